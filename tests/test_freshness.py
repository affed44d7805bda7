"""before_run reuses what it parsed while nothing changed, yet the very next run sees every write.

The property: after a write through ANY door (the backend, the files API over HTTP, the agent's
tools, another process, plain SQL, an agent config change), a run's memory and skills index, with
its warnings and events, are exactly what an uncached read of the database gives. The cache is
warmed before every write, so each step checks an invalidation, not a cold read.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hango.agent import snapshot
from hango.agent.hooks import RunContext
from hango.agent.memory import MemoryMiddleware
from hango.agent.skills import SkillsMiddleware
from hango.agent.tools import FILESYSTEM_TOOLS
from hango.agents import AgentConfig, create_tenant, create_token, load_agent, save_agent
from hango.db import Database
from hango.fs.backend import SKILL_HEAD, FileNotFound, PostgresBackend
from hango.telemetry import Telemetry

PATHS = ["/memories/AGENTS.md", "/memories/team.md", "/skills/a/SKILL.md", "/skills/b/SKILL.md",
         "/skills/team/c/SKILL.md", "/notes/n.md"]
CHILD = r"""
import json, sys, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
if sys.argv[2] == "set-role":
    conn.execute("SET ROLE hango_app")
for line in sys.stdin:
    tenant, agent, op, path, content = json.loads(line)
    with conn.transaction():
        conn.execute("SELECT set_config('hango.tenant_id', %s, true)", [tenant])
        if op == "write":
            data = content.encode()
            conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                         " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id, agent_id, path)"
                         " DO UPDATE SET content = EXCLUDED.content, size = EXCLUDED.size,"
                         " version = agent_files.version + 1",
                         [tenant, agent, path, data, len(data)])
        else:
            conn.execute("DELETE FROM agent_files WHERE tenant_id = %s AND agent_id = %s"
                         " AND path = %s", [tenant, agent, path])
    print("ok", flush=True)
"""


class Uncached:
    """A Backend that is not a PostgresBackend: before_run reads it every run, caching nothing."""

    def __init__(self, inner: PostgresBackend) -> None:
        self.inner = inner
        self.tenant_id, self.agent_id = inner.tenant_id, inner.agent_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def observe(db: Database, tenant: str, agent: str, cached: bool) -> tuple[Any, ...]:
    """One run's before_run, as Agent.run does it, and everything a user can see of it."""
    config = load_agent(db, tenant, agent)
    assert config is not None
    backend = PostgresBackend(db, tenant, agent)
    ctx = RunContext(tenant, agent, config, backend if cached else Uncached(backend),  # type: ignore[arg-type]
                     "run", frozenset(config.tools), Telemetry())
    skills, memory = SkillsMiddleware(max_skills=2), MemoryMiddleware(max_bytes=200)
    skills.before_run(ctx)
    memory.before_run(ctx)
    return (memory.system_blocks(ctx), skills.system_blocks(ctx), ctx.state(skills.key).skills,
            ctx.warnings, [(e.name, e.attributes) for e in ctx.events], dict(ctx.attributes))


