"""A namespace of 10,000 `SKILL.md` files and a 10 MiB `AGENTS.md`, made by the database: what a run
loads and what leaves the database stay within `HANGO_MEMORY_MAX_BYTES`; at most `HANGO_SKILLS_MAX`
skills indexed and `HANGO_SKILLS_MAX + 1` heads read; bytes asserted, never time.

The caps under load: a 10 MiB AGENTS.md and 10,000 SKILL.md files in one namespace.

The files are made by the database itself (one ``INSERT ... SELECT generate_series``), so the
fixture takes about a second. What is asserted is *bytes*, never time (``bench/caps_under_load.py``
measures the time):

- memory: what the run loads is within ``HANGO_MEMORY_MAX_BYTES``, and what leaves the database
  (``PostgresBackend.bytes_read``) is within the cap too, not 10 MiB;
- skills: at most ``HANGO_SKILLS_MAX`` skills are indexed, at most ``HANGO_SKILLS_MAX + 1`` heads are
  read per source, and the bytes read are within ``heads read x HEAD_BYTES``, far from the
  10,000 files' 67 MiB.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from hango.agent.frontmatter import HEAD_BYTES
from hango.agent.hooks import RunContext
from hango.agent.memory import MemoryMiddleware
from hango.agent.runtime import Agent
from hango.agent.skills import SkillsMiddleware
from hango.agents import AgentConfig, create_tenant, drop_tenant, save_agent
from hango.db import Database
from hango.fs.backend import FileData, PostgresBackend
from hango.models.simulated import SimulatedModel
from hango.settings import Settings, load_settings
from hango.telemetry import Telemetry

MIB = 1024 * 1024
N_SKILLS = 10_000
BODY_LINES = 200  # each SKILL.md is ~7 KB: frontmatter plus a body that must never be read

# One statement for 10,000 files: the frontmatter is ~50 bytes, the body 7 KB.
INSERT_SKILLS = """
INSERT INTO agent_files (tenant_id, agent_id, path, content, size)
SELECT %(t)s, %(a)s, format('/skills/s%%s/SKILL.md', lpad(i::text, 5, '0')), c, octet_length(c)
  FROM generate_series(1, %(n)s) AS i,
       LATERAL (SELECT convert_to(
           format(E'---\\nname: s%%s\\ndescription: Skill number %%s.\\n---\\n\\n', i, i)
           || repeat(E'Step: do the thing, then check it.\\n', %(lines)s), 'UTF8') AS c) AS body
"""
INSERT_MEMORY = """
INSERT INTO agent_files (tenant_id, agent_id, path, content, size)
SELECT %(t)s, %(a)s, '/memories/AGENTS.md', c, octet_length(c)
  FROM (SELECT convert_to(repeat(E'- remember: the user prefers metric units.\\n', %(k)s)
               || 'END-OF-MEMORY', 'UTF8') AS c) AS m
