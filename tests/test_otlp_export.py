"""OTLP and Langfuse export over HTTP; `OTEL_*` per signal, traces only or metrics only; `flush()`
reports failed exports; the Langfuse SDK's headers, every span, root metadata and the usage
mapping; a backend that is down, failing or slow never fails or slows a run.

Configure(mode="otlp"/"langfuse") with the real OTLP/HTTP exporters, against a real receiver.

The receiver is a small ``http.server`` on 127.0.0.1 that accepts POST /v1/traces, /v1/metrics
and Langfuse's /api/public/otel/v1/traces, and decodes the protobuf bodies with
opentelemetry-proto, as a collector would.
"""

from __future__ import annotations

import gzip
import logging
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from hango import telemetry as t
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.base import CacheDiagnostics, Request, Response, Usage
from hango.models.simulated import SimulatedModel, tool_call


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    port: int
    status: int = 200
    delay_s: float = 0.0
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bodies(self, suffix: str) -> list[bytes]:
        with self.lock:
            return [r.body for r in self.requests if r.path.endswith(suffix)]

    def spans(self, suffix: str = "/v1/traces") -> dict[str, tuple[Span, dict[str, Any]]]:
        """Span name -> (span, its resource attributes); checks the scope is hango's."""
        out: dict[str, tuple[Span, dict[str, Any]]] = {}
        for body in self.bodies(suffix):
            request = ExportTraceServiceRequest.FromString(body)
            for rs in request.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    assert ss.scope.name == "hango"
                    for span in ss.spans:
                        out[span.name] = (span, resource)
        return out

    def logs(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Every log record: (body, trace id in hex, attributes)."""
        out = []
        for body in self.bodies("/v1/logs"):
            for rl in ExportLogsServiceRequest.FromString(body).resource_logs:
                for sl in rl.scope_logs:
                    for record in sl.log_records:
                        out.append((value(record.body), record.trace_id.hex(),
                                    attributes(record.attributes)))
        return out

    def metrics(self) -> dict[str, Metric]:
        out: dict[str, Metric] = {}
        for body in self.bodies("/v1/metrics"):
            request = ExportMetricsServiceRequest.FromString(body)
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        out[metric.name] = metric  # later exports are cumulative: keep the last
        return out


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


def make_handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            with receiver.lock:
                receiver.requests.append(Received(self.path, dict(self.headers.items()), body))
            if receiver.delay_s:
                time.sleep(receiver.delay_s)
            known = self.path.endswith(("/v1/traces", "/v1/metrics", "/v1/logs"))
            status = receiver.status if known else 404
            reply = (
                ExportMetricsServiceResponse()
                if self.path.endswith("/v1/metrics")
                else ExportLogsServiceResponse()
                if self.path.endswith("/v1/logs")
                else ExportTraceServiceResponse()
            ).SerializeToString()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            pass

    return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with listening() as rec:
        yield rec


@contextmanager
def listening(port: int = 0) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1:``port`` (0: a free one); OSError if the port is taken."""
    rec = Receiver(port=port)
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(rec))
    rec.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def emit(tel: t.Telemetry) -> None:
    """What one run emits: the before_run tree, a chat call with a tool call, and the metrics."""
    with tel.span(t.SPAN_RUN, **{t.GEN_AI_AGENT_NAME: "a1"}):
        with tel.span(t.SPAN_BEFORE_RUN):
            with tel.span(t.SPAN_MEMORY_LOAD) as span:
                span.set_attribute(t.ATTR_MEMORY_SOURCES, ["/memories/AGENTS.md"])
                span.set_attribute(t.ATTR_MEMORY_BYTES, 2048)
                span.add_event(t.EVENT_MEMORY_MISSING, {"path": "/memories/gone.md"})
            tel.record_memory_load(0.003, 2048, 1)
            with tel.span(t.SPAN_SKILLS_INDEX, **{t.ATTR_SKILLS_COUNT: 3}):
                pass
            tel.record_skills(3, 1)
            tel.record_proposal("proposed")
        request = Request(model="claude-test", tools=(), system=(), messages=())
        with tel.chat_span(request, "anthropic") as span:
            usage = Usage(
                input_tokens=12, cache_creation_input_tokens=88, cache_read_input_tokens=900, output_tokens=40
            )
            tel.record_chat(
                span,
                Response(
                    "ok", usage=usage, model="claude-test", diagnostics=CacheDiagnostics("messages_changed"),
                    id="msg_1",
                ),
                model="claude-test",
                attributes={"hango.memory.bytes": 2048, "hango.skills.count": 3},
                provider="anthropic",
                request=request,
            )
            with tel.tool_span("read_file", "toolu_1"):
                pass
        tel.log_run(agent_id="a1", run_id="run-1", attributes={
            "hango.memory.sources": ["/memories/AGENTS.md"], "hango.memory.bytes": 2048,
            "hango.skills.count": 3, "hango.skills.invalid": 1})


