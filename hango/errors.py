"""One hierarchy for the errors a caller can act on, each with the HTTP status that says it.

Every error hango raises on purpose (a bad path, a reserved prefix, a missing file, a lost race,
a cap, a quota, an edit that does not apply, a proposal that cannot be decided, the database
being away) subclasses :class:`HangoError` and names its ``status``. The classes stay where
their concept lives (``hango.fs.path``, ``hango.fs.backend``, ``hango.agent.proposals``,
``hango.agent.runs``, ``hango.db``); each also keeps its standard base (``ValueError``,
``LookupError``...), so ``except ValueError`` still catches a bad path. The files API turns
any of them into its status and ``{"detail": ...}`` in one place (``hango.api.deps``), instead
of a ladder of ``except`` clauses in every route.

This module imports nothing from hango: every layer may import it.
"""

from __future__ import annotations

from typing import Any, ClassVar


class HangoError(Exception):
    """An error with an HTTP status and a message that names what was wrong."""

    status: ClassVar[int] = 500

    def detail(self) -> str:
        """The message an HTTP caller reads (by default the exception's own)."""
        return str(self)

    def headers(self) -> dict[str, str]:
        """Response headers that go with the error (an ETag, a Retry-After)."""
        return {}

    def body(self) -> dict[str, Any]:
        """The JSON error body: ``{"detail": ...}``, plus what a client needs to retry."""
        return {"detail": self.detail()}

    def may_hide_agent(self) -> bool:
        """Whether "not found" or "forbidden" might really mean "no such agent here": the API
        then answers 404 for the agent instead (a caller learns nothing about other tenants)."""
        return self.status in (403, 404)
