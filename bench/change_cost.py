"""What does a change cost a cached run's start? One SKILL.md, or the memory, changed among many skills.

Everything is measured in this one process, in turns (each round: every row once), so that the
load of a shared machine falls on all rows alike: read the ratios, and the counts.

Setup: ``--skills`` skills (10,000 by default), each the 2,221-byte ``SKILL.md`` of
``bench/before_run.py``, made in one statement, and a 64 KiB ``/memories/AGENTS.md``;
``SkillsMiddleware(max_skills=--skills)`` with the index budget raised to hold every line (the cap
raised, as an operator would for a big library), and ``MemoryMiddleware``.

Rows (p50 and p90 ms of ``CachedStack.before_run``; the write before it is not timed):

- *unchanged*: nothing written since the last run;
- *one SKILL.md changed*: the delta (the heads written since the cache's counter, merged into
  the rows it kept);
- *one SKILL.md changed, full scan*: the same, with the kept rows dropped before each run, so the
  stack reads every head again: what a change cost before the delta;
- *memory edited*: ``/memories/AGENTS.md`` rewritten (its own counter: no skill head sent);
- *the skills build alone*: the lesson's ``SkillsMiddleware.build`` over the same rows with the
  parse memo warm, outside any round trip: the part of a changed run that a delta cannot cut;
- *plain stack*: the library default, which reads and builds everything every run.

Beside each: the heads the database sent (``Trace.received``) and the protocol round trips
counted from a libpq trace (``bench/before_run.py``'s counter).

Run: ``.venv/bin/python bench/change_cost.py [--skills 10000] [--rounds 15]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from before_run import memory_file, p50, p90, round_trips, skill_file

from hango import perf
from hango.agent.hooks import RunContext
from hango.agent.memory import MemoryMiddleware
from hango.agent.skills import SkillsMiddleware
from hango.agent.stack import Stack
from hango.agents import AgentConfig, create_tenant, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.fs.files import read
from hango.perf.cache import ParseMemo
from hango.perf.stack import CachedStack, entry_key
from hango.settings import load_settings
from hango.telemetry import Telemetry


def insert_skills(db: Database, tenant: str, count: int) -> None:
    """``count`` skills in ONE statement (the files API would need a request each)."""
    paths = [f"/skills/skill-{i:05d}/SKILL.md" for i in range(count)]
    bodies = [skill_file(i).replace(f"skill-{i:04d}", f"skill-{i:05d}").encode()
              for i in range(count)]
    with db.tenant(tenant) as conn:
        conn.execute("""INSERT INTO agent_files (tenant_id, agent_id, path, content, size)
                        SELECT %(t)s, 'a1', p, b, octet_length(b)
                          FROM unnest(%(p)s::text[], %(b)s::bytea[]) AS u(p, b)""",
                     {"t": tenant, "p": paths, "b": bodies})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skills", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    db = Database(load_settings(database_name="hango_bench"))  # never the course's data
    tenant = create_tenant(db, "bench-change-" + uuid.uuid4().hex[:8])
    try:
        run(db, tenant, args.skills, args.rounds)
    finally:
        with db.admin(all_tenants=True) as conn:
            conn.execute("DELETE FROM tenants WHERE tenant_id = %s", [tenant])
        db.close()
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


def run(db: Database, tenant: str, count: int, rounds: int) -> None:
    save_agent(db, tenant, "a1", AgentConfig())
    started = time.perf_counter()
    insert_skills(db, tenant, count)
    print(f"{count} skills inserted in one statement: {time.perf_counter() - started:.2f} s")
    fs = PostgresBackend(db, tenant, "a1")
    fs.write("/memories/AGENTS.md", memory_file())
    with db.tenant(tenant) as conn:
        head = conn.execute("SELECT avg(octet_length(skill_head)) FROM agent_files"
                            " WHERE path LIKE '/skills/%%/SKILL.md'").fetchone()
    print(f"a head is {float(head[0] if head else 0):.0f} bytes on average")
    skills = SkillsMiddleware(max_skills=count, index_max_bytes=1 << 24)
    memory = MemoryMiddleware()
    config = AgentConfig()
    cached, plain = CachedStack([skills, memory]), Stack([skills, memory])
    entry = perf.CACHE.entry(entry_key(db, tenant, "a1"))

    def context() -> RunContext:
        return RunContext(tenant, "a1", config, PostgresBackend(db, tenant, "a1"), "bench",
                          frozenset(config.tools), Telemetry())

    def start(stack: Stack) -> Callable[[], RunContext]:
        def go() -> RunContext:
            ctx = context()
            stack.before_run(ctx)
            return ctx
        return go

    edits = iter(range(1, 1 << 30))

    def write_skill() -> None:
        i = next(edits) % count
        fs.write(f"/skills/skill-{i:05d}/SKILL.md",
                 skill_file(i).replace(f"skill-{i:04d}", f"skill-{i:05d}")
                 .replace("Follow the steps", f"Follow the steps ({next(edits)})"))

    def drop_kept() -> None:
        write_skill()
        for key, built in list(entry.builds.items()):
            entry.builds[key] = dataclasses.replace(built, kept=())

    def write_memory() -> None:
        fs.write("/memories/AGENTS.md", memory_file()[:-8] + f"{next(edits):08d}")

    ctx = context()
    rows = [read(ctx.backend, r) for r in skills.reads(ctx)]

    def build_alone() -> RunContext:  # with the parse memo the cached stack gives it
        built, parse = context(), skills.parse
        skills.parse = ParseMemo(parse, entry.memos.get(skills.name, {}))  # type: ignore[assignment]
        try:
            skills.build(built, rows)
        finally:
            skills.parse = parse
        return built

    cases: dict[str, tuple[Callable[[], None] | None, Callable[[], RunContext]]] = {
        "unchanged": (None, start(cached)),
        "one SKILL.md changed (delta)": (write_skill, start(cached)),
        "one SKILL.md changed, full scan (before)": (drop_kept, start(cached)),
        "memory edited": (write_memory, start(cached)),
        "the skills build alone (memo warm)": (None, build_alone),
        "plain stack (reads and builds all)": (None, start(plain)),
    }
    timed: dict[str, list[float]] = {name: [] for name in cases}
    heads: dict[str, int] = {}
    trips: dict[str, int] = {}
    start(cached)()  # warm: the build and its kept rows
    for name, (prepare, fn) in cases.items():  # counted once each, outside the timed rounds
        if prepare is not None:
            prepare()
        got: list[RunContext] = []
        trips[name] = round_trips(db, lambda fn=fn, got=got: got.append(fn()))  # type: ignore[misc]
        trace = perf.trace_of(got[0]) if "stack" not in name and "alone" not in name else None
        heads[name] = trace.received.get("skills", 0) if trace is not None else -1
    for _ in range(rounds):
        for name, (prepare, fn) in cases.items():
            if prepare is not None:
                prepare()
            began = time.perf_counter()
            fn()
            timed[name].append(time.perf_counter() - began)
    base = p50(timed["one SKILL.md changed, full scan (before)"])
    print(f"\n{count} skills, {rounds} rounds in turns; p50 and p90 in ms")
    print(f"  {'row':<44} {'p50':>9} {'p90':>9} {'/ full scan':>11} {'heads sent':>11}"
          f" {'round trips':>12}")
    for name, xs in timed.items():
        sent = "-" if heads[name] < 0 else str(heads[name])
        print(f"  {name:<44} {p50(xs) * 1000:9.3f} {p90(xs) * 1000:9.3f}"
              f" {p50(xs) / base:11.3f} {sent:>11} {trips[name]:>12}")


if __name__ == "__main__":
    main()