# Every instrument but the cache-miss counter: emit()'s call reads 900 of its 1000 input tokens.
EMITTED = {spec.name for spec in t.INSTRUMENTS} - {t.METRIC_CACHE_MISSES}
EXPECTED_SPANS = {
    t.SPAN_RUN,
    t.SPAN_BEFORE_RUN,
    t.SPAN_MEMORY_LOAD,
    t.SPAN_SKILLS_INDEX,
    "chat claude-test",
    "execute_tool read_file",
}


def test_otlp_mode_exports_spans_and_metrics(receiver: Receiver) -> None:
    c = t.configure(
        "otlp",
        otlp_endpoint=receiver.base + "/",
        service_name="hango-otlp-test",
        metric_interval_ms=3_600_000,
    )  # only flush() pushes metrics
    try:
        assert c.destinations == (receiver.base + "/v1/traces", receiver.base + "/v1/metrics")
        emit(c.telemetry)
        assert c.flush(10_000)
    finally:
        c.shutdown()

    spans = receiver.spans()
    assert set(spans) == EXPECTED_SPANS
    assert {res["service.name"] for _, res in spans.values()} == {"hango-otlp-test"}
    run, before, memory = (spans[n][0] for n in (t.SPAN_RUN, t.SPAN_BEFORE_RUN, t.SPAN_MEMORY_LOAD))
    assert run.parent_span_id == b""
    assert before.parent_span_id == run.span_id and memory.parent_span_id == before.span_id
    assert spans[t.SPAN_SKILLS_INDEX][0].parent_span_id == before.span_id
    assert len({s.trace_id for s, _ in spans.values()}) == 1
    assert attributes(memory.attributes)[t.ATTR_MEMORY_SOURCES] == ("/memories/AGENTS.md",)
    assert [e.name for e in memory.events] == [t.EVENT_MEMORY_MISSING]

    chat, _ = spans["chat claude-test"]
    assert chat.kind == Span.SPAN_KIND_CLIENT
    chat_attrs = attributes(chat.attributes)
    assert {
        k: chat_attrs[k]
        for k in (
            "gen_ai.operation.name",
            "gen_ai.provider.name",
            "gen_ai.request.model",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.usage.output_tokens",
            "hango.memory.bytes",
            "hango.skills.count",
            "hango.cache.miss_reason",
            "langfuse.observation.metadata.memory_bytes",
        )
    } == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-test",
        "gen_ai.usage.input_tokens": 1000,
        "gen_ai.usage.cache_read.input_tokens": 900,
        "gen_ai.usage.cache_creation.input_tokens": 88,
        "gen_ai.usage.output_tokens": 40,
        "hango.memory.bytes": 2048,
        "hango.skills.count": 3,
        "hango.cache.miss_reason": "messages_changed",
        "langfuse.observation.metadata.memory_bytes": 2048,
    }
    assert chat_attrs["hango.cache.read_ratio"] == pytest.approx(0.9)
    tool, _ = spans["execute_tool read_file"]
    assert attributes(tool.attributes)["gen_ai.tool.call.id"] == "toolu_1"

    got = receiver.metrics()
    assert set(got) == EMITTED
    for spec in (s for s in t.INSTRUMENTS if s.name in EMITTED):
        metric = got[spec.name]
        assert metric.unit == spec.unit, spec.name
        data = metric.WhichOneof("data")
        assert data == {"counter": "sum", "histogram": "histogram", "gauge": "gauge"}[spec.kind]
        if spec.kind == "histogram":
            assert metric.histogram.data_points
            for dp in metric.histogram.data_points:
                assert tuple(dp.explicit_bounds) == spec.buckets
            assert metric.histogram.aggregation_temporality == (
                AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
            )  # what Prometheus wants
        if spec.kind == "counter":
            assert metric.sum.is_monotonic
    tokens = {
        attributes(dp.attributes)[t.ATTR_TOKEN_KIND]: dp.as_int for dp in got[t.METRIC_TOKENS].sum.data_points
    }
    assert tokens == {"input": 12, "cache_creation": 88, "cache_read": 900, "output": 40}
    (ratio,) = got[t.METRIC_CACHE_READ_RATIO].histogram.data_points
    assert ratio.count == 1 and ratio.sum == pytest.approx(0.9)
    assert [dp.as_int for dp in got[t.METRIC_SKILLS_INDEXED].gauge.data_points] == [3]
    usage = {attributes(dp.attributes)[t.GEN_AI_TOKEN_TYPE]: dp.sum
             for dp in got[t.METRIC_GEN_AI_TOKEN_USAGE].histogram.data_points}
    assert usage == {"input": 1000, "output": 40}  # the conventions' input includes the cache


