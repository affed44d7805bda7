"""An :class:`~hango.agent.runtime.Agent` on the cached stack whose config costs no round trip.

The plain ``Agent.load_config`` is a transaction of its own (four waits for the server), then
``before_run`` makes one more. :class:`CachedAgent` sends the config's query and the hooks'
reads of the agent's last run, gated on the counters their builds are cached at, in ONE round
trip; the stack uses those reads when this run plans the same ones on the same builds (nothing
in the config changed them), else it makes its own round trip. Every run still reads the config
and the change counter from the database: a write through any door is seen by the next run.
The parsed config is kept by its row's text, so an unchanged config is parsed once.
"""

from __future__ import annotations

import threading
from typing import Any

from hango.agent.runtime import Agent, StackBuilder
from hango.agent.stack import Stack
from hango.agent_config import AgentConfig
from hango.agents import RUN_CONFIG_QUERY, run_config
from hango.db import Database
from hango.perf.cache import CACHE, BuildCache
from hango.perf.gated import gated, statement
from hango.perf.stack import CachedStack, Prefetched, cached_stack, entry_key, known
from hango.perf.trip import one_trip


class NoAgent(LookupError):
    """The tenant has no such agent (the config's query found no row)."""


def prefetch(db: Database, tenant_id: str, agent_id: str, reserved_writes: str,
             cache: BuildCache = CACHE) -> tuple[AgentConfig, Prefetched] | None:
    """The agent's run config (as :meth:`Agent.load_config` makes it), and its last run's reads,
    in one round trip; ``None`` when the tenant has no such agent."""
    entry = cache.entry(entry_key(db, tenant_id, agent_id))
    plan = entry.plan
    ns = {"t": tenant_id, "a": agent_id}
    builds = [cache.get(entry, p.key) for p in plan]
    reads = [gated(r, ns, p.counter, known(b, i)[1] if b is not None and b.counter == p.counter
                   else None)
             for p, b in zip(plan, builds, strict=True) for i, r in enumerate(p.reads)]
    rowsets = one_trip(db, tenant_id, [(RUN_CONFIG_QUERY, ns), *map(statement, reads)])
    if not rowsets[0]:
        return None
    text: tuple[str, str, str] = (rowsets[0][0][0], rowsets[0][0][1], reserved_writes)
    kept = entry.config
    if kept is not None and kept[0] == text:
        config = kept[1]
    else:
        config = run_config(text[0], text[1])
        if config.reserved_writes is None:  # as Agent.load_config: the server's setting
            config = config.model_copy(update={"reserved_writes": reserved_writes})
        entry.config = (text, config, config.model_dump_json())
    return config, Prefetched(plan, reads, rowsets[1:])


class CachedAgent(Agent):
    """``Agent`` on :func:`~hango.perf.stack.cached_stack` (or the given builder of a cached
    stack), its config read in the round trip of ``before_run``'s reads: once the agent has run
    in this process, a run with no tool call is one round trip whatever file changed (two
    after a change of its config: the reads it planned are planned anew)."""

    def __init__(self, *args: Any, stack: StackBuilder | None = None, **kwargs: Any) -> None:
        builder = stack or cached_stack
        super().__init__(*args, stack=lambda agent: self._stack(builder, agent), **kwargs)
        self._local = threading.local()  # the prefetch of this thread's run, until its stack

    def load_config(self) -> AgentConfig:
        if self._config is not None:  # given: used as it is
            return super().load_config()
        found = prefetch(self.db, self.tenant_id, self.agent_id, self.settings.reserved_writes)
        if found is None:
            raise NoAgent(f"no agent {self.agent_id!r} in tenant {self.tenant_id!r}")
        config, self._local.prefetched = found
        return config

    def _stack(self, builder: StackBuilder, agent: Agent) -> Stack:
        stack = builder(agent)
        if agent is self:  # a subagent's stack reads for itself
            prefetched, self._local.prefetched = getattr(self._local, "prefetched", None), None
            if isinstance(stack, CachedStack) and stack.cache is CACHE:
                stack.prefetched = prefetched
        return stack
