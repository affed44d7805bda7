"""What a whole run costs: ``Agent.run`` on the offline simulator, plain, cached and as served.

One agent with 100 skills (2,221 bytes each) and a 64 KiB ``/memories/AGENTS.md``, one model
call and no tool call: the config, before_run, the request, the simulator's pricing, the run
span; in the two "served" rows also what the runs API keeps (the runs row and the prompt view).
Timed in turns in this one process beside a ``SELECT 1`` round trip through the same pool, so
the figures are multiples of a round trip and ratios, not milliseconds to compare across
machines. Each turn runs them in another order. Beside the time, each row's protocol round
trips, COUNTED from a libpq trace (bench/before_run.py's ``round_trips``).

- plain: the library's default stack (every run reads and builds);
- cached: ``Agent(..., stack=cached_stack)``: before_run one round trip, the config its own
  transaction (four);
- CachedAgent: ``hango.perf.CachedAgent``: the config in before_run's round trip;
- served, before: what the runs API did: the cached stack, ``record=True`` (the runs row in a
  transaction of its own), then ``prompts.keep`` (another);
- served, after: what it does: ``CachedAgent``, then ``hango.api.runs.record`` (the row and the
  view in one round trip).

Run: ``.venv/bin/python bench/whole_run.py [--iterations 60]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from collections.abc import Callable

from before_run import round_trips  # type: ignore[import-not-found]

from hango import prompts
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, drop_tenant, save_agent
from hango.api.runs import record
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel
from hango.perf import CachedAgent, cached_stack
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
        settings = db.settings
        plain = Agent(db, TENANT, "a1", SimulatedModel())
        cached = Agent(db, TENANT, "a1", SimulatedModel(), stack=cached_stack)
        agent = CachedAgent(db, TENANT, "a1", SimulatedModel())

        def served_before() -> object:
            result = cached.run("hello", record=True)
            prompts.keep(db, TENANT, result, settings)
            return result

        with db.pool.connection() as conn:
            conn.autocommit = True
            rows: dict[str, tuple[str, Callable[[], object]]] = {
                "rt": ("SELECT 1 round trip (pooled, autocommit)",
                       lambda: conn.execute("SELECT 1").fetchone()),
                "plain": ("Agent.run, default (plain) stack", lambda: plain.run("hello")),
                "cached": ("Agent.run, cached stack", lambda: cached.run("hello")),
                "agent": ("CachedAgent.run", lambda: agent.run("hello")),
                "before": ("served, before: cached + record=True + keep", served_before),
                "after": ("served, after: CachedAgent + record()",
                          lambda: record(agent, agent.run("hello"), settings)),
            }
            for _, fn in rows.values():  # warm: prepared statements, the cache, the simulator
                for _ in range(5):
                    fn()
            times: dict[str, list[float]] = {name: [] for name in rows}
            names = list(rows)
            for turn in range(args.iterations):  # in turns, each turn in another order
                k = turn % len(names)
                for name in names[k:] + names[:k]:
                    times[name].append(timed(rows[name][1]))
            conn.autocommit = False
        counted = {name: round_trips(db, fn) for name, (_, fn) in rows.items() if name != "rt"}
        rt = statistics.median(times["rt"])
        print(f"load: {os.getloadavg()} on {os.cpu_count()} CPUs; {args.iterations} turns")
        print(f"  {'':<48} {'p50 ms':>8} {'x SELECT 1':>11} {'round trips':>12}")
        for name, (text, _) in rows.items():
            p50 = statistics.median(times[name])
            print(f"  {text:<48} {p50 * 1000:>8.3f} {p50 / rt:>11.1f} "
                  f"{counted.get(name, 1):>12}")
        p50 = {name: statistics.median(values) for name, values in times.items()}
        print(f"  cached / plain: {p50['cached'] / p50['plain']:.2f}; "
              f"CachedAgent / cached: {p50['agent'] / p50['cached']:.2f}; "
              f"served after / before: {p50['after'] / p50['before']:.2f}")
    finally:
        drop_tenant(db, TENANT)
        db.close()


if __name__ == "__main__":
    main()
