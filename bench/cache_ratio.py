"""Does adding memory and skills collapse the prompt-cache read ratio? At which pace, under which rule?

The same 20-turn scripted conversation, over the same files, through three stacks:

- ``default``: the DefaultStack (skills index before the breakpoint, memory after it);
- ``wrong``: memory moved before ``prompt_cache``, so memory sits inside the cached prefix;
- ``baseline``: the stack without memory and skills (``without("skills", "memory")``).

An owner edits memory every 5 turns (``PostgresBackend.write``); each turn is a new
``agent.run(prompt, history=previous.messages)``, so before_run reloads memory every turn. Each
stack's conversation is recorded once per prefix TTL (``PromptCache(prefix_ttl="5m" | "1h")``),
then *replayed* (``hango.models.simulated.replay``) on a fresh cache at each pace (seconds
between turns, so memory edits seconds or minutes apart) under each reading of the provider's
open refresh rule (``refresh="all"``: a read refreshes every entry a breakpoint finds;
``"longest"``: only the entry it read). The requests do not depend on the clock, so the replay
is exact.

The specification's criterion: ``hango.cache.read_ratio`` has not collapsed compared with the
baseline. Past five minutes between turns, judge by the dollars, not the ratio: at 400 s the
wrong order reads a larger share (it rewrites more, so more is there to read) and still costs
more. Prices are Sonnet 4.6's (``hango-sim-1`` is priced as Sonnet 4.6).

Run: ``.venv/bin/python bench/cache_ratio.py [--turns 20] [--edit-every 5] [--paces 10,30,60,120,400]
[--calls PACE,READING,TTL] [--quiet]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from hango.agent.runtime import Agent, RunResult, default_stack
from hango.agent.stack import DefaultStack, Stack
from hango.agents import AgentConfig, create_tenant, drop_tenant, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.base import Message, Request, Response, ToolCall
from hango.models.simulated import (
    READINGS,
    TTL,
    Refresh,
    Reply,
    SimulatedModel,
    cost,
    count_tokens,
    echo_policy,
    replay,
    tool_call,
)
from hango.settings import load_settings

TENANT, AGENT = f"bench-cache-ratio-{os.getpid()}", "a1"
N_SKILLS = 30
ORDER_WRONG = ["skills", "filesystem", "subagents", "memory", "prompt_cache"]

# ~1,500 tokens (count_tokens is utf-8 bytes / 4), so the baseline's prefix alone passes the
# 1,024-token minimum and the comparison is fair.
BASE_PROMPT = "You are the operations assistant of a small logistics company.\n" + "".join(
    f"Rule {i:02d}: answer in plain English, cite the file you relied on, say when you are "
    f"unsure, and never invent an order number, a price or a delivery date (case {i:02d}).\n"
    for i in range(1, 40)
)


def skill(i: int) -> str:
    return (f"---\nname: task-{i:02d}\ndescription: How to handle request type {i:02d} "
            "(refunds, address changes and late deliveries), with the checks to run first.\n"
            f"---\n\n# Task {i:02d}\n\n1. Read the order.\n2. Check the policy.\n3. Answer.\n")


def memory(version: int) -> str:
    lines = [f"- Fact {i:03d}: the customer in region {i % 7} prefers e-mail over phone."
             for i in range(60)]
    lines += [f"- Edit {v}: from now on, quote prices with VAT (owner note {v})."
              for v in range(1, version + 1)]
    return "# What I know\n" + "\n".join(lines) + "\n"


def prompt(turn: int) -> str:
    if turn % 4 == 3:  # now and then, the model reads a skill: a second call in the turn
        return f"Use skill task-{turn % N_SKILLS:02d} for order {1000 + turn}."
    return f"Turn {turn}: what is the status of order {1000 + turn}?"


def policy(request: Request) -> Reply | list[ToolCall]:
    last = request.messages[-1]
    if last.text.startswith("Use skill "):
        name = last.text.split()[2]
        return [tool_call("read_file", {"path": f"/skills/{name}/SKILL.md"})]
    return echo_policy(request)


@dataclass
class Call:
    turn: int
    input: int
    write: int
    read: int
    ratio: float
    reason: str
    cost: float


STACKS: dict[str, Callable[[Agent], Stack]] = {
    "default": default_stack,
    "wrong": lambda a: slots(a).reordered(ORDER_WRONG),
    "baseline": lambda a: slots(a).without("skills", "memory"),
}


TTLS: tuple[TTL, ...] = ("5m", "1h")


def slots(agent: Agent) -> DefaultStack:
    stack = default_stack(agent)
    assert isinstance(stack, DefaultStack)
    return stack


Recorded = list[tuple[int, Request, Response]]  # (turn, request, response)


def record(db: Database, name: str, turns: int, edit_every: int, prefix_ttl: TTL) -> Recorded:
    """One conversation through stack ``name``; the clock never moves (replay sets the pace)."""
    backend = PostgresBackend(db, TENANT, AGENT)
    backend.write("/memories/AGENTS.md", memory(0))  # every stack starts from the same content
    model = SimulatedModel(policy=policy, clock=lambda: 0.0)
    settings = load_settings(database_name="hango_bench", cache_prefix_ttl=prefix_ttl)
    agent = Agent(db, TENANT, AGENT, model, stack=STACKS[name], settings=settings)
    history: list[Message] = []
    calls: Recorded = []
    for turn in range(turns):
        if turn and turn % edit_every == 0:
            backend.write("/memories/AGENTS.md", memory(turn // edit_every))  # an owner's edit
        result: RunResult = agent.run(prompt(turn), history=history)
        history = result.messages
        calls += [(turn, q, r) for q, r in zip(result.requests, result.responses, strict=True)]
    return calls


def price(recorded: Recorded, gap: float, reading: Refresh) -> list[Call]:
    """Replay a recorded conversation with ``gap`` seconds between turns under ``reading``."""
    responses = replay([(turn * gap, q, r) for turn, q, r in recorded], refresh=reading)
    calls = []
    for (turn, _, _), response in zip(recorded, responses, strict=True):
        u = response.usage
        reason = response.diagnostics.miss_reason if response.diagnostics else None
        calls.append(Call(turn + 1, u.input_tokens, u.cache_creation_input_tokens,
                          u.cache_read_input_tokens, u.read_ratio, reason or "-",
                          cost(u, response.model)))
    return calls


def print_calls(name: str, calls: list[Call]) -> None:
    print(f"\n{name}")
    print(f"{'turn':>4} {'input':>7} {'write':>7} {'read':>7} {'ratio':>6} {'cost $':>9}  miss")
    for c in calls:
        print(f"{c.turn:>4} {c.input:>7} {c.write:>7} {c.read:>7} {c.ratio:>6.3f} "
              f"{c.cost:>9.5f}  {c.reason}")


@dataclass(frozen=True)
class Cell:
    """One stack at one pace, under one reading, with one prefix TTL."""

    mean: float  # mean of the per-call ratio
    weighted: float  # all reads / all input tokens
    lowest: float  # the lowest per-call ratio after the first call
    cost: float
    ratios: tuple[float, ...]  # per call


def cell(calls: list[Call]) -> Cell:
    total = sum(c.input + c.write + c.read for c in calls)
    return Cell(statistics.mean(c.ratio for c in calls), sum(c.read for c in calls) / total,
                min(c.ratio for c in calls[1:]), sum(c.cost for c in calls),
                tuple(c.ratio for c in calls))


def collapses(default: Cell, baseline: Cell) -> int:
    """Calls where the baseline reads from the cache and the default stack reads nothing."""
    return sum(d == 0 < p for d, p in zip(default.ratios, baseline.ratios, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--edit-every", type=int, default=5)
    parser.add_argument("--paces", default="10,30,60,120,400",
                        help="seconds between turns, comma-separated")
    parser.add_argument("--calls", metavar="PACE,READING,TTL",
                        help="also print every call of one setting, e.g. 60,longest,5m")
    parser.add_argument("--quiet", action="store_true", help="print only the grid and verdicts")
    args = parser.parse_args()
    paces = [float(p) for p in args.paces.split(",")]

    db = Database(load_settings(database_name="hango_bench"))
    create_tenant(db, TENANT)
    try:
        save_agent(db, TENANT, AGENT, AgentConfig(system_prompt=BASE_PROMPT))
        backend = PostgresBackend(db, TENANT, AGENT)
        for i in range(N_SKILLS):
            backend.write(f"/skills/task-{i:02d}/SKILL.md", skill(i))
        recorded = {(name, ttl): record(db, name, args.turns, args.edit_every, ttl)
                    for ttl in TTLS for name in STACKS}
    finally:
        drop_tenant(db, TENANT)
        db.close()
    grid = {(gap, reading, ttl, name): cell(price(recorded[name, ttl], gap, reading))
            for gap in paces for reading in READINGS for ttl in TTLS for name in STACKS}
    if args.calls and not args.quiet:
        gap_s, reading, ttl = args.calls.split(",")
        for name in STACKS:
            print_calls(f"{name} ({gap_s} s between turns, refresh={reading}, prefix {ttl})",
                        price(recorded[name, ttl], float(gap_s), reading))  # type: ignore[arg-type]
    summarize(grid, paces, args)


def summarize(grid: dict[tuple[float, Refresh, TTL, str], Cell], paces: list[float],
              args: argparse.Namespace) -> None:
    with open("/proc/loadavg") as f:  # the figures are deterministic; the load is for the record
        load = f.read().split()[:3]
    print(f"\n{args.turns} turns, memory edited every {args.edit_every} turns; base prompt "
          f"~{count_tokens(BASE_PROMPT)} tokens, memory ~{count_tokens(memory(0))}, {N_SKILLS} "
          f"skills; load {' '.join(load)}")
    print("ratio = token-weighted read ratio (all reads / all input tokens); cost in $ for the "
          "whole conversation at Sonnet 4.6 prices ($3 in, $15 out per million; 1h writes 2x, "
          "5m writes 1.25x, reads 0.1x)")
    print("lowest = the default stack's lowest per-call ratio after call 1 (0: a call that "
          "read nothing)")
    print(f"{'turns':>6} {'edits':>7} {'refresh':>8} {'prefix':>6} | {'default':>7} "
          f"{'wrong':>7} {'baseline':>8} {'lowest':>6} | {'default $':>9} {'wrong $':>9} "
          f"{'baseline $':>10} | {'def/base':>8} {'wrong/def $':>11}")
    for gap in paces:
        for reading in READINGS:
            for ttl in TTLS:
                d, w, p = (grid[gap, reading, ttl, n] for n in ("default", "wrong", "baseline"))
                print(f"{gap:>4g} s {gap * args.edit_every:>5g} s {reading:>8} {ttl:>6} | "
                      f"{d.weighted:>7.3f} {w.weighted:>7.3f} {p.weighted:>8.3f} {d.lowest:>6.3f} | "
                      f"{d.cost:>9.4f} {w.cost:>9.4f} "
                      f"{p.cost:>10.4f} | {d.weighted / p.weighted:>8.3f} {w.cost / d.cost:>11.3f}")
    print("\nverdicts. The criterion holds when no call collapses: no call where the baseline "
          "reads from the cache and the default stack reads nothing.")
    for gap in paces:
        for ttl in TTLS:
            verdict = {r: not collapses(grid[gap, r, ttl, "default"], grid[gap, r, ttl, "baseline"])
                       for r in READINGS}
            both = "holds under both readings" if all(verdict.values()) else (
                "fails under both readings" if not any(verdict.values()) else
                "holds only under " + " and ".join(r for r, ok in verdict.items() if ok))
            if all(grid[gap, r, ttl, "baseline"].lowest == 0 for r in READINGS):
                both += " (but the baseline too reads nothing on some calls)"
            gain = {r: grid[gap, r, ttl, "wrong"].cost / grid[gap, r, ttl, "default"].cost
                    for r in READINGS}
            print(f"  edits {gap * args.edit_every:>4g} s apart, prefix {ttl}: criterion {both}; "
                  f"wrong order costs x{gain['all']:.2f} (all) / x{gain['longest']:.2f} "
                  "(longest) the default")
            for r in READINGS:
                d, w = grid[gap, r, ttl, "default"], grid[gap, r, ttl, "wrong"]
                if w.weighted > d.weighted and w.cost > d.cost:
                    print(f"    refresh={r}: the read ratio ranks the wrong order higher "
                          f"({w.weighted:.3f} against {d.weighted:.3f}), yet it costs more "
                          f"(${w.cost:.4f} against ${d.cost:.4f}): judge by the dollars")
        one, five = (grid[gap, "longest", t, "default"].cost for t in ("1h", "5m"))
        print(f"  edits {gap * args.edit_every:>4g} s apart: 1h prefix costs x{one / five:.3f} "
              "the 5m prefix (refresh=longest); x"
              f"{grid[gap, 'all', '1h', 'default'].cost / grid[gap, 'all', '5m', 'default'].cost:.3f}"
              " (refresh=all)")


if __name__ == "__main__":
    main()
