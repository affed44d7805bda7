"""`hango serve` as a subprocess with `OTEL_*` at a loopback receiver: the span tree, the run line
(stderr and OTLP logs, in the run's trace), the metrics; the prompt with capture on, none with it
off; nothing sent when nothing is configured; a setting it cannot honour stops it naming the
variable.

``hango serve``'s telemetry, for real: the server is a subprocess configured by the standard
``OTEL_*`` variables only, a run is made over HTTP, and a loopback OTLP/HTTP receiver decodes
what arrives (opentelemetry-proto, as a collector would): the span tree, the run's log line, the
metrics; the prompt on the chat span when content capture is on, none when it is off; and nothing
at all when nothing is configured.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_otlp_export import Receiver, attributes, listening

from hango import telemetry as t
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_token, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel

HANGO = str(Path(sys.executable).parent / "hango")
OURS = ("OTEL_", "LANGFUSE_", "PHOENIX_")  # variables a developer's shell may carry


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Served:
    run: dict[str, Any]
    stderr: str
    tenant: str


@pytest.fixture
def agent(db: Database, tenant: str) -> tuple[str, list[str]]:
    """Agent a1 with a memory file and a skill; its token, and the system block sources the same
    run makes in this process (the order the trace must show)."""
    save_agent(db, tenant, "a1", AgentConfig(tools=["read_file", "ls"],
                                             memory=["/memories/AGENTS.md"]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", "Answer in French.\n")
    fs.write("/skills/csv/SKILL.md", "---\nname: csv\ndescription: Read CSV files.\n---\nStep 1.\n")
    model = SimulatedModel()
    Agent(db, tenant, "a1", model).run("hi")
    return create_token(db, tenant, "owner", "test"), [b.source for b in model.calls[0][0].system]


def serve_and_run(tenant: str, token: str, env: dict[str, str]) -> Served:
    """``hango serve`` with ``env`` (and no OTEL_/LANGFUSE_/PHOENIX_ of ours), one run over
    HTTP, then SIGTERM: the server flushes its exporters as it stops."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(OURS)}
    server = subprocess.Popen([HANGO, "serve", "--port", str(port)], env={**clean, **env},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/v1/agents/a1/runs"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                reply = httpx.post(url, json={"prompt": "hi"}, timeout=30,
                                   headers={"Authorization": f"Bearer {token}"})
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()
                assert time.monotonic() < deadline, "hango serve did not answer in 60 s"
                time.sleep(0.1)
        assert reply.status_code == 201, reply.text
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
    assert server.returncode == 0, stderr
    return Served(reply.json(), stderr, tenant)


def otlp_env(receiver: Receiver, **extra: str) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base, "OTEL_SERVICE_NAME": "hango-serve-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100", **extra}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with listening() as rec:
        yield rec


def spans(receiver: Receiver) -> list[tuple[Any, dict[str, Any], dict[str, Any]]]:
    return spans_at(receiver, "/v1/traces")