def test_langfuse_mode_sends_every_hango_span_with_basic_auth(receiver: Receiver) -> None:
    c = t.configure(
        "langfuse",
        langfuse_host=receiver.base,
        langfuse_public_key=t.LANGFUSE_LOCAL_PUBLIC_KEY,
        langfuse_secret_key=t.LANGFUSE_LOCAL_SECRET_KEY,
    )
    try:
        emit(c.telemetry)
        assert c.flush(10_000)
        # metrics are not sent to Langfuse (it discards them): they stay inspectable here
        assert c.metrics()[t.METRIC_SKILLS_INDEXED][0]["value"] == 3
    finally:
        c.shutdown()

    assert {r.path for r in receiver.requests} == {t.LANGFUSE_OTEL_TRACES_PATH}
    # not only the gen_ai ones: Langfuse's SDK filter would have dropped the agent.* spans
    assert set(receiver.spans(t.LANGFUSE_OTEL_TRACES_PATH)) == EXPECTED_SPANS
    for request in receiver.requests:
        headers = {k.lower(): v for k, v in request.headers.items()}
        assert (
            headers["authorization"]
            == t.langfuse_headers(t.LANGFUSE_LOCAL_PUBLIC_KEY, t.LANGFUSE_LOCAL_SECRET_KEY)["Authorization"]
        )
        assert headers["x-langfuse-ingestion-version"] == "4"
        assert headers["content-type"] == "application/x-protobuf"


def test_langfuse_and_collector_together(receiver: Receiver) -> None:
    c = t.configure(
        "langfuse",
        langfuse_host=receiver.base,
        langfuse_public_key="pk-a",
        langfuse_secret_key="sk-a",
        otlp_endpoint=receiver.base,
        metric_interval_ms=3_600_000,
    )
    try:
        emit(c.telemetry)
        assert c.flush(10_000)
    finally:
        c.shutdown()
    assert set(receiver.spans(t.LANGFUSE_OTEL_TRACES_PATH)) == EXPECTED_SPANS
    plain = [r for r in receiver.requests if r.path == "/v1/traces"]
    assert plain and all("authorization" not in {k.lower() for k in r.headers} for r in plain)
    assert set(receiver.metrics()) == EMITTED


