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

With ``--deepagents``, then one whole turn beside deepagents 0.7.32's, in rounds of rotating
order (``pip install -e '.[bench]'``; without it those rows say so): ``create_deep_agent`` with
its memory and skills middlewares over a ``FilesystemBackend`` on a temporary copy of
bench/before_run.py's files (100 skills of 2,221 bytes, a 64 KiB AGENTS.md), its skills parser
as shipped (PyYAML) and on libyaml's C loader, invoked with no checkpointer (every turn loads, as
a thread's first turn) on langchain_core's ``GenericFakeChatModel``, which answers the
simulator's text with no tool call; against ``CachedAgent.run`` and the plain ``Agent.run`` over
the same files, the same user message, the index budget off (deepagents has none). Both prompts
are checked to hold the memory and the 100 skill lines; each side's model call is also timed
alone, on the request its run sent.

Run: ``.venv/bin/python bench/whole_run.py [--iterations 60] [--deepagents [--profile]]``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import itertools
import logging
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from before_run import (  # type: ignore[import-not-found]
    deepagents_libyaml,
    files,
    p50,
    p90,
    round_trips,
    write_tree,
)
from before_run import seed as seed_files  # type: ignore[import-not-found]

from hango import prompts
from hango.agent.runtime import Agent, RunResult
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


def rotating(rows: dict[str, Callable[[], object]], turns: int,
             warmup: int = 5) -> dict[str, list[float]]:
    """Seconds per call of each row, in turns, each turn starting one row further on, so that
    load on a shared machine falls on every row alike: their ratios are the result."""
    for fn in rows.values():  # warm: prepared statements, the cache, the simulator
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in rows}
    names = list(rows)
    for turn in range(turns):
        k = turn % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(timed(rows[name]))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--deepagents", action="store_true",
                        help="then a whole turn beside deepagents' (pip install -e '.[bench]')")
    parser.add_argument("--profile", action="store_true",
                        help="with --deepagents: then cProfile that section's CachedAgent.run")
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
            times = rotating({name: fn for name, (_, fn) in rows.items()}, args.iterations)
            conn.autocommit = False
        counted = {name: round_trips(db, fn) for name, (_, fn) in rows.items() if name != "rt"}
        rt = statistics.median(times["rt"])
        print(f"load: {os.getloadavg()} on {os.cpu_count()} CPUs; {args.iterations} turns")
        print(f"  {'':<48} {'p50 ms':>8} {'x SELECT 1':>11} {'round trips':>12}")
        for name, (text, _) in rows.items():
            p50 = statistics.median(times[name])
            print(f"  {text:<48} {p50 * 1000:>8.3f} {p50 / rt:>11.1f} "
                  f"{counted.get(name, 1):>12}")
        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"  cached / plain: {median['cached'] / median['plain']:.2f}; "
              f"CachedAgent / cached: {median['agent'] / median['cached']:.2f}; "
              f"served after / before: {median['after'] / median['before']:.2f}")
        if args.deepagents:
            with tempfile.TemporaryDirectory() as tmp:
                beside_deepagents(db, Path(tmp), args.iterations, args.profile)
    finally:
        drop_tenant(db, TENANT)
        db.close()


# --- one whole turn beside deepagents' -------------------------------------------------------

MESSAGE = "hello"  # the user's message, the same on both sides
INDEX_OFF = 1024 * 1024  # HANGO_SKILLS_INDEX_MAX_BYTES at its maximum, 30x the 100-line index