"""


@dataclass
class Loaded:
    db: Database
    tenant: str
    agent: str
    memory_size: int
    skills_bytes: int


@pytest.fixture(scope="module")
def loaded(db: Database) -> Iterator[Loaded]:
    tenant = create_tenant(db, "caps-" + uuid.uuid4().hex[:12])
    save_agent(db, tenant, "big", AgentConfig())
    with db.admin() as conn:
        conn.execute(INSERT_SKILLS, {"t": tenant, "a": "big", "n": N_SKILLS, "lines": BODY_LINES})
        conn.execute(INSERT_MEMORY, {"t": tenant, "a": "big", "k": (10 * MIB) // 43 + 1})
        memory_size, skills_bytes = conn.execute(
            "SELECT sum(size) FILTER (WHERE path LIKE '/memories/%%'),"
            "       sum(size) FILTER (WHERE path LIKE '/skills/%%')"
            "  FROM agent_files WHERE tenant_id = %s", [tenant]).fetchone() or (0, 0)
    try:
        yield Loaded(db, tenant, "big", int(memory_size), int(skills_bytes))
    finally:
        drop_tenant(db, tenant)


def context(loaded: Loaded, backend: PostgresBackend) -> RunContext:
    config = AgentConfig()
    return RunContext(loaded.tenant, loaded.agent, config, backend, "caps",
                      frozenset(config.tools), Telemetry())


def test_the_load_is_what_it_claims(loaded: Loaded) -> None:
    backend = PostgresBackend(loaded.db, loaded.tenant, loaded.agent)
    assert loaded.memory_size >= 10 * MIB
    found, cursor = 0, None
    while True:  # a listing comes in pages (HANGO_LIST_PAGE_MAX at most)
        page = backend.glob("/skills/**/SKILL.md", limit=5000, cursor=cursor)
        assert len(page) <= 5000
        found += len(page)
        if (cursor := page.next_cursor) is None:
            break
    assert found == N_SKILLS
    assert loaded.skills_bytes > N_SKILLS * 7000  # ~67 MiB of skills in all


@pytest.mark.parametrize("cap", [65536, 1000, 1])
def test_memory_stays_within_the_cap(loaded: Loaded, cap: int) -> None:
    backend = PostgresBackend(loaded.db, loaded.tenant, loaded.agent)
    memory = MemoryMiddleware(max_bytes=cap)
    ctx = context(loaded, backend)
    memory.before_run(ctx)
    assert ctx.attributes["hango.memory.bytes"] <= cap
    assert backend.bytes_read <= cap  # the cut is in SQL: 10 MiB never leave the database
    loaded_text = "".join(text for _, text in ctx.state(memory.key).loaded)
    assert "END-OF-MEMORY" not in loaded_text
    if cap >= 1000:
        assert "[... truncated: /memories/AGENTS.md" in loaded_text  # the cut is visible


class CountingBackend(PostgresBackend):
    """Counts the files each heads scan returns (bytes are counted by the backend): the heads
    rows are the lenient ones."""

    heads_rows = 0

    def decoded(self, rows: Any, *, lenient: bool = False) -> list[FileData]:
        found = super().decoded(rows, lenient=lenient)
        self.heads_rows += len(found) if lenient else 0
        return found


@pytest.mark.parametrize("cap", [100, 10, 1])
def test_skills_scan_stays_within_count_and_head_bytes(loaded: Loaded, cap: int) -> None:
    backend = CountingBackend(loaded.db, loaded.tenant, loaded.agent)
    skills = SkillsMiddleware(max_skills=cap)
    ctx = context(loaded, backend)
    skills.before_run(ctx)
    assert ctx.attributes["hango.skills.count"] == cap
    assert ctx.attributes["hango.skills.invalid"] == 0
    # one source: at most cap + 1 files are read (the +1 only tells that the source holds more)
    assert backend.heads_rows <= cap + 1
    assert backend.bytes_read <= backend.heads_rows * HEAD_BYTES
    # ... and since only heads leave the database, nowhere near those files' whole bytes
    assert backend.bytes_read < loaded.skills_bytes * (backend.heads_rows / N_SKILLS) / 4
    assert any(f"HANGO_SKILLS_MAX={cap}" in w for w in ctx.warnings)


def test_a_whole_run_under_load(loaded: Loaded) -> None:
    settings: Settings = load_settings()
    result = Agent(loaded.db, loaded.tenant, loaded.agent, SimulatedModel(),
                   settings=settings).run("hi")
    assert result.stop_reason == "final"
    assert result.memory_bytes <= settings.memory_max_bytes
    assert result.skills_count == settings.skills_max
    request = result.requests[0]
    prompt = sum(len(b.text.encode("utf-8")) for b in request.system)
    # the prompt holds the capped memory plus one short line per indexed skill, nothing more
    assert prompt <= settings.memory_max_bytes + settings.skills_max * 200 + 4096
    assert b"Step: do the thing" not in request.canonical()  # no skill body in the prompt