@dataclass
class Doors:
    db: Database
    tenant: str
    http: httpx.Client
    child: subprocess.Popen[str]

    def write(self, door: str, path: str, content: str | None) -> None:
        """``content`` None deletes; "sql-move" moves the file to the next path."""
        backend = PostgresBackend(self.db, self.tenant, "a1")
        if door == "backend":
            if content is None:
                with contextlib.suppress(FileNotFound):
                    backend.delete(path)
            else:
                backend.write(path, content)
        elif door == "http":
            url = f"/v1/agents/a1/files{path}"
            if content is None:
                assert self.http.delete(url).status_code in (204, 404)
            else:
                r = self.http.put(url, content=content.encode(),
                                  headers={"Content-Type": "text/plain; charset=utf-8"})
                assert r.status_code in (200, 201), r.text
        elif door == "tools":  # the agent may not write /memories/ or /skills/: then nothing changes
            config = load_agent(self.db, self.tenant, "a1")
            assert config is not None
            ctx = RunContext(self.tenant, "a1", config, backend, "tool", frozenset(config.tools),
                             Telemetry())
            tool = {t.spec.name: t for t in FILESYSTEM_TOOLS}["write_file"]
            with contextlib.suppress(Exception):
                tool.fn(ctx, {"path": path, "content": content or ""})
        elif door == "process":
            assert self.child.stdin is not None and self.child.stdout is not None
            self.child.stdin.write(json.dumps([self.tenant, "a1", "delete" if content is None
                                               else "write", path, content]) + "\n")
            self.child.stdin.flush()
            assert self.child.stdout.readline().strip() == "ok"
        elif door == "sql":  # plain SQL as the superuser: no hango code on the write path
            with self.db.admin() as conn:
                if content is None:
                    target = PATHS[(PATHS.index(path) + 1) % len(PATHS)]
                    conn.execute("DELETE FROM agent_files WHERE tenant_id = %s AND agent_id = 'a1'"
                                 " AND path = %s", [self.tenant, target])
                    conn.execute("UPDATE agent_files SET path = %s WHERE tenant_id = %s"
                                 " AND agent_id = 'a1' AND path = %s", [target, self.tenant, path])
                else:
                    data = content.encode()
                    conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size)"
                                 " VALUES (%s, 'a1', %s, %s, %s) ON CONFLICT (tenant_id, agent_id,"
                                 " path) DO UPDATE SET content = EXCLUDED.content,"
                                 " size = EXCLUDED.size", [self.tenant, path, data, len(data)])
        elif door == "config":
            tools = ["read_file", "ls"] if content and len(content) % 2 else ["read_file", "glob"]
            memory = ["/memories/AGENTS.md"] if content is None else [
                "/memories/team.md", "/memories/AGENTS.md"]
            skills = ["/skills/"] if "/skills/team" not in path else ["/skills/", "/skills/team/"]
            save_agent(self.db, self.tenant, "a1",
                       AgentConfig(tools=tools, memory=memory, skills=skills))


@pytest.fixture(scope="module")
def doors(db: Database, api_url: str) -> Iterator[Doors]:
    tenant = create_tenant(db, "fresh-" + uuid.uuid4().hex[:10])
    save_agent(db, tenant, "a1", AgentConfig())
    token = create_token(db, tenant, "owner")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, db.app_conninfo, "plain" if db.embedded else "set-role"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    with httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {token}"}) as http:
        yield Doors(db, tenant, http, child)
    child.stdin.close()  # type: ignore[union-attr]
    child.wait(timeout=10)