def fixed_answer_model(answer: str) -> tuple[Any, list[list[Any]]]:
    """langchain_core's ``GenericFakeChatModel`` answering ``answer`` with no tool call at every
    call, and a list holding the messages of its last call (a reference, for the prompt check).
    The one thing added: ``bind_tools``, which the fake leaves unimplemented, converts the tools
    to the function schema and binds them, as a real chat model does at every model call of a
    langchain agent."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool

    seen: list[list[Any]] = [[]]

    class FixedAnswer(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            seen[0] = messages
            return super()._generate(messages, *args, **kwargs)

    return FixedAnswer(messages=itertools.repeat(AIMessage(answer))), seen


class DeepagentsTurn(NamedTuple):
    turn: Callable[[], Any]  # one whole turn
    model_alone: Callable[[], Any]  # its fake model's call alone, on its last turn's messages
    seen: list[list[Any]]  # the messages of the model's last call


def deepagents_turn(root: Path, answer: str, libyaml: bool) -> DeepagentsTurn | None:
    """``create_deep_agent`` with memory and skills over a ``FilesystemBackend`` on ``root``
    (``libyaml``: its skills parser on the C loader). ``None``: deepagents is not installed."""
    try:
        import deepagents.middleware.skills as da_skills_module
        from deepagents import create_deep_agent
        from deepagents.backends import FilesystemBackend
    except ImportError:
        return None
    model, seen = fixed_answer_model(answer)
    agent = create_deep_agent(model=model, memory=["/memories/AGENTS.md"], skills=["/skills/"],
                              backend=FilesystemBackend(root_dir=str(root), virtual_mode=True))

    def turn() -> Any:
        with deepagents_libyaml(da_skills_module) if libyaml else contextlib.nullcontext():
            out = agent.invoke({"messages": [{"role": "user", "content": MESSAGE}]})
        return out

    return DeepagentsTurn(turn, lambda: model.invoke(seen[0]), seen)


def check_prompt(side: str, system: str, answer: str, content: dict[str, str]) -> str:
    """The memory and every skill's index line are in ``system``, and the answer is the same
    on both sides: neither skips work the other does."""
    memory = content["/memories/AGENTS.md"]
    assert memory.rstrip() in system, f"{side}: the memory is not in its prompt"
    lines = system.splitlines()
    skills = [(path.split("/")[2], text.split("description: ", 1)[1].split("\n", 1)[0])
              for path, text in content.items() if path.startswith("/skills/")]
    indexed = sum(any(name in line and description in line for line in lines)
                  for name, description in skills)
    assert indexed == len(skills) == SKILLS, f"{side}: {indexed} of {len(skills)} skill lines"
    return (f"{side}: the memory ({len(memory):,} chars) and {indexed} skill lines in a "
            f"{len(system):,}-char system prompt; answered {answer!r}")


def hango_checked(side: str, result: RunResult, content: dict[str, str]) -> str:
    (request,) = result.requests  # one model call: no tool call
    assert result.stop_reason == "final", result.stop_reason
    system = "\n".join(block.text for block in request.system)
    return check_prompt(side, system, result.text, content)


def deepagents_checked(side: str, out: dict[str, Any], seen: list[Any],
                       content: dict[str, str]) -> str:
    last = out["messages"][-1]
    assert last.type == "ai" and not last.tool_calls, last
    system = "\n".join(m.text for m in seen if m.type == "system")
    return check_prompt(side, system, last.text, content)


def beside_deepagents(db: Database, tmp: Path, turns: int, profile: bool) -> None:
    started = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()
    content = files(SKILLS)  # bench/before_run.py's files, the same on both sides
    seed_files(db, "d100", content, tenant=TENANT)
    write_tree(tmp, content)
    settings = load_settings(database_name="hango_bench", skills_index_max_bytes=INDEX_OFF)
    # history=1: what ``hango serve`` keeps of its calls (the next call's diagnostics)
    agent = CachedAgent(db, TENANT, "d100", SimulatedModel(history=1), settings=settings)
    plain = Agent(db, TENANT, "d100", SimulatedModel(history=1), settings=settings)
    first = agent.run(MESSAGE)
    checks = [hango_checked("hango CachedAgent.run", first, content),
              hango_checked("hango Agent.run", plain.run(MESSAGE), content)]
    simulator, request = SimulatedModel(history=1), first.requests[0]
    rows: dict[str, tuple[str, Callable[[], object]]] = {
        "agent": ("hango CachedAgent.run", lambda: agent.run(MESSAGE)),
        "plain": ("hango Agent.run, plain stack", lambda: plain.run(MESSAGE)),
        "sim": ("  its model alone: SimulatedModel.complete", lambda: simulator.complete(request)),
    }
    sides = {"da": ("deepagents 0.7.32, PyYAML (shipped)",
                    deepagents_turn(tmp, first.text, libyaml=False)),
             "da_c": ("deepagents 0.7.32, libyaml C loader",
                      deepagents_turn(tmp, first.text, libyaml=True))}
    for key, (label, side) in sides.items():
        if side is not None:
            checks.append(deepagents_checked(label, side.turn(), side.seen[0], content))
            rows[key] = (label, side.turn)
    shipped = sides["da"][1]
    if shipped is not None:
        rows["fake"] = ("  its model alone: GenericFakeChatModel.invoke", shipped.model_alone)
    times = rotating({name: fn for name, (_, fn) in rows.items()}, turns)
    load_after = os.getloadavg()
    print(f"\nwhole turn beside deepagents, {started:%Y-%m-%d %H:%M:%S} UTC: {SKILLS} skills x "
          f"{SKILL_BYTES} B and {MEMORY_BYTES:,} B of memory, one model call, no tool call; "
          f"{turns} rounds in rotating order")
    for line in checks:
        print(f"  checked: {line}")
    print(f"  {'':<48} {'p50 ms':>9} {'p90 ms':>9}")
    for name, (label, _) in rows.items():
        print(f"  {label:<48} {p50(times[name]) * 1000:9.3f} {p90(times[name]) * 1000:9.3f}")
    if "da" not in rows:
        print("  deepagents: not installed (pip install -e '.[bench]'); no ratios")
    else:
        h, hp = p50(times["agent"]), p50(times["plain"])
        for key, goal in (("da", 50), ("da_c", 20)):
            d = p50(times[key])
            print(f"  {rows[key][0]} / hango CachedAgent.run: {d / h:5.1f}x (goal >= {goal}x); "
                  f"/ plain Agent.run: {d / hp:5.1f}x; both model calls left out: "
                  f"{(d - p50(times['fake'])) / (h - p50(times['sim'])):5.1f}x")
    print(f"  load: {fmt_load(load_before)} before, {fmt_load(load_after)} after, on "
          f"{os.cpu_count()} CPUs")
    if profile:
        profiled(lambda: agent.run(MESSAGE), turns)


def fmt_load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


def profiled(fn: Callable[[], object], calls: int, top: int = 30) -> None:
    """cProfile of ``calls`` calls (after the timed rounds: warm): own time by part, the top
    functions by own time, then hango's by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    stats = pstats.Stats(profiler)
    print(f"\ncProfile of {calls} CachedAgent.run (100 skills, 64 KiB, index budget off); "
          f"{stats.total_tt / calls * 1000:.3f} ms a run under the profiler")  # type: ignore[attr-defined]
    by_part: dict[str, float] = {}
    for (filename, _, _), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        by_part[part_of(filename)] = by_part.get(part_of(filename), 0.0) + own
    print("  own time by part (ms a run, share)")
    for part, own in sorted(by_part.items(), key=lambda kv: -kv[1]):
        print(f"    {part:<40} {own / calls * 1000:7.3f} {own / stats.total_tt:6.1%}")  # type: ignore[attr-defined]
    print(f"\n  top {top} by own time")
    stats.sort_stats("tottime").print_stats(top)
    print(f"\n  hango's top {top} by cumulative time")
    stats.sort_stats("cumulative").print_stats(f"{os.sep}hango{os.sep}", top)


def part_of(filename: str) -> str:
    """A profiled function's part: hango's module, a site package, the standard library."""
    path = Path(filename)
    if "site-packages" in path.parts:
        return path.parts[path.parts.index("site-packages") + 1]
    if "hango" in path.parts:
        return ".".join(path.parts[path.parts.index("hango"):]).removesuffix(".py")
    return "python (standard library, builtins)"


if __name__ == "__main__":
    main()
