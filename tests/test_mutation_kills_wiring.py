"""Tests written to kill mutants of the path rules and the runtime's wiring (issue 11 point 5).

What a user reads: the exact error messages of the path rules, the run's row in ``runs`` (what
``GET /runs/{id}`` answers), the resume event, the spans and log line of a run. Real parts only:
PostgreSQL, the OpenTelemetry SDK with an in-memory exporter, the offline SimulatedModel.
tests/mutation_verdicts.toml ([path], [runtime-wiring]) lists the mutants no test can tell apart.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from hango.agent import proposals, runs
from hango.agent.runtime import Agent, RunResult
from hango.agents import AgentConfig, create_tenant, save_agent
from hango.db import Database
from hango.fs.path import PathError, ReservedPathError, check_write, clean, clean_dir
from hango.models.base import Message, Request, Response, ToolCall, ToolResult
from hango.models.simulated import Reply, SimulatedModel, tool_call
from hango.settings import load_settings
from hango.telemetry import Telemetry

MEMORY = "/memories/AGENTS.md"

# --- path: the messages a user reads (the files API answers them as 422/403 details) -----------


@pytest.mark.parametrize(("path", "message"), [
    (5, "invalid path 5: must be a string"),
    ("notes/x", "invalid path 'notes/x': must be absolute (start with /)"),
    ("/a\\b", "invalid path '/a\\\\b': backslash is not allowed (use /)"),
    ("/a\u2029b", "invalid path '/a\\u2029b': invisible or unassigned character U+2029"),
    ("/a\u2028b", "invalid path '/a\\u2028b': invisible or unassigned character U+2028"),
    ("/notes/", "invalid path '/notes/': a file path must not end with /"),
    ("/notes//x", "invalid path '/notes//x': empty segment (//) is not allowed"),
])
def test_a_bad_file_path_names_the_rule_it_breaks(path: object, message: str) -> None:
    with pytest.raises(PathError) as info:
        clean(path)
    assert str(info.value) == message
    assert info.value.path == path


def test_the_root_spelled_with_an_empty_segment_is_refused_by_name() -> None:
    with pytest.raises(PathError) as info:
        clean_dir("//")
    assert str(info.value) == "invalid path '//': empty segment (//) is not allowed"
    assert (info.value.path, info.value.rule) == ("//", "empty segment (//) is not allowed")


@pytest.mark.parametrize(("role", "who"), [(None, "the agent"), ("member", "a member")])
def test_a_refused_reserved_write_says_where_and_who(role: str | None, who: str) -> None:
    with pytest.raises(ReservedPathError) as info:
        check_write("/memories/AGENTS.md", role)
    assert str(info.value) == (
        "'/memories/AGENTS.md' is under the reserved prefix /memories/: only an owner or admin "
        f"may write there, and only through the files API ({who} may not)")
    assert (info.value.path, info.value.prefix) == ("/memories/AGENTS.md", "/memories/")


# --- runtime: what a run keeps in the runs table (what GET /runs/{id} answers) ------------------


def _tenant(db: Database, **config: Any) -> str:
    tid = create_tenant(db, "w-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig(**config))
    return tid


def _write(path: str, content: str = "x") -> ToolCall:
    return tool_call("write_file", {"path": path, "content": content})


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


def test_the_time_limit_stops_a_run_with_a_warning_naming_the_setting(db: Database) -> None:
    tid = _tenant(db)
    agent = Agent(db, tid, "a1", SimulatedModel(), settings=load_settings(run_max_seconds=1e-9))
    result = agent.run("hi", record=True)
    assert (result.status, result.stop_reason, result.text, result.responses) == (
        "failed", "time_limit", "", [])
    assert result.warnings[-1:] == ["run stopped after HANGO_RUN_MAX_SECONDS=1e-09 s"]
    assert runs.load(db, tid, result.run_id)["result"]["stop_reason"] == "time_limit"


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


# --- runtime: the spans a trace backend shows -------------------------------------------------


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