def spans_at(receiver: Receiver, path: str) -> list[tuple[Any, dict[str, Any], dict[str, Any]]]:
    """Every span posted to ``path``: (span, its attributes, its resource's attributes)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    out = []
    for body in receiver.bodies(path):
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                out += [(s, attributes(s.attributes), resource) for s in ss.spans]
    return out


def test_a_served_run_reaches_the_collector_as_a_tree_a_log_line_and_metrics(
        agent: tuple[str, list[str]], tenant: str, receiver: Receiver) -> None:
    token, sources = agent
    served = serve_and_run(tenant, token, otlp_env(
        receiver, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="SPAN_ONLY"))
    run_id, trace_id = served.run["run_id"], served.run["trace_id"]
    assert (f"telemetry: traces -> {receiver.base}/v1/traces; metrics -> {receiver.base}"
            "/v1/metrics; logs -> " in served.stderr) and "prompts captured" in served.stderr

    got = spans(receiver)
    assert {res["service.name"] for _, _, res in got} == {"hango-serve-test"}
    by_name = {s.name: (s, a) for s, a, _ in got if s.trace_id.hex() == trace_id}
    root, root_attrs = by_name[t.SPAN_RUN]
    before, _ = by_name[t.SPAN_BEFORE_RUN]
    assert root.parent_span_id == b"" and before.parent_span_id == root.span_id
    for child in (t.SPAN_MEMORY_LOAD, t.SPAN_SKILLS_INDEX):  # the seed's success criterion
        assert by_name[child][0].parent_span_id == before.span_id, child
    assert (root_attrs["gen_ai.operation.name"], root_attrs["gen_ai.conversation.id"],
            root_attrs["hango.tenant.id"]) == ("invoke_agent", run_id, tenant)
    assert root_attrs["input.value"] == "hi"  # the run's input and output, captured
    chat, chat_attrs = by_name["chat hango-sim-1"]
    assert chat.parent_span_id == root.span_id
    system = json.loads(chat_attrs["gen_ai.system_instructions"])
    assert [p["source"] for p in system] == sources  # the blocks, in order, with their sources
    assert [i for i, p in enumerate(system) if "cache_breakpoint" in p] == [
        sources.index("skills")]  # the breakpoint right after the skills index
    assert "<- cache breakpoint" in chat_attrs["input.value"]

    line = next(x for x in served.stderr.splitlines() if x.startswith("INFO hango: hango run "))
    assert line.startswith(f"INFO hango: hango run tenant_id={tenant} agent_id=a1 run_id={run_id}"
                           " status=done cache_read_ratio=0.000 memory_sources=/memories/AGENTS.md"
                           " memory_bytes=18 skills_indexed=1 skills_invalid=0")
    (record,) = [r for r in receiver.logs() if str(r[0]).startswith("hango run ")]
    assert record[1] == trace_id and f"run_id={run_id}" in record[0]  # the log line is in the trace

    metrics = set(receiver.metrics())
    assert {t.METRIC_TOKENS, t.METRIC_GEN_AI_TOKEN_USAGE, t.METRIC_GEN_AI_DURATION,
            t.METRIC_CACHE_MISSES, t.METRIC_MEMORY_BYTES, t.METRIC_SKILLS_INDEXED} <= metrics


def test_without_content_capture_the_trace_carries_no_prompt(
        agent: tuple[str, list[str]], tenant: str, receiver: Receiver) -> None:
    token, _ = agent
    served = serve_and_run(tenant, token, otlp_env(receiver))
    assert "prompts captured" not in served.stderr
    got = {s.name: a for s, a, _ in spans(receiver) if s.trace_id.hex() == served.run["trace_id"]}
    content = {t.GEN_AI_SYSTEM_INSTRUCTIONS, t.GEN_AI_INPUT_MESSAGES, t.GEN_AI_OUTPUT_MESSAGES,
               t.INPUT_VALUE, t.OUTPUT_VALUE}
    assert got and all(not content & set(attrs) for attrs in got.values())
    assert got["chat hango-sim-1"]["gen_ai.usage.input_tokens"] > 0  # the rest is there


def test_with_nothing_configured_nothing_is_sent(agent: tuple[str, list[str]],
                                                 tenant: str) -> None:
    """No OTLP, Phoenix or Langfuse setting: nothing reaches even the default endpoints (OTLP's
    localhost:4318, Phoenix's 127.0.0.1:6006), where receivers listen when those ports are free."""
    token, _ = agent
    with ExitStack() as stack:
        listeners = []
        for port in (4318, 6006):
            try:
                listeners.append(stack.enter_context(listening(port)))
            except OSError:  # in use on this machine (a running Phoenix, a collector)
                continue
        served = serve_and_run(tenant, token, {})
        assert "telemetry: not exported" in served.stderr
        assert [len(r.requests) for r in listeners] == [0] * len(listeners)
    assert any(x.startswith("INFO hango: hango run ") for x in served.stderr.splitlines())
    if not listeners:
        pytest.skip("ports 4318 and 6006 are both in use: the default endpoints went unwatched")


def test_a_setting_the_server_cannot_honour_stops_it_naming_the_variable(tenant: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(OURS)}
    for var, value, message in (
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'"),
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "yes",
             "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT='yes'"),
            ("LANGFUSE_PUBLIC_KEY", "pk-only", "LANGFUSE_SECRET_KEY is not set")):
        result = subprocess.run([HANGO, "serve", "--port", str(free_port())], timeout=60,
                                env={**clean, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                                     var: value}, capture_output=True, text=True)
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith("hango: error: ") and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_with_langfuse_keys_the_server_sends_every_span_through_the_sdk(
        agent: tuple[str, list[str]], tenant: str, receiver: Receiver) -> None:
    token, _ = agent
    served = serve_and_run(tenant, token, {
        "LANGFUSE_PUBLIC_KEY": "pk-lf-served", "LANGFUSE_SECRET_KEY": "sk-lf-served",
        "LANGFUSE_BASE_URL": receiver.base})
    assert f"traces -> Langfuse {receiver.base}" in served.stderr
    assert {r.path for r in receiver.requests} == {t.LANGFUSE_OTEL_TRACES_PATH}  # no OTLP asked
    assert all({k.lower(): v for k, v in r.headers.items()}["x-langfuse-public-key"] == "pk-lf-served"
               for r in receiver.requests)
    got = {s.name: a for s, a, _ in spans_at(receiver, t.LANGFUSE_OTEL_TRACES_PATH)}
    assert {t.SPAN_RUN, t.SPAN_BEFORE_RUN, t.SPAN_MEMORY_LOAD, t.SPAN_SKILLS_INDEX} <= set(got)
    assert (got[t.SPAN_RUN][t.LANGFUSE_TRACE_NAME], got[t.SPAN_RUN][t.LANGFUSE_SESSION_ID],
            got[t.SPAN_RUN][t.LANGFUSE_USER_ID]) == ("a1", served.run["run_id"], tenant)
