"""The speed layer (hango.perf): the cached stack reuses what it built while nothing changed, in
one round trip, yet the very next run sees every write.

The property: after a write through ANY door (the backend, the files API over HTTP, the agent's
tools, another process, plain SQL, an agent config change), a run's memory and skills index, with
its warnings and events, are exactly what the plain stack reads from the database. The cache is
warmed before every write, so each step checks an invalidation, not a cold read. That the plain
and the cached stack give the same runs is tests/test_memory.py's and tests/test_skills.py's
parity fixture (tests/stacks.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parity import Stacks, seen
from test_skills import block, skill_file, skills_span

from hango import perf, prompts
from hango.agent import runs as agent_runs
from hango.agent.frontmatter import FENCES, HEAD_BYTES
from hango.agent.hooks import RunContext, RunHook
from hango.agent.memory import MemoryMiddleware
from hango.agent.runtime import Agent
from hango.agent.skills import INDEX_FOOTER, INDEX_HEADER, SkillsMiddleware
from hango.agent.stack import Stack
from hango.agent.tools import FILESYSTEM_TOOLS
from hango.agents import (
    AgentConfig,
    create_tenant,
    create_token,
    load_agent,
    save_agent,
    save_tenant_defaults,
)
from hango.api.runs import record
from hango.db import Database
from hango.fs.backend import FileNotFound, PostgresBackend
from hango.models.simulated import SimulatedModel, tool_call
from hango.perf import cache, gated
from hango.perf.agent import NoAgent
from hango.perf.stack import CachedStack, entry_key
from hango.telemetry import EVENT_SKILL_TOOLS_NARROWED, Telemetry

# The speed layer alone (not the parity stack, which runs every before_run twice)
run_with = Stacks("cached", CachedStack).run_with
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


def observe(db: Database, tenant: str, agent: str, cached: bool) -> tuple[Any, ...]:
    """One run's before_run, as Agent.run does it, and everything a user can see of it."""
    config = load_agent(db, tenant, agent)
    assert config is not None
    ctx = RunContext(tenant, agent, config, PostgresBackend(db, tenant, agent), "run",
                     frozenset(config.tools), Telemetry())
    skills, memory = SkillsMiddleware(max_skills=2), MemoryMiddleware(max_bytes=200)
    (CachedStack if cached else Stack)([skills, memory]).before_run(ctx)
    return (memory.system_blocks(ctx), skills.system_blocks(ctx), ctx.state(skills.key).skills,
            ctx.warnings, [(e.name, e.attributes) for e in ctx.events], dict(ctx.attributes))


def observe_run(db: Database, tenant: str, cached: bool) -> tuple[Any, ...]:
    """One whole run of a1, on the plain Agent or the CachedAgent: what its model received,
    its warnings and events."""
    agent = (perf.CachedAgent if cached else Agent)(db, tenant, "a1", SimulatedModel(),
                                                     settings=db.settings)
    result = agent.run("hi")
    return (result.requests[0].system, result.requests[0].tools, result.warnings,
            [(e.name, e.attributes) for e in result.events])


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
        elif door == "patch":  # the files API's edit: the whole text replaced, if there is one
            got = self.http.get(f"/v1/agents/a1/files{path}")
            if got.status_code == 200 and got.text and content:
                r = self.http.patch(f"/v1/agents/a1/files{path}",
                                    json={"old": got.text, "new": content})
                assert r.status_code in (200, 409, 422), r.text
        elif door == "restore":  # the files API's restore of the file's first version
            r = self.http.post(f"/v1/agents/a1/restore{path}", json={"version": 1})
            assert r.status_code in (200, 404, 409, 410), r.text
        elif door == "defaults":  # the tenant's defaults (PUT /v1/tenant/defaults)
            save_tenant_defaults(self.db, self.tenant, {
                "memory": None if content is None else ["/memories/team.md"],
                "skills": ["/skills/team/"] if "/skills/team" in path else None})
        elif door == "config":
            tools = ["read_file", "ls"] if content and len(content) % 2 else ["read_file", "glob"]
            memory = None if content is None else [  # None: the tenant's defaults say
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
                                            "config", "patch", "restore", "defaults"]),
                           st.sampled_from(PATHS), contents), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_the_next_run_sees_every_write_through_every_door(doors: Doors,
                                                          steps: list[tuple[str, str, Any]]) -> None:
    for door, path, content in steps:
        observe(doors.db, doors.tenant, "a1", cached=True)  # warm: the next run could reuse it
        observe_run(doors.db, doors.tenant, cached=True)  # ... and read with its config
        doors.write(door, path, content)
        seen = observe(doors.db, doors.tenant, "a1", cached=True)
        assert seen == observe(doors.db, doors.tenant, "a1", cached=False), (door, path)
        # and with nothing written in between, the cached run is the same again
        assert observe(doors.db, doors.tenant, "a1", cached=True) == seen
        # a whole run, its config read with its reads (CachedAgent), is the plain run
        ran = observe_run(doors.db, doors.tenant, cached=True)
        assert ran == observe_run(doors.db, doors.tenant, cached=False), (door, path)


