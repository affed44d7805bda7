"""Span names, kinds, parentage and attributes; metrics and their buckets; the log line; Prometheus
names; `configure()` modes.

Hango.telemetry on real SDK providers passed in per test (never the global ones).
"""

from __future__ import annotations

import itertools
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Metric, Sum
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, SpanContext, SpanKind, StatusCode

from hango import telemetry as t
from hango.models.base import CacheDiagnostics, Request, Response, Usage


@dataclass
class Otel:
    telemetry: t.Telemetry
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> dict[str, ReadableSpan]:
        return {s.name: s for s in self.exporter.get_finished_spans()}

    def metrics(self) -> dict[str, Metric]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    yield Otel(t.Telemetry(tp, mp, logging.getLogger("hango.test")), exporter, reader)
    tp.shutdown()
    mp.shutdown()


def context(span: ReadableSpan) -> SpanContext:
    ctx: SpanContext | None = span.context
    assert ctx is not None
    return ctx


def request(model: str = "claude-test") -> Request:
    return Request(model=model, tools=(), system=(), messages=(), max_tokens=512)


def response(
    usage: Usage, *, model: str = "claude-test-2026", stop: str = "end_turn", miss: str | None = None
) -> Response:
    diagnostics = CacheDiagnostics(miss, missed_input_tokens=100) if miss else None
    return Response(text="ok", usage=usage, model=model, stop_reason=stop, diagnostics=diagnostics)


def one_run(tel: t.Telemetry) -> None:
    with tel.span(t.SPAN_RUN, **{t.GEN_AI_AGENT_NAME: "a1"}):
        with tel.span(t.SPAN_BEFORE_RUN):
            with tel.span(t.SPAN_MEMORY_LOAD) as span:
                span.add_event(t.EVENT_MEMORY_MISSING, {"path": "/memories/missing.md"})
                span.set_attribute(t.ATTR_MEMORY_SOURCES, ["/memories/AGENTS.md"])
                span.set_attribute(t.ATTR_MEMORY_BYTES, 1200)
            with tel.span(t.SPAN_SKILLS_INDEX, **{t.ATTR_SKILLS_COUNT: 2, t.ATTR_SKILLS_INVALID: 1}) as span:
                span.add_event(t.EVENT_SKILL_INVALID, {"path": "/skills/bad/SKILL.md", "reason": "no name"})
        with tel.chat_span(request(), "anthropic") as span:
            tel.record_chat(
                span,
                response(Usage(10, 100, 890, 7), stop="tool_use"),
                model="claude-test",
                attributes={"hango.memory.bytes": 1200, "hango.skills.count": 2},
            )
            with tel.tool_span("read_file", "toolu_1"):
                pass


GROWTH0 = {"hango.memory.bytes": 0, "hango.skills.count": 0}
GROWTH1 = {"hango.memory.bytes": 1, "hango.skills.count": 1}


# --- spans ----------------------------------------------------------------------------------------
def test_span_names_kinds_and_parentage(otel: Otel) -> None:
    one_run(otel.telemetry)
    spans = otel.spans()
    assert set(spans) == {
        t.SPAN_RUN,
        t.SPAN_BEFORE_RUN,
        t.SPAN_MEMORY_LOAD,
        t.SPAN_SKILLS_INDEX,
        "chat claude-test",
        "execute_tool read_file",
    }
    run, before = spans[t.SPAN_RUN], spans[t.SPAN_BEFORE_RUN]
    assert run.parent is None
    parent_of = {
        t.SPAN_BEFORE_RUN: t.SPAN_RUN,
        t.SPAN_MEMORY_LOAD: t.SPAN_BEFORE_RUN,
        t.SPAN_SKILLS_INDEX: t.SPAN_BEFORE_RUN,
        "chat claude-test": t.SPAN_RUN,
        "execute_tool read_file": "chat claude-test",
    }
    for child, parent in parent_of.items():
        span = spans[child]
        assert span.parent is not None and span.context is not None
        assert span.parent.span_id == context(spans[parent]).span_id
        assert span.context.trace_id == context(run).trace_id
    assert spans["chat claude-test"].kind is SpanKind.CLIENT
    for name in (t.SPAN_RUN, t.SPAN_BEFORE_RUN, t.SPAN_MEMORY_LOAD, "execute_tool read_file"):
        assert spans[name].kind is SpanKind.INTERNAL
    assert all(
        s.instrumentation_scope is not None and s.instrumentation_scope.name == "hango"
        for s in spans.values()
    )
    assert before.status.status_code is StatusCode.UNSET
    assert [e.name for e in spans[t.SPAN_MEMORY_LOAD].events] == [t.EVENT_MEMORY_MISSING]
    assert spans[t.SPAN_SKILLS_INDEX].attributes == {t.ATTR_SKILLS_COUNT: 2, t.ATTR_SKILLS_INVALID: 1}


