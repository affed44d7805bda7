"""Measure the real provider's prompt cache next to the simulator's prediction (needs a key).

Not run in CI: it calls the Anthropic API (a few cents) and, at the pace that matters, takes
minutes. It settles the rule the provider's documentation leaves open and the simulator makes a
switch of (``SimulatedModel(refresh="all" | "longest")``): when a call reads the conversation
entry, is the older prefix entry refreshed too?

What it does: a fixed conversation through hango's real ``DefaultStack`` and ``AnthropicModel``
(``agent.run(prompt, history=...)`` per turn), an owner's memory edit every ``--edit-every``
turns, ``--seconds-between`` real seconds between turns. Every request that goes on the wire is
also priced by two simulators, one per reading, at the same elapsed time. One line per call: the
provider's usage fields, then each reading's prediction. The simulator counts tokens as
``ceil(bytes / 4)``, so compare *shapes* (is anything read? how much of the prompt?), not exact
counts.

The decisive calls are the memory-edit calls when the edits are more than 5 minutes apart and
the prefix has a 5-minute TTL (the defaults here: 70 s between turns, an edit every 5 turns,
``--prefix-ttl 5m``): ``all`` predicts the prefix is read, ``longest`` predicts nothing is. The
script ends with which reading the provider matched. Please send the output with a correction
if the simulator's default (``longest``) is wrong.

Run:
    ANTHROPIC_API_KEY=... .venv/bin/python bench/provider_check.py \\
        [--model claude-sonnet-4-6] [--turns 11] [--edit-every 5] [--seconds-between 70] \\
        [--prefix-ttl 5m|1h]
    .venv/bin/python bench/provider_check.py --dry-run   # no key: the simulator plays provider
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, drop_tenant, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.base import Model, Request, Response, Usage
from hango.models.simulated import READINGS, SimulatedModel, min_cacheable_tokens
from hango.settings import load_settings

TENANT, AGENT = f"bench-provider-check-{os.getpid()}", "a1"

# ~1,600 simulator tokens (and over 1,024 real ones): the prefix must pass the model's minimum.
BASE_PROMPT = "You are the operations assistant of a small logistics company.\n" + "".join(
    f"Rule {i:02d}: answer in one short sentence, cite the file you relied on, say when you are "
    f"unsure, and never invent an order number, a price or a delivery date (case {i:02d}).\n"
    for i in range(1, 41))


def memory(version: int) -> str:
    lines = [f"- Fact {i:02d}: the customer in region {i % 7} prefers e-mail." for i in range(30)]
    lines += [f"- Edit {v}: quote prices with VAT (owner note {v})." for v in range(1, version + 1)]
    return "# What I know\n" + "\n".join(lines) + "\n"


@dataclass
class Row:
    turn: int
    elapsed: float
    edited: bool
    real: Usage
    predicted: dict[str, Usage]


class Observed:
    """A :class:`Model` that sends each request to ``model`` and has each simulator price it."""

    def __init__(self, model: Model, sims: dict[str, SimulatedModel], now: list[float]) -> None:
        self.model, self.sims, self.now = model, sims, now
        self.name, self.provider = model.name, model.provider
        self.calls: list[tuple[float, Usage, dict[str, Usage]]] = []

    def complete(self, request: Request) -> Response:
        started = self.now[0]
        response = self.model.complete(request)
        predicted = {reading: sim.complete(request).usage for reading, sim in self.sims.items()}
        self.calls.append((started, response.usage, predicted))
        return response


def fields(u: Usage) -> str:
    five = u.cache_creation_input_tokens - u.cache_creation_1h_input_tokens
    return (f"{u.input_tokens:>6} {five:>6} {u.cache_creation_1h_input_tokens:>6} "
            f"{u.cache_read_input_tokens:>6} {u.read_ratio:>5.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="claude-sonnet-4-6")
    parser.add_argument("--turns", type=int, default=11)
    parser.add_argument("--edit-every", type=int, default=5)
    parser.add_argument("--seconds-between", type=float, default=70.0)
    parser.add_argument("--prefix-ttl", choices=["5m", "1h"], default="5m")
    parser.add_argument("--dry-run", action="store_true",
                        help="no key, no waiting: a SimulatedModel (refresh=longest) plays provider")
    args = parser.parse_args()
    if not args.dry_run and not os.environ.get("ANTHROPIC_API_KEY"):
        print("provider_check: set ANTHROPIC_API_KEY (or use --dry-run)", file=sys.stderr)
        return 2

    now = [0.0]  # elapsed seconds at the start of the current call, shared with the simulators
    start = time.monotonic()
    minimum = min_cacheable_tokens(args.model)
    sims = {r: SimulatedModel(args.model, clock=lambda: now[0], refresh=r, min_cacheable=minimum)
            for r in READINGS}
    provider: Model
    if args.dry_run:
        provider = SimulatedModel(args.model, clock=lambda: now[0], min_cacheable=minimum)
    else:
        from hango.models.anthropic import AnthropicModel  # the optional extra

        provider = AnthropicModel(args.model)
    observed = Observed(provider, sims, now)

    settings = load_settings(database_name="hango_bench", cache_prefix_ttl=args.prefix_ttl)
    db = Database(settings)
    create_tenant(db, TENANT)
    rows: list[Row] = []
    try:
        save_agent(db, TENANT, AGENT, AgentConfig(system_prompt=BASE_PROMPT))
        backend = PostgresBackend(db, TENANT, AGENT)
        backend.write("/memories/AGENTS.md", memory(0))
        agent = Agent(db, TENANT, AGENT, observed, settings=settings)
        history = ()
        for turn in range(args.turns):
            if turn:
                if args.dry_run:
                    now[0] += args.seconds_between
                else:
                    time.sleep(max(0.0, start + turn * args.seconds_between - time.monotonic()))
            edited = bool(turn) and turn % args.edit_every == 0
            if edited:
                backend.write("/memories/AGENTS.md", memory(turn // args.edit_every))
            if not args.dry_run:
                now[0] = time.monotonic() - start
            done = len(observed.calls)
            result = agent.run(f"Turn {turn}: in one short sentence and without tools, what is "
                               f"the status of order {1000 + turn}?", history=history)
            history = tuple(result.messages)
            for started, real, predicted in observed.calls[done:]:
                rows.append(Row(turn, started, edited, real, predicted))
                report(rows[-1], header=len(rows) == 1)
    finally:
        drop_tenant(db, TENANT)
        db.close()
    verdict(rows, args)
    return 0


def report(row: Row, header: bool) -> None:
    if header:
        cols = f"{'input':>6} {'w5m':>6} {'w1h':>6} {'read':>6} {'ratio':>5}"
        print(f"{'turn':>4} {'t (s)':>7} {'edit':>4} | provider {cols} | "
              + " | ".join(f"sim {r:<7} {cols}" for r in READINGS))
    print(f"{row.turn:>4} {row.elapsed:>7.1f} {'yes' if row.edited else '':>4} | "
          f"         {fields(row.real)} | "
          + " | ".join(f"            {fields(row.predicted[r])}" for r in READINGS))


def verdict(rows: list[Row], args: argparse.Namespace) -> None:
    """Which reading matched the provider on the calls where the two readings disagree."""
    decisive = [row for row in rows if (row.predicted["all"].cache_read_input_tokens > 0)
                != (row.predicted["longest"].cache_read_input_tokens > 0)]
    print(f"\n{len(rows)} calls; {args.seconds_between:g} s between turns, memory edited every "
          f"{args.edit_every} turns, prefix TTL {args.prefix_ttl}, model {args.model}")
    if not decisive:
        print("no call where the two readings disagree: make the edits more than 5 minutes "
              "apart with --prefix-ttl 5m (e.g. --seconds-between 70 --edit-every 5)")
        return
    matches = {r: sum((row.real.cache_read_input_tokens > 0)
                      == (row.predicted[r].cache_read_input_tokens > 0) for row in decisive)
               for r in READINGS}
    print(f"{len(decisive)} decisive call(s) (turns {sorted({r.turn for r in decisive})}); "
          + ", ".join(f"refresh={r} matched {n}" for r, n in matches.items()))


if __name__ == "__main__":
    raise SystemExit(main())
