"""Slot order pinned; agent writes under `/memories/` and `/skills/` refused with nothing written; the
allowlist; tool errors go back to the model; the step limit; byte-stable assembly (the same inputs
give the same request bytes); the conversation breakpoint stays within 4; subagent state never
reaches the parent; undeclared subagents refused.

The run loop over real PostgreSQL: allowlist, tool errors, reserved prefixes, subagents,
and where the stack puts the cache breakpoint.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from opentelemetry import trace
from test_proposals import MEMORY, do, policy, write  # the same scripted model

from hango.agent import proposals, runs
from hango.agent.hooks import Event
from hango.agent.runtime import Agent, RunResult, default_stack
from hango.agent.stack import SLOTS, DefaultStack, Stack
from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.fs.backend import FileNotFound, PostgresBackend
from hango.models.base import (
    Block,
    InvalidRequest,
    Message,
    ModelError,
    Request,
    Response,
    ToolCall,
    ToolResult,
)
from hango.models.simulated import Reply, SimulatedModel, tool_call
from hango.settings import load_settings
from hango.telemetry import Telemetry


def test_default_stack_slots_are_pinned(db: Database, tenant: str, sim_agent: Agent) -> None:
    save_agent(db, tenant, "a1")
    built = default_stack(sim_agent)
    assert isinstance(built, DefaultStack)
    assert SLOTS == ("skills", "filesystem", "subagents", "prompt_cache", "memory")
    assert built.names == list(SLOTS)
    with pytest.raises(ValueError, match="unknown slot"):
        DefaultStack(cache=object())


def test_agent_write_to_memory_is_refused_and_nothing_written(backend: PostgresBackend,
                                                              db: Database) -> None:
    model = SimulatedModel(policy=[
        [tool_call("write_file", {"path": "/memories/AGENTS.md", "content": "pwned"})],
        [tool_call("edit_file", {"path": "/skills/x/SKILL.md", "old_string": "a",
                                 "new_string": "b"})],
        "ok",
    ])
    result = Agent(db, backend.tenant_id, "a1", model).run("remember this")
    refusals = [r for m in result.messages for r in m.tool_results]
    assert [r.is_error for r in refusals] == [True, True]
    assert "reserved prefix /memories/" in refusals[0].content
    assert "only an owner or admin" in refusals[0].content
    assert "reserved prefix /skills/" in refusals[1].content
    with pytest.raises(FileNotFound):
        backend.read("/memories/AGENTS.md")
    assert result.text == "ok"


def test_agent_can_write_ordinary_files(backend: PostgresBackend, db: Database) -> None:
    model = SimulatedModel(policy=[
        [tool_call("write_file", {"path": "/notes/todo.md", "content": "buy milk"})], "done"])
    Agent(db, backend.tenant_id, "a1", model).run("note it")
    assert backend.read("/notes/todo.md").content == "buy milk"


def test_tool_outside_allowlist_is_refused_and_never_executed(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(tools=["read_file"]))
    backend = PostgresBackend(db, tenant, "a1")
    model = SimulatedModel(policy=[
        [tool_call("write_file", {"path": "/notes/x", "content": "should not exist"})], "done"])
    result = Agent(db, tenant, "a1", model).run("try")
    (refusal,) = result.messages[2].tool_results
    assert refusal.is_error and "not in this agent's allowlist" in refusal.content
    with pytest.raises(FileNotFound):
        backend.read("/notes/x")
    # the model is never even shown a tool it may not call
    assert [t.name for t in result.requests[0].tools] == ["read_file"]


def test_tool_error_goes_back_to_the_model_and_the_run_goes_on(backend: PostgresBackend,
                                                               db: Database) -> None:
    model = SimulatedModel(policy=[
        [tool_call("read_file", {"path": "/nope.md"})],
        [tool_call("read_file", {"path": "relative"})],
        [tool_call("read_file", {})],
        "recovered",
    ])
    result = Agent(db, backend.tenant_id, "a1", model).run("read")
    errors = [r for m in result.messages for r in m.tool_results]
    assert all(r.is_error for r in errors)
    assert "no such file: /nope.md" in errors[0].content
    assert "must be absolute" in errors[1].content
    assert "'path' must be a string" in errors[2].content
    assert result.text == "recovered" and result.stop_reason == "final"


def test_step_limit_stops_a_looping_model(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(max_steps=3))
    model = SimulatedModel(policy=lambda req: [tool_call("ls", {"path": "/"})])
    result = Agent(db, tenant, "a1", model).run("loop")
    assert result.stop_reason == "max_steps"
    assert len(result.requests) == 3


def test_assembly_is_byte_stable(backend: PostgresBackend, db: Database) -> None:
    backend.write("/memories/AGENTS.md", "Prefer short answers.")
    backend.write("/skills/a/SKILL.md", "---\nname: a\ndescription: Skill A.\n---\nbody")
    model_1, model_2 = SimulatedModel(), SimulatedModel()
    r1 = Agent(db, backend.tenant_id, "a1", model_1).run("same question")
    r2 = Agent(db, backend.tenant_id, "a1", model_2).run("same question")
    assert r1.requests[0].canonical() == r2.requests[0].canonical()
    assert r1.requests[0].canonical().count(b"Prefer short answers.") == 1


def test_conversation_breakpoint_within_the_limit(backend: PostgresBackend, db: Database) -> None:
    model = SimulatedModel(policy=[[tool_call("ls")], [tool_call("ls")], "done"])
    result = Agent(db, backend.tenant_id, "a1", model).run("go")
    for i, request in enumerate(result.requests):
        tiers = [(b.tier, b.index) for b in request.breakpoints]
        assert tiers == [("system", request.system_breakpoint), ("messages", 2 * i)]
        assert len(request.breakpoints) <= 4


def test_subagent_state_and_prompt_never_reach_the_parent(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "parent", AgentConfig(tools=["task", "read_file"],
                                                 subagents=["researcher"]))
    save_agent(db, tenant, "researcher", AgentConfig(system_prompt="CHILD-ONLY PROMPT",
                                                     tools=["read_file"]))
    child_fs = PostgresBackend(db, tenant, "researcher")
    child_fs.write("/memories/AGENTS.md", "CHILD MEMORY SECRET")
    child_fs.write("/skills/deep/SKILL.md",
                   "---\nname: deep-dive\ndescription: CHILD SKILL DESCRIPTION\n---\nbody")
    parent_fs = PostgresBackend(db, tenant, "parent")
    parent_fs.write("/memories/AGENTS.md", "PARENT MEMORY")
    child_model = SimulatedModel(policy=["the answer is 42"])
    parent_model = SimulatedModel(policy=[
        [tool_call("task", {"agent": "researcher", "description": "find the answer"})],
        lambda req: f"child said: {req.messages[-1].tool_results[0].content}",
    ])
    result = Agent(db, tenant, "parent", parent_model,
                   child_models={"researcher": child_model}).run("ask the child")
    assert result.text == "child said: the answer is 42"
    parent_bytes = b"".join(r.canonical() for r in result.requests)
    for secret in (b"CHILD MEMORY SECRET", b"CHILD SKILL DESCRIPTION", b"CHILD-ONLY PROMPT"):
        assert secret not in parent_bytes
    child_request: Request = child_model.calls[0][0]
    child_bytes = child_request.canonical()
    assert b"CHILD MEMORY SECRET" in child_bytes and b"CHILD SKILL DESCRIPTION" in child_bytes
    assert b"PARENT MEMORY" not in child_bytes  # the child loads its own sources, not ours
    assert result.memory_bytes == len(b"PARENT MEMORY")
    assert result.skills_count == 0


def test_task_tool_refuses_an_undeclared_subagent(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "parent", AgentConfig(tools=["task"], subagents=["helper"]))
    save_agent(db, tenant, "other", AgentConfig())
    model = SimulatedModel(policy=[[tool_call("task", {"agent": "other", "description": "x"})],
                                   "done"])
    result = Agent(db, tenant, "parent", model).run("go")
    (res,) = result.messages[2].tool_results
    assert res.is_error and "not one of this agent's subagents" in res.content


# --- what a run tells the trace viewers ----------------------------------------------------------
def _spans(exporter: Any) -> list[Any]:
    return list(exporter.get_finished_spans())


def test_the_run_span_follows_the_genai_agent_conventions(db: Database, tenant: str,
                                                          telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(tools=["ls"]))
    result = Agent(db, tenant, "a1", SimulatedModel(policy=[[tool_call("ls", {"path": "/"})],
                                                             "done"]), telemetry=tel).run("hi")
    spans = _spans(exporter)
    (root,) = [s for s in spans if s.name == "agent.run"]
    assert {k: root.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.agent.id", "gen_ai.conversation.id",
        "gen_ai.provider.name", "gen_ai.request.model", "session.id", "user.id")} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a1",
        "gen_ai.agent.id": f"{tenant}/a1", "gen_ai.conversation.id": result.run_id,
        "gen_ai.provider.name": "hango-sim", "gen_ai.request.model": "hango-sim-1",
        "session.id": result.run_id, "user.id": tenant}
    for span in spans:  # Langfuse's trace keys on every observation of the run
        assert (span.attributes["langfuse.trace.name"], span.attributes["langfuse.session.id"],
                span.attributes["langfuse.user.id"]) == ("a1", result.run_id, tenant), span.name
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert [c.attributes["gen_ai.response.id"] for c in chats] == [
        r.id for r in result.responses] and len(chats) == 2
    assert [tuple(c.attributes["gen_ai.response.finish_reasons"]) for c in chats] == [
        ("tool_use",), ("end_turn",)]


def test_failed_and_refused_tool_calls_are_error_spans(db: Database, tenant: str,
                                                       telemetry_pair: Any) -> None:
    """A refused call showed green in a trace viewer: it is ERROR now, with the reason."""
    from opentelemetry.trace import StatusCode

    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(tools=["ls", "read_file"]))
    Agent(db, tenant, "a1", SimulatedModel(policy=[
        [tool_call("ls", {"path": "/"})], [tool_call("read_file", {"path": "/nope.md"})],
        [tool_call("rm", {"path": "/"})], "done"]), telemetry=tel).run("hi")
    tools = [s for s in _spans(exporter) if s.name.startswith("execute_tool")]
    assert [(s.status.status_code, s.attributes.get("error.type")) for s in tools] == [
        (StatusCode.UNSET, None), (StatusCode.ERROR, "tool_error"), (StatusCode.ERROR, "refused")]
    assert tools[2].status.description == "refused: tool 'rm' is not in this agent's allowlist"
    assert "/nope.md" in (tools[1].status.description or "")


def test_span_events_are_mirrored_where_langfuse_keeps_them(db: Database, tenant: str,
                                                            telemetry_pair: Any) -> None:
    """Langfuse drops custom span events; the observation keeps them as metadata, and a warning
    as its level and status message: "why doesn't the agent know my skill" on its screen too."""
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(memory=["/memories/AGENTS.md", "/memories/gone.md"]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", "Answer in French.\n")
    fs.write("/skills/broken/SKILL.md", "---\nname: broken\ndescription: Use when: x\n---\n")
    result = Agent(db, tenant, "a1", SimulatedModel(), telemetry=tel).run("hi")
    by_name = {s.name: s.attributes for s in _spans(exporter)}
    skills, memory = by_name["agent.skills_index"], by_name["agent.memory_load"]
    assert skills["langfuse.observation.level"] == "WARNING"
    assert skills["langfuse.observation.status_message"] == result.warnings[0]
    (invalid,) = skills["langfuse.observation.metadata.skill_invalid"]
    assert invalid.startswith("path=/skills/broken/SKILL.md reason=")
    assert memory["langfuse.observation.level"] == "WARNING"
    assert memory["langfuse.observation.metadata.memory_missing"] == ("path=/memories/gone.md",)
    assert "gone.md" in memory["langfuse.observation.status_message"]
    assert "langfuse.observation.level" not in by_name["agent.run"]  # no warning of its own


def test_a_warning_in_the_log_names_tenant_agent_and_run(db: Database, tenant: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.WARNING, logger="hango")
    save_agent(db, tenant, "a1", AgentConfig(memory=["/memories/gone.md"]))
    result = Agent(db, tenant, "a1", SimulatedModel()).run("hi")
    (record,) = [r for r in caplog.records if "gone.md" in r.getMessage()]
    assert record.getMessage().endswith(
        f"(tenant_id={tenant} agent_id=a1 run_id={result.run_id})")
    assert (record.tenant_id, record.agent_id, record.run_id) == (tenant, "a1", result.run_id)


def test_a_subagent_run_stays_in_its_parents_trace_and_session(db: Database, tenant: str,
                                                               telemetry_pair: Any) -> None:
    from test_subagents import chain_agents

    tel, exporter, _ = telemetry_pair
    models = chain_agents(db, tenant, "ab")
    parent = Agent(db, tenant, "a", models["a"], telemetry=tel, child_models=models)
    result = parent.run("go")
    runs = {s.attributes["gen_ai.agent.name"]: s for s in _spans(exporter) if s.name == "agent.run"}
    assert set(runs) == {"a", "b"}
    assert runs["b"].parent is not None  # inside a's trace, under its task call
    assert runs["b"].attributes["langfuse.session.id"] == result.run_id  # the trace's session
    assert runs["b"].attributes["gen_ai.conversation.id"] != result.run_id  # its own run
    assert "session.id" not in runs["b"].attributes  # only the trace's root names the session


def test_a_resumed_run_joins_its_run_in_the_viewers(db: Database, tenant: str,
                                                    telemetry_pair: Any) -> None:

    tel, exporter, _ = telemetry_pair
    agent = ask_agent(db, tenant, telemetry=tel)
    first = agent.run(do(write(MEMORY, "- tea\n")))
    assert first.status == "interrupted"
    approve(db, tenant, first.interrupt)
    second = agent.resume(first.run_id)
    roots = [s for s in _spans(exporter) if s.name == "agent.run"]
    assert len(roots) == 2 and roots[0].context.trace_id != roots[1].context.trace_id
    for root in roots:  # two traces, one conversation: Langfuse's and Phoenix's session
        assert root.attributes["gen_ai.conversation.id"] == first.run_id
        assert root.attributes["session.id"] == root.attributes["langfuse.session.id"] == first.run_id
    assert roots[1].attributes["langfuse.observation.metadata.run_resumed"] == (
        f"run_id={first.run_id}",)
    assert second.run_id == first.run_id


# --- the run's spans and log line -------------------------------------------------------------


def hango_attributes(span: Any) -> dict[str, Any]:
    """A span's attributes without the Langfuse mirrors every span of a run carries."""
    return {k: v for k, v in (span.attributes or {}).items() if not k.startswith("langfuse.")}