def test_span_attributes_drop_none_and_keep_sequences(otel: Otel) -> None:
    with otel.telemetry.span(
        "x", **{"a.none": None, "a.list": ("p", "q"), "a.int": 3, "a.obj": CacheDiagnostics("expired")}
    ):
        pass
    attrs = dict(otel.spans()["x"].attributes or {})
    assert "a.none" not in attrs
    assert attrs["a.list"] == ("p", "q")
    assert attrs["a.int"] == 3
    assert str(attrs["a.obj"]).startswith("CacheDiagnostics(")


def test_chat_span_attributes(otel: Otel) -> None:
    usage = Usage(
        input_tokens=10, cache_creation_input_tokens=100, cache_read_input_tokens=890, output_tokens=7
    )
    with otel.telemetry.chat_span(request(), "anthropic") as span:
        otel.telemetry.record_chat(
            span,
            response(usage, stop="tool_use", miss="system_changed"),
            model="claude-test",
            attributes={"hango.memory.bytes": 1200, "hango.skills.count": 2},
        )
    chat = otel.spans()["chat claude-test"]
    assert chat.kind is SpanKind.CLIENT
    assert dict(chat.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-test",
        "gen_ai.request.max_tokens": 512,
        "gen_ai.response.model": "claude-test-2026",
        "gen_ai.response.finish_reasons": ("tool_use",),
        # semconv: input_tokens INCLUDES cached tokens (Anthropic's 10 is only the uncached tail)
        "gen_ai.usage.input_tokens": 1000,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 890,
        "gen_ai.usage.cache_creation.input_tokens": 100,
        "hango.memory.bytes": 1200,
        "hango.skills.count": 2,
        "langfuse.observation.metadata.memory_bytes": 1200,
        "langfuse.observation.metadata.skills_count": 2,
        "hango.cache.read_ratio": pytest.approx(0.89),
        "hango.cache.miss_reason": "system_changed",
        "hango.cache.missed_input_tokens": 100,
        "langfuse.observation.metadata.cache_miss_reason": "system_changed",
    }
    # one cache-write name only, or Langfuse would count the write tokens twice
    assert "gen_ai.usage.cache_write.input_tokens" not in (chat.attributes or {})


def test_chat_without_diagnostics_or_response_model(otel: Otel) -> None:
    with otel.telemetry.chat_span(request("m1"), "simulated") as span:
        otel.telemetry.record_chat(
            span, response(Usage(5, 0, 0, 1), model=""), model="m1", attributes=GROWTH0
        )
    attrs = dict(otel.spans()["chat m1"].attributes or {})
    assert attrs["gen_ai.response.model"] == "m1"
    assert attrs["hango.cache.read_ratio"] == 0.0
    assert not any("miss" in key for key in attrs)


def test_tool_span(otel: Otel) -> None:
    with otel.telemetry.tool_span("write_file", "toolu_9") as span:
        span.set_attribute("hango.tool.error", False)
    tool = otel.spans()["execute_tool write_file"]
    assert tool.kind is SpanKind.INTERNAL
    assert dict(tool.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "write_file",
        "gen_ai.tool.call.id": "toolu_9",
        "gen_ai.tool.type": "function",
        "hango.tool.error": False,
    }