def test_backend_down_never_fails_a_run(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    c = t.configure(
        "otlp", otlp_endpoint=f"http://127.0.0.1:{free_port()}", timeout_s=0.5, metric_interval_ms=3_600_000
    )
    started = time.monotonic()
    try:
        for _ in range(3):
            emit(c.telemetry)
        c.flush(5_000)  # may report False; must not raise
    finally:
        c.shutdown()
    assert time.monotonic() - started < 20
    assert any(r.name.startswith("opentelemetry") and r.levelno >= logging.WARNING for r in caplog.records), (
        "export failures should be logged"
    )


def test_backend_error_status_is_logged_not_raised(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.status = 400  # not retryable
    caplog.set_level(logging.ERROR)
    c = t.configure("otlp", otlp_endpoint=receiver.base, timeout_s=2, metric_interval_ms=3_600_000)
    try:
        emit(c.telemetry)
        c.flush(5_000)  # flushing completes; the failed batches are dropped and logged
    finally:
        c.shutdown()
    assert receiver.bodies("/v1/traces") and receiver.bodies("/v1/metrics")  # it really tried
    failures = {
        r.name.rsplit(".", 1)[-1]
        for r in caplog.records
        if r.levelno == logging.ERROR and "400" in r.getMessage()
    }
    assert failures == {"trace_exporter", "metric_exporter"}


def test_slow_backend_does_not_slow_the_run(receiver: Receiver) -> None:
    receiver.delay_s = 1.0
    c = t.configure("otlp", otlp_endpoint=receiver.base, timeout_s=5, metric_interval_ms=3_600_000)
    try:
        started = time.monotonic()
        for _ in range(5):
            emit(c.telemetry)
        elapsed = time.monotonic() - started
        assert elapsed < 0.5, f"spans must be exported in the background ({elapsed:.2f}s)"
    finally:
        c.shutdown()
    assert len(receiver.spans()) == len(EXPECTED_SPANS)


# --- OTEL_* per signal, flush() failures, Langfuse through its SDK --------------------
def test_otlp_honours_per_signal_variables(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # unused
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.base + "/phoenix/v1/traces")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    c = t.configure("otlp", metric_interval_ms=3_600_000)
    try:
        assert c.destinations == (receiver.base + "/phoenix/v1/traces", "memory (metrics)")
        emit(c.telemetry)
        assert c.flush(10_000)
        assert c.metrics()[t.METRIC_SKILLS_INDEXED][0]["value"] == 3  # metrics stayed here
    finally:
        c.shutdown()
    assert {r.path for r in receiver.requests} == {"/phoenix/v1/traces"}
    assert set(receiver.spans("/phoenix/v1/traces")) == EXPECTED_SPANS


def test_otlp_metrics_only(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-the-env")
    c = t.configure("otlp", metric_interval_ms=3_600_000)
    try:
        assert c.destinations == ("memory (traces)", receiver.base + "/v1/metrics")
        emit(c.telemetry)
        assert c.flush(10_000)
        assert {s.name for s in c.spans()} == EXPECTED_SPANS
    finally:
        c.shutdown()
    assert {r.path for r in receiver.requests} == {"/v1/metrics"}
    assert set(receiver.metrics()) == EMITTED
    body = receiver.bodies("/v1/metrics")[0]
    (rm,) = ExportMetricsServiceRequest.FromString(body).resource_metrics
    assert attributes(rm.resource.attributes)["service.name"] == "from-the-env"


def test_otlp_signals_argument_and_bad_values(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    c = t.configure("otlp", otlp_endpoint=receiver.base, signals=("traces",))
    assert c.destinations == (receiver.base + "/v1/traces", "memory (metrics)")
    c.shutdown()
    with pytest.raises(ValueError, match="signals"):
        t.configure("otlp", signals=("logs",))
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ValueError, match="OTEL_TRACES_EXPORTER='zipkin'"):
        t.configure("otlp")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    with pytest.raises(ValueError, match="every signal is off"):
        t.configure("otlp")


def test_flush_reports_failed_exports(receiver: Receiver) -> None:
    receiver.status = 400
    c = t.configure("otlp", otlp_endpoint=receiver.base, timeout_s=2, metric_interval_ms=3_600_000)
    try:
        emit(c.telemetry)
        assert c.flush(5_000) is False  # finished in time, but every export was refused
        assert c.exports.failures == 2
        receiver.status = 200
        emit(c.telemetry)
        assert c.flush(5_000) is True  # failures count since the previous flush()
    finally:
        c.shutdown()


def test_flush_reports_an_unreachable_backend() -> None:
    c = t.configure("otlp", otlp_endpoint=f"http://127.0.0.1:{free_port()}", timeout_s=0.5,
                    metric_interval_ms=3_600_000)
    try:
        emit(c.telemetry)
        assert c.flush(5_000) is False
    finally:
        c.shutdown()


def langfuse_usage(attrs: dict[str, Any]) -> dict[str, int]:
    """Langfuse's documented generic mapping of ``gen_ai.usage.*`` (server v4.16.0,
    ``extractGenericGenAiUsageDetails``): cache counts are subtracted from the inclusive input."""
    read = attrs.get("gen_ai.usage.cache_read.input_tokens", 0)
    write = attrs.get("gen_ai.usage.cache_creation.input_tokens", 0)
    return {"input": max(0, attrs["gen_ai.usage.input_tokens"] - read - write),
            "input_cached_tokens": read, "input_cache_creation": write,
            "output": attrs["gen_ai.usage.output_tokens"]}


def test_langfuse_sdk_exports_every_span_with_its_headers_and_root_metadata(receiver: Receiver) -> None:
    c = t.configure("langfuse", langfuse_host=receiver.base, langfuse_public_key="pk-lf-sdk-test",
                    langfuse_secret_key="sk-lf-sdk-test")
    try:
        emit(c.telemetry)
        assert c.flush(10_000)
    finally:
        c.shutdown()
    assert {r.path for r in receiver.requests} == {t.LANGFUSE_OTEL_TRACES_PATH}
    for request in receiver.requests:  # what the langfuse SDK itself sends
        headers = {k.lower(): v for k, v in request.headers.items()}
        assert headers["authorization"] == t.langfuse_headers("pk-lf-sdk-test", "sk-lf-sdk-test")[
            "Authorization"]
        assert headers["x-langfuse-ingestion-version"] == "4"
        assert headers["x-langfuse-public-key"] == "pk-lf-sdk-test"
        assert headers["x-langfuse-sdk-name"] == "python"
    spans = receiver.spans(t.LANGFUSE_OTEL_TRACES_PATH)
    assert set(spans) == EXPECTED_SPANS  # the SDK's default filter would keep only the chat span
    root = attributes(spans[t.SPAN_RUN][0].attributes)
    for prefix in (t.LANGFUSE_TRACE_METADATA_PREFIX, t.LANGFUSE_METADATA_PREFIX):
        assert root[prefix + "memory_bytes"] == 2048
        assert root[prefix + "skills_count"] == 3
        assert root[prefix + "skills_invalid"] == 1
        assert root[prefix + "memory_sources"] == ("/memories/AGENTS.md",)
    chat = attributes(spans["chat claude-test"][0].attributes)
    assert chat["gen_ai.operation.name"] == "chat"  # -> a Langfuse GENERATION
    assert chat["gen_ai.request.model"] == "claude-test"
    assert langfuse_usage(chat) == {"input": 12, "input_cached_tokens": 900,
                                    "input_cache_creation": 88, "output": 40}
    assert "gen_ai.usage.cache_write.input_tokens" not in chat  # never both names


def test_langfuse_configured_twice_with_one_key_exports_twice(receiver: Receiver) -> None:
    for _ in range(2):  # the SDK keeps one client per key; a re-run notebook cell must still export
        c = t.configure("langfuse", langfuse_host=receiver.base, langfuse_public_key="pk-lf-twice",
                        langfuse_secret_key="sk-lf-twice")
        emit(c.telemetry)
        assert c.flush(10_000)
        c.shutdown()
    runs = sum(1 for body in receiver.bodies(t.LANGFUSE_OTEL_TRACES_PATH)
               for rs in ExportTraceServiceRequest.FromString(body).resource_spans
               for ss in rs.scope_spans for s in ss.spans if s.name == t.SPAN_RUN)
    assert runs == 2


def test_langfuse_receives_every_span_of_a_real_run(receiver: Receiver, db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(tools=["ls"], memory=["/memories/AGENTS.md"]))
    PostgresBackend(db, tenant, "a1").write("/memories/AGENTS.md", "Answer in French.\n")
    local = t.configure("memory")
    lf = t.configure("langfuse", langfuse_host=receiver.base, langfuse_public_key="pk-lf-real-run",
                     langfuse_secret_key="sk-lf-real-run")
    try:
        for c in (local, lf):
            model = SimulatedModel(policy=[[tool_call("ls", {"path": "/"})], "done"])
            Agent(db, tenant, "a1", model, telemetry=c.telemetry).run("hi")
        assert lf.flush(10_000)
        expected = sorted(s.name for s in local.spans())
    finally:
        local.shutdown()
        lf.shutdown()
    got = sorted(s.name for body in receiver.bodies(t.LANGFUSE_OTEL_TRACES_PATH)
                 for rs in ExportTraceServiceRequest.FromString(body).resource_spans
                 for ss in rs.scope_spans for s in ss.spans)
    assert got == expected
    assert {t.SPAN_RUN, t.SPAN_BEFORE_RUN, t.SPAN_MEMORY_LOAD, t.SPAN_SKILLS_INDEX} <= set(got)
    root = attributes(receiver.spans(t.LANGFUSE_OTEL_TRACES_PATH)[t.SPAN_RUN][0].attributes)
    assert root["langfuse.trace.metadata.memory_bytes"] == len("Answer in French.\n")


def test_flush_reports_a_failed_export_to_langfuse(receiver: Receiver) -> None:
    receiver.status = 401  # e.g. wrong keys
    c = t.configure("langfuse", langfuse_host=receiver.base, langfuse_public_key="pk-lf-refused",
                    langfuse_secret_key="sk-lf-refused")
    try:
        emit(c.telemetry)
        assert c.flush(10_000) is False
    finally:
        c.shutdown()
    assert receiver.bodies(t.LANGFUSE_OTEL_TRACES_PATH)  # it really tried


def test_what_langfuse_shows_of_a_run_arrives_through_its_sdk(receiver: Receiver, db: Database,
                                                              tenant: str) -> None:
    """The Langfuse SDK to a loopback receiver: trace name from the agent, session from the run,
    user from the tenant, usage with cache tokens, input and output (capture on), and the span
    events Langfuse drops, mirrored as level, status message and metadata."""
    from test_proposals import PROMPT  # long enough for the simulator's minimum cacheable prefix

    save_agent(db, tenant, "a1", AgentConfig(tools=["ls"], system_prompt=PROMPT,
                                             memory=["/memories/AGENTS.md"]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", "Answer in French.\n")
    fs.write("/skills/broken/SKILL.md", "---\nname: broken\ndescription: Use when: x\n---\n")
    c = t.configure("langfuse", langfuse_host=receiver.base, langfuse_public_key="pk-lf-screen",
                    langfuse_secret_key="sk-lf-screen", capture_content=True)
    try:
        model = SimulatedModel(policy=[[tool_call("ls", {"path": "/"})], "Voilà."])
        result = Agent(db, tenant, "a1", model, telemetry=c.telemetry).run("which files?")
        assert c.flush(10_000)
    finally:
        c.shutdown()
    got: dict[str, list[dict[str, Any]]] = {}
    for body in receiver.bodies(t.LANGFUSE_OTEL_TRACES_PATH):
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    got.setdefault(span.name, []).append(attributes(span.attributes))
    (root,) = got[t.SPAN_RUN]
    for spans in got.values():  # every observation: one trace, one session, one user
        for attrs in spans:
            assert (attrs[t.LANGFUSE_TRACE_NAME], attrs[t.LANGFUSE_SESSION_ID],
                    attrs[t.LANGFUSE_USER_ID]) == ("a1", result.run_id, tenant)
    assert (root[t.INPUT_VALUE], root[t.OUTPUT_VALUE]) == ("which files?", "Voilà.")
    first, second = got["chat hango-sim-1"]
    assert langfuse_usage(first)["input_cache_creation"] > 0
    assert langfuse_usage(second)["input_cached_tokens"] > 0  # the prefix read from the cache
    assert "<- cache breakpoint" in first[t.INPUT_VALUE] and "/memories/AGENTS.md" in first[t.INPUT_VALUE]
    (skills,) = got[t.SPAN_SKILLS_INDEX]
    assert skills[t.LANGFUSE_LEVEL] == "WARNING"
    assert "/skills/broken/SKILL.md skipped" in skills[t.LANGFUSE_STATUS_MESSAGE]
    (invalid,) = skills[t.LANGFUSE_METADATA_PREFIX + "skill_invalid"]
    assert invalid.startswith("path=/skills/broken/SKILL.md reason=")
