"""Measure an OpenAI-compatible server's prompt cache next to the simulator's prediction.

Not run in CI: it calls a real endpoint. Any server that speaks Chat Completions with tools:
a local Ollama, llama.cpp (``llama-server --jinja``), vLLM (start it with
``--enable-prompt-tokens-details`` or it reports no cached tokens) or LM Studio, or OpenAI with
a key. The SDK's variables choose it: ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``.

What it does: the order experiment of notebook 10. The same conversation through hango's real
``DefaultStack`` and ``OpenAIModel`` twice: memory after the breakpoint (the default stack) and
memory before it (``memory-before-cache``); the owner edits memory every ``--edit-every``
turns. Every request that goes on the wire is also priced by ``SimulatedModel(caching=
"automatic")`` with the rules you name. One line per call: the server's ``prompt_tokens`` and
``cached_tokens`` (``?`` where it reports none) and the simulator's. The simulator counts
``ceil(bytes / 4)`` tokens and renders with a reference template, so compare *shapes* (does an
edit call keep the stable prefix? does the wrong order lose more?), not exact counts.

Run:
    OPENAI_BASE_URL=http://localhost:11434/v1 .venv/bin/python bench/provider_check_openai.py \\
        --model qwen2.5:7b [--turns 6] [--edit-every 2] [--seconds-between 5] \\
        [--granularity exact|openai|16]
    .venv/bin/python bench/provider_check_openai.py --dry-run   # no server: the simulator plays it
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from hango.agent.runtime import Agent, default_stack
from hango.agents import AgentConfig, create_tenant, drop_tenant, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.base import Model, Request, Response, Usage
from hango.models.prefixcache import PrefixRules
from hango.models.simulated import SimulatedModel
from hango.settings import load_settings

TENANT = f"bench-openai-check-{os.getpid()}"
STACKS = {
    "default": default_stack,
    "memory-before-cache": lambda a: default_stack(a).reordered(
        ["skills", "filesystem", "subagents", "memory", "prompt_cache"]),
}
# ~1,600 simulator tokens, over 1,024 real ones: OpenAI caches nothing shorter.
BASE_PROMPT = "You are the operations assistant of a small logistics company.\n" + "".join(
    f"Rule {i:02d}: answer in one short sentence, cite the file you relied on, say when you are "
    f"unsure, and never invent an order number, a price or a delivery date (case {i:02d}).\n"
    for i in range(1, 41))


def memory(version: int) -> str:
    lines = [f"- Fact {i:02d}: the customer in region {i % 7} prefers e-mail." for i in range(30)]
    lines += [f"- Edit {v}: quote prices with VAT (owner note {v})." for v in range(1, version + 1)]
    return "# What I know\n" + "\n".join(lines) + "\n"


class Observed:
    """A :class:`Model` that sends each request to ``model`` and has the simulator price it."""

    def __init__(self, model: Model, sim: SimulatedModel, now: list[float]) -> None:
        self.model, self.sim, self.now = model, sim, now
        self.name, self.provider = model.name, model.provider
        self.calls: list[tuple[Usage, Usage]] = []

    def complete(self, request: Request) -> Response:
        response = self.model.complete(request)
        self.calls.append((response.usage, self.sim.complete(request).usage))
        return response


def cells(u: Usage) -> str:
    read = "?" if u.cache_read_input_tokens is None else str(u.cache_read_input_tokens)
    ratio = "?" if u.read_ratio is None else f"{u.read_ratio:.2f}"
    return f"{u.total_input_tokens:>7} {read:>7} {ratio:>5}"


def rules_from(text: str) -> PrefixRules:
    if text == "openai":
        return PrefixRules("openai")
    if text == "exact":  # llama.cpp and Ollama: no idle eviction, the slot keeps the prompt
        return PrefixRules("exact", idle_seconds=None)
    return PrefixRules(int(text), idle_seconds=None)  # vLLM's block size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5:7b")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--edit-every", type=int, default=2)
    parser.add_argument("--seconds-between", type=float, default=5.0)
    parser.add_argument("--granularity", default="exact",
                        help="the simulator's rules: openai, exact (llama.cpp, Ollama) or a "
                             "block size (vLLM: 16)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no server: a SimulatedModel(caching='automatic') plays it")
    args = parser.parse_args()
    if not args.dry_run and not (os.environ.get("OPENAI_BASE_URL")
                                 or os.environ.get("OPENAI_API_KEY")):
        print("provider_check_openai: set OPENAI_BASE_URL (a local server) or OPENAI_API_KEY "
              "(OpenAI), or use --dry-run", file=sys.stderr)
        return 2
    rules = rules_from(args.granularity)
    settings = load_settings(database_name="hango_bench")
    db = Database(settings)
    create_tenant(db, TENANT)
    print(f"{'stack':<20} {'turn':>4} {'edit':>4} | server {'prompt':>7} {'cached':>7} "
          f"{'ratio':>5} | sim {'prompt':>7} {'cached':>7} {'ratio':>5}")
    try:
        for name, stack in STACKS.items():
            run(db, settings, name, stack, rules, args)
    finally:
        drop_tenant(db, TENANT)
        db.close()
    print(f"\nrules of the prediction: {rules}; the server's tokenizer and chat template differ "
          "from the simulator's, so compare the shape of each column")
    return 0


def run(db: Database, settings: object, name: str, stack: object, rules: PrefixRules,
        args: argparse.Namespace) -> None:
    now = [0.0]
    sim = SimulatedModel(args.model, clock=lambda: now[0], caching="automatic", rules=rules)
    provider: Model
    if args.dry_run:
        provider = SimulatedModel(args.model, clock=lambda: now[0], caching="automatic",
                                  rules=rules)
    else:
        from hango.models.openai import OpenAIModel  # the optional extra

        provider = OpenAIModel(args.model, api_key=os.environ.get("OPENAI_API_KEY") or "unused")
    observed = Observed(provider, sim, now)
    agent_id = name.replace("-", "_")
    save_agent(db, TENANT, agent_id, AgentConfig(system_prompt=BASE_PROMPT))
    backend = PostgresBackend(db, TENANT, agent_id)
    backend.write("/memories/AGENTS.md", memory(0))
    agent = Agent(db, TENANT, agent_id, observed, stack=stack)  # type: ignore[arg-type]
    history: tuple = ()
    for turn in range(args.turns):
        if turn and not args.dry_run:
            time.sleep(args.seconds_between)
        now[0] = turn * args.seconds_between
        edited = bool(turn) and turn % args.edit_every == 0
        if edited:
            backend.write("/memories/AGENTS.md", memory(turn // args.edit_every))
        done = len(observed.calls)
        result = agent.run(f"Turn {turn}: in one short sentence and without tools, what is "
                           f"the status of order {1000 + turn}?", history=history)
        history = tuple(result.messages)
        if result.status == "failed":
            print(f"{name:<20} {turn:>4} stopped: {result.warnings[-1]}")
            return
        for real, predicted in observed.calls[done:]:
            print(f"{name:<20} {turn:>4} {'yes' if edited else '':>4} |        {cells(real)} "
                  f"|     {cells(predicted)}")


if __name__ == "__main__":
    raise SystemExit(main())
