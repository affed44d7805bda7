"""The run loop over real PostgreSQL: allowlist, tool errors, reserved prefixes, subagents,
and where the stack puts the cache breakpoint."""

from __future__ import annotations

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