# --- the cache's scope ---------------------------------------------------------------------------

def test_the_agent_lru_is_bounded_and_drops_the_least_recently_used() -> None:
    store = cache.BuildCache(max_agents=3)
    entries = {key: store.entry(key) for key in "abc"}
    assert store.entry("a") is entries["a"]  # a is now the most recently used
    store.entry("d")
    assert len(store) == 3
    assert store.entry("a") is entries["a"] and store.entry("c") is entries["c"]
    assert store.entry("b") is not entries["b"]  # b was the least recently used: dropped


def test_each_agent_keeps_a_bounded_number_of_builds() -> None:
    store = cache.BuildCache()
    entry = store.entry("x")
    for i in range(cache.BUILDS_PER_AGENT + 3):
        store.remember(entry, i, cache.Built(i, {}, (), (), ()))
    assert list(entry.builds) == list(range(3, cache.BUILDS_PER_AGENT + 3))


def test_the_parse_memo_keeps_one_builds_inputs_and_counts_what_it_parsed() -> None:
    calls: list[str] = []
    first = cache.ParseMemo(lambda text: calls.append(text) or text.upper(), {})
    assert [first("a"), first("b"), first("a")] == ["A", "B", "A"] and first.parsed == 2
    second = cache.ParseMemo(first.parse, first.now)
    assert second("a") == "A" and second("c") == "C" and second.parsed == 1
    assert second.now == {"a": "A", "c": "C"}  # "b" was not in this build: dropped
    assert calls == ["a", "b", "c"]


def test_agents_in_one_process_never_share_an_index(db: Database) -> None:
    tenants = [create_tenant(db, "scope-" + uuid.uuid4().hex[:10]) for _ in range(2)]
    for i, tenant in enumerate(tenants):
        save_agent(db, tenant, "a1", AgentConfig())
        PostgresBackend(db, tenant, "a1").write("/skills/s/SKILL.md", skill(f"s{i}", f"d{i}"))
    for _ in range(2):
        for i, tenant in enumerate(tenants):
            seen = observe(db, tenant, "a1", cached=True)
            assert [s.name for s in seen[2]] == [f"s{i}"]


