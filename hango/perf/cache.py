"""What the hooks of an agent's last runs built, and the parse memo, in a bounded process cache.

At most :data:`DEFAULT_AGENTS` (128) agents, least recently used first out; each holds at most
:data:`BUILDS_PER_AGENT` builds (one per hook and configuration) and its own parse memo (no
process-wide memo that a 10,000-skill agent, or many agents, would thrash). Thread-safe: a
workshop server runs many runs at once.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hango.agent.hooks import Event, RunContext, log
from hango.agent_config import AgentConfig
from hango.fs.files import FileData, Read

BUILDS_PER_AGENT = 4
DEFAULT_AGENTS = 128
T = TypeVar("T")


@dataclass(frozen=True)
class Built:
    """What one ``build`` added to a run at one change counter, replayable into any later run."""

    counter: int
    state: dict[str, Any]  # the hook's state, field by field (copied on the way in and out)
    warnings: tuple[str, ...]
    events: tuple[Event, ...]
    published: tuple[tuple[str, Any], ...]  # ctx.attributes it set or changed, by name
    # the rows each read gave the build, kept for the reads a delta can follow (the skills
    # scan; None for the others): hango.perf.gated.delta_of
    kept: tuple[tuple[FileData, ...] | None, ...] = ()


def _fields(state: Any) -> dict[str, Any]:
    """A state dataclass field by field, each container copied one level deep."""
    return {f.name: copy.copy(getattr(state, f.name)) for f in dataclasses.fields(state)}


class Recording:
    """What a run holds before a build, so that :meth:`built` can say what the build added."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.warnings, self.events = len(ctx.warnings), len(ctx.events)
        self.before = {name: copy.copy(value) for name, value in ctx.attributes.items()}

    def built(self, counter: int, state: Any) -> Built:
        ctx = self.ctx
        published = tuple((name, copy.copy(value)) for name, value in ctx.attributes.items()
                          if name not in self.before or self.before[name] != value)
        return Built(counter, _fields(state), tuple(ctx.warnings[self.warnings:]),
                     tuple(ctx.events[self.events:]), published)


def replay(ctx: RunContext, state: Any, built: Built) -> None:
    """Put a build's state, warnings, events and published figures into this run."""
    for name, value in built.state.items():
        setattr(state, name, copy.copy(value))
    for message in built.warnings:
        ctx.warnings.append(message)
        log.warning("%s", message)
    for event in built.events:
        ctx.event(event.name, **event.attributes)
    for name, value in built.published:
        ctx.attributes[name] = copy.copy(value)


class ParseMemo(Generic[T]):
    """A parse function remembered by its input, for one build: ``last`` is what the previous
    build parsed, ``now`` what this one did (the next build's ``last``: a memo bounded by one
    build's inputs). ``parsed`` counts the calls that reached the wrapped function."""

    def __init__(self, parse: Callable[[str], T], last: dict[str, T]) -> None:
        self.parse = parse
        self.last = last
        self.now: dict[str, T] = {}
        self.parsed = 0

    def __call__(self, text: str) -> T:
        hit = self.now.get(text)
        if hit is None:
            hit = self.last.get(text)
            if hit is None:
                hit, self.parsed = self.parse(text), self.parsed + 1
            self.now[text] = hit
        return hit


@dataclass(frozen=True)
class Planned:
    """One hook's reads in the agent's last run, and the counter its build is cached at: what
    the next run's first round trip sends, gated on that counter, beside the config."""

    key: Hashable  # the build's key (hook, parameters, config, allowlist, reads)
    reads: tuple[Read, ...]
    counter: int


@dataclass
class AgentEntry:
    builds: OrderedDict[Hashable, Built] = field(default_factory=OrderedDict)
    memos: dict[str, dict[str, Any]] = field(default_factory=dict)  # by hook: input -> parse
    plan: tuple[Planned, ...] = ()  # the last run's reads, hook by hook
    # the last config read: its row's text and the reserved_writes default -> the parsed config,
    # and that config's JSON (the builds' key holds it)
    config: tuple[tuple[str, str, str], AgentConfig, str] | None = None


class BuildCache:
    """The process's bounded LRU of agents."""

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

    def get(self, entry: AgentEntry, key: Hashable) -> Built | None:
        with self._lock:
            return entry.builds.get(key)

    def remember(self, entry: AgentEntry, key: Hashable, built: Built) -> None:
        with self._lock:
            entry.builds[key] = built
            entry.builds.move_to_end(key)
            while len(entry.builds) > BUILDS_PER_AGENT:
                entry.builds.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._agents.clear()


CACHE = BuildCache()
