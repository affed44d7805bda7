"""Slot order pinned; agent writes under `/memories/` and `/skills/` refused with nothing written; the
allowlist; tool errors go back to the model; the step limit; byte-stable assembly (the same inputs
give the same request bytes); the conversation breakpoint stays within 4; subagent state never
reaches the parent; undeclared subagents refused.

The run loop over real PostgreSQL: allowlist, tool errors, reserved prefixes, subagents,
and where the stack puts the cache breakpoint.
"""

from __future__ import annotations

from typing import Any

import pytest

from hango.agent.runtime import Agent, default_stack
from hango.agent.stack import SLOTS, DefaultStack
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.fs.backend import FileNotFound, PostgresBackend
from hango.models.base import Request
from hango.models.simulated import SimulatedModel, tool_call


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
        "gen_ai.provider.name", "session.id", "user.id")} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a1",
        "gen_ai.agent.id": f"{tenant}/a1", "gen_ai.conversation.id": result.run_id,
        "gen_ai.provider.name": "hango-sim", "session.id": result.run_id, "user.id": tenant}
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
    from test_mutation_kills_resume import approve, ask_agent
    from test_proposals import MEMORY, do, write

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
