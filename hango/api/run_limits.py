"""Runs share a server fairly: threads of their own, and a limit per tenant.

A run waits on its model for seconds; a file request takes milliseconds. When runs were plain
``def`` routes they ran on the worker threads every sync route shares (anyio's default limiter,
40 threads), so 80 slow runs of one tenant held all of them and another tenant's PUT waited for
a run to end. Here a run (or a resume):

- is counted against its tenant first: at most ``HANGO_TENANT_MAX_RUNS`` in progress at once,
  one more is ``429`` with ``Retry-After``, refused before it waits for anything;
- then takes a thread from a limiter of its own (``HANGO_RUN_THREADS``), so the threads of the
  file routes stay free whatever the runs do. When all of them are busy, a run waits its turn.

Both bounds hold **per server process**: ``hango serve --workers N`` allows a tenant up to N
times ``HANGO_TENANT_MAX_RUNS``. Nothing is shared between processes, so nothing is left behind
when one dies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import ClassVar, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter

from hango.errors import HangoError

T = TypeVar("T")
RETRY_AFTER_SECONDS = 1


class TooManyRuns(HangoError, RuntimeError):
    """The tenant already has its limit of runs in progress in this process; nothing was run."""

    status: ClassVar[int] = 429

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER_SECONDS)}


class RunLimits:
    """The run threads of one server process and the count of each tenant's runs in them."""

    def __init__(self, threads: int, per_tenant: int) -> None:
        self.limiter = CapacityLimiter(threads)
        self.per_tenant = per_tenant
        self._running: dict[str, int] = {}
        self._lock = threading.Lock()

    def running(self, tenant_id: str) -> int:
        with self._lock:
            return self._running.get(tenant_id, 0)

    async def run(self, tenant_id: str, fn: Callable[[], T]) -> T:
        """``fn()`` on a run thread, counted as one of the tenant's runs while it lasts."""
        with self._lock:
            now = self._running.get(tenant_id, 0)
            if now >= self.per_tenant:
                raise TooManyRuns(
                    f"this tenant already has {now} runs in progress (HANGO_TENANT_MAX_RUNS="
                    f"{self.per_tenant} per server process); nothing was run: try again when "
                    "one has ended")
            self._running[tenant_id] = now + 1
        try:
            # Not abandoned on cancel: the count drops only when the thread is done.
            return await anyio.to_thread.run_sync(fn, limiter=self.limiter)
        finally:
            with self._lock:
                left = self._running[tenant_id] - 1
                if left:
                    self._running[tenant_id] = left
                else:
                    del self._running[tenant_id]
