"""Tests written to kill surviving mutants of skills.py and memory.py (issue 11 point 5).

Each test names what a user relies on: the prompt, a warning, an event, a tool result, a span
attribute. Real parts only: PostgreSQL, the OpenTelemetry SDK with an in-memory exporter, the
offline SimulatedModel.
"""

from __future__ import annotations

from typing import Any

import pytest

from hango.agent.hooks import RunContext
from hango.agent.memory import LEFT_OUT_MARKER, TRUNCATION_MARKER, MemoryMiddleware
from hango.agent.runtime import Agent
from hango.agent.skills import INDEX_FOOTER, INDEX_HEADER, SkillsMiddleware, index_line
from hango.agent.stack import Stack, default_stack
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel, tool_call
from hango.telemetry import EVENT_SKILL_TOOLS_NARROWED, Telemetry


def skill_md(name: str, description: str = "Does a thing.", extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n\nThe body.\n"


def run_with(db: Database, tenant: str, mw: Any, script: list[Any] | None = None,
             tel: Telemetry | None = None) -> Any:
    """One run of agent a1 with ``mw`` in place of the default stack's middleware of its name."""
    stack = lambda a: Stack([m if m.name != mw.name else mw  # noqa: E731
                             for m in default_stack(a).middlewares])
    return Agent(db, tenant, "a1", SimulatedModel(policy=script), telemetry=tel,
                 stack=stack).run("hi")


def block(result: Any, source: str) -> str | None:
    found = [b.text for b in result.requests[0].system if b.source == source]
    return found[0] if found else None


def skills_span(exporter: Any) -> dict[str, Any]:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "agent.skills_index"]
    exporter.clear()  # without the Langfuse mirrors every span of a run carries
    return {k: v for k, v in (span.attributes or {}).items() if not k.startswith("langfuse.")}


# --- skills: the parse memo and the replayed index, seen on the span ------------------------------