def _run(db: Database, tenant: str, tel: Telemetry, script: list[Any]) -> Any:
    save_agent(db, tenant, "a1", AgentConfig())
    return Agent(db, tenant, "a1", SimulatedModel(policy=script), telemetry=tel).run("hi")


def test_the_run_span_names_agent_tenant_run_and_status(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    """A trace backend finds a run by agent, tenant and run id, and sees how it ended."""
    tel, exporter, _ = telemetry_pair
    result = _run(db, tenant, tel, ["done"])
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.parent is None)
    assert root.name == "agent.run"
    attrs = dict(root.attributes or {})
    assert {k: attrs.get(k) for k in ("gen_ai.agent.name", "hango.tenant.id", "hango.run.id",
                                      "hango.run.status")} == {
        "gen_ai.agent.name": "a1", "hango.tenant.id": tenant, "hango.run.id": result.run_id,
        "hango.run.status": "done"}
    before = next(s for s in spans if s.name == "agent.before_run")
    assert before.parent is not None and before.parent.span_id == root.context.span_id
    # The result carries the trace id a user pastes into the trace backend.
    assert result.trace_id == trace.format_trace_id(root.context.trace_id)
    assert re.fullmatch(r"[0-9a-f]{32}", result.trace_id)


def test_a_failed_run_says_failed_on_its_span(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(max_steps=1))
    result = Agent(db, tenant, "a1", SimulatedModel(policy=[
        [tool_call("ls", {"path": "/"})], "never reached"]), telemetry=tel).run("hi")
    root = next(s for s in exporter.get_finished_spans() if s.name == "agent.run")
    assert result.status == "failed"
    assert (root.attributes or {})["hango.run.status"] == "failed"


