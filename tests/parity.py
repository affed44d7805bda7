"""One parity test: the memory and skills tests run on the plain and on the cached stack.

As rasbt/LLMs-from-scratch's ``tests/test_ch04.py`` runs one golden test over its plain and its
cached model, a test module that sets ``stacks = parity.both`` runs each of its tests twice, once
per stack. A test builds its agents with ``stacks.agent(...)`` (or ``sim_agent``) and runs a bare
chain with ``stacks.before_run(ctx, *middlewares)``.

On the cached stack every ``before_run`` runs twice, and the second must be a replay (a cold
cache that never replays would pass a single run): first a run on a context of its own (it
records, or replays what an earlier run recorded), then the test's run, which must replay every
hook that reads the database. Beside them, the plain stack runs on a context of its own, and the
three must agree: the same request bytes (the plain one built by the plain ``Stack``), warnings,
events and published attributes. The cached side's agents are ``CachedAgent``s: their config
comes with the reads of their last run, which the first of the two runs takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from hango.agent.hooks import Reader, RunContext
from hango.agent.runtime import Agent, RunResult
from hango.agent.stack import Stack, default_stack
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel
from hango.perf import CachedAgent, CachedStack, trace_of
from hango.telemetry import Telemetry


def _scratch(ctx: RunContext, fresh_backend: bool) -> RunContext:
    """A context like ``ctx`` (same tenant, agent, config, allowlist), with nothing in it yet and
    telemetry of its own, so that only the test's run reaches the test's spans and metrics."""
    backend = ctx.backend
    if fresh_backend:
        assert isinstance(backend, PostgresBackend)
        backend = PostgresBackend(backend.db, backend.tenant_id, backend.agent_id,
                                  backend.settings)
    return RunContext(ctx.tenant_id, ctx.agent_id, ctx.config, backend, ctx.run_id,
                      ctx.allowlist, Telemetry(), started_by=ctx.started_by)


def seen(stack: Stack, ctx: RunContext) -> tuple[Any, ...]:
    """What a run's start shows: the request it builds, its warnings, events and attributes."""
    request = stack.build_request(ctx, (), stack.tools(ctx), "parity")
    return (request.canonical(), list(ctx.warnings),
            [(e.name, e.attributes) for e in ctx.events], dict(ctx.attributes))


class ParityStack(CachedStack):
    """The cached stack, checked at every ``before_run`` against itself and the plain stack."""

    def before_run(self, ctx: RunContext) -> None:
        plain = _scratch(ctx, fresh_backend=True)
        Stack(self.middlewares).before_run(plain)
        warm = _scratch(ctx, fresh_backend=False)  # bytes it reads count on the test's backend
        super().before_run(warm)
        super().before_run(ctx)
        readers = [mw.name for mw in self.middlewares if isinstance(mw, Reader)]
        assert trace_of(ctx).replayed == readers, (
            f"the second run on the cached stack replayed {trace_of(ctx).replayed}, "
            f"not every hook that reads: {readers}")
        assert seen(Stack(self.middlewares), plain) == seen(self, warm) == seen(self, ctx), (
            "the plain and the cached stack gave different runs")


@dataclass(frozen=True)
class Stacks:
    """One of the two stacks, as a test asks for it."""

    name: str
    make: Callable[[Sequence[Any]], Stack]
    runs: type[Agent] = Agent  # the cached side's reads its config with before_run's reads

    def builder(self, agent: Agent) -> Stack:
        """The stack builder to pass to ``Agent``: the default stack, on this side."""
        return self.make(default_stack(agent).middlewares)

    def wrap(self, builder: Callable[[Agent], Stack]) -> Callable[[Agent], Stack]:
        """A test's own stack builder (another order, fewer middlewares), on this side."""
        return lambda agent: self.make(builder(agent).middlewares)

    def agent(self, *args: Any, stack: Callable[[Agent], Stack] | None = None,
              **kwargs: Any) -> Agent:
        """``Agent(*args, **kwargs)`` on this stack."""
        return self.runs(*args, stack=self.builder if stack is None else self.wrap(stack),
                         **kwargs)

    def before_run(self, ctx: RunContext, *middlewares: Any) -> None:
        """The chain of ``middlewares`` starting a run, as ``Agent.run`` does it."""
        self.make(middlewares).before_run(ctx)

    def run_with(self, db: Database, tenant: str, mw: Any, script: list[Any] | None = None,
                 tel: Telemetry | None = None) -> RunResult:
        """One run of agent a1 with ``mw`` in place of the default stack's middleware of its
        name."""
        stack = lambda a: Stack([m if m.name != mw.name else mw  # noqa: E731
                                 for m in default_stack(a).middlewares])
        return self.agent(db, tenant, "a1", SimulatedModel(policy=script), telemetry=tel,
                          stack=stack).run("hi")


def hango_attributes(span: Any) -> dict[str, Any]:
    """A span's attributes without the Langfuse mirrors every span of a run carries."""
    return {k: v for k, v in (span.attributes or {}).items() if not k.startswith("langfuse.")}


PLAIN = Stacks("plain", Stack)
CACHED = Stacks("cached", ParityStack, CachedAgent)


@pytest.fixture(name="stacks", params=[PLAIN, CACHED], ids=["plain", "cached"])
def both(request: pytest.FixtureRequest) -> Stacks:
    """Every test of the module, once on each stack."""
    stacks: Stacks = request.param
    return stacks
