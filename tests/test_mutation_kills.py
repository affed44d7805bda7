"""Tests written to kill mutants that survived `make mutation` (issue 11 point 5).

Each test names what a user relies on; docs/reliability.md "Mutation testing" lists the mutants it
kills. Real parts only: PostgreSQL, the OpenTelemetry SDK with an in-memory exporter.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from opentelemetry import trace

from hango.agent.runtime import Agent
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.models.simulated import SimulatedModel, tool_call
from hango.telemetry import Telemetry


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


# --- memory ---------------------------------------------------------------------------------------


def test_cut_utf8_never_splits_a_character() -> None:
    from hango.agent.memory import cut_utf8

    assert cut_utf8("aé", 2) == "a"  # é is 2 bytes: a cut inside it drops it, raises nothing
    assert cut_utf8("aé", 3) == "aé"
    assert cut_utf8("abc", 3) == "abc"


def test_a_path_with_an_ampersand_is_escaped_in_the_frame() -> None:
    from hango.agent.memory import frame

    assert frame("/memories/a&b.md", "x") == '<memory path="/memories/a&amp;b.md">\nx\n</memory>'


def _memory_run(db: Database, tenant: str, mw: Any, files: dict[str, str],
                tel: Telemetry | None = None) -> Any:
    from hango.agent.stack import Stack, default_stack
    from hango.fs.backend import PostgresBackend

    save_agent(db, tenant, "a1", AgentConfig())
    fs = PostgresBackend(db, tenant, "a1")
    for path, text in files.items():
        fs.write(path, text)
    stack = lambda a: Stack([m if m.name != "memory" else mw  # noqa: E731
                             for m in default_stack(a).middlewares])
    return Agent(db, tenant, "a1", SimulatedModel(), telemetry=tel, stack=stack).run("hi")


def _memory_blocks(result: Any) -> list[str]:
    return [b.text for b in result.requests[0].system if b.source.startswith("/memories/")]


def test_sources_given_to_the_middleware_override_the_agent_config(
        db: Database, tenant: str) -> None:
    from hango.agent.memory import MemoryMiddleware

    result = _memory_run(db, tenant, MemoryMiddleware(sources=["/memories/b.md"]),
                         {"/memories/AGENTS.md": "from config", "/memories/b.md": "from mw"})
    assert _memory_blocks(result) == ['<memory path="/memories/b.md">\nfrom mw\n</memory>']


def test_a_source_of_exactly_the_cap_is_loaded_whole(db: Database, tenant: str) -> None:
    from hango.agent.memory import MemoryMiddleware

    result = _memory_run(db, tenant, MemoryMiddleware(max_bytes=4), {"/memories/AGENTS.md": "abcd"})
    assert _memory_blocks(result) == ['<memory path="/memories/AGENTS.md">\nabcd\n</memory>']
    assert result.warnings == []


def test_memory_load_publishes_sources_and_bytes_on_span_result_and_metrics(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    from hango.agent.memory import MemoryMiddleware

    tel, exporter, reader = telemetry_pair
    result = _memory_run(db, tenant, MemoryMiddleware(), {"/memories/AGENTS.md": "abc"}, tel)
    assert result.attributes["hango.memory.sources"] == ["/memories/AGENTS.md"]
    assert result.attributes["hango.memory.bytes"] == 3
    span = next(s for s in exporter.get_finished_spans() if s.name == "agent.memory_load")
    assert hango_attributes(span) == {"hango.memory.sources": ("/memories/AGENTS.md",),
                                           "hango.memory.bytes": 3}
    points = {m.name: m.data.data_points for rm in reader.get_metrics_data().resource_metrics
              for sm in rm.scope_metrics for m in sm.metrics}
    (duration,) = points["hango.memory.load.duration"]
    assert dict(duration.attributes) == {"hango.memory.source_count": 1}
    assert duration.count == 1 and 0 <= duration.sum < 60  # a duration, not a negative time
    (nbytes,) = points["hango.memory.bytes"]
    assert (nbytes.sum, dict(nbytes.attributes)) == (3, {"hango.memory.source_count": 1})


# --- stack ----------------------------------------------------------------------------------------


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
    from hango.models.base import Block

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
    from hango.agent.stack import Stack, default_stack

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


# --- path -----------------------------------------------------------------------------------------


def test_an_agent_write_in_ask_mode_is_a_proposal_naming_path_and_prefix() -> None:
    from hango.fs.path import ApprovalRequired, check_write

    with pytest.raises(ApprovalRequired) as info:
        check_write("/memories/AGENTS.md", None, "ask")
    assert (info.value.path, info.value.prefix) == ("/memories/AGENTS.md", "/memories/")
    assert str(info.value) == ("'/memories/AGENTS.md' is under the reserved prefix /memories/: the "
                               "write becomes a proposal that an owner or admin approves or rejects")


def test_a_source_outside_its_prefix_is_named_in_the_error() -> None:
    from hango.fs.path import PathError, validate_source

    with pytest.raises(PathError) as info:
        validate_source("/notes/a.md", "/memories/")
    assert (info.value.path, info.value.rule) == ("/notes/a.md", "must be under /memories/")
    assert str(info.value) == "invalid path '/notes/a.md': must be under /memories/"


# --- skills ---------------------------------------------------------------------------------------


def _skill(name: str, description: str = "Does a thing.") -> Any:
    from hango.agent.skills import Skill

    return Skill(name, description, f"/skills/{name}/SKILL.md", None, None)


def test_the_index_budget_is_exact_to_the_byte() -> None:
    from hango.agent.skills import index_line, render_index, within_budget

    skills = [_skill("a"), _skill("b"), _skill("c")]
    lines = [index_line(s) for s in skills]
    size = len(render_index(skills).encode())
    assert within_budget(lines, size) == 3
    assert within_budget(lines, size - 1) == 2
    assert within_budget(lines[:1], len(render_index(skills[:1]).encode())) == 1
    assert within_budget(lines[:1], len(render_index(skills[:1]).encode()) - 1) == 0


def test_an_ampersand_in_a_description_is_escaped_on_its_index_line() -> None:
    from hango.agent.skills import one_line

    assert one_line("Q&A <b>") == "Q&amp;A &lt;b&gt;"


def test_the_skills_index_span_counts_indexed_and_invalid(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    from hango.fs.backend import PostgresBackend

    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig())
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/skills/good/SKILL.md", "---\nname: good\ndescription: A skill.\n---\n")
    fs.write("/skills/bad/SKILL.md", "---\nname: [unclosed\n---\n")
    result = Agent(db, tenant, "a1", SimulatedModel(), telemetry=tel).run("hi")
    span = next(s for s in exporter.get_finished_spans() if s.name == "agent.skills_index")
    assert hango_attributes(span) == {"hango.skills.count": 1, "hango.skills.invalid": 1,
                                           "hango.skills.parsed": 2}
    assert (result.attributes["hango.skills.count"], result.attributes["hango.skills.invalid"]) \
        == (1, 1)


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


# --- PromptCache ----------------------------------------------------------------------------------


def _cache_request(n_system_marks: int, messages: int) -> Any:
    from hango.models.base import Block, Breakpoint, Message, Request

    return Request(model="m", tools=(), system=tuple(Block(f"b{i}", f"s{i}") for i in range(4)),
                   messages=tuple(Message("user", f"m{i}") for i in range(messages)),
                   breakpoints=tuple(Breakpoint("system", i, "5m")
                                     for i in range(n_system_marks)))


def test_no_conversation_breakpoint_without_messages() -> None:
    from hango.agent.promptcache import PromptCache

    sent = PromptCache(prefix_ttl="5m").wrap_model_call(
        None, _cache_request(1, 0), lambda r: r)  # type: ignore[arg-type]
    assert [b.tier for b in sent.breakpoints] == ["system"]


def test_the_conversation_breakpoint_takes_the_fourth_slot_not_a_fifth() -> None:
    from hango.agent.promptcache import PromptCache

    cache = PromptCache(prefix_ttl="5m")
    sent = cache.wrap_model_call(None, _cache_request(3, 2), lambda r: r)  # type: ignore[arg-type]
    assert [(b.tier, b.index) for b in sent.breakpoints][-1] == ("messages", 1)
    assert len(sent.breakpoints) == 4
    full = cache.wrap_model_call(None, _cache_request(4, 2), lambda r: r)  # type: ignore[arg-type]
    assert [b.tier for b in full.breakpoints] == ["system"] * 4
