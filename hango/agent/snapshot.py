"""What ``before_run`` read last time, reused while the agent's change counter has not moved.

Memory and skills are files, re-read at the start of every run: an edit made between two runs is
in the next run's prompt. Reading and parsing them every time is what made a run's start cost
ten round trips. Instead, every write of a file under ``/memories/`` or ``/skills/`` (through any
door, plain SQL included) gives the agent's row of ``agent_changes`` a new counter value, in the
same transaction: a trigger in ``schema.sql`` does it, not application code. So ``before_run``:

1. sends ONE pipelined round trip: the tenant, and each read *gated in SQL* on the counter its
   cached result was read at (an unchanged read returns only the counter);
2. unchanged: replays the cached result (state, warnings, events, published figures) as if it
   had just been parsed; changed: the middleware parses the rows and stores what it built.

The first middleware of a run (skills) prefetches every read this agent made in its recent runs
(memory's too), so the second one (memory) finds its rows already there: one round trip per
run. A read is keyed by everything its result depends on (sources, caps, allowlist), so a
config change is a different key, never a stale hit.

Bounded: at most :data:`DEFAULT_AGENTS` (128) agents (least recently used first out), each holding
at most :data:`READS_PER_AGENT` results and its own parse memo (no process-wide memo that a
10,000-skill agent, or many agents, would thrash).
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from hango.agent.hooks import Event, RunContext, StateKey, log

if TYPE_CHECKING:
    from hango.fs.backend import FileData, Gated, PostgresBackend

READS_PER_AGENT = 4
DEFAULT_AGENTS = 128

@dataclass(frozen=True)
class Read:
    """One read of ``before_run`` and, in ``salt``, whatever else its parsed result depends on.

    ``files``: :meth:`~hango.fs.backend.PostgresBackend.read_many` of ``sources`` within
    ``limit`` bytes. ``heads``: :meth:`~hango.fs.backend.PostgresBackend.heads` of every
    ``name`` under ``sources``."""

    kind: Literal["files", "heads"]
    sources: tuple[str, ...]
    limit: int
    name: str = ""
    max_per_dir: int | None = None
    cut_after: tuple[bytes, ...] = ()
    salt: Hashable = ()

    def gated(self, backend: PostgresBackend, known: int | None) -> Gated:
        if self.kind == "files":
            return backend.gated_read_many(self.sources, self.limit, known)
        return backend.gated_heads(self.sources, self.name, self.limit, known,
                                   self.max_per_dir, self.cut_after)

    def plain(self, backend: Any) -> list[FileData]:
        if self.kind == "files":
            return list(backend.read_many(self.sources, self.limit))
        return list(backend.heads(self.sources, self.name, self.limit,
                                  max_per_dir=self.max_per_dir, cut_after=self.cut_after))


@dataclass(frozen=True)
class Built:
    """A middleware's result for one read at one counter, replayable into any later run."""

    counter: int
    value: Any  # the middleware's own (treated as immutable once stored)
    warnings: tuple[str, ...]
    events: tuple[Event, ...]
    published: tuple[tuple[str, Any], ...]  # ctx.attributes it set or changed, by name


@dataclass
class AgentEntry:
    reads: OrderedDict[Read, Built | None] = field(default_factory=OrderedDict)
    memo: dict[str, Any] = field(default_factory=dict)  # the skills parse memo, path -> result


class SnapshotCache:
    """The process's bounded LRU of agents. Thread-safe: a workshop server runs many runs."""

    def __init__(self, max_agents: int = DEFAULT_AGENTS) -> None:
        self.max_agents = max_agents
        self._agents: OrderedDict[Hashable, AgentEntry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._agents)

    def entry(self, key: Hashable) -> AgentEntry:
        with self._lock:
            found = self._agents.get(key)
            if found is None:
                found = self._agents[key] = AgentEntry()
                while len(self._agents) > self.max_agents:
                    self._agents.popitem(last=False)
            else:
                self._agents.move_to_end(key)
            return found

    def remember(self, entry: AgentEntry, read: Read, built: Built | None) -> None:
        with self._lock:
            entry.reads[read] = built
            entry.reads.move_to_end(read)
            while len(entry.reads) > READS_PER_AGENT:
                entry.reads.popitem(last=False)

    def recent(self, entry: AgentEntry) -> list[tuple[Read, Built | None]]:
        with self._lock:
            return list(entry.reads.items())

    def clear(self) -> None:
        with self._lock:
            self._agents.clear()


