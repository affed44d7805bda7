"""MemoryMiddleware over real PostgreSQL: placement after the breakpoint, reload, caps."""

from __future__ import annotations

import pytest

from hango.agent.memory import MemoryMiddleware, strip_comments
from hango.agent.promptcache import PromptCache
from hango.agent.runtime import Agent, default_stack
from hango.agent.stack import Stack
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel
from hango.settings import load_settings
from hango.telemetry import EVENT_MEMORY_MISSING


def memory_indexes(request) -> list[int]:  # type: ignore[no-untyped-def]
    return [i for i, b in enumerate(request.system) if b.source.startswith("/memories/")]


def test_memory_lands_after_the_breakpoint_index(backend: PostgresBackend, db: Database) -> None:
    backend.write("/memories/AGENTS.md", "Always answer in French.")
    backend.write("/skills/s/SKILL.md", "---\nname: s\ndescription: A skill.\n---\n")
    result = Agent(db, backend.tenant_id, "a1", SimulatedModel()).run("hello")
    request = result.requests[0]
    assert request.system_breakpoint is not None
    (index,) = memory_indexes(request)
    assert index > request.system_breakpoint
    assert request.system[index].text.startswith('<memory path="/memories/AGENTS.md">')
    assert "Always answer in French." in request.system[index].text
    # and the skills index sits inside the cached prefix
    skills_index = [i for i, b in enumerate(request.system) if b.source == "skills"]
    assert skills_index and skills_index[0] <= request.system_breakpoint


def test_wrong_order_puts_memory_inside_the_cached_prefix(backend: PostgresBackend,
                                                          db: Database) -> None:
    """The assertion is on indexes: the same middlewares in another order break it."""
    backend.write("/memories/AGENTS.md", "note")
    wrong = lambda agent: default_stack(agent).reordered(  # noqa: E731
        ["skills", "filesystem", "memory", "prompt_cache"])
    result = Agent(db, backend.tenant_id, "a1", SimulatedModel(), stack=wrong).run("hi")
    request = result.requests[0]
    assert memory_indexes(request)[0] <= (request.system_breakpoint or 0)


def test_memory_is_reread_every_run(backend: PostgresBackend, db: Database) -> None:
    agent = Agent(db, backend.tenant_id, "a1", SimulatedModel())
    backend.write("/memories/AGENTS.md", "version one")
    first = agent.run("q").requests[0]
    backend.write("/memories/AGENTS.md", "version two")
    second = agent.run("q").requests[0]
    assert b"version one" in first.canonical() and b"version two" in second.canonical()
    assert b"version one" not in second.canonical()


def test_missing_source_is_skipped_with_an_event_and_no_error(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=["/memories/AGENTS.md", "/memories/gone.md"]))
    PostgresBackend(db, tenant, "a1").write("/memories/AGENTS.md", "present")
    result = Agent(db, tenant, "a1", SimulatedModel()).run("hi")
    assert result.stop_reason == "final"
    assert [e.attributes for e in result.events if e.name == EVENT_MEMORY_MISSING] == [
        {"path": "/memories/gone.md"}]
    assert result.warnings == ["memory source /memories/gone.md does not exist; skipped"]
    assert [b.source for b in result.requests[0].system if b.source.startswith("/memories/")] == [
        "/memories/AGENTS.md"]


def test_sources_load_in_config_order_each_headed_by_its_path(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=["/memories/team.md", "/memories/AGENTS.md"]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", "agent notes")
    fs.write("/memories/team.md", "team notes")
    request = Agent(db, tenant, "a1", SimulatedModel()).run("hi").requests[0]
    blocks = [b for b in request.system if b.source.startswith("/memories/")]
    assert [b.source for b in blocks] == ["/memories/team.md", "/memories/AGENTS.md"]
    assert blocks[0].text == '<memory path="/memories/team.md">\nteam notes\n</memory>'


def test_byte_cap_truncates_at_a_utf8_boundary_with_a_marker(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=["/memories/AGENTS.md", "/memories/b.md"]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", "é" * 5000)  # 10,000 bytes of two-byte characters
    fs.write("/memories/b.md", "never loaded")
    settings = load_settings(memory_max_bytes=1001)
    result = Agent(db, tenant, "a1", SimulatedModel(), settings=settings).run("hi")
    (block,) = [b for b in result.requests[0].system if b.source.startswith("/memories/")]
    body = block.text.removeprefix('<memory path="/memories/AGENTS.md">\n').removesuffix(
        "\n</memory>")
    assert body.endswith("\n[... truncated: /memories/AGENTS.md is 10000 bytes; "
                         "HANGO_MEMORY_MAX_BYTES=1001; left out: /memories/b.md]")
    assert len(body.encode("utf-8")) <= 1001
    assert set(body.split("\n[...")[0]) == {"é"}  # no half character
    assert result.memory_bytes <= 1001
    assert ("memory source /memories/AGENTS.md truncated at HANGO_MEMORY_MAX_BYTES=1001; "
            "left out: /memories/b.md") in result.warnings


def test_the_cap_is_applied_in_sql(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1")
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", "x" * (10 * 1024 * 1024))
    mw = MemoryMiddleware(max_bytes=65536)
    reader = PostgresBackend(db, tenant, "a1")
    agent = Agent(db, tenant, "a1", SimulatedModel(), stack=lambda a: Stack([PromptCache(), mw]))
    # run with a backend whose transfer we can count
    from hango.agent.hooks import RunContext
    from hango.telemetry import Telemetry

    ctx = RunContext(tenant, "a1", AgentConfig(), reader, "r", frozenset(), Telemetry())
    mw.before_run(ctx)
    assert reader.bytes_read == 65536
    assert ctx.attributes["hango.memory.bytes"] <= 65536
    assert agent.run("hi").memory_bytes <= 65536


@pytest.mark.parametrize(("text", "expected"), [
    ("a<!-- x -->b", "ab"),
    ("a<!--\nmulti\nline-->b", "ab"),
    ("a<!-- one -->b<!-- two -->c", "abc"),
    ("```\n<!-- in a fence -->\n```", "```\n\n```"),
    ("keep <!-- unterminated", "keep <!-- unterminated"),
    ("a --> b", "a --> b"),
])
def test_strip_comments(text: str, expected: str) -> None:
    assert strip_comments(text) == expected


def test_memory_middleware_has_exactly_two_hooks() -> None:
    assert hasattr(MemoryMiddleware, "before_run") and hasattr(MemoryMiddleware, "system_blocks")
    assert not hasattr(MemoryMiddleware, "wrap_model_call")
    assert not hasattr(MemoryMiddleware, "wrap_tool_call")
    assert not hasattr(MemoryMiddleware, "tools")


def test_memory_state_is_private_to_the_middleware(backend: PostgresBackend, db: Database) -> None:
    from hango.agent.hooks import RunContext, StateKey
    from hango.telemetry import Telemetry

    backend.write("/memories/AGENTS.md", "private")
    mw = MemoryMiddleware()
    ctx = RunContext(backend.tenant_id, "a1", AgentConfig(), backend, "r", frozenset(),
                     Telemetry())
    mw.before_run(ctx)
    impostor = StateKey("memory", list)  # same name, different key: a different slot
    assert ctx.state(impostor) == []
    assert ctx.state(mw.key).loaded == [("/memories/AGENTS.md", "private")]