@pytest.mark.parametrize("kind", ["span", "chat", "tool"])
def test_exception_is_recorded_and_reraised(otel: Otel, kind: str) -> None:
    tel = otel.telemetry
    cms: dict[str, Callable[[], AbstractContextManager[Span]]] = {
        "span": lambda: tel.span("agent.boom"),
        "chat": lambda: tel.chat_span(request(), "x"),
        "tool": lambda: tel.tool_span("t", "c1"),
    }
    with pytest.raises(KeyError, match="nope"), cms[kind]():
        raise KeyError("nope")
    (span,) = otel.exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert "KeyError" in (span.status.description or "")
    assert (span.attributes or {})["error.type"] == "KeyError"
    (event,) = span.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "KeyError"


def test_noop_providers_do_nothing_and_raise_nothing() -> None:
    tel = t.Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
    with tel.span(t.SPAN_RUN) as span:
        assert not span.is_recording()
        with tel.chat_span(request(), "anthropic") as chat:
            tel.record_chat(chat, response(Usage(1, 2, 3, 4)), model="m", attributes=GROWTH1)
    tel.record_memory_load(0.1, 10, 1)
    tel.record_skills(1, 0)


def test_two_instances_do_not_share_providers(otel: Otel) -> None:
    other = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(other))
    second = t.Telemetry(tp, metrics.NoOpMeterProvider())
    with second.span("only.second"):
        pass
    with otel.telemetry.span("only.first"):
        pass
    assert [s.name for s in other.get_finished_spans()] == ["only.second"]
    assert [s.name for s in otel.exporter.get_finished_spans()] == ["only.first"]


# --- metrics --------------------------------------------------------------------------------------
def points(metric: Metric) -> dict[tuple[tuple[str, Any], ...], Any]:
    return {tuple(sorted((dp.attributes or {}).items())): dp for dp in metric.data.data_points}


def test_token_counter_by_kind_and_read_ratio(otel: Otel) -> None:
    tel = otel.telemetry
    calls = [Usage(10, 1000, 0, 50), Usage(20, 30, 1000, 60), Usage(0, 0, 0, 0)]
    for usage in calls:
        with tel.chat_span(request(), "anthropic") as span:
            tel.record_chat(span, response(usage), model="claude-test", attributes=GROWTH0)
    got = otel.metrics()

    tokens = got[t.METRIC_TOKENS]
    assert tokens.unit == "{token}"
    assert isinstance(tokens.data, Sum) and tokens.data.is_monotonic
    by_kind = {dict(k)[t.ATTR_TOKEN_KIND]: dp.value for k, dp in points(tokens).items()}
    assert by_kind == {"input": 30, "cache_creation": 1030, "cache_read": 1000, "output": 110}
    assert {dict(k)[t.GEN_AI_REQUEST_MODEL] for k in points(tokens)} == {"claude-test"}
    exact = by_kind["cache_read"] / (by_kind["input"] + by_kind["cache_creation"] + by_kind["cache_read"])
    assert exact == pytest.approx(1000 / 2060)

    ratio = got[t.METRIC_CACHE_READ_RATIO]
    assert ratio.unit == "1" and isinstance(ratio.data, Histogram)
    (dp,) = ratio.data.data_points
    assert dict(dp.attributes or {}) == {t.GEN_AI_REQUEST_MODEL: "claude-test"}
    assert dp.count == 2  # the empty third call has no ratio
    assert dp.sum == pytest.approx(0.0 + 1000 / 1050)
    assert tuple(dp.explicit_bounds) == t.CACHE_READ_RATIO_BUCKETS
    buckets = dict(zip([*dp.explicit_bounds, float("inf")], dp.bucket_counts, strict=True))
    assert buckets[0.0] == 1 and buckets[0.99] == 1 and sum(dp.bucket_counts) == 2  # 0.952...


