"""One run read back through a real Arize Phoenix's REST API (installed into `.traces-venv`, loopback,
free ports): `agent.memory_load` and `agent.skills_index` under `agent.before_run`,
`hango.memory.bytes` and `hango.skills.count` on the chat span; one run served by `hango serve
--phoenix` with its session and its prompt in the input pane; skipped with the reason when the
registry is unreachable.

The trace picture in a real viewer: one agent run, read back through Arize Phoenix's REST API.

Phoenix is installed once into ``.traces-venv`` (its own virtual environment, as ``make traces``
does; about a minute on a fast line) and started on loopback on free ports for this module only.
When the package registry cannot be reached, the module is SKIPPED with the reason: a learner's
laptop offline must not fail ``make test``. ``HANGO_SKIP_PHOENIX=1`` skips it on purpose.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hango import telemetry as t
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_token, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel, tool_call

ROOT = Path(__file__).resolve().parents[1]


def traces_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hango_traces", ROOT / "deploy/phoenix/traces.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A Phoenix of this module's own on 127.0.0.1 (HTTP and gRPC); its HTTP port."""
    if os.environ.get("HANGO_SKIP_PHOENIX"):
        pytest.skip("HANGO_SKIP_PHOENIX is set")
    traces = traces_module()
    venv = traces.venv_dir()
    try:
        traces.install(venv)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        stderr = getattr(exc, "stderr", b"") or b""
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        pytest.skip(f"Phoenix could not be installed into {venv} (package registry "
                    f"unreachable?): {tail[0]}")
    port, grpc_port = free_port(), free_port()
    proc = traces.start(venv, port, grpc_port, tmp_path_factory.mktemp("phoenix"))
    try:
        yield port
    finally:
        traces.stop_process(proc.pid)


def by_name(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in spans}


def attribute(span: dict[str, Any], dotted: str) -> Any:
    """Phoenix returns attributes nested (``{"hango": {"memory": {...}}}``) or flat: read both."""
    attributes = span["attributes"]
    if dotted in attributes:
        return attributes[dotted]
    node: Any = attributes
    for part in dotted.split("."):
        node = node[part]
    return node


def test_one_run_draws_the_before_run_tree_in_phoenix(phoenix: int, db: Database,
                                                       tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(tools=["read_file", "ls"],
                                             memory=["/memories/AGENTS.md"]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", "Answer in French.\n")
    fs.write("/skills/csv/SKILL.md", "---\nname: csv\ndescription: Read CSV files.\n---\nStep 1.\n")
    project = f"hango-test-{tenant}"
    c = t.configure("phoenix", phoenix_endpoint=f"http://127.0.0.1:{phoenix}", project=project)
    model = SimulatedModel(policy=[[tool_call("ls", {"path": "/skills/"})], "Voilà."])
    Agent(db, tenant, "a1", model, telemetry=c.telemetry).run("which skills?")
    assert c.flush(), "the export to Phoenix failed"
    assert "memory (metrics)" in c.destinations  # Phoenix rejects OTLP metrics: none are sent
    c.shutdown()

    traces = traces_module()
    deadline = time.monotonic() + 60  # Phoenix ingests through a queue: poll, bounded
    names: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        try:
            names = by_name(traces.spans(phoenix, project))
        except OSError:  # the project appears with its first span
            names = {}
        if {t.SPAN_MEMORY_LOAD, t.SPAN_SKILLS_INDEX, t.SPAN_RUN} <= set(names) and any(
                n.startswith("chat ") for n in names):
            break
        time.sleep(0.5)
    before = names[t.SPAN_BEFORE_RUN]
    for child in (t.SPAN_MEMORY_LOAD, t.SPAN_SKILLS_INDEX):
        assert names[child]["parent_id"] == before["context"]["span_id"], child
        assert names[child]["context"]["trace_id"] == before["context"]["trace_id"]
    assert before["parent_id"] == names[t.SPAN_RUN]["context"]["span_id"]
    chat = next(s for n, s in names.items() if n.startswith("chat "))
    assert attribute(chat, t.ATTR_MEMORY_BYTES) == len("Answer in French.\n")
    assert attribute(chat, t.ATTR_SKILLS_COUNT) == 1
    assert attribute(chat, t.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS) is not None
    assert "execute_tool ls" in names


def wait_for(port: int, project: str, trace_id: str, names: set[str]) -> dict[str, dict[str, Any]]:
    """The spans of one trace, once Phoenix has ingested ``names`` of it (bounded poll)."""
    traces = traces_module()
    deadline = time.monotonic() + 60
    found: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        try:
            found = by_name([s for s in traces.spans(port, project)
                             if s["context"]["trace_id"] == trace_id])
        except OSError:
            found = {}
        if names <= set(found):
            break
        time.sleep(0.5)
    return found


def test_a_run_served_by_hango_serve_shows_in_phoenix(phoenix: int, db: Database,
                                                      tenant: str) -> None:
    """``make traces`` + ``hango serve --phoenix URL``: a run over HTTP is a trace in Phoenix,
    the tree under agent.run, the chat span with its prompt when capture is on."""
    from test_serve_telemetry import serve_and_run

    save_agent(db, tenant, "a1", AgentConfig(tools=["ls"], memory=["/memories/AGENTS.md"]))
    PostgresBackend(db, tenant, "a1").write("/memories/AGENTS.md", "Answer in French.\n")
    token = create_token(db, tenant, "owner", "test")
    project = f"hango-serve-{tenant}"
    served = serve_and_run(tenant, token, {
        "PHOENIX_COLLECTOR_ENDPOINT": f"http://127.0.0.1:{phoenix}",
        "OTEL_RESOURCE_ATTRIBUTES": f"{t.PHOENIX_PROJECT_ATTRIBUTE}={project}",
        "OTEL_BSP_SCHEDULE_DELAY": "100", t.CAPTURE_CONTENT_ENV: "SPAN_ONLY"})
    assert f"traces -> Phoenix http://127.0.0.1:{phoenix}" in served.stderr
    names = wait_for(phoenix, project, served.run["trace_id"],
                     {t.SPAN_RUN, t.SPAN_BEFORE_RUN, t.SPAN_MEMORY_LOAD, "chat hango-sim-1"})
    run, before = names[t.SPAN_RUN], names[t.SPAN_BEFORE_RUN]
    assert before["parent_id"] == run["context"]["span_id"]
    assert names[t.SPAN_MEMORY_LOAD]["parent_id"] == before["context"]["span_id"]
    assert attribute(run, t.GEN_AI_CONVERSATION_ID) == served.run["run_id"]
    assert attribute(run, t.SESSION_ID) == served.run["run_id"]  # Phoenix's sessions
    chat = names["chat hango-sim-1"]
    assert "<- cache breakpoint" in attribute(chat, t.INPUT_VALUE)  # Phoenix's input pane
    assert "/memories/AGENTS.md" in attribute(chat, t.INPUT_VALUE)