CACHE = SnapshotCache()


@dataclass
class _RunReads:
    """This run's fetched reads: (counter, rows or None when unchanged, the Built it gated on)."""

    fetched: dict[Read, tuple[int, list[FileData] | None, Built | None]] = field(
        default_factory=dict)


_RUN: StateKey[_RunReads] = StateKey("snapshot", _RunReads)


@dataclass
class Lookup:
    """What a middleware gets: ``built`` to replay, or ``rows`` to parse and then :meth:`store`.

    ``memo`` is the agent's own parse memo from its last parse (empty without a cache)."""

    rows: list[FileData]
    built: Built | None
    ctx: RunContext
    marks: tuple[int, int, dict[str, Any]]
    counter: int | None = None  # None: nothing to store (unchanged, or no cache)
    keep: Callable[[Built], None] = lambda built: None
    memo: dict[str, Any] = field(default_factory=dict)
    keep_memo: Callable[[dict[str, Any]], None] = lambda memo: None

    def store(self, value: Any, memo: dict[str, Any] | None = None) -> None:
        """Keep ``value`` with what the parse added to the run: warnings, events, figures."""
        if self.counter is None:
            return
        ctx, (nw, ne, before) = self.ctx, self.marks
        published = tuple((name, copy.copy(value)) for name, value in ctx.attributes.items()
                          if name not in before or before[name] != value)
        self.keep(Built(self.counter, value, tuple(ctx.warnings[nw:]), tuple(ctx.events[ne:]),
                        published))
        if memo is not None:
            self.keep_memo(memo)


def _published(ctx: RunContext) -> dict[str, Any]:
    """What the run's features have published so far (``ctx.attributes``), by name: a result
    keeps only the names its own build set, so replaying it never overwrites another's."""
    return {name: copy.copy(value) for name, value in ctx.attributes.items()}


def replay(ctx: RunContext, built: Built) -> None:
    """Put a cached result's warnings, events and published figures into this run."""
    for message in built.warnings:
        ctx.warnings.append(message)
        log.warning("%s", message)
    for event in built.events:
        ctx.event(event.name, **event.attributes)
    for name, value in built.published:
        ctx.attributes[name] = copy.copy(value)


def lookup(ctx: RunContext, read: Read, cache: SnapshotCache | None = None) -> Lookup:
    """This run's rows for ``read``, or the result built from them when nothing has changed."""
    cache = cache or CACHE
    marks = (len(ctx.warnings), len(ctx.events), _published(ctx))
    from hango.db import Database
    from hango.fs.backend import PostgresBackend

    backend = ctx.backend
    if not isinstance(backend, PostgresBackend) or not isinstance(backend.db, Database):
        return Lookup(read.plain(backend), None, ctx, marks)  # read every run, cache nothing
    entry = cache.entry((backend.db.app_conninfo, ctx.tenant_id, ctx.agent_id))
    run = ctx.state(_RUN)
    if read not in run.fetched:
        # Prefetch: this read, and every other read of this agent's recent runs not yet fetched.
        wanted: dict[Read, Built | None] = {read: None}
        for other, built in cache.recent(entry):
            if other not in run.fetched:
                wanted[other] = built
        reads = list(wanted)
        known = [None if b is None else b.counter for b in wanted.values()]
        results = backend.read_if_changed(
            [r.gated(backend, k) for r, k in zip(reads, known, strict=True)])
        for r, (counter, rows) in zip(reads, results, strict=True):
            run.fetched[r] = (counter, rows, wanted[r])
    counter, rows, built = run.fetched[read]
    if rows is None:
        assert built is not None  # the database skipped the read: the counter is built's
        cache.remember(entry, read, built)
        return Lookup([], built, ctx, marks)
    cache.remember(entry, read, None)
    return Lookup(rows, None, ctx, marks, counter, lambda b: cache.remember(entry, read, b),
                  entry.memo, lambda memo: setattr(entry, "memo", memo))