def test_memory_load_histograms_use_explicit_buckets(otel: Otel) -> None:
    tel = otel.telemetry
    for seconds, nbytes in [(0.0003, 0), (0.004, 5000), (3.0, 20 * 2**20)]:
        tel.record_memory_load(seconds, nbytes, 2)
    got = otel.metrics()

    duration = got[t.METRIC_MEMORY_LOAD_DURATION]
    assert duration.unit == "s" and isinstance(duration.data, Histogram)
    (dp,) = duration.data.data_points
    assert tuple(dp.explicit_bounds) == t.MEMORY_LOAD_DURATION_BUCKETS_S
    assert dp.explicit_bounds[0] == 0.0005 and dp.explicit_bounds[-1] == 5.0
    assert dict(dp.attributes or {}) == {t.ATTR_MEMORY_SOURCE_COUNT: 2}
    counts = dict(zip([*dp.explicit_bounds, float("inf")], dp.bucket_counts, strict=True))
    assert (counts[0.0005], counts[0.005], counts[5.0]) == (1, 1, 1)
    assert dp.count == 3 and dp.sum == pytest.approx(3.0043)

    size = got[t.METRIC_MEMORY_BYTES]
    assert size.unit == "By" and isinstance(size.data, Histogram)
    (dp,) = size.data.data_points
    assert tuple(dp.explicit_bounds) == t.MEMORY_BYTES_BUCKETS
    assert dp.explicit_bounds[-1] == 16 * 2**20
    counts = dict(zip([*dp.explicit_bounds, float("inf")], dp.bucket_counts, strict=True))
    assert (counts[0], counts[8192], counts[float("inf")]) == (1, 1, 1)
    assert dp.max == 20 * 2**20


def test_memory_bytes_buckets_fit_the_default_cap() -> None:
    """A run cut at the cap lands on a bound; below it a quantile estimate is at most 2x off
    (an 18-byte memory read as a 243-byte p95 with the old powers-of-4 from 256 B)."""
    from hango.settings import Settings

    cap = Settings().memory_max_bytes
    bounds = t.MEMORY_BYTES_BUCKETS
    assert cap in bounds
    below = [b for b in bounds if 0 < b <= cap]
    assert below[0] <= 16 and all(hi / lo <= 2 for lo, hi in itertools.pairwise(below))
    assert bounds[-1] == 16 * 2**20  # the largest HANGO_MEMORY_MAX_BYTES allowed


def test_skills_indexed_and_invalid_are_the_latest_runs(otel: Otel) -> None:
    """One bad SKILL.md read by three runs is one invalid file, not three (a counter summed
    every run's skips, and the dashboard showed 9.36 for a single bad file)."""
    for _ in range(3):
        otel.telemetry.record_skills(5, 1)
    otel.telemetry.record_skills(7, 2)
    got = otel.metrics()
    indexed = got[t.METRIC_SKILLS_INDEXED]
    assert isinstance(indexed.data, Gauge)
    assert [dp.value for dp in indexed.data.data_points] == [7]  # the latest run, not a sum
    invalid = got[t.METRIC_SKILLS_INVALID]
    assert isinstance(invalid.data, Gauge)
    assert [dp.value for dp in invalid.data.data_points] == [2]
    assert indexed.unit == invalid.unit == "{skill}"


def test_every_instrument_is_created_with_its_spec(otel: Otel) -> None:
    one_run(otel.telemetry)
    otel.telemetry.record_memory_load(0.01, 10, 1)
    otel.telemetry.record_skills(1, 0)
    otel.telemetry.record_proposal("proposed")
    tel = otel.telemetry
    with tel.chat_span(request(), "anthropic") as span:  # read nothing: a cache miss
        tel.record_chat(span, response(Usage(30, 0, 0, 2), miss="expired"), model="claude-test",
                        attributes={}, provider="anthropic", request=request())
    got = otel.metrics()
    kinds = {"counter": Sum, "histogram": Histogram, "gauge": Gauge}
    assert set(got) == {spec.name for spec in t.INSTRUMENTS}
    for spec in t.INSTRUMENTS:
        assert got[spec.name].unit == spec.unit
        assert isinstance(got[spec.name].data, kinds[spec.kind])
        for dp in got[spec.name].data.data_points:  # error.type only on a failed call
            assert set(spec.attributes) - {t.ERROR_TYPE} <= set(dp.attributes or {})
            assert set(dp.attributes or {}) <= set(spec.attributes)


