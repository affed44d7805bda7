"""What a whole run costs: ``Agent.run`` on the offline simulator, plain stack and cached stack.

One agent with 100 skills (2,221 bytes each) and a 64 KiB ``/memories/AGENTS.md``, one model
call and no tool call: before_run, the request, the simulator's pricing, the run span. Timed in
turns in this one process beside a ``SELECT 1`` round trip through the same pool, so the figures
are multiples of a round trip and ratios, not milliseconds to compare across machines. Each turn
runs the three in another order (a run right after another run is faster than one right after
a round trip).

The plain stack is the library's default (every run reads and builds); the cached stack is what
``hango serve`` and the runs API choose (``hango.perf.cached_stack``). Without ``hango.perf``
(the package deleted, or code from before it existed) the cached row is the default's.

Run: ``.venv/bin/python bench/whole_run.py [--iterations 60]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from collections.abc import Callable

from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, drop_tenant, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel
from hango.settings import load_settings

TENANT = f"bench-whole-run-{os.getpid()}"
SKILLS, SKILL_BYTES, MEMORY_BYTES = 100, 2221, 64 * 1024


def seed(db: Database) -> None:
    save_agent(db, TENANT, "a1", AgentConfig())
    fs = PostgresBackend(db, TENANT, "a1")
    for i in range(SKILLS):
        head = f"---\nname: skill-{i:03d}\ndescription: Use this skill for task family {i:03d}.\n---\n"
        fs.write(f"/skills/skill-{i:03d}/SKILL.md", head + "x" * (SKILL_BYTES - len(head)))
    fs.write("/memories/AGENTS.md", "m" * MEMORY_BYTES)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=60)
    args = parser.parse_args()
    logging.getLogger("hango").addHandler(logging.NullHandler())
    logging.getLogger("hango").propagate = False
    db = Database(load_settings(database_name="hango_bench"))
    create_tenant(db, TENANT)
    try:
        seed(db)
        try:
            from hango.perf import cached_stack
            cached = Agent(db, TENANT, "a1", SimulatedModel(), stack=cached_stack)
            label = "cached stack (hango.perf.cached_stack)"
        except ModuleNotFoundError:
            cached = Agent(db, TENANT, "a1", SimulatedModel())
            label = "default stack (no hango.perf)"
        plain = Agent(db, TENANT, "a1", SimulatedModel())
        with db.pool.connection() as conn:
            conn.autocommit = True
            fns: dict[str, Callable[[], object]] = {
                "rt": lambda: conn.execute("SELECT 1").fetchone(),
                "plain": lambda: plain.run("hello"),
                "cached": lambda: cached.run("hello"),
            }
            for fn in fns.values():  # warm: prepared statements, the cache, the simulator
                for _ in range(5):
                    fn()
            times: dict[str, list[float]] = {name: [] for name in fns}
            names = list(fns)
            for turn in range(args.iterations):  # in turns, each turn in another order
                for name in names[turn % 3:] + names[:turn % 3]:
                    times[name].append(timed(fns[name]))
            conn.autocommit = False
        rt = statistics.median(times["rt"])
        print(f"load: {os.getloadavg()} on {os.cpu_count()} CPUs; {args.iterations} turns")
        print(f"  {'':<48} {'p50 ms':>8} {'round trips':>12}")
        for name, text in (("rt", "SELECT 1 round trip (pooled, autocommit)"),
                           ("plain", "Agent.run, default (plain) stack"),
                           ("cached", f"Agent.run, {label}")):
            p50 = statistics.median(times[name])
            print(f"  {text:<48} {p50 * 1000:>8.3f} {p50 / rt:>12.1f}")
        ratio = statistics.median(times["cached"]) / statistics.median(times["plain"])
        print(f"  cached / plain: {ratio:.2f}")
    finally:
        drop_tenant(db, TENANT)
        db.close()


if __name__ == "__main__":
    main()