def _bench() -> Any:
    """bench/before_run.py, whose ``round_trips`` counts them from a libpq trace."""
    path = Path(__file__).resolve().parents[1] / "bench" / "before_run.py"
    spec = importlib.util.spec_from_file_location("bench_before_run", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_cached_run_is_one_round_trip_and_replays_the_warnings(
        db: Database, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    save_agent(db, tenant, "a1", AgentConfig())
    backend = PostgresBackend(db, tenant, "a1")
    backend.write("/skills/bad/SKILL.md", "no frontmatter here")
    first = observe(db, tenant, "a1", cached=True)
    second = observe(db, tenant, "a1", cached=True)
    assert first == second and any("skipped" in w for w in second[3])
    calls: list[Any] = []
    original = perf.stack.read_if_changed

    def counting(where: Any, reads: Any) -> Any:
        out = original(where, reads)
        calls.append(out)
        return out

    monkeypatch.setattr(perf.stack, "read_if_changed", counting)
    observe(db, tenant, "a1", cached=True)
    assert len(calls) == 1  # one call for the whole before_run, both hooks' reads in it
    assert [rows for _, rows in calls[0]] == [None, None]  # ... the database skipped both reads


def test_one_protocol_round_trip_unchanged_and_one_after_a_change(db: Database,
                                                                  tenant: str) -> None:
    """Counted from a libpq trace of every pooled connection (each Sync or simple Query is one
    wait for the server); the plain stack's two queries are two at least."""
    save_agent(db, tenant, "a1", AgentConfig())
    backend = PostgresBackend(db, tenant, "a1")
    backend.write("/memories/AGENTS.md", "note")
    backend.write("/skills/s/SKILL.md", skill("s", "one"))
    round_trips = _bench().round_trips
    config = AgentConfig()

    def before_run(cached: bool) -> RunContext:
        ctx = RunContext(tenant, "a1", config, PostgresBackend(db, tenant, "a1"), "run",
                         frozenset(config.tools), Telemetry())
        stack = (CachedStack if cached else Stack)([SkillsMiddleware(), MemoryMiddleware()])
        stack.before_run(ctx)
        return ctx

    before_run(cached=True)  # warm
    runs: list[RunContext] = []
    assert round_trips(db, lambda: runs.append(before_run(cached=True))) == 1
    assert perf.trace_of(runs[-1]).replayed == ["skills", "memory"]
    backend.write("/skills/s/SKILL.md", skill("s", "two"))
    assert round_trips(db, lambda: runs.append(before_run(cached=True))) == 1
    trace = perf.trace_of(runs[-1])
    # a counter for skills and one for memory: a skill edit re-sends no memory
    assert (trace.built, trace.replayed) == (["skills"], ["memory"])
    assert trace.received == {"skills": 1, "memory": 0}  # the changed head alone
    backend.write("/memories/AGENTS.md", "note two")
    assert round_trips(db, lambda: runs.append(before_run(cached=True))) == 1
    trace = perf.trace_of(runs[-1])
    assert (trace.built, trace.replayed) == (["memory"], ["skills"])
    assert trace.received == {"skills": 0, "memory": 1}  # a memory edit: no skill head
    assert round_trips(db, lambda: before_run(cached=False)) > 2  # plain: a transaction a read


# --- a change costs what changed: two counters, and a delta of the skills' heads -------------------

def insert_skills(db: Database, tenant: str, count: int) -> None:
    """``count`` skills of agent a1 (``/skills/s00001/SKILL.md`` ...) in ONE statement, as
    notebook 03 makes its archive: the files API would need a request each."""
    with db.tenant(tenant) as conn:
        conn.execute(
            """INSERT INTO agent_files (tenant_id, agent_id, path, content, size)
               SELECT %(t)s, 'a1', format('/skills/s%%s/SKILL.md', lpad(g::text, 5, '0')),
                      body, octet_length(body)
                 FROM generate_series(1, %(n)s) AS g,
                      convert_to(format(E'---\\nname: s%%s\\ndescription: Skill %%s.\\n---\\n',
                                        lpad(g::text, 5, '0'), g), 'UTF8') AS body""",
            {"t": tenant, "n": count})


def start(db: Database, tenant: str, cached: bool, max_skills: int,
          sources: list[str] | None = None) -> tuple[Any, perf.Trace | None]:
    """One before_run of a1 (skills within ``max_skills``, the index budget raised to hold
    them all, and memory) on the cached or the plain stack: what the run shows, and the trace."""
    config = load_agent(db, tenant, "a1")
    assert config is not None
    ctx = RunContext(tenant, "a1", config, PostgresBackend(db, tenant, "a1"), "run",
                     frozenset(config.tools), Telemetry())
    stack = (CachedStack if cached else Stack)([
        SkillsMiddleware(sources, max_skills=max_skills, index_max_bytes=1 << 22),
        MemoryMiddleware()])
    stack.before_run(ctx)
    return seen(stack, ctx), perf.trace_of(ctx) if cached else None


@pytest.mark.parametrize("count", [100, 10_000])
def test_one_changed_skill_re_sends_one_head_and_a_memory_edit_none(
        db: Database, tenant: str, count: int) -> None:
    """At the default cap (100) and with the cap raised to 10,000: one SKILL.md changed, and
    the database sends that head alone (every other head comes from the rows the cache kept);
    a memory edit sends no skill head at all. The run equals the plain stack's."""
    save_agent(db, tenant, "a1", AgentConfig())
    insert_skills(db, tenant, count)
    backend = PostgresBackend(db, tenant, "a1")
    backend.write("/memories/AGENTS.md", "note")
    first, trace = start(db, tenant, True, count)
    assert trace is not None and trace.received == {"skills": count, "memory": 1}
    backend.write("/skills/s00007/SKILL.md", skill("s00007", "changed"))
    changed, trace = start(db, tenant, True, count)
    assert trace is not None and trace.received == {"skills": 1, "memory": 0}
    assert trace.round_trips == 1 and trace.built == ["skills"]
    assert changed == start(db, tenant, False, count)[0] != first
    assert "s00007 — changed".encode() in changed[0]
    backend.write("/memories/AGENTS.md", "note two")
    edited, trace = start(db, tenant, True, count)
    assert trace is not None and trace.received == {"skills": 0, "memory": 1}
    assert trace.replayed == ["skills"] and edited == start(db, tenant, False, count)[0]


def move(db: Database, tenant: str, old: str, new: str) -> None:
    """A file's path changed in place (plain SQL, as the superuser: an UPDATE, no delete)."""
    with db.admin() as conn:
        conn.execute("UPDATE agent_files SET path = %s WHERE tenant_id = %s AND agent_id = 'a1'"
                     " AND path = %s", [new, tenant, old])


def test_the_delta_gives_the_plain_run_through_changes_deletes_renames_and_the_cap(
        db: Database, tenant: str) -> None:
    """Each step changes the skills, then the cached run (which reads only the delta where it
    can prove it equal, else every head) must show what the plain run shows; the heads the
    database sent say which it did. The cap is 3: a source's scan reads at most 4 heads."""
    save_agent(db, tenant, "a1", AgentConfig())
    fs = PostgresBackend(db, tenant, "a1")
    for name in ("a", "b"):
        fs.write(f"/skills/{name}/SKILL.md", skill(name, name.upper()))
    fs.write("/skills/team/c/SKILL.md", skill("c", "C"))

    def step(sent: int, trips: int = 1, sources: list[str] | None = None) -> None:
        cached, trace = start(db, tenant, True, 3, sources)
        assert cached == start(db, tenant, False, 3, sources)[0]
        assert trace is not None
        assert (trace.received["skills"], trace.round_trips) == (sent, trips)

    step(3)  # cold: every head
    fs.write("/skills/a/SKILL.md", skill("a", "changed"))
    step(1)  # a change: that head
    fs.delete("/skills/b/SKILL.md")
    step(0)  # a delete: its path only
    move(db, tenant, "/skills/a/SKILL.md", "/skills/a2/SKILL.md")
    step(1)  # a rename: the new path's head
    move(db, tenant, "/skills/a2/SKILL.md", "/notes/a2/SKILL.md")
    step(0)  # moved out of the source
    fs.write("/skills/a/SKILL.md", skill("a", "back"))  # a deleted path written again
    fs.write("/skills/a/ref.md", "a reference file")  # under /skills/, not a head
    step(1)
    fs.write("/skills/d/SKILL.md", skill("d", "D"))
    fs.write("/skills/e/SKILL.md", skill("e", "E"))
    step(2)  # four in /skills/ now: over the cap, the warning says so
    assert any("more than HANGO_SKILLS_MAX=3" in w for w in start(db, tenant, False, 3)[0][1])
    fs.write("/skills/z/SKILL.md", skill("z", "Z"))
    step(4)  # the kept rows reached the scan's limit: there may be more, every head again
    fs.delete("/skills/d/SKILL.md")
    step(4)  # a delete inside the scan's window lets z in, which no delta would say
    fs.delete("/skills/e/SKILL.md")
    fs.delete("/skills/z/SKILL.md")
    step(2)  # two left in /skills/ (a and team/c): every head, the kept rows were at the limit
    for name in ("f", "g", "h"):  # one transaction each; three new heads at once would be over
        fs.write(f"/skills/{name}/SKILL.md", skill(name, name.upper()))
    step(3 + 4, trips=2)  # the merge is over the limit: not provable, the full scan too
    step(1, sources=["/skills/team/"])  # the sources changed: another build, cold
    fs.write("/skills/team/c/SKILL.md", skill("c", "changed"))
    step(1, sources=["/skills/team/"])


SKILL_PATHS = ["/skills/a/SKILL.md", "/skills/b/SKILL.md", "/skills/team/c/SKILL.md",
               "/skills/team/d/SKILL.md", "/skills/z/SKILL.md", "/notes/e/SKILL.md"]
edits = st.lists(st.tuples(st.sampled_from(["write", "delete", "move", "pair", "reference"]),
                           st.sampled_from(SKILL_PATHS), st.sampled_from(SKILL_PATHS)),
                 min_size=1, max_size=8)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=edits, cap=st.sampled_from([1, 2, 3, 8]),
       sources=st.sampled_from([None, ["/skills/", "/skills/team/"], ["/skills/team/", "/skills/"]]))
def test_after_any_edits_the_delta_is_the_full_scan(
        db: Database, steps: list[tuple[str, str, str]], cap: int,
        sources: list[str] | None) -> None:
    """Writes (one or two between runs), deletes, moves (in, out and across overlapping sources)
    and reference files, in any order, against caps the edits cross: after each, the cached run
    equals the plain one."""
    tenant = create_tenant(db, "delta-" + uuid.uuid4().hex[:10])
    save_agent(db, tenant, "a1", AgentConfig())
    fs = PostgresBackend(db, tenant, "a1")
    for path in SKILL_PATHS[:3]:  # at a cap of 1 or 2, a source's scan starts at its limit
        fs.write(path, skill(path.rsplit("/", 2)[-2], "first"))
    start(db, tenant, True, cap, sources)
    for i, (op, path, other) in enumerate(steps):
        folder = path.rsplit("/", 2)[-2]
        with contextlib.suppress(FileNotFound):
            if op == "write":
                fs.write(path, skill(folder, f"edit {i}"))
            elif op == "delete":
                fs.delete(path)
            elif op == "pair":  # two heads between two runs
                fs.write(path, skill(folder, f"edit {i}"))
                fs.write(other, skill(other.rsplit("/", 2)[-2], f"edit {i}"))
            elif op == "move" and path != other:
                with db.admin() as conn:
                    conn.execute("DELETE FROM agent_files WHERE tenant_id = %s AND path = %s",
                                 [tenant, other])
                move(db, tenant, path, other)
            else:
                fs.write(path.replace("SKILL.md", "ref.md"), f"reference {i}")
        cached, trace = start(db, tenant, True, cap, sources)
        assert cached == start(db, tenant, False, cap, sources)[0], (op, path, other)
        assert trace is not None and trace.round_trips <= 2


def test_a_delta_never_starts_before_what_the_database_kept(db: Database, tenant: str) -> None:
    """The agent deleted and created again (its files and deletions gone by cascade, no path
    recorded), or more deletions than the database keeps: the cached run reads every head."""
    save_agent(db, tenant, "a1", AgentConfig())
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/skills/a/SKILL.md", skill("a", "A"))
    fs.write("/skills/b/SKILL.md", skill("b", "B"))
    start(db, tenant, True, 100)
    with db.admin(tenant) as conn:
        conn.execute("DELETE FROM agents WHERE tenant_id = %s AND agent_id = 'a1'", [tenant])
    save_agent(db, tenant, "a1", AgentConfig())
    fs.write("/skills/c/SKILL.md", skill("c", "C"))
    cached, trace = start(db, tenant, True, 100)
    assert cached == start(db, tenant, False, 100)[0] and b"(/skills/a/" not in cached[0]
    assert trace is not None and trace.received["skills"] == 1 and trace.round_trips == 1
    insert_skills(db, tenant, 300)
    start(db, tenant, True, 1000)
    with db.tenant(tenant) as conn:  # 300 deletions: the database keeps at most 256 paths
        conn.execute("DELETE FROM agent_files WHERE tenant_id = %s AND path LIKE '/skills/s%%'",
                     [tenant])
        kept = conn.execute("SELECT count(*) FROM agent_skill_deletions").fetchone()
    assert kept is not None and kept[0] <= 256
    cached, trace = start(db, tenant, True, 1000)
    assert cached == start(db, tenant, False, 1000)[0]
    assert trace is not None and trace.received["skills"] == 1  # c alone, read in full


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
    """The schema's ``skill_head`` column and the skills scan's one definition of a head
    (frontmatter.HEAD_BYTES and FENCES) cut the same bytes."""
    for i, text in enumerate(texts):
        backend.write(f"/skills/s{i}/SKILL.md", text)
    backend.write("/skills/s0/notes.md", "---\nnot a skill\n---\n")
    per_scan = backend.heads(["/skills/"], "SKILL.md", HEAD_BYTES, max_per_dir=10,
                             cut_after=FENCES)
    query, params = gated.skill_heads_query(backend.ns(), ["/skills/"], 10)
    with backend.transaction() as conn:
        column = backend.decoded(conn.execute(query, params, binary=True).fetchall(),
                                 lenient=True)
    assert column == per_scan
    # and the middleware's read is the column's, so the cached stack reads the column
    ctx = RunContext(backend.tenant_id, "a1", AgentConfig(), backend, "r", frozenset(),
                     Telemetry())
    assert gated.is_skill_head(SkillsMiddleware().reads(ctx)[0])


# --- the parse memo, seen on the skills span --------------------------------------------------


def test_the_span_says_how_many_heads_a_run_parsed(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    """A changed skill costs one parse; nothing changed costs none (the index is replayed)."""
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(memory=[]))
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/skills/a/SKILL.md", skill_file("a", "First."))
    fs.write("/skills/b/SKILL.md", skill_file("b", "Second."))
    fs.write("/skills/bad/SKILL.md", "---\nname: [unclosed\n---\n")
    fs.write("/skills/c/SKILL.md", skill_file("c", "Third."))
    first = run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert skills_span(exporter, parsed=True) == {"hango.skills.count": 3, "hango.skills.invalid": 1,
                                     "hango.skills.parsed": 4}
    again = run_with(db, tenant, SkillsMiddleware(), tel=tel)  # nothing written: replayed
    assert skills_span(exporter, parsed=True) == {"hango.skills.count": 3, "hango.skills.invalid": 1,
                                     "hango.skills.parsed": 0}
    assert block(again, "skills") == block(first, "skills")
    assert again.warnings == first.warnings and len(first.warnings) == 1
    fs.write("/skills/b/SKILL.md", skill_file("b", "Second, edited."))  # one head changed
    edited = run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert skills_span(exporter, parsed=True) == {"hango.skills.count": 3, "hango.skills.invalid": 1,
                                     "hango.skills.parsed": 1}
    assert block(edited, "skills") == "\n".join([
        INDEX_HEADER, "- a — First. (/skills/a/SKILL.md)",
        "- b — Second, edited. (/skills/b/SKILL.md)", "- c — Third. (/skills/c/SKILL.md)",
        INDEX_FOOTER])
    assert edited.warnings == first.warnings  # the invalid one, from the memo, still warns
    fs.write("/notes/x.md", "not a skill")  # no change under /skills/: still replayed
    run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert skills_span(exporter, parsed=True)["hango.skills.parsed"] == 0


def test_an_allowlist_change_rebuilds_the_index_from_the_memo(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    """What a skill may call depends on the agent's tools: a new allowlist is never served the
    old result, yet the unchanged heads are not parsed again."""
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls"]))
    PostgresBackend(db, tenant, "a1").write(
        "/skills/x/SKILL.md", skill_file("x", extra="allowed-tools: ls glob\n"))
    narrowed = run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert [e.attributes["dropped"] for e in narrowed.events
            if e.name == EVENT_SKILL_TOOLS_NARROWED] == [["glob"]]
    assert skills_span(exporter, parsed=True)["hango.skills.parsed"] == 1
    save_agent(db, tenant, "a1", AgentConfig(memory=[], tools=["read_file", "ls", "glob"]))
    widened = run_with(db, tenant, SkillsMiddleware(), tel=tel)
    assert [e for e in widened.events if e.name == EVENT_SKILL_TOOLS_NARROWED] == []
    assert widened.warnings == []
    assert skills_span(exporter, parsed=True)["hango.skills.parsed"] == 0


# --- a whole run: the config with the reads, a read_file, the runs row --------------------------

class Traced:
    """A stack builder for CachedAgent that keeps each run's stack, to read its trace."""

    def __init__(self) -> None:
        self.stacks: list[CachedStack] = []

    def __call__(self, agent: Any) -> CachedStack:
        self.stacks.append(perf.cached_stack(agent))
        return self.stacks[-1]

    @property
    def last(self) -> perf.Trace:
        trace = self.stacks[-1].trace
        assert trace is not None
        return trace


def system(result: Any) -> str:
    """The system blocks the run's first model call received, as one text."""
    return "\n".join(b.text for b in result.requests[0].system)


def _run_counts(db: Database, tenant: str) -> tuple[Any, Any]:
    """bench/before_run.py's libpq-trace counter, and the agent a1 with a note and a skill."""
    save_agent(db, tenant, "a1", AgentConfig())
    backend = PostgresBackend(db, tenant, "a1")
    backend.write("/memories/AGENTS.md", "note")
    backend.write("/skills/s/SKILL.md", skill("s", "one"))
    backend.write("/notes/n.md", "hello")
    return _bench().round_trips, backend


def test_a_whole_run_is_one_round_trip_and_two_with_its_row(db: Database, tenant: str) -> None:
    """The config comes with before_run's reads (CachedAgent): a run is one round trip whatever
    file changed; the server's runs row and its prompt views are one more, in one transaction."""
    round_trips, backend = _run_counts(db, tenant)
    settings = db.settings
    traced = Traced()
    agent = perf.CachedAgent(db, tenant, "a1", SimulatedModel(), settings=settings, stack=traced)
    agent.run("warm")  # the first run of the agent in this process: the config, then the reads
    assert not traced.last.prefetched and traced.last.round_trips == 1
    results: list[Any] = []
    assert round_trips(db, lambda: results.append(agent.run("hi"))) == 1
    trace = traced.last
    assert trace.prefetched and trace.round_trips == 0 and trace.replayed == ["skills", "memory"]
    backend.write("/skills/s/SKILL.md", skill("s", "two"))  # a change: still one
    assert round_trips(db, lambda: results.append(agent.run("hi"))) == 1
    assert "two" in system(results[-1])
    assert traced.last.prefetched and traced.last.built == ["skills"]
    assert traced.last.received == {"skills": 1, "memory": 0}  # the changed head, with the config
    assert round_trips(db, lambda: record(agent, agent.run("hi"), settings)) == 2
    row = agent_runs.load(db, tenant, agent_runs.list_runs(db, tenant, "a1")[0]["run_id"])
    assert row["status"] == "done" and len(prompts.load(db, tenant, row["run_id"])) == 1
    plain = Agent(db, tenant, "a1", SimulatedModel(), settings=settings)
    assert round_trips(db, lambda: plain.run("hi", record=True)) >= 9  # 4 + 1 + 4


def test_a_config_change_is_seen_by_the_next_run(db: Database, tenant: str) -> None:
    """The config is read every run: a change through ``hango agent set`` (save_agent) or the
    tenant's defaults is the next run's, at the cost of one more round trip, once."""
    round_trips, backend = _run_counts(db, tenant)
    backend.write("/memories/other.md", "the other note")
    agent = perf.CachedAgent(db, tenant, "a1", SimulatedModel(), settings=db.settings)
    agent.run("warm")
    save_agent(db, tenant, "a1", AgentConfig(memory=["/memories/other.md"]))
    results: list[Any] = []
    assert round_trips(db, lambda: results.append(agent.run("hi"))) == 2
    assert "the other note" in system(results[-1])
    assert round_trips(db, lambda: results.append(agent.run("hi"))) == 1
    save_agent(db, tenant, "a1", AgentConfig())  # memory from the tenant's defaults now
    save_tenant_defaults(db, tenant, {"memory": ["/memories/other.md"]})
    assert "the other note" in system(agent.run("hi"))
    save_tenant_defaults(db, tenant, {"memory": None})
    assert "the other note" not in system(agent.run("hi"))


def test_a_read_file_is_one_round_trip(db: Database, tenant: str) -> None:
    round_trips, _ = _run_counts(db, tenant)
    script = [[tool_call("read_file", {"path": "/notes/n.md"})], "done"]
    agent = perf.CachedAgent(db, tenant, "a1", SimulatedModel(policy=script * 8))
    agent.run("warm")
    results: list[Any] = []
    assert round_trips(db, lambda: results.append(agent.run("read it"))) == 2  # run + read_file
    assert results[-1].messages[2].tool_results[0].content == "hello"
    with pytest.raises(NoAgent):
        perf.CachedAgent(db, tenant, "nobody", SimulatedModel()).run("hi")


def test_a_build_a_slower_run_left_behind_is_never_replayed(db: Database, tenant: str) -> None:
    """Two runs at once: the slower one remembers its older build after the newer run planned
    the next reads. The next run's reads came gated on the newer counter; they are used only on
    the build they were planned on, so the older build is rebuilt, not replayed."""
    _, backend = _run_counts(db, tenant)
    agent = perf.CachedAgent(db, tenant, "a1", SimulatedModel(), settings=db.settings)
    agent.run("warm")
    entry = perf.CACHE.entry(entry_key(db, tenant, "a1"))
    older = dict(entry.builds)
    backend.write("/skills/s/SKILL.md", skill("s", "two"))
    assert "two" in system(agent.run("hi"))
    for key, built in older.items():  # the slower run, done now
        perf.CACHE.remember(entry, key, built)
    assert "two" in system(agent.run("hi"))


# --- the stack's capabilities, once per middleware class -------------------------------------

def test_a_run_checks_no_protocol_once_the_classes_are_known(
        db: Database, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``runtime_checkable`` isinstance costs 4-17 us (every member looked up): the cached
    stack knows each middleware class's protocols after their first run, the plain one asks
    25 times a run of the default stack."""
    _run_counts(db, tenant)
    cached = perf.CachedAgent(db, tenant, "a1", SimulatedModel(), settings=db.settings)
    plain = Agent(db, tenant, "a1", SimulatedModel(), settings=db.settings)
    cached.run("warm")
    checks: list[type] = []
    meta = type(RunHook)
    original = meta.__instancecheck__

    def counting(cls: type, instance: Any) -> bool:
        checks.append(cls)
        return bool(original(cls, instance))

    monkeypatch.setattr(meta, "__instancecheck__", counting)
    cached.run("hi")
    assert checks == []
    plain.run("hi")
    assert len(checks) >= 15


def test_the_cached_stack_wraps_calls_in_the_plain_order() -> None:
    """Model and tool calls go through the wrappers first middleware outermost, and the tools
    and the request are the plain stack's (the parity fixture compares requests too)."""
    seen: list[str] = []

    class Wrapper:
        def __init__(self, name: str) -> None:
            self.name = name

        def wrap_model_call(self, ctx: Any, request: Any, call_next: Any) -> Any:
            seen.append(f"model {self.name}")
            return call_next(request)

        def wrap_tool_call(self, ctx: Any, call: Any, call_next: Any) -> Any:
            seen.append(f"tool {self.name}")
            return call_next(call)

    class Provider(Wrapper):
        def tools(self, ctx: Any) -> Any:
            return FILESYSTEM_TOOLS[:2]

    chain = [Wrapper("a"), Provider("b"), Wrapper("c")]
    ctx = RunContext("t", "a1", AgentConfig(), None, "r", frozenset({"read_file"}),  # type: ignore[arg-type]
                     Telemetry())
    out = []
    for stack in (Stack(chain), CachedStack(chain)):
        seen.clear()
        stack.call_model(ctx, "req", lambda r: seen.append("inner") or r)  # type: ignore[arg-type, func-returns-value]
        stack.call_tool(ctx, "call", lambda c: seen.append("inner") or c)  # type: ignore[arg-type, func-returns-value]
        tools = stack.tools(ctx)
        out.append((list(seen), list(tools), stack.build_request(ctx, (), tools, "m")))
    assert out[0] == out[1]
    assert out[0][0] == ["model a", "model b", "model c", "inner",
                         "tool a", "tool b", "tool c", "inner"]