# --- the log line ---------------------------------------------------------------------------------
def test_log_run_is_one_info_line_with_extra(otel: Otel, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="hango.test")
    with otel.telemetry.span(t.SPAN_RUN) as span:
        otel.telemetry.log_run(
            agent_id="a1",
            run_id="r-7",
            attributes={  # published in any order; logged in the catalogue's order
                "hango.skills.count": 3,
                "hango.skills.invalid": 1,
                "hango.memory.sources": ["/memories/AGENTS.md", "/memories/team notes.md"],
                "hango.memory.bytes": 1234,
            },
        )
    (record,) = [r for r in caplog.records if r.name == "hango.test"]
    fields = vars(record)
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        "hango run agent_id=a1 run_id=r-7 memory_sources=/memories/AGENTS.md,"
        '"/memories/team notes.md" memory_bytes=1234 skills_indexed=3 skills_invalid=1'
    )
    assert fields["agent_id"] == "a1" and fields["run_id"] == "r-7"
    assert fields["memory_sources"] == ["/memories/AGENTS.md", "/memories/team notes.md"]
    assert (fields["memory_bytes"], fields["skills_indexed"], fields["skills_invalid"]) == (1234, 3, 1)
    assert fields["trace_id"] == trace.format_trace_id(span.get_span_context().trace_id)


def test_log_run_default_logger_and_no_sources(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hango")
    t.Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()).log_run(
        agent_id="a2", run_id="r", attributes={"hango.memory.sources": [], "hango.memory.bytes": 0}
    )
    (record,) = [r for r in caplog.records if r.name == "hango"]
    assert "memory_sources=- memory_bytes=0" in record.getMessage()
    assert not hasattr(record, "trace_id")  # no span: nothing to correlate


# --- Prometheus names -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "unit", "kind", "expected"),
    [
        # from prometheus/otlptranslator's own documentation examples
        ("http.server.request.duration", "s", "histogram", "http_server_request_duration_seconds"),
        ("requests.count", "1", "counter", "requests_count_total"),
        ("memory.usage", "By", "gauge", "memory_usage_bytes"),
        ("io.throughput", "By/s", "gauge", "io_throughput_bytes_per_second"),
        ("cpu.utilization", "1", "gauge", "cpu_utilization_ratio"),
        ("foo.total", "{request}", "counter", "foo_total"),
        ("gen_ai.client.token.usage", "{token}", "histogram", "gen_ai_client_token_usage"),
        # hango's, as the notes table lists them
        ("hango.memory.bytes", "By", "histogram", "hango_memory_bytes"),
        ("hango.cache.read_ratio", "1", "gauge", "hango_cache_read_ratio"),
        ("hango.cache.read_ratio", "1", "histogram", "hango_cache_read_ratio"),
    ],
)
def test_prometheus_name(name: str, unit: str, kind: t.InstrumentKind, expected: str) -> None:
    assert t.prometheus_name(name, unit, kind) == expected


def test_prometheus_series_of_hango_instruments() -> None:
    series = {spec.name: t.prometheus_series(spec) for spec in t.INSTRUMENTS}
    assert series == {
        "hango.memory.load.duration": (
            "hango_memory_load_duration_seconds_bucket",
            "hango_memory_load_duration_seconds_sum",
            "hango_memory_load_duration_seconds_count",
        ),
        "hango.memory.bytes": (
            "hango_memory_bytes_bucket",
            "hango_memory_bytes_sum",
            "hango_memory_bytes_count",
        ),
        "hango.skills.indexed": ("hango_skills_indexed",),
        "hango.skills.invalid": ("hango_skills_invalid",),
        "hango.cache.read_ratio": (
            "hango_cache_read_ratio_bucket",
            "hango_cache_read_ratio_sum",
            "hango_cache_read_ratio_count",
        ),
        "hango.tokens": ("hango_tokens_total",),
        "hango.proposals": ("hango_proposals_total",),
        "hango.cache.misses": ("hango_cache_misses_total",),
        "gen_ai.client.token.usage": (
            "gen_ai_client_token_usage_bucket",
            "gen_ai_client_token_usage_sum",
            "gen_ai_client_token_usage_count",
        ),
        "gen_ai.client.operation.duration": (
            "gen_ai_client_operation_duration_seconds_bucket",
            "gen_ai_client_operation_duration_seconds_sum",
            "gen_ai_client_operation_duration_seconds_count",
        ),
    }
    assert t.prometheus_label("hango.token.kind") == "hango_token_kind"
    assert t.prometheus_label("gen_ai.request.model") == "gen_ai_request_model"


