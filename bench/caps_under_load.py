"""before_run under load: a 10 MiB AGENTS.md and 10,000 SKILL.md files in one namespace.

The namespace is filled by the database itself (one ``INSERT ... SELECT generate_series``, the
same statements as ``tests/test_caps.py``). Timed, interleaved with their baselines so that load
on a shared machine falls on all of them alike:

- ``before_run``: a fresh ``RunContext`` and the default stack's ``before_run`` (skills with the
  default ``HANGO_SKILLS_MAX=100``, memory with the default ``HANGO_MEMORY_MAX_BYTES=65536``);
- ``SELECT 1``: one bare round trip on a pooled connection in autocommit (the unit);
- the same ``before_run`` on a namespace of only 100 skills and 64 KiB of memory, to show what
  the load adds.

Printed: p50 and p90 in ms, ``before_run`` as a multiple of the round trip, and the bytes that
left the database per run (``PostgresBackend.bytes_read``). Nothing is asserted about time.

Run: ``.venv/bin/python bench/caps_under_load.py [--iterations 50]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hango.agent.hooks import RunContext
from hango.agent.memory import MemoryMiddleware
from hango.agent.skills import SkillsMiddleware
from hango.agents import AgentConfig, create_tenant, drop_tenant, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.settings import Settings, load_settings
from hango.telemetry import Telemetry

TENANT = f"bench-caps-{os.getpid()}"
MIB = 1024 * 1024
INSERT_SKILLS = """
INSERT INTO agent_files (tenant_id, agent_id, path, content, size)
SELECT %(t)s, %(a)s, format('/skills/s%%s/SKILL.md', lpad(i::text, 5, '0')), c, octet_length(c)
  FROM generate_series(1, %(n)s) AS i,
       LATERAL (SELECT convert_to(
           format(E'---\\nname: s%%s\\ndescription: Skill number %%s.\\n---\\n\\n', i, i)
           || repeat(E'Step: do the thing, then check it.\\n', 60), 'UTF8') AS c) AS body
"""
INSERT_MEMORY = """
INSERT INTO agent_files (tenant_id, agent_id, path, content, size)
SELECT %(t)s, %(a)s, '/memories/AGENTS.md', c, octet_length(c)
  FROM (SELECT convert_to(repeat(E'- remember: the user prefers metric units.\\n', %(k)s),
                          'UTF8') AS c) AS m
"""


def fill(db: Database, agent: str, skills: int, memory_bytes: int) -> None:
    save_agent(db, TENANT, agent, AgentConfig())
    with db.admin() as conn:
        conn.execute(INSERT_SKILLS, {"t": TENANT, "a": agent, "n": skills})
        conn.execute(INSERT_MEMORY, {"t": TENANT, "a": agent, "k": memory_bytes // 43 + 1})


def before_run(db: Database, agent: str, settings: Settings,
               read: list[int]) -> Callable[[], RunContext]:
    skills = SkillsMiddleware(max_skills=settings.skills_max)
    memory = MemoryMiddleware(max_bytes=settings.memory_max_bytes)
    config = AgentConfig()
    telemetry = Telemetry()

    def run() -> RunContext:
        backend = PostgresBackend(db, TENANT, agent)
        ctx = RunContext(TENANT, agent, config, backend, "bench", frozenset(config.tools),
                         telemetry)
        skills.before_run(ctx)
        memory.before_run(ctx)
        read.append(backend.bytes_read)
        return ctx

    return run


@contextmanager
def select_1(db: Database) -> Iterator[Callable[[], object]]:
    with db.pool.connection() as conn:
        conn.autocommit = True
        try:
            yield lambda: conn.execute("SELECT 1").fetchone()
        finally:
            conn.autocommit = False


def interleaved(fns: dict[str, tuple[Callable[[], object], int]],
                iterations: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in fns}
    for fn, _ in fns.values():
        for _ in range(3):
            fn()  # warm-up
    for _ in range(iterations):
        for name, (fn, burst) in fns.items():
            for _ in range(burst):
                start = time.perf_counter()
                fn()
                out[name].append(time.perf_counter() - start)
    return out


def p90(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=10)[8] if len(xs) > 1 else xs[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    logging.getLogger("hango").addHandler(logging.NullHandler())
    logging.getLogger("hango").propagate = False

    settings = load_settings(database_name="hango_bench")
    db = Database(settings)
    create_tenant(db, TENANT)
    try:
        start = time.perf_counter()
        fill(db, "big", 10_000, 10 * MIB)
        fill(db, "small", 100, 64 * 1024)
        print(f"filled: 10,000 skills + 10 MiB memory, and 100 skills + 64 KiB memory, "
              f"in {time.perf_counter() - start:.2f} s")
        read_big: list[int] = []
        read_small: list[int] = []
        big = before_run(db, "big", settings, read_big)
        small = before_run(db, "small", settings, read_small)
        ctx = big()
        skills, memory = ctx.attributes["hango.skills.count"], ctx.attributes["hango.memory.bytes"]
        print(f"big run: {skills} skills indexed (HANGO_SKILLS_MAX="
              f"{settings.skills_max}), {memory} B of memory (HANGO_MEMORY_MAX_BYTES="
              f"{settings.memory_max_bytes}), {read_big[-1]} B read from the database")
        with select_1(db) as round_trip:
            times = interleaved({"rt": (round_trip, 8), "big": (big, 1), "small": (small, 1)},
                                args.iterations)
        rt = statistics.median(times["rt"])
        print(f"\n{args.iterations} interleaved iterations after warm-up")
        print(f"  {'':<44} {'p50 ms':>9} {'p90 ms':>9} {'x SELECT 1':>11}")
        for label, key in (("SELECT 1 (round trip)", "rt"),
                           ("before_run, 100 skills + 64 KiB memory", "small"),
                           ("before_run, 10,000 skills + 10 MiB memory", "big")):
            xs = times[key]
            print(f"  {label:<44} {statistics.median(xs) * 1000:9.3f} {p90(xs) * 1000:9.3f} "
                  f"{statistics.median(xs) / rt:10.1f}x")
        print(f"\n  bytes read per run: {statistics.median(read_small):,.0f} (small), "
              f"{statistics.median(read_big):,.0f} (big)")
        ratio = statistics.median(times["big"]) / statistics.median(times["small"])
        print(f"  the load costs {ratio:.2f}x the small namespace's before_run")
    finally:
        drop_tenant(db, TENANT)
        db.close()


if __name__ == "__main__":
    main()