def test_without_a_tracer_the_trace_id_is_empty(db: Database, tenant: str) -> None:
    """No tracing configured: no made-up all-zero trace id on the result."""
    result = _run(db, tenant, Telemetry(trace.NoOpTracerProvider()), ["done"])
    assert result.trace_id == ""


def test_the_run_log_line_names_agent_and_run(
        db: Database, tenant: str, telemetry_pair: Any, caplog: pytest.LogCaptureFixture) -> None:
    tel, _, _ = telemetry_pair
    caplog.set_level(logging.INFO, logger="hango")
    result = _run(db, tenant, tel, ["done"])
    lines = [r for r in caplog.records if r.getMessage().startswith("hango run ")]
    assert len(lines) == 1
    assert lines[0].getMessage().startswith(
        f"hango run tenant_id={tenant} agent_id=a1 run_id={result.run_id} status=done ")
    assert (lines[0].__dict__["agent_id"], lines[0].__dict__["run_id"]) == ("a1", result.run_id)
    ratio = result.usage.read_ratio  # the provider said what it read: a number, not "unknown"
    assert isinstance(ratio, float) and lines[0].__dict__["cache_read_ratio"] == ratio
    assert f" cache_read_ratio={ratio:.3f}" in lines[0].getMessage()


def test_tool_spans_say_whether_the_tool_failed(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    _run(db, tenant, tel, [[tool_call("ls", {"path": "/"})],
                           [tool_call("read_file", {"path": "/nope.md"})],
                           [tool_call("no_such_tool")], "done"])
    tools = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert [(s.attributes or {})["hango.tool.error"] for s in tools] == [False, True, True]
    root = next(s for s in exporter.get_finished_spans() if s.name == "agent.run")
    for span in tools:  # inside the run's trace, not a trace of their own
        assert span.context.trace_id == root.context.trace_id


@pytest.fixture
def captured() -> Any:
    """A Telemetry with content capture on (what ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
    switches), on private providers, and its span exporter."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(provider, MeterProvider(), capture_content=True), exporter


def test_with_content_capture_the_run_span_shows_the_prompt_and_the_answer(
        db: Database, tenant: str, captured: Any) -> None:
    """The viewers' input and output panes: the user's message of this run (not the history
    before it) and the final answer; each chat span shows what the model received."""
    tel, exporter = captured
    save_agent(db, tenant, "a1", AgentConfig())
    history = [Message("user", "earlier"), Message("assistant", "noted")]
    result = Agent(db, tenant, "a1", SimulatedModel(policy=["the answer"]), telemetry=tel).run(
        "now", history)
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.name == "agent.run")
    assert {k: (root.attributes or {}).get(k) for k in ("input.value", "output.value")} == {
        "input.value": "now", "output.value": "the answer"} and result.text == "the answer"
    (chat,) = [s for s in spans if s.name.startswith("chat ")]
    sent = (chat.attributes or {})["gen_ai.input.messages"]
    assert isinstance(sent, str) and '"earlier"' in sent and '"now"' in sent


def test_a_resumed_runs_span_shows_the_runs_prompt_not_what_the_model_said_last(
        db: Database, tenant: str, captured: Any) -> None:
    """A resume starts from the saved conversation, which ends with the model's words: the
    input is still the user's message."""
    tel, exporter = captured
    agent = ask_agent(db, tenant, SimulatedModel(policy=[
        Reply("I propose noting tea.", (_write(MEMORY, "- tea\n"),)), "end"]), telemetry=tel)
    first = agent.run("remember tea")
    approve(db, tenant, first.interrupt)
    assert agent.resume(first.run_id).text == "end"
    roots = [s for s in exporter.get_finished_spans() if s.name == "agent.run"]
    assert [(r.attributes or {}).get("input.value") for r in roots] == ["remember tea"] * 2


def test_an_empty_prompt_is_refused_naming_the_empty_message(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig())
    with pytest.raises(InvalidRequest, match=r"^messages\[0\] \(user\) is empty"):
        Agent(db, tenant, "a1", SimulatedModel()).run("")


def test_a_runs_token_metrics_name_the_provider_and_a_call_that_read_no_cache_is_counted(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    """The conventions' token usage histogram is split by provider; ``hango.cache.misses``
    counts a call that read nothing from the cache, with why."""
    tel, _, reader = telemetry_pair
    result = _run(db, tenant, tel, ["done"])
    assert result.usage.cache_read_input_tokens == 0  # the first call: nothing cached yet
    data = reader.get_metrics_data()
    metrics = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics
               for m in sm.metrics}
    usage = metrics["gen_ai.client.token.usage"].data.data_points
    assert {(dp.attributes or {}).get("gen_ai.provider.name") for dp in usage} == {"hango-sim"}
    (miss,) = metrics["hango.cache.misses"].data.data_points
    assert miss.value == 1 and (miss.attributes or {})["hango.cache.miss_reason"]



# --- the stack: settings, the request, the breakpoint, the wrappers ---------------------------


def test_default_stack_hands_each_middleware_its_setting(db: Database, tenant: str) -> None:
    from hango.agent.stack import default_stack
    from hango.settings import load_settings

    s = load_settings(proposals_max_pending=3, max_file_bytes=4096,
                      skills_default_sources=["/skills/team"],
                      memory_default_sources=["/memories/team.md"])
    stack = default_stack(Agent(db, tenant, "a1", SimulatedModel(), settings=s))
    fs, skills, memory = (stack.slots[n] for n in ("filesystem", "skills", "memory"))
    assert (fs.max_pending, fs.max_bytes) == (3, 4096)
    assert skills.default_sources == ["/skills/team/"]
    assert memory.default_sources == ["/memories/team.md"]


def test_a_request_carries_model_max_tokens_and_the_system_prompt_block(
        db: Database, tenant: str) -> None:

    save_agent(db, tenant, "a1", AgentConfig(system_prompt="Be brief."))
    result = Agent(db, tenant, "a1", SimulatedModel()).run("hi")
    request = result.requests[0]
    assert (request.model, request.max_tokens) == ("hango-sim-1", 1024)
    assert request.system[1] == Block("Be brief.", "system_prompt")  # after the cache scope


def test_a_stack_without_prompt_cache_has_no_breakpoint(db: Database, tenant: str) -> None:
    from hango.agent.stack import default_stack

    save_agent(db, tenant, "a1", AgentConfig())
    plain = lambda a: default_stack(a).without("prompt_cache")  # noqa: E731
    result = Agent(db, tenant, "a1", SimulatedModel(), stack=plain).run("hi")
    assert result.requests[0].breakpoints == ()
    names = [m.name for m in default_stack(Agent(db, tenant, "a1", SimulatedModel()))
             .without("skills", "memory").middlewares]
    assert names == ["filesystem", "subagents", "prompt_cache"]


def test_a_model_wrapper_sees_the_run_context(db: Database, tenant: str) -> None:
    from hango.agent.stack import default_stack

    seen: list[str] = []

    class Spy:
        name = "spy"

        def wrap_model_call(self, ctx: Any, request: Any, call_next: Any) -> Any:
            seen.append(ctx.agent_id)
            return call_next(request)

    save_agent(db, tenant, "a1", AgentConfig())
    Agent(db, tenant, "a1", SimulatedModel(),
          stack=lambda a: Stack([*default_stack(a).middlewares, Spy()])).run("hi")
    assert seen == ["a1"]


def test_an_allowed_tool_no_middleware_provides_is_an_error_the_model_reads(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    from hango.agent.stack import default_stack

    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(tools=["ls", "task"]))
    result = Agent(db, tenant, "a1", SimulatedModel(policy=[[tool_call("task", {})], "done"]),
                   telemetry=tel, stack=lambda a: default_stack(a).without("subagents")).run("hi")
    (answer,) = result.messages[2].tool_results
    assert (answer.call_id, answer.content, answer.is_error) == (
        "call_1", "error: no tool named 'task'", True)
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert (span.attributes or {})["hango.tool.error"] is True



# --- Agent.run and the config it runs with ----------------------------------------------------


def test_the_prompt_reaches_the_model_as_a_user_message_after_the_history(
        db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig())
    model = SimulatedModel()
    history = [Message("user", "earlier"), Message("assistant", "noted")]
    Agent(db, tenant, "a1", model).run("now", history)
    assert list(model.calls[0][0].messages) == [*history, Message("user", "now")]


def test_only_a_recorded_run_is_kept(db: Database, tenant: str) -> None:
    """A run in a notebook leaves no row; a run over HTTP (``record=True``) can be read back."""
    save_agent(db, tenant, "a1", AgentConfig())
    agent = Agent(db, tenant, "a1", SimulatedModel())
    plain = agent.run("hi")
    with pytest.raises(runs.RunNotFound):
        runs.load(db, tenant, plain.run_id)
    kept = agent.run("hi", record=True)
    assert runs.load(db, tenant, kept.run_id)["status"] == "done"


def test_a_given_config_is_used_instead_of_the_stored_one(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(system_prompt="the stored prompt"))
    model = SimulatedModel()
    Agent(db, tenant, "a1", model, config=AgentConfig(system_prompt="the given prompt")).run("hi")
    system = " ".join(b.text for b in model.calls[0][0].system)
    assert "the given prompt" in system and "the stored prompt" not in system


def test_a_missing_agent_is_named_with_its_tenant(db: Database, tenant: str) -> None:
    with pytest.raises(LookupError) as caught:
        Agent(db, tenant, "nope", SimulatedModel()).run("hi")
    assert str(caught.value) == f"no agent 'nope' in tenant {tenant!r}"



# --- the loop's bounds and what it sends back -------------------------------------------------


def _tenant(db: Database, **config: Any) -> str:
    tid = create_tenant(db, "w-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig(**config))
    return tid


def _write(path: str, content: str = "x") -> ToolCall:
    return tool_call("write_file", {"path": path, "content": content})


def test_the_time_limit_stops_a_run_with_a_warning_naming_the_setting(db: Database) -> None:
    tid = _tenant(db)
    agent = Agent(db, tid, "a1", SimulatedModel(), settings=load_settings(run_max_seconds=1e-9))
    result = agent.run("hi", record=True)
    assert (result.status, result.stop_reason, result.text, result.responses) == (
        "failed", "time_limit", "", [])
    assert result.warnings[-1:] == ["run stopped after HANGO_RUN_MAX_SECONDS=1e-09 s"]
    assert runs.load(db, tid, result.run_id)["result"]["stop_reason"] == "time_limit"


def test_a_failing_model_is_named_with_the_first_line_of_its_error_cut_at_300_characters(
        db: Database) -> None:
    """The warning (and the runs row) say which model failed and how, in one bounded line; an
    error with no message still names its type."""
    tid = _tenant(db)

    def failing(message: str) -> Any:
        def model(request: Request) -> Reply:
            raise RuntimeError(message)
        return model

    long = Agent(db, tid, "a1", SimulatedModel(policy=[failing("x" * 400 + "\nsecond line")]))
    silent = Agent(db, tid, "a1", SimulatedModel(policy=[failing("")]))
    results = [long.run("hi"), silent.run("hi")]
    assert [(r.stop_reason, r.warnings[-1]) for r in results] == [
        ("model_error", "the model hango-sim-1 failed: RuntimeError: " + "x" * 300),
        ("model_error", "the model hango-sim-1 failed: RuntimeError: ")]


def test_the_assistant_turn_is_sent_back_with_its_text_and_calls(db: Database) -> None:
    tid = _tenant(db)
    agent = Agent(db, tid, "a1", SimulatedModel(policy=[
        Reply("let me look", (tool_call("ls", {"path": "/"}),)), "done"]))
    result = agent.run("hi")
    assert result.requests[1].messages[1] == Message(
        "assistant", "let me look", tool_calls=(ToolCall("call_1", "ls", {"path": "/"}),))


def test_refused_and_failed_tool_calls_answer_their_call_ids(db: Database) -> None:
    tid = _tenant(db, tools=["ls", "read_file"])
    result = Agent(db, tid, "a1", SimulatedModel(policy=[
        [tool_call("read_file", {"path": "/nope.md"}), _write("/notes/x.md")], "done"])).run("hi")
    failed, refused = result.messages[2].tool_results
    assert (failed.call_id, failed.is_error) == ("call_1", True)
    assert failed.content.startswith("error: ")
    assert refused == ToolResult(
        "call_2", "refused: tool 'write_file' is not in this agent's allowlist", True)


class _PlainModel:
    """A user's own model: it answers, and leaves ``Response.model`` empty (the protocol allows)."""

    name = "plain-1"
    provider = "plain"

    def complete(self, request: Request) -> Response:
        return Response("hello")


def test_chat_spans_name_the_provider_and_the_model_even_when_the_answer_does_not(
        db: Database, telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    tid = _tenant(db)
    Agent(db, tid, "a1", _PlainModel(), telemetry=tel).run("hi")
    chat = next(s for s in exporter.get_finished_spans() if s.name == "chat plain-1")
    attrs = dict(chat.attributes or {})
    assert (attrs["gen_ai.provider.name"], attrs["gen_ai.response.model"]) == ("plain", "plain-1")


def test_tool_spans_name_the_tool_and_the_call(db: Database, telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    tid = _tenant(db)
    Agent(db, tid, "a1", SimulatedModel(policy=[
        [tool_call("ls", {"path": "/"}), tool_call("read_file", {"path": "/x"})], "done"]),
        telemetry=tel).run("hi")
    tools = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert [(s.name, (s.attributes or {})["gen_ai.tool.name"],
             (s.attributes or {})["gen_ai.tool.call.id"]) for s in tools] == [
        ("execute_tool ls", "ls", "call_1"), ("execute_tool read_file", "read_file", "call_2")]


def test_a_run_with_the_default_telemetry_still_works(db: Database) -> None:
    assert Agent(db, _tenant(db), "a1", SimulatedModel(), telemetry=Telemetry()).run("hi").text


# --- interrupts, and a resume of one ----------------------------------------------------------


def ask_agent(db: Database, tenant: str, model: SimulatedModel | None = None,
              **kwargs: Any) -> Agent:
    """Agent ``a1`` in ``ask`` mode: its writes under /memories/ become proposals."""
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="ask"))
    return Agent(db, tenant, "a1", model or SimulatedModel(policy=policy), **kwargs)


def approve(db: Database, tenant: str, interrupt: dict[str, Any] | None) -> None:
    assert interrupt is not None
    proposals.approve(db, tenant, "a1", interrupt["proposal_id"], by="test", role="owner")


def test_the_interrupt_event_names_its_kind(db: Database, tenant: str,
                                            telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    result = ask_agent(db, tenant, telemetry=tel).run(do(write(MEMORY, "x")))
    assert result.events[-1] == Event("agent.run_interrupted", {"kind": "proposal"})
    (event,) = [e for s in exporter.get_finished_spans() for e in s.events
                if e.name == "agent.run_interrupted"]
    assert dict(event.attributes or {}) == {"kind": "proposal"}


def test_a_proposal_over_the_bound_is_that_calls_error_and_the_turn_goes_on(
        db: Database, tenant: str) -> None:
    model = SimulatedModel(policy=policy)
    agent = ask_agent(db, tenant, model, settings=load_settings(proposals_max_pending=1))
    assert agent.run(do(write("/memories/one.md", "x"))).status == "interrupted"
    result = agent.run(do(write("/memories/two.md", "y"), write("/notes/n.md", "n")))
    assert result.status == "done"
    request = model.calls[-1][0]
    calls, results = request.messages[-2].tool_calls, request.messages[-1].tool_results
    assert [(r.call_id, r.is_error) for r in results] == [(calls[0].id, True),
                                                           (calls[1].id, False)]
    assert results[0].content == (
        "error: this agent already has 1 proposals waiting for a decision "
        "(HANGO_PROPOSALS_MAX_PENDING); nothing was proposed")
    assert results[1].content == "wrote /notes/n.md (version 1)"


@pytest.fixture(scope="module")
def server(db: Database) -> Iterator[str]:
    url, stop = serve_in_thread(create_app(db))
    yield url
    stop()


def test_a_run_read_the_moment_it_is_interrupted_answers_interrupted(
        db: Database, tenant: str, server: str) -> None:
    """An owner who sees the new proposal and opens its run at once (before the run has
    recorded its summary) reads an interrupted run, not an error. The run's log line is
    written in exactly that moment, so a log handler stands in for the quick owner."""
    owner = httpx.Client(base_url=f"{server}/v1/agents/a1", timeout=30,
                         headers={"Authorization": f"Bearer {create_token(db, tenant, 'owner')}"})
    seen: list[httpx.Response] = []

    class QuickOwner(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(owner.get(f"/runs/{record.__dict__['run_id']}"))

    logger = logging.Logger("quick-owner", logging.INFO)  # this test's own, not a global one
    logger.addHandler(QuickOwner())
    result = ask_agent(db, tenant, telemetry=Telemetry(logger=logger)).run(do(write(MEMORY, "x")))
    assert result.status == "interrupted"
    (early,) = seen
    assert early.status_code == 200, early.text
    assert early.json()["status"] == "interrupted"
    assert owner.get(f"/runs/{result.run_id}").json()["proposal"]["path"] == MEMORY


def test_a_changed_config_stops_the_resume_with_the_whole_message(db: Database,
                                                                  tenant: str) -> None:
    agent = ask_agent(db, tenant)
    first = agent.run(do(write(MEMORY, "x")))
    approve(db, tenant, first.interrupt)
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="ask", max_steps=5))
    with pytest.raises(runs.RunError) as caught:
        agent.resume(first.run_id)
    assert str(caught.value) == (
        f"run {first.run_id}: the agent's config or model changed since the run was "
        "interrupted, so its conversation no longer matches; nothing was run. "
        "Restore the config, or start a new run")


def test_a_run_interrupted_twice_resumes_twice(db: Database, tenant: str) -> None:
    """The second resume passes the first (decided) write through the tool wrappers again; the
    proposal that wrapper would make again is not a new interrupt."""
    model = SimulatedModel(policy=[[tool_call("write_file", {"path": MEMORY, "content": "a"})],
                                   [tool_call("write_file", {"path": "/memories/b.md",
                                                             "content": "b"})],
                                   policy])
    agent = ask_agent(db, tenant, model)
    first = agent.run("remember two things")
    approve(db, tenant, first.interrupt)
    second = agent.resume(first.run_id)
    assert (second.status, second.run_id) == ("interrupted", first.run_id)
    approve(db, tenant, second.interrupt)
    third = agent.resume(first.run_id)
    assert third.status == "done"
    assert third.text.startswith("done: approved: /memories/b.md written as version 1")


def test_a_failing_resume_gives_back_its_own_claim_and_no_other(db: Database, tenant: str) -> None:
    """A resume whose model fails frees its claim, so the run can be resumed again; but when
    another resume holds the run by then (this one's claim was taken over), the failing one
    leaves that claim alone."""
    run_id = ""
    take_over = False

    def failing_model(request: Request) -> Reply:
        if take_over:  # another resume claimed the run meanwhile
            with db.admin(tenant) as conn:
                conn.execute("UPDATE runs SET claim_token = 'another' WHERE tenant_id = %s"
                             " AND run_id = %s", [tenant, run_id])
        raise RuntimeError("the model is down")

    agent = ask_agent(db, tenant, SimulatedModel(policy=[
        [tool_call("write_file", {"path": MEMORY, "content": "x"})], failing_model,
        failing_model]))
    first = agent.run("remember")
    run_id = first.run_id
    approve(db, tenant, first.interrupt)
    with pytest.raises(ModelError):
        agent.resume(run_id)
    assert runs.load(db, tenant, run_id)["status"] == "interrupted"  # its own claim: freed
    take_over = True
    with pytest.raises(ModelError):
        agent.resume(run_id)
    assert runs.load(db, tenant, run_id)["status"] == "resuming"  # the other's: kept


def test_a_resume_failing_while_the_database_fails_too_reports_the_first_failure(
        db: Database, tenant: str) -> None:
    """The model fails during the resume, and giving the claim back fails as well (the database
    connection is cut): the caller reads the model's error; the claim expires by itself."""
    holder = psycopg.connect(db.admin_conninfo)
    run_id = ""

    def cut_the_release() -> None:  # terminate the session that waits behind the holder's lock
        with psycopg.connect(db.admin_conninfo, autocommit=True) as watcher:
            for _ in range(3000):
                row = watcher.execute(
                    "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    [holder.info.backend_pid]).fetchone()
                if row:
                    watcher.execute("SELECT pg_terminate_backend(%s)", [row[0]])
                    return
                threading.Event().wait(0.01)
        holder.close()  # never found: let the release through rather than hang

    watcher = threading.Thread(target=cut_the_release)

    def failing_model(request: Request) -> Reply:
        # The tenant set, or a managed server's owner (row-level security forced) locks no row.
        holder.execute("SELECT set_config('hango.tenant_id', %s, true)", [tenant])
        locked = holder.execute("SELECT 1 FROM runs WHERE tenant_id = %s AND run_id = %s "
                                "FOR UPDATE", [tenant, run_id]).fetchall()
        assert locked == [(1,)]
        watcher.start()
        raise RuntimeError("the model is down")

    agent = ask_agent(db, tenant, SimulatedModel(policy=[
        [tool_call("write_file", {"path": MEMORY, "content": "x"})], failing_model]))
    first = agent.run("remember")
    run_id = first.run_id
    approve(db, tenant, first.interrupt)
    try:
        with pytest.raises(ModelError, match=r"^the model hango-sim-1 failed: RuntimeError: "
                                             r"the model is down$"):
            agent.resume(run_id)
    finally:
        watcher.join(60)
        holder.close()
    assert runs.load(db, tenant, run_id)["status"] == "resuming"
    with pytest.raises(runs.RunConflict, match="already being resumed"):
        agent.resume(run_id)



# --- what a run keeps in the runs table, and how a resume goes on -----------------------------


def _approve(db: Database, tid: str, result: RunResult) -> None:
    assert result.status == "interrupted" and result.interrupt is not None, result
    proposals.approve(db, tid, "a1", result.interrupt["proposal_id"], by="t", role="owner")


def test_only_a_recorded_run_is_kept_with_its_outcome(db: Database) -> None:
    tid = _tenant(db, max_steps=1)
    agent = Agent(db, tid, "a1", SimulatedModel(policy=["done", [tool_call("ls", {"path": "/"})]]))
    done = agent.run("hi", record=True)
    row = runs.load(db, tid, done.run_id)
    assert (row["status"], row["agent_id"]) == ("done", "a1")
    assert row["result"] == runs.summary(done) and row["result"]["text"] == "done"
    assert row["result"]["resumed"] is False
    failed = agent.run("hi", record=True)  # max_steps: no answer, and the row says so
    assert (failed.status, failed.stop_reason, failed.text) == ("failed", "max_steps", "")
    assert runs.load(db, tid, failed.run_id)["result"]["text"] == ""
    quiet = Agent(db, tid, "a1", SimulatedModel()).run("hi")  # record=False: no row
    with pytest.raises(runs.RunNotFound):
        runs.load(db, tid, quiet.run_id)


def test_an_interrupted_run_keeps_its_outcome_and_proposal(db: Database) -> None:
    tid = _tenant(db, reserved_writes="ask")
    first = Agent(db, tid, "a1", SimulatedModel(policy=[[_write(MEMORY)]])).run("go")
    assert first.status == "interrupted" and first.interrupt is not None
    row = runs.load(db, tid, first.run_id)
    assert row["status"] == "interrupted"
    assert row["proposal_id"] == first.interrupt["proposal_id"]
    assert row["result"] == runs.summary(first)
    assert row["result"]["interrupt"]["proposal_id"] == first.interrupt["proposal_id"]
    assert (row["result"]["status"], row["result"]["text"]) == ("interrupted", "")


def test_a_resumed_run_says_so_in_its_events_span_and_row(
        db: Database, telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    tid = _tenant(db, reserved_writes="ask")
    agent = Agent(db, tid, "a1", SimulatedModel(policy=[[_write(MEMORY)], "end"]), telemetry=tel)
    first = agent.run("go")
    assert [e.name for e in first.events if e.name.startswith("agent.run_")] == [
        "agent.run_interrupted"]
    _approve(db, tid, first)
    resumed = agent.resume(first.run_id)
    assert resumed.status == "done" and resumed.text == "end"
    assert [(e.name, e.attributes) for e in resumed.events
            if e.name.startswith("agent.run_")] == [("agent.run_resumed", {"run_id": first.run_id})]
    root = [s for s in exporter.get_finished_spans() if s.name == "agent.run"][-1]
    assert [(e.name, dict(e.attributes or {})) for e in root.events
            if e.name.startswith("agent.run_")] == [
        ("agent.run_resumed", {"run_id": first.run_id})]
    row = runs.load(db, tid, first.run_id)
    assert row["status"] == "done"
    assert row["result"] == runs.summary(resumed, {}) and row["result"]["resumed"] is True


def test_a_turn_interrupted_twice_resumes_in_order_and_keeps_counting_steps(db: Database) -> None:
    """Three calls in one turn, two of them proposals: each resume goes on with the next call,
    every result answers its call id, and max_steps counts the steps before the interrupts."""
    tid = _tenant(db, reserved_writes="ask", max_steps=2)
    agent = Agent(db, tid, "a1", SimulatedModel(policy=[
        [_write("/notes/a.md", "a"), _write(MEMORY, "one"), _write("/memories/b.md", "two")],
        [tool_call("ls", {"path": "/"})],
        "end (never reached: the second step is the last)",
    ]))
    first = agent.run("go")
    _approve(db, tid, first)
    second = agent.resume(first.run_id)  # the third call is a proposal too
    assert second.status == "interrupted" and second.interrupt is not None
    assert second.interrupt["proposal_id"] != first.interrupt["proposal_id"]  # type: ignore[index]
    row = runs.load(db, tid, first.run_id)
    assert row["status"] == "interrupted" and row["result"]["resumed"] is True
    assert row["result"]["interrupt"]["proposal_id"] == second.interrupt["proposal_id"]
    _approve(db, tid, second)
    third = agent.resume(first.run_id)
    assert (third.status, third.stop_reason, third.text) == ("failed", "max_steps", "")
    assert len(third.responses) == 1  # one step was left after the first
    turn = third.messages[2]
    assert [(r.call_id, r.is_error) for r in turn.tool_results] == [
        ("call_1", False), ("call_2", False), ("call_3", False)]
    assert turn.tool_results[0].content == "wrote /notes/a.md (version 1)"
    assert turn.tool_results[1].content.startswith(f"approved: {MEMORY} written as version 1.")
    assert turn.tool_results[2].content.startswith("approved: /memories/b.md written as version 1.")
    assert third.requests[0].messages[2] == turn  # what the model read


def test_a_rejected_proposal_reaches_the_model_as_an_error_with_the_reason(db: Database) -> None:
    tid = _tenant(db, reserved_writes="ask")
    agent = Agent(db, tid, "a1", SimulatedModel(policy=[[_write(MEMORY)], "ok"]))
    first = agent.run("go")
    assert first.interrupt is not None
    proposals.reject(db, tid, "a1", first.interrupt["proposal_id"], by="t", role="owner",
                     reason="not that")
    resumed = agent.resume(first.run_id)
    assert resumed.requests[0].messages[-1].tool_results == (ToolResult(
        "call_1", f"rejected by an owner or admin: not that. Nothing was written to {MEMORY}.",
        True),)


def test_a_resumed_run_keeps_the_system_blocks_and_breakpoints_it_started_with(
        db: Database) -> None:
    """The approved write adds a skill, which a fresh request would put in the cached prefix;
    the resumed request keeps the interrupted one's prefix, byte for byte."""
    tid = _tenant(db, reserved_writes="ask")
    skill = "---\nname: notes\ndescription: Keep notes.\n---\nbody\n"
    agent = Agent(db, tid, "a1", SimulatedModel(policy=[
        [_write("/skills/notes/SKILL.md", skill)], "end", "again"]))
    first = agent.run("go")
    _approve(db, tid, first)
    resumed = agent.resume(first.run_id)
    before, after = first.requests[-1], resumed.requests[0]
    assert (after.system, after.system_breakpoint) == (before.system, before.system_breakpoint)
    assert not any(b.source == "skills" for b in after.system)
    fresh = agent.run("again").requests[0]  # the next run does see the skill, in its prefix
    assert any(b.source == "skills" for b in fresh.system)
    assert fresh.system_breakpoint != before.system_breakpoint


def test_an_interrupted_run_answers_with_what_the_model_said_with_the_call_that_waits(
        db: Database) -> None:
    tid = _tenant(db, reserved_writes="ask")
    result = Agent(db, tid, "a1", SimulatedModel(policy=[
        Reply("I propose noting tea.", (_write(MEMORY, "- tea\n"),))])).run("go")
    assert (result.status, result.text) == ("interrupted", "I propose noting tea.")
    assert runs.load(db, tid, result.run_id)["result"]["text"] == "I propose noting tea."


def test_who_started_a_run_is_kept_in_its_row_whether_it_ended_or_waits(db: Database) -> None:
    """``GET /runs?mine`` and ``hango runs`` filter and show runs by who started them."""
    tid = _tenant(db, reserved_writes="ask")
    agent = Agent(db, tid, "a1", SimulatedModel(policy=["done", [_write(MEMORY)]]),
                  started_by="member:abc")
    done, waiting = agent.run("hi", record=True), agent.run("go")
    assert (done.status, waiting.status) == ("done", "interrupted")
    assert [runs.load(db, tid, r.run_id)["started_by"] for r in (done, waiting)] == [
        "member:abc", "member:abc"]


def test_a_resumed_run_proposes_in_the_name_of_who_started_it_not_who_resumed_it(
        db: Database) -> None:
    """An owner resumes a member's run: the member's next proposal still counts as the
    member's (HANGO_PROPOSALS_MAX_PENDING_PER_MEMBER)."""
    tid = _tenant(db, reserved_writes="ask")
    model = SimulatedModel(policy=[[_write(MEMORY, "one")], [_write("/memories/b.md", "two")]])
    first = Agent(db, tid, "a1", model, started_by="member:abc").run("go")
    _approve(db, tid, first)
    second = Agent(db, tid, "a1", model, started_by="owner:xyz").resume(first.run_id)
    assert second.status == "interrupted" and second.interrupt is not None
    assert (second.interrupt["path"], second.interrupt["proposed_by"]) == (
        "/memories/b.md", "member:abc")


def test_a_resume_that_failed_after_a_new_turn_still_proposes_in_the_starters_name(
        db: Database) -> None:
    """The first resume saves a new turn, then its model fails; the next resume goes on from
    that saved turn, still in the name of who started the run."""
    tid = _tenant(db, reserved_writes="ask")

    def down(request: Request) -> Reply:
        raise RuntimeError("the model is down")

    model = SimulatedModel(policy=[[_write(MEMORY, "one")], [tool_call("ls", {"path": "/"})],
                                   down, [_write("/memories/b.md", "two")]])
    first = Agent(db, tid, "a1", model, started_by="member:abc").run("go")
    _approve(db, tid, first)
    owner = Agent(db, tid, "a1", model, started_by="owner:xyz")
    with pytest.raises(ModelError, match="the model is down"):
        owner.resume(first.run_id)
    again = owner.resume(first.run_id)
    assert again.status == "interrupted" and again.interrupt is not None
    assert (again.interrupt["path"], again.interrupt["proposed_by"]) == (
        "/memories/b.md", "member:abc")


def test_a_resume_whose_claim_was_released_before_it_ended_leaves_the_run_resumable(
        db: Database) -> None:
    """An owner frees the claim of a resume that looked dead while its model answered: that
    resume stops with LeaseLost instead of overwriting the run, and the next resume ends it."""
    from hango.agent import resuming

    tid = _tenant(db, reserved_writes="ask")
    run_id = ""

    def freed(request: Request) -> Reply:
        resuming.release(db, tid, run_id)  # what an owner's release does
        return Reply("end")

    agent = Agent(db, tid, "a1", SimulatedModel(policy=[[_write(MEMORY)], freed, "end again"]))
    first = agent.run("go")
    run_id = first.run_id
    _approve(db, tid, first)
    with pytest.raises(runs.LeaseLost):
        agent.resume(run_id)
    assert runs.load(db, tid, run_id)["status"] == "interrupted"
    assert agent.resume(run_id).text == "end again"
    assert runs.load(db, tid, run_id)["status"] == "done"


def test_a_resume_whose_claim_was_released_before_it_paused_again_proposes_nothing(
        db: Database) -> None:
    """The claim is freed just before the resumed run's next call becomes a proposal: the run
    is not saved by a resume that no longer holds it, and the proposal is not kept either."""
    from hango.agent import resuming

    tid = _tenant(db, reserved_writes="ask")
    run_id = ""

    class OwnerFreesTheClaim:  # outermost tool wrapper: runs before the call is proposed
        name = "owner_frees_the_claim"

        def wrap_tool_call(self, ctx: Any, call: ToolCall,
                           call_next: Callable[[ToolCall], ToolResult]) -> ToolResult:
            if call.arguments.get("path") == "/memories/b.md":
                resuming.release(db, tid, run_id)
            return call_next(call)

    agent = Agent(db, tid, "a1", SimulatedModel(policy=[[_write(MEMORY)],
                                                        [_write("/memories/b.md")]]),
                  stack=lambda a: Stack([OwnerFreesTheClaim(), *default_stack(a).middlewares]))
    first = agent.run("go")
    run_id = first.run_id
    _approve(db, tid, first)
    with pytest.raises(runs.LeaseLost):
        agent.resume(run_id)
    assert [p.path for p in proposals.list_proposals(db, tid, "a1", status=None)] == [
        MEMORY]
    assert runs.load(db, tid, run_id)["status"] == "interrupted"


def test_a_resumed_runs_call_to_a_tool_outside_the_allowlist_is_refused_and_the_run_goes_on(
        db: Database) -> None:
    tid = _tenant(db, reserved_writes="ask")
    agent = Agent(db, tid, "a1", SimulatedModel(policy=[
        [_write(MEMORY)], [tool_call("rm", {"path": "/"})], "end"]))
    first = agent.run("go")
    _approve(db, tid, first)
    resumed = agent.resume(first.run_id)
    assert (resumed.status, resumed.text) == ("done", "end")
    assert [r.content for r in resumed.messages[-2].tool_results] == [
        "refused: tool 'rm' is not in this agent's allowlist"]