# --- configure() ---------------------------------------------------------------------------------
def test_configure_memory_span_tree_is_deterministic() -> None:
    c = t.configure("memory", service_name="hango-test")
    try:
        one_run(c.telemetry)
        with pytest.raises(RuntimeError), c.telemetry.tool_span("rm", "toolu_2"):
            raise RuntimeError("refused")
        assert c.span_tree() == "\n".join(
            [
                "agent.run gen_ai.agent.name=a1",
                "  agent.before_run",
                "    agent.memory_load hango.memory.bytes=1200 hango.memory.sources=[/memories/AGENTS.md]",
                "      * agent.memory_missing path=/memories/missing.md",
                "    agent.skills_index hango.skills.count=2 hango.skills.invalid=1",
                "      * agent.skill_invalid path=/skills/bad/SKILL.md reason=no name",
                "  chat claude-test [CLIENT] gen_ai.operation.name=chat gen_ai.provider.name=anthropic"
                " gen_ai.request.max_tokens=512 gen_ai.request.model=claude-test"
                " gen_ai.response.finish_reasons=[tool_use] gen_ai.response.model=claude-test-2026"
                " gen_ai.usage.cache_creation.input_tokens=100"
                " gen_ai.usage.cache_read.input_tokens=890 gen_ai.usage.input_tokens=1000"
                " gen_ai.usage.output_tokens=7 hango.cache.read_ratio=0.89 hango.memory.bytes=1200"
                " hango.skills.count=2",
                "    execute_tool read_file gen_ai.operation.name=execute_tool"
                " gen_ai.tool.call.id=toolu_1 gen_ai.tool.name=read_file gen_ai.tool.type=function",
                "execute_tool rm !ERROR RuntimeError: refused error.type=RuntimeError"
                " gen_ai.operation.name=execute_tool gen_ai.tool.call.id=toolu_2 gen_ai.tool.name=rm"
                " gen_ai.tool.type=function",
                "  * exception exception.type=RuntimeError",
            ]
        )
        timed = c.span_tree(durations=True).splitlines()
        assert timed[0].startswith("agent.run (") and " ms) " in timed[0]
        assert {s.resource.attributes["service.name"] for s in c.spans()} == {"hango-test"}
    finally:
        c.shutdown()


def test_configure_memory_metrics_flattened_and_clear() -> None:
    c = t.configure()
    try:
        c.telemetry.record_skills(4, 1)
        c.telemetry.record_memory_load(0.002, 3000, 1)
        c.telemetry.record_memory_load(0.2, 5000, 1)
        got = c.metrics()
        assert got[t.METRIC_SKILLS_INDEXED] == [
            {"unit": "{skill}", "attributes": {}, "type": "gauge", "value": 4}
        ]
        assert got[t.METRIC_SKILLS_INVALID][0]["value"] == 1
        (load,) = got[t.METRIC_MEMORY_LOAD_DURATION]
        assert (load["type"], load["count"], load["min"], load["max"]) == ("histogram", 2, 0.002, 0.2)
        assert load["bounds"] == t.MEMORY_LOAD_DURATION_BUCKETS_S
        assert len(load["bucket_counts"]) == len(load["bounds"]) + 1
        assert c.metrics() == got  # reading twice does not drain or double anything
        c.telemetry.record_skills(6, 2)
        again = c.metrics()
        assert again[t.METRIC_SKILLS_INDEXED][0]["value"] == 6
        assert again[t.METRIC_SKILLS_INVALID][0]["value"] == 2  # a gauge: the latest run
        assert again[t.METRIC_MEMORY_LOAD_DURATION][0]["count"] == 2
        c.clear()
        assert c.metrics() == {} and c.spans() == ()
        c.telemetry.record_skills(1, 0)
        assert c.metrics()[t.METRIC_SKILLS_INVALID][0]["value"] == 0
    finally:
        c.shutdown()
        c.shutdown()  # twice is fine