def test_the_span_says_how_many_heads_a_run_parsed(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    """A changed skill costs one parse; nothing changed costs none (the index is replayed)."""
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(memory=[]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/skills/a/SKILL.md", skill_md("a", "First."))
    fs.write("/skills/b/SKILL.md", skill_md("b", "Second."))
    fs.write("/skills/bad/SKILL.md", "---\nname: [unclosed\n---\n")
    fs.write("/skills/c/SKILL.md", skill_md("c", "Third."))
    first = run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert skills_span(exporter) == {"hango.skills.count": 3, "hango.skills.invalid": 1,
                                     "hango.skills.parsed": 4}
    again = run_with(db, tenant, SkillsMiddleware(), tel=tel)  # nothing written: replayed
    assert skills_span(exporter) == {"hango.skills.count": 3, "hango.skills.invalid": 1,
                                     "hango.skills.parsed": 0}
    assert block(again, "skills") == block(first, "skills")
    assert again.warnings == first.warnings and len(first.warnings) == 1
    fs.write("/skills/b/SKILL.md", skill_md("b", "Second, edited."))  # one head changed
    edited = run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert skills_span(exporter) == {"hango.skills.count": 3, "hango.skills.invalid": 1,
                                     "hango.skills.parsed": 1}
    assert block(edited, "skills") == "\n".join([
        INDEX_HEADER, "- a — First. (/skills/a/SKILL.md)",
        "- b — Second, edited. (/skills/b/SKILL.md)", "- c — Third. (/skills/c/SKILL.md)",
        INDEX_FOOTER])
    assert edited.warnings == first.warnings  # the invalid one, from the memo, still warns
    fs.write("/notes/x.md", "not a skill")  # no change under /skills/: still replayed
    run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert skills_span(exporter)["hango.skills.parsed"] == 0


def test_an_allowlist_change_rebuilds_the_index_from_the_memo(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    """What a skill may call depends on the agent's tools: a new allowlist is never served the
    old result, yet the unchanged heads are not parsed again."""
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls"]))
    PostgresBackend(db, tenant, "a1").write(
        "/skills/x/SKILL.md", skill_md("x", extra="allowed-tools: ls glob\n"))
    narrowed = run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert [e.attributes["dropped"] for e in narrowed.events
            if e.name == EVENT_SKILL_TOOLS_NARROWED] == [["glob"]]
    assert skills_span(exporter)["hango.skills.parsed"] == 1
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls", "glob"]))
    widened = run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert [e for e in widened.events if e.name == EVENT_SKILL_TOOLS_NARROWED] == []
    assert widened.warnings == []
    assert skills_span(exporter)["hango.skills.parsed"] == 0


# --- skills: caps and sources ---------------------------------------------------------------------


def test_a_source_over_the_cap_reads_and_parses_only_the_cap(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(memory=[]))
    fs = PostgresBackend(db, tenant, "a1")
    for name in "abcd":
        fs.write(f"/skills/{name}/SKILL.md", skill_md(name))
    result = run_with(db, tenant, SkillsMiddleware(max_skills=2), tel=tel)
    assert result.warnings == [
        "/skills/ holds more than HANGO_SKILLS_MAX=2 SKILL.md files; read the first 2 by path, "
        "from /skills/a/SKILL.md to /skills/b/SKILL.md"]
    assert skills_span(exporter) == {"hango.skills.count": 2, "hango.skills.invalid": 0,
                                     "hango.skills.parsed": 2}


def test_exactly_the_cap_of_skills_is_no_warning(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[], skills=["/skills/one/", "/skills/two/"]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/skills/one/a/SKILL.md", skill_md("a"))
    fs.write("/skills/two/b/SKILL.md", skill_md("b"))
    result = run_with(db, tenant, SkillsMiddleware(max_skills=2))
    assert result.warnings == []
    assert block(result, "skills") is not None and "- b — " in str(block(result, "skills"))


def test_sources_given_to_the_skills_middleware_override_the_agent_config(
        db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[], skills=["/skills/config/"]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/skills/config/a/SKILL.md", skill_md("a", "From the config."))
    fs.write("/skills/mw/b/SKILL.md", skill_md("b", "From the middleware."))
    result = run_with(db, tenant, SkillsMiddleware(sources=["/skills/mw/"]))
    assert block(result, "skills") == "\n".join([
        INDEX_HEADER, "- b — From the middleware. (/skills/mw/b/SKILL.md)", INDEX_FOOTER])


def test_the_default_index_budget_is_16_kib(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[]))
    fs = PostgresBackend(db, tenant, "a1")
    for i in range(20):
        fs.write(f"/skills/s{i:02d}/SKILL.md", skill_md(f"s{i:02d}", "d" * 1000))
    result = run_with(db, tenant, SkillsMiddleware())
    (warning,) = result.warnings
    assert warning.startswith("5 skill(s) over HANGO_SKILLS_INDEX_MAX_BYTES=16384 left out")
    assert len(str(block(result, "skills")).encode()) <= 16384


def test_the_default_count_cap_is_100(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[]))
    fs = PostgresBackend(db, tenant, "a1")
    for i in range(101):
        fs.write(f"/skills/s{i:03d}/SKILL.md", skill_md(f"s{i:03d}", "x"))
    result = run_with(db, tenant, SkillsMiddleware())
    assert result.warnings == [
        "/skills/ holds more than HANGO_SKILLS_MAX=100 SKILL.md files; read the first 100 by "
        "path, from /skills/s000/SKILL.md to /skills/s099/SKILL.md"]


def test_the_default_skills_source_is_the_skills_folder(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[]))  # the config names no source
    PostgresBackend(db, tenant, "a1").write("/skills/a/SKILL.md", skill_md("a", "Here."))
    result = run_with(db, tenant, SkillsMiddleware())
    assert block(result, "skills") == "\n".join([
        INDEX_HEADER, "- a — Here. (/skills/a/SKILL.md)", INDEX_FOOTER])


def test_no_skill_is_no_skills_block(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[]))
    result = run_with(db, tenant, SkillsMiddleware())
    assert [b.source for b in result.requests[0].system if b.source == "skills"] == []


def _context(db: Database, tenant: str, backend: PostgresBackend) -> RunContext:
    """A run's context as ``Agent.run`` builds it, for calling a middleware's hooks directly."""
    config = AgentConfig(memory=[])
    save_agent(db, tenant, "a1", config)
    return RunContext(tenant, "a1", config, backend, "run", frozenset(config.tools), Telemetry())


def test_only_the_frontmatter_of_a_skill_leaves_the_database(db: Database, tenant: str) -> None:
    backend = PostgresBackend(db, tenant, "a1")
    ctx = _context(db, tenant, backend)
    frontmatter = "---\nname: big\ndescription: A long body.\n---\n"
    backend.write("/skills/big/SKILL.md", frontmatter + "body line\n" * 3000)  # 30 KB
    backend.bytes_read = 0
    SkillsMiddleware().before_run(ctx)
    assert backend.bytes_read == len(frontmatter.encode())


def test_a_skills_middleware_with_nothing_to_index_contributes_no_block(
        db: Database, tenant: str) -> None:
    backend = PostgresBackend(db, tenant, "a1")
    ctx = _context(db, tenant, backend)
    skills = SkillsMiddleware()
    skills.before_run(ctx)
    assert skills.system_blocks(ctx) == []
    backend.write("/skills/a/SKILL.md", skill_md("a", "Here."))
    ctx = _context(db, tenant, backend)
    skills.before_run(ctx)
    assert [b.source for b in skills.system_blocks(ctx)] == ["skills"]


# --- skills: narrowing, its warning and its event --------------------------------------------------


def test_a_partly_narrowed_skill_names_what_was_dropped_and_what_remains(
        db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls"]))
    PostgresBackend(db, tenant, "a1").write(
        "/skills/x/SKILL.md", skill_md("x", extra="allowed-tools: ls bash\n"))
    result = run_with(db, tenant, SkillsMiddleware())
    assert result.warnings == [
        "skill 'x' (/skills/x/SKILL.md): allowed_tools ['bash'] are not in the agent's allowlist "
        "and were dropped (a skill can only narrow)"]
    (event,) = [e for e in result.events if e.name == EVENT_SKILL_TOOLS_NARROWED]
    assert event.attributes == {"skill": "x", "dropped": ["bash"], "remaining": ["ls"]}


def test_a_skill_that_declares_no_tool_says_so_in_its_event(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls"]))
    PostgresBackend(db, tenant, "a1").write(
        "/skills/x/SKILL.md", skill_md("x", extra="allowed-tools: []\n"))
    result = run_with(db, tenant, SkillsMiddleware())
    assert result.warnings == [
        "skill 'x' (/skills/x/SKILL.md): allowed_tools is empty; after reading it the agent can "
        "call no tool for the rest of the run"]
    (event,) = [e for e in result.events if e.name == EVENT_SKILL_TOOLS_NARROWED]
    assert event.attributes == {"skill": "x", "dropped": [], "remaining": []}


def test_a_skill_within_the_allowlist_is_no_warning(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls"]))
    PostgresBackend(db, tenant, "a1").write(
        "/skills/x/SKILL.md", skill_md("x", extra="allowed-tools: ls\n"))
    result = run_with(db, tenant, SkillsMiddleware())
    assert result.warnings == [] and result.events == []


# --- skills: the narrowing guard while a skill is in use -------------------------------------------


def _tool_results(result: Any) -> list[Any]:
    return [r for m in result.messages for r in m.tool_results]


def test_reading_a_skill_without_allowed_tools_narrows_nothing(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls"]))
    PostgresBackend(db, tenant, "a1").write("/skills/free/SKILL.md", skill_md("free"))
    result = run_with(db, tenant, SkillsMiddleware(), [
        [tool_call("read_file", {"path": "/skills/free/SKILL.md"})],
        [tool_call("ls", {"path": "/"})], "done"])
    assert [r.is_error for r in _tool_results(result)] == [False, False]


def test_two_skills_in_use_intersect_and_the_refusal_names_both(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls", "glob"]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/skills/one/SKILL.md", skill_md("one", extra="allowed-tools: read_file ls glob\n"))
    fs.write("/skills/two/SKILL.md", skill_md("two", extra="allowed-tools: read_file ls\n"))
    fs.write("/skills/three/SKILL.md", skill_md("three", extra="allowed-tools: read_file glob\n"))
    result = run_with(db, tenant, SkillsMiddleware(), [
        [tool_call("read_file", {"path": "/skills/one/SKILL.md"})],
        [tool_call("glob", {"pattern": "/skills/*"})],
        [tool_call("read_file", {"path": "/skills/two/SKILL.md"})],
        [tool_call("glob", {"pattern": "/skills/*"})],
        [tool_call("read_file", {"path": "/skills/three/SKILL.md"})],
        [tool_call("ls", {"path": "/"})], "done"])
    results = _tool_results(result)
    assert [r.is_error for r in results] == [False, False, False, True, False, True]
    assert (results[3].call_id, results[3].content) == (
        "call_4", "refused: tool 'glob' is outside the tools of the skill(s) in use (one, two): "
                  "['ls', 'read_file']")
    assert (results[5].call_id, results[5].content) == (
        "call_6", "refused: tool 'ls' is outside the tools of the skill(s) in use "
                  "(one, two, three): ['read_file']")


def test_a_refusal_with_no_tool_left_answers_the_call_it_refuses(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls"]))
    PostgresBackend(db, tenant, "a1").write(
        "/skills/stop/SKILL.md", skill_md("stop", extra="allowed-tools: []\n"))
    result = run_with(db, tenant, SkillsMiddleware(), [
        [tool_call("read_file", {"path": "/skills/stop/SKILL.md"})],
        [tool_call("ls", {"path": "/"})], "done"])
    refused = _tool_results(result)[1]
    assert (refused.call_id, refused.is_error) == ("call_2", True)


def test_only_a_successful_read_file_puts_a_skill_in_use(db: Database, tenant: str) -> None:
    """Listing a skill's file is not reading its instructions."""
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls"]))
    PostgresBackend(db, tenant, "a1").write(
        "/skills/ro/SKILL.md", skill_md("ro", extra="allowed-tools: read_file\n"))
    result = run_with(db, tenant, SkillsMiddleware(), [
        [tool_call("ls", {"path": "/skills/ro/SKILL.md"})],
        [tool_call("ls", {"path": "/"})], "done"])
    listed, after = _tool_results(result)
    assert listed.is_error is False
    assert after.is_error is False, after.content


# --- memory ---------------------------------------------------------------------------------------


def _mem_run(db: Database, tenant: str, mw: MemoryMiddleware, files: dict[str, str],
             memory: list[str] | None = None) -> Any:
    save_agent(db, tenant, "a1", AgentConfig(memory=memory))
    fs = PostgresBackend(db, tenant, "a1")
    for path, text in files.items():
        fs.write(path, text)
    return run_with(db, tenant, mw)


def _mem_blocks(result: Any) -> list[str]:
    return [b.text for b in result.requests[0].system if b.source.startswith("/memories/")]


def test_the_default_memory_cap_is_64_kib(db: Database, tenant: str) -> None:
    result = _mem_run(db, tenant, MemoryMiddleware(), {"/memories/AGENTS.md": "a" * 65537})
    assert result.warnings == [
        "memory source /memories/AGENTS.md truncated at HANGO_MEMORY_MAX_BYTES=65536"]
    assert result.attributes["hango.memory.bytes"] <= 65536


def test_one_source_truncated_says_so_and_names_no_other(db: Database, tenant: str) -> None:
    result = _mem_run(db, tenant, MemoryMiddleware(max_bytes=200),
                      {"/memories/AGENTS.md": "a" * 300})
    marker = TRUNCATION_MARKER.format(path="/memories/AGENTS.md", size=300, cap=200, left_out="")
    assert marker == ("\n[... truncated: /memories/AGENTS.md is 300 bytes; "
                      "HANGO_MEMORY_MAX_BYTES=200]")
    assert _mem_blocks(result) == [
        f'<memory path="/memories/AGENTS.md">\n{"a" * (200 - len(marker))}{marker}\n</memory>']
    assert result.warnings == [
        "memory source /memories/AGENTS.md truncated at HANGO_MEMORY_MAX_BYTES=200"]


def test_a_truncated_source_names_every_source_left_out_after_it(db: Database, tenant: str) -> None:
    paths = ["/memories/AGENTS.md", "/memories/b.md", "/memories/c.md"]
    result = _mem_run(db, tenant, MemoryMiddleware(max_bytes=300),
                      {"/memories/AGENTS.md": "a" * 400, "/memories/b.md": "b",
                       "/memories/c.md": "c"}, memory=paths)
    assert result.warnings == [
        "memory source /memories/AGENTS.md truncated at HANGO_MEMORY_MAX_BYTES=300; "
        "left out: /memories/b.md, /memories/c.md"]
    (text,) = _mem_blocks(result)
    assert text.endswith("[... truncated: /memories/AGENTS.md is 400 bytes; "
                         "HANGO_MEMORY_MAX_BYTES=300; left out: /memories/b.md, /memories/c.md]"
                         "\n</memory>")


def test_a_first_source_left_out_with_room_for_the_notice_is_no_block(
        db: Database, tenant: str) -> None:
    """Nothing loaded before it: the notice has no block to end, and the warning says it all."""
    notice = LEFT_OUT_MARKER.format(paths="/memories/AGENTS.md", cap=70)
    marker = TRUNCATION_MARKER.format(path="/memories/AGENTS.md", size=200, cap=70, left_out="")
    assert len(notice) <= 70 < len(marker)
    result = _mem_run(db, tenant, MemoryMiddleware(max_bytes=70), {"/memories/AGENTS.md": "a" * 200})
    assert result.status == "done" and _mem_blocks(result) == []
    assert result.warnings == ["memory source /memories/AGENTS.md left out whole at "
                               "HANGO_MEMORY_MAX_BYTES=70: no room for any of it"]


def test_the_left_out_notice_fits_to_the_byte(db: Database, tenant: str) -> None:
    paths = ["/memories/AGENTS.md", "/memories/b.md"]
    notice = LEFT_OUT_MARKER.format(paths="/memories/b.md", cap=1000)
    cap = 1000 - len(notice)  # 4 digits either way: the notice is the same length at this cap
    notice = LEFT_OUT_MARKER.format(paths="/memories/b.md", cap=cap)
    first = "a" * (cap - len(notice))  # leaves exactly the notice's bytes, too few for b
    result = _mem_run(db, tenant, MemoryMiddleware(max_bytes=cap),
                      {"/memories/AGENTS.md": first, "/memories/b.md": "b" * 2000}, memory=paths)
    assert _mem_blocks(result) == [f'<memory path="/memories/AGENTS.md">\n{first}{notice}\n</memory>']
    assert result.attributes["hango.memory.bytes"] == cap


def test_the_default_memory_source_is_agents_md(db: Database, tenant: str) -> None:
    result = _mem_run(db, tenant, MemoryMiddleware(), {"/memories/AGENTS.md": "hello"})
    assert _mem_blocks(result) == ['<memory path="/memories/AGENTS.md">\nhello\n</memory>']


@pytest.mark.parametrize("replayed", [False, True])
def test_a_replayed_memory_load_is_the_load(db: Database, tenant: str, replayed: bool) -> None:
    files = {"/memories/AGENTS.md": "a" * 300}
    first = _mem_run(db, tenant, MemoryMiddleware(max_bytes=200), files,
                     memory=["/memories/AGENTS.md", "/memories/gone.md"])
    second = run_with(db, tenant, MemoryMiddleware(max_bytes=200)) if replayed else first
    assert _mem_blocks(second) == _mem_blocks(first) and len(_mem_blocks(first)) == 1
    assert second.warnings == first.warnings and len(first.warnings) == 2
    assert second.attributes["hango.memory.sources"] == ["/memories/AGENTS.md"]


def test_index_line_is_what_the_index_shows() -> None:
    from hango.agent.skills import Skill

    skill = Skill("a", "Q&A", "/skills/a/SKILL.md", None, None)
    assert index_line(skill) == "- a — Q&amp;A (/skills/a/SKILL.md)"