def skill(name: str, description: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\nallowed_tools: [read_file, ls]\n---\n\nbody\n"


contents = st.one_of(
    st.none(),
    st.builds(skill, st.sampled_from(["alpha", "beta", "gamma"]),
              st.text(alphabet="abcxyz <>&", min_size=1, max_size=12).map(str.strip)
              .filter(bool)),
    st.text(alphabet="ab<!-- >\n", max_size=300),  # memory text, comments, over the 200-byte cap
)
steps = st.lists(st.tuples(st.sampled_from(["backend", "http", "tools", "process", "sql",
                                            "config"]),
                           st.sampled_from(PATHS), contents), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_the_next_run_sees_every_write_through_every_door(doors: Doors,
                                                          steps: list[tuple[str, str, Any]]) -> None:
    for door, path, content in steps:
        observe(doors.db, doors.tenant, "a1", cached=True)  # warm: the next run could reuse it
        doors.write(door, path, content)
        seen = observe(doors.db, doors.tenant, "a1", cached=True)
        assert seen == observe(doors.db, doors.tenant, "a1", cached=False), (door, path)
        # and with nothing written in between, the cached run is the same again
        assert observe(doors.db, doors.tenant, "a1", cached=True) == seen


# --- the cache's scope ---------------------------------------------------------------------------

def test_the_agent_lru_is_bounded_and_drops_the_least_recently_used() -> None:
    cache = snapshot.SnapshotCache(max_agents=3)
    entries = {key: cache.entry(key) for key in "abc"}
    assert cache.entry("a") is entries["a"]  # a is now the most recently used
    cache.entry("d")
    assert len(cache) == 3
    assert cache.entry("a") is entries["a"] and cache.entry("c") is entries["c"]
    assert cache.entry("b") is not entries["b"]  # b was the least recently used: dropped


def test_each_agent_keeps_a_bounded_number_of_reads() -> None:
    cache = snapshot.SnapshotCache()
    entry = cache.entry("x")
    for i in range(snapshot.READS_PER_AGENT + 3):
        cache.remember(entry, snapshot.Read("files", (f"/memories/{i}.md",), 10), None)
    reads = [r for r, _ in cache.recent(entry)]
    assert len(reads) == snapshot.READS_PER_AGENT
    assert reads[-1].sources == (f"/memories/{snapshot.READS_PER_AGENT + 2}.md",)


def test_agents_in_one_process_never_share_an_index(db: Database) -> None:
    tenants = [create_tenant(db, "scope-" + uuid.uuid4().hex[:10]) for _ in range(2)]
    for i, tenant in enumerate(tenants):
        save_agent(db, tenant, "a1", AgentConfig())
        PostgresBackend(db, tenant, "a1").write("/skills/s/SKILL.md", skill(f"s{i}", f"d{i}"))
    for _ in range(2):
        for i, tenant in enumerate(tenants):
            seen = observe(db, tenant, "a1", cached=True)
            assert [s.name for s in seen[2]] == [f"s{i}"]


def test_a_cached_run_is_one_round_trip_and_replays_the_warnings(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig())
    backend = PostgresBackend(db, tenant, "a1")
    backend.write("/skills/bad/SKILL.md", "no frontmatter here")
    first = observe(db, tenant, "a1", cached=True)
    second = observe(db, tenant, "a1", cached=True)
    assert first == second and any("skipped" in w for w in second[3])
    calls: list[Any] = []
    original = PostgresBackend.read_if_changed

    def counting(self: PostgresBackend, reads: Any) -> Any:
        out = original(self, reads)
        calls.append(out)
        return out

    PostgresBackend.read_if_changed = counting  # type: ignore[method-assign]
    try:
        observe(db, tenant, "a1", cached=True)
    finally:
        PostgresBackend.read_if_changed = original  # type: ignore[method-assign]
    assert len(calls) == 1  # skills prefetched memory's read: one call for the whole before_run
    assert [rows for _, rows in calls[0]] == [None, None]  # ... the database skipped both reads


# --- the heads cut at write time -----------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.one_of(
    st.text(alphabet="-\r\nab: é", max_size=60),
    st.builds(lambda a, b: f"---\nname: x\n{a}\n---{b}", st.text(alphabet="-\r\nab: ", max_size=40),
              st.sampled_from(["\n", "\r\n", "", "-\n", " \n"])),
    st.just("---\nname: big\n" + "d" * 20000 + "\n---\n"),
), min_size=1, max_size=4))
def test_the_head_cut_at_write_time_is_the_cut_heads_makes(backend: PostgresBackend,
                                                          texts: list[str]) -> None:
    from hango.agent.frontmatter import HEAD_BYTES
    from hango.agent.skills import FENCES

    for i, text in enumerate(texts):
        backend.write(f"/skills/s{i}/SKILL.md", text)
    backend.write("/skills/s0/notes.md", "---\nnot a skill\n---\n")
    per_scan = backend.heads(["/skills/"], "SKILL.md", HEAD_BYTES, max_per_dir=10,
                             cut_after=FENCES)
    assert backend.skill_heads(["/skills/"], max_per_dir=10) == per_scan
    # and the middleware's arguments are the column's, so before_run reads the column
    assert SKILL_HEAD == ("SKILL.md", HEAD_BYTES, FENCES)