def test_configure_does_not_touch_globals_unless_asked() -> None:
    before = trace.get_tracer_provider()
    c = t.configure()
    try:
        assert trace.get_tracer_provider() is before
        assert c.tracer_provider is not before
    finally:
        c.shutdown()


def test_configure_rejects_unknown_mode() -> None:
    with pytest.raises(ValueError, match="memory, console, otlp, phoenix, langfuse"):
        t.configure("grafana")


def test_configure_langfuse_without_keys_sends_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for var in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY"):
        monkeypatch.delenv(var, raising=False)
    caplog.set_level(logging.WARNING, logger="hango")
    c = t.configure("langfuse", langfuse_public_key="pk-only")
    try:
        assert c.mode == "memory" and c.destinations == ("memory",)
        assert "Langfuse keys missing" in c.message
        assert t.LANGFUSE_LOCAL_PUBLIC_KEY in c.message and t.LANGFUSE_LOCAL_HOST in c.message
        assert any("Langfuse keys missing" in r.getMessage() for r in caplog.records)
        with c.telemetry.span(t.SPAN_RUN):
            pass
        assert [s.name for s in c.spans()] == [t.SPAN_RUN]
    finally:
        c.shutdown()


def test_configure_langfuse_reads_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-env")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-env")
    monkeypatch.setenv("LANGFUSE_BASE_URL", "http://127.0.0.1:9/")
    c = t.configure("langfuse", timeout_s=0.2)
    try:
        assert c.mode == "langfuse" and c.message == ""
        assert c.destinations == ("http://127.0.0.1:9/api/public/otel/v1/traces", "memory (metrics)")
        with pytest.raises(RuntimeError, match="spans\\(\\) needs"):
            c.spans()
        c.telemetry.record_skills(2, 0)  # metrics stay inspectable: Langfuse drops OTLP metrics
        assert c.metrics()[t.METRIC_SKILLS_INDEXED][0]["value"] == 2
    finally:
        c.shutdown()


def test_langfuse_headers() -> None:
    headers = t.langfuse_headers("pk-lf-hango-local", "sk-lf-hango-local")
    assert headers == {
        "Authorization": "Basic cGstbGYtaGFuZ28tbG9jYWw6c2stbGYtaGFuZ28tbG9jYWw=",
        "x-langfuse-ingestion-version": "4",
    }


def test_configure_console_prints(capsys: pytest.CaptureFixture[str]) -> None:
    c = t.configure("console", service_name="hango-console")
    try:
        with c.telemetry.span(t.SPAN_BEFORE_RUN):
            pass
        assert '"name": "agent.before_run"' in capsys.readouterr().out
        c.telemetry.record_skills(3, 0)
        assert c.flush()
        assert t.METRIC_SKILLS_INDEXED in capsys.readouterr().out
    finally:
        c.shutdown()


