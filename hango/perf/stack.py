"""The cached stack: every hook's reads in one gated round trip, each build replayed or recorded.

Its ``before_run`` gathers the ``reads()`` of every :class:`~hango.agent.hooks.Reader` in the
chain and sends them in ONE pipelined round trip, each gated on the change counter its last
build was made at. A hook whose reads are unchanged gets that build replayed (state, warnings,
events, published figures) inside its own span; a hook whose files changed builds from the
rows, and what it built is recorded for the next run. A hook's ``parse``, if it has one, is
memoised by its input. Other hooks run their plain ``before_run``, in chain order. The run's
own reads (``read_file``) go through :class:`~hango.perf.backend.OneTripBackend`; the tools,
the request and the wrapper chains are the plain stack's, with each middleware class's
protocols checked once (:meth:`CachedStack.implements`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hango.agent.hooks import (
    Reader,
    RunContext,
    RunHook,
    StateKey,
)
from hango.agent.stack import Stack, default_stack
from hango.fs.backend import PostgresBackend
from hango.fs.files import FileData, Namespace, Read, read
from hango.perf.backend import OneTripBackend
from hango.perf.cache import CACHE, BuildCache, Built, ParseMemo, Planned, Recording, replay
from hango.perf.gated import Gated, gated, is_skill_head, read_if_changed
from hango.perf.gated import results as gated_results
from hango.telemetry import ATTR_SKILLS_PARSED

if TYPE_CHECKING:
    from hango.agent.stack import AgentLike


@dataclass
class Trace:
    """What the cached stack did in one run: for the parity test and the benches."""

    round_trips: int = 0  # its own: 0 when the reads came with the config (prefetched), one
    # more when a delta fell back to the full scan
    prefetched: bool = False
    replayed: list[str] = field(default_factory=list)  # hook names, in chain order
    built: list[str] = field(default_factory=list)
    # by hook: the files the database sent for its reads (0 when unchanged; after a skills
    # change, only the heads written since)
    received: dict[str, int] = field(default_factory=dict)


TRACE: StateKey[Trace] = StateKey("perf", Trace)


_KNOWN: dict[tuple[type, type], bool] = {}  # (a middleware's class, a protocol): implements it


def _salt(hook: Reader, config: str, ctx: RunContext) -> Hashable:
    """Everything a build depends on besides its rows: the hook's own parameters, the config
    (``config``: its JSON) and the allowlist. A change of any is another key, never a stale
    replay."""
    params = sorted((name, repr(value)) for name, value in vars(hook).items()
                    if not isinstance(value, StateKey) and not callable(value))
    return (type(hook).__qualname__, tuple(params), config, ctx.allowlist)


@dataclass(frozen=True)
class Prefetched:
    """The hooks' reads of the agent's last run, sent gated in the round trip that read the
    config (:class:`~hango.perf.agent.CachedAgent`): used when this run plans the same reads on
    the same builds, else this run makes its own round trip."""

    plan: tuple[Planned, ...]
    reads: list[Gated]
    rowsets: list[list[tuple[Any, ...]]]


def entry_key(db: Any, tenant_id: str, agent_id: str) -> Hashable:
    return (db.app_conninfo, tenant_id, agent_id)


class CachedStack(Stack):
    """A :class:`~hango.agent.stack.Stack` whose ``before_run`` is one round trip and a replay
    (none when its agent read the reads with the config: ``prefetched``)."""

    def __init__(self, middlewares: Sequence[Any], cache: BuildCache | None = None,
                 prefetched: Prefetched | None = None) -> None:
        super().__init__(middlewares)
        self.cache = cache or CACHE
        self.prefetched = prefetched
        self.trace: Trace | None = None  # its last run's

    def implements(self, mw: Any, protocol: type) -> bool:
        """The plain stack's check, known by ``mw``'s class after its first time: a
        ``runtime_checkable`` ``isinstance`` looks up every member at every call (4-17 us each,
        25 a run). A middleware's capabilities are its class's (every hango middleware sets its
        members in its class or its ``__init__``)."""
        key = (type(mw), protocol)
        known = _KNOWN.get(key)
        if known is None:
            known = _KNOWN[key] = isinstance(mw, protocol)
        return known

    def before_run(self, ctx: RunContext) -> None:
        backend = ctx.backend
        if not isinstance(backend, Namespace):  # the caller chose this stack for a database
            raise TypeError(f"the cached stack reads the agent's files from its database; "
                            f"{type(backend).__name__} is not a namespace of one: use the plain "
                            "stack (hango.agent.stack.default_stack)")
        if (isinstance(backend, PostgresBackend) and backend.conn is None
                and not isinstance(backend, OneTripBackend)):
            ctx.backend = OneTripBackend(backend)  # the run's reads (read_file): one trip each
        entry = self.cache.entry(entry_key(backend.db, ctx.tenant_id, ctx.agent_id))
        trace = self.trace = ctx.state(TRACE)
        config = entry.config
        dump = config[2] if config is not None and config[1] is ctx.config else \
            ctx.config.model_dump_json()
        plans: dict[int, tuple[Hashable, list[Read], Built | None]] = {}
        for mw in self.middlewares:
            if self.implements(mw, Reader):
                reads = list(mw.reads(ctx))
                key: Hashable = (_salt(mw, dump, ctx), tuple(reads))
                plans[id(mw)] = (key, reads, self.cache.get(entry, key))
        prefetched, self.prefetched = self.prefetched, None
        if prefetched is not None and [(p.key, p.counter) for p in prefetched.plan] == [
                (key, None if built is None else built.counter)
                for key, _, built in plans.values()]:
            sent = prefetched.reads
            results = gated_results(backend, sent, prefetched.rowsets)
            trace.prefetched = True
        else:
            sent = [gated(r, backend.ns(), *known(built, i))
                    for _, reads, built in plans.values() for i, r in enumerate(reads)]
            results = read_if_changed(backend, sent)
            trace.round_trips += 1
        trace.round_trips += any(len(g.sent) > 1 for g in sent)  # a delta's fall back
        fetched, counted = iter(results), iter(sent)
        plan: list[Planned] = []
        for mw in self.middlewares:
            if not self.implements(mw, RunHook):
                continue
            if not self.implements(mw, Reader):
                mw.before_run(ctx)
                continue
            key, reads, built = plans[id(mw)]
            got = [next(fetched) for _ in reads]
            trace.received[mw.name] = sum(sum(next(counted).sent) for _ in reads)
            started = time.perf_counter()
            with ctx.telemetry.span(mw.span) as span:
                if built is not None and all(rows is None for _, rows in got):
                    replay(ctx, ctx.state(mw.key), built)
                    trace.replayed.append(mw.name)
                    parsed = 0
                else:
                    rows = [found if found is not None else read(ctx.backend, r)
                            for (_, found), r in zip(got, reads, strict=True)]
                    counter = min((c for c, _ in got), default=0)
                    built, parsed = _build(ctx, mw, rows, counter, entry.memos)
                    built = dataclasses.replace(built, kept=tuple(
                        tuple(r) if is_skill_head(d) else None
                        for d, r in zip(reads, rows, strict=True)))
                    self.cache.remember(entry, key, built)
                    trace.built.append(mw.name)
                plan.append(Planned(key, tuple(reads), built.counter))
                mw.report(ctx, span, time.perf_counter() - started)
                if hasattr(mw, "parse"):  # how many inputs the memo did not hold
                    span.set_attribute(ATTR_SKILLS_PARSED, parsed)
        entry.plan = tuple(plan)  # what the agent's next run reads with its config


def known(built: Built | None, i: int) -> tuple[int | None, tuple[FileData, ...] | None]:
    """What the ``i``-th read of a hook is gated on: the counter its cached build was made at,
    and the rows that build kept of it (a delta's base)."""
    if built is None:
        return None, None
    return built.counter, built.kept[i] if i < len(built.kept) else None


def _build(ctx: RunContext, hook: Reader, rows: list[list[FileData]], counter: int,
           memos: dict[str, dict[str, Any]]) -> tuple[Built, int]:
    """Run ``hook.build`` (its ``parse`` memoised) and record what it added to the run."""
    recording = Recording(ctx)
    plain: Callable[[str], Any] | None = getattr(hook, "parse", None)
    if plain is None:
        hook.build(ctx, rows)
        return recording.built(counter, ctx.state(hook.key)), 0
    memo = ParseMemo(plain, memos.get(hook.name, {}))
    hook.parse = memo  # type: ignore[attr-defined]
    try:
        hook.build(ctx, rows)
    finally:
        hook.parse = plain  # type: ignore[attr-defined]
    memos[hook.name] = memo.now
    return recording.built(counter, ctx.state(hook.key)), memo.parsed


def cached_stack(agent: AgentLike) -> CachedStack:
    """:func:`~hango.agent.stack.default_stack`, with a ``before_run`` of one round trip: the
    stack builder ``hango serve``, the runs API, the workshop and the benches pass to ``Agent``."""
    return CachedStack(default_stack(agent).middlewares)


def trace_of(ctx: RunContext) -> Trace:
    """What the cached stack did in the run of ``ctx``."""
    return ctx.state(TRACE)
