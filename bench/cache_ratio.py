"""Does adding memory and skills collapse the prompt-cache read ratio? A 20-turn scripted run.

The same conversation, over the same files, through three stacks:

- ``default``: the DefaultStack (skills index before the breakpoint, memory after it);
- ``wrong``: memory moved before ``prompt_cache``, so memory sits inside the cached prefix;
- ``phase10``: the stack before memory and skills existed (``without("skills", "memory")``).

The SimulatedModel prices every call by Anthropic's caching rules on an injected clock (30 s
between turns); an owner edits memory every 5 turns (``PostgresBackend.write``). Each turn is a
new ``agent.run(prompt, history=previous.messages)``, so before_run reloads memory every turn.
The seed's criterion: ``hango.cache.read_ratio`` has not collapsed compared with phase 10.

Run: ``.venv/bin/python bench/cache_ratio.py [--turns 20] [--edit-every 5] [--quiet]``.
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
from hango.models.base import Message, Request, ToolCall
from hango.models.simulated import (
    Reply,
    SimulatedModel,
    cost,
    count_tokens,
    echo_policy,
    tool_call,
)
from hango.settings import load_settings

TENANT, AGENT = f"bench-cache-ratio-{os.getpid()}", "a1"
N_SKILLS = 30
ORDER_WRONG = ["skills", "filesystem", "subagents", "memory", "prompt_cache"]

# ~1,500 tokens (count_tokens is utf-8 bytes / 4), so the phase-10 prefix alone passes the
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


class Clock:
    """An injectable clock: the model reads it at each call, the script moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


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
    "phase10": lambda a: slots(a).without("skills", "memory"),
}


def slots(agent: Agent) -> DefaultStack:
    stack = default_stack(agent)
    assert isinstance(stack, DefaultStack)
    return stack


def run_stack(db: Database, name: str, turns: int, edit_every: int, gap: float) -> list[Call]:
    backend = PostgresBackend(db, TENANT, AGENT)
    backend.write("/memories/AGENTS.md", memory(0))  # every stack starts from the same content
    clock = Clock()
    model = SimulatedModel(policy=policy, clock=clock)
    agent = Agent(db, TENANT, AGENT, model, stack=STACKS[name])
    history: list[Message] = []
    calls: list[Call] = []
    for turn in range(turns):
        if turn and turn % edit_every == 0:
            backend.write("/memories/AGENTS.md", memory(turn // edit_every))  # an owner's edit
        clock.now += gap
        result: RunResult = agent.run(prompt(turn), history=history)
        history = result.messages
        for response in result.responses:
            u = response.usage
            reason = response.diagnostics.miss_reason if response.diagnostics else None
            calls.append(Call(turn + 1, u.input_tokens, u.cache_creation_input_tokens,
                              u.cache_read_input_tokens, u.read_ratio, reason or "-",
                              cost(u, response.model or model.name)))
    return calls


def print_calls(name: str, calls: list[Call]) -> None:
    print(f"\n{name}")
    print(f"{'turn':>4} {'input':>7} {'write':>7} {'read':>7} {'ratio':>6} {'cost $':>9}  miss")
    for c in calls:
        print(f"{c.turn:>4} {c.input:>7} {c.write:>7} {c.read:>7} {c.ratio:>6.3f} "
              f"{c.cost:>9.5f}  {c.reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--edit-every", type=int, default=5)
    parser.add_argument("--seconds-between", type=float, default=30.0)
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args()

    db = Database(load_settings(database_name="hango_bench"))
    create_tenant(db, TENANT)
    try:
        save_agent(db, TENANT, AGENT, AgentConfig(system_prompt=BASE_PROMPT))
        backend = PostgresBackend(db, TENANT, AGENT)
        for i in range(N_SKILLS):
            backend.write(f"/skills/task-{i:02d}/SKILL.md", skill(i))
        results = {name: run_stack(db, name, args.turns, args.edit_every, args.seconds_between)
                   for name in STACKS}
    finally:
        drop_tenant(db, TENANT)
        db.close()
    if not args.quiet:
        for name, calls in results.items():
            print_calls(name, calls)
    summarize(results, args)


def summarize(results: dict[str, list[Call]], args: argparse.Namespace) -> None:
    print(f"\nsummary: {args.turns} turns, memory edited every {args.edit_every} turns, "
          f"{args.seconds_between:g} s between turns; base prompt ~{count_tokens(BASE_PROMPT)} "
          f"tokens, memory ~{count_tokens(memory(0))}, {N_SKILLS} skills")
    print(f"{'stack':<8} {'calls':>5} {'mean ratio':>10} {'weighted':>9} {'tokens in':>10} "
          f"{'cost $':>9} {'$/Mtok in':>9}")
    summary = {}
    for name, calls in results.items():
        mean = statistics.mean(c.ratio for c in calls)
        read = sum(c.read for c in calls)
        total = sum(c.input + c.write + c.read for c in calls)
        dollars = sum(c.cost for c in calls)
        summary[name] = (mean, dollars)
        print(f"{name:<8} {len(calls):>5} {mean:>10.3f} {read / total:>9.3f} {total:>10} "
              f"{dollars:>9.4f} {dollars / total * 1e6:>9.3f}")
    for a, b in (("default", "phase10"), ("wrong", "default")):
        (ratio_a, cost_a), (ratio_b, cost_b) = summary[a], summary[b]
        print(f"{a + ' / ' + b:<18} mean read ratio x{ratio_a / ratio_b:.3f}, "
              f"cost x{cost_a / cost_b:.2f}")

if __name__ == "__main__":
    main()