def test_set_global_makes_default_telemetry_use_the_providers() -> None:
    # In a child process: the API lets a process set its global providers only once.
    code = (
        "from hango import telemetry as t\n"
        "c = t.configure(set_global=True)\n"
        "tel = t.Telemetry()\n"
        "with tel.span(t.SPAN_RUN):\n"
        "    pass\n"
        "tel.record_skills(2, 0)\n"
        "print([s.name for s in c.spans()], c.metrics()[t.METRIC_SKILLS_INDEXED][0]['value'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['agent.run'] 2"


# --- the package: names, facade, set-up -----------------------------------------------------------
def test_package_modules_are_small_and_layered() -> None:
    import ast
    from pathlib import Path

    package = Path(t.__file__).parent
    for module in package.glob("*.py"):
        lines = len(module.read_text().splitlines())
        assert lines <= 350, f"{module.name}: {lines} lines"
    imported = {
        module.stem: {
            node.module or "" for node in ast.walk(ast.parse(module.read_text()))
            if isinstance(node, ast.ImportFrom)
        } | {
            alias.name for node in ast.walk(ast.parse(module.read_text()))
            if isinstance(node, ast.Import) for alias in node.names
        }
        for module in package.glob("*.py")
    }
    assert not any(m.startswith("opentelemetry") for m in imported["names"])  # plain constants
    assert not any(m.startswith("opentelemetry.sdk") for m in imported["facade"])  # API only
    assert "hango.telemetry.setup" not in imported["facade"]


def test_every_public_name_is_reexported() -> None:
    from hango.telemetry import configured, facade, names, prometheus, server, setup

    for module in (names, facade, configured, prometheus, setup, server):
        for name, value in vars(module).items():
            if name.startswith("_") or name == "TYPE_CHECKING" or getattr(
                    value, "__module__", module.__name__) != module.__name__:
                continue
            if isinstance(value, type) or callable(value) or name.isupper():
                assert getattr(t, name) is value, f"{module.__name__}.{name}"
                assert name in t.__all__


def test_log_run_puts_run_metadata_on_the_root_span_for_langfuse(otel: Otel) -> None:
    with otel.telemetry.span(t.SPAN_RUN):
        otel.telemetry.log_run(agent_id="a1", run_id="r1", attributes={
            "hango.memory.sources": ["/memories/AGENTS.md"], "hango.memory.bytes": 19,
            "hango.skills.count": 2, "hango.skills.invalid": 1})
    root = otel.spans()[t.SPAN_RUN].attributes or {}
    assert root["langfuse.trace.metadata.memory_bytes"] == 19
    assert root["langfuse.observation.metadata.skills_count"] == 2
    assert root["langfuse.trace.metadata.skills_invalid"] == 1
    assert tuple(root["langfuse.trace.metadata.memory_sources"]) == ("/memories/AGENTS.md",)
    assert not any(k.startswith("hango.") for k in root)  # the hango.* values stay where measured


def test_root_metadata_is_hidden_from_span_tree() -> None:
    c = t.configure("memory")
    try:
        with c.telemetry.span(t.SPAN_RUN):
            c.telemetry.annotate_run(memory_bytes=5)
        assert c.span_tree() == "agent.run"
    finally:
        c.shutdown()


def test_annotate_run_outside_a_span_is_a_no_op(otel: Otel) -> None:
    otel.telemetry.annotate_run(memory_bytes=5)
    assert otel.spans() == {}


def test_configure_phoenix_sends_traces_only_to_its_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PHOENIX_COLLECTOR_ENDPOINT", raising=False)
    c = t.configure("phoenix", timeout_s=0.2)
    try:
        assert c.destinations == (t.PHOENIX_LOCAL_ENDPOINT + "/v1/traces", "memory (metrics)")
        assert c.tracer_provider.resource.attributes[t.PHOENIX_PROJECT_ATTRIBUTE] == "hango"
    finally:
        c.shutdown()
    monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", "http://127.0.0.1:9/")
    c = t.configure("phoenix", project="course", timeout_s=0.2)
    try:
        assert c.destinations[0] == "http://127.0.0.1:9/v1/traces"
        assert c.tracer_provider.resource.attributes[t.PHOENIX_PROJECT_ATTRIBUTE] == "course"
    finally:
        c.shutdown()


def test_otlp_endpoints_per_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(var, raising=False)
    assert t.otlp_endpoints() == {"traces": "http://localhost:4318/v1/traces",
                                  "metrics": "http://localhost:4318/v1/metrics"}
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://vm:8428/opentelemetry/v1/metrics")
    assert t.otlp_endpoints() == {"traces": "http://collector:4318/v1/traces",
                                  "metrics": "http://vm:8428/opentelemetry/v1/metrics"}
    assert t.otlp_endpoints("http://explicit:1") == {"traces": "http://explicit:1/v1/traces",
                                                     "metrics": "http://explicit:1/v1/metrics"}
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert t.otlp_endpoints()["traces"] is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_METRICS_PROTOCOL='grpc'"):
        t.otlp_endpoints()


def test_importing_a_middleware_loads_no_sdk_and_no_exporter() -> None:
    """Every middleware imports hango.telemetry; the SDK and exporters load only where a
    configuration is built (setup, configured, server)."""
    code = ("import sys, hango.agent.memory, hango.agent.skills, hango.agent.runtime\n"
            "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', "
            "'opentelemetry.exporter', 'langfuse', 'prometheus_client'))))\n"
            "from hango.telemetry import configure\n"
            "print('opentelemetry.sdk' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "True"]  # and a configure() still finds the SDK
