"""One hierarchy for the errors a caller can act on, each with the HTTP status that says it.

Every error hango raises on purpose (a bad path, a reserved prefix, a missing file, a lost race,
a cap, a quota, an edit that does not apply, a proposal that cannot be decided, the database
being away) subclasses :class:`HangoError` and names its ``status``. The storage's errors are
defined below (``hango.fs.backend`` re-exports them); the others stay where their concept lives
(``hango.fs.path``, ``hango.fs.listing``, ``hango.agent.proposals``, ``hango.agent.runs``,
``hango.agent.yaml_slice``, ``hango.db``). Each also keeps its standard base (``ValueError``,
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


# --- the storage's errors (hango.fs.backend) ------------------------------------------------------


class FileNotFound(HangoError, LookupError):
    status: ClassVar[int] = 404

    def __init__(self, path: str) -> None:
        super().__init__(f"no such file: {path}")
        self.path = path


class VersionConflict(HangoError, RuntimeError):
    """``if_version`` did not match: someone else wrote the file first. Nothing was written."""

    status: ClassVar[int] = 412

    def __init__(self, path: str, expected: int, actual: int | None) -> None:
        now = "it does not exist" if actual is None else f"it is at version {actual}"
        super().__init__(f"{path}: expected version {expected}, but {now}; nothing was written")
        self.path, self.expected, self.actual = path, expected, actual

    def detail(self) -> str:
        if self.expected == 0 and self.actual is not None:
            return (f"{self.path} already exists (version {self.actual}) and the write was "
                    "create-only; nothing was written")
        return str(self)

    def headers(self) -> dict[str, str]:
        return {} if self.actual is None else {"ETag": f'"{self.actual}"'}

    def may_hide_agent(self) -> bool:
        return self.actual is None  # "it does not exist" may mean: no such agent


class EditError(HangoError, ValueError):
    """The text to replace is missing or ambiguous. Nothing was written."""

    status: ClassVar[int] = 409


class NotText(HangoError, ValueError):
    """File contents are UTF-8 text."""

    status: ClassVar[int] = 409


class InvalidText(HangoError, ValueError):
    """Content a write would store is not text: U+0000 (NUL), or a lone surrogate, which has no
    UTF-8 form. Nothing was written. (POSIX: the lines of a text file hold no NUL.)"""

    status: ClassVar[int] = 422


class FileTooLarge(HangoError, ValueError):
    """A file would be (or is) larger than ``HANGO_MAX_FILE_BYTES``. Nothing was written.

    Raised *before* the too-large content is built: a write compares the content's size, an
    edit counts the occurrences and computes the result's size first. A read of a file that
    was stored before the cap (or under a larger one) raises it too, after at most the cap's
    bytes have left the database (the files API answers that read 409, not 413).
    """

    status: ClassVar[int] = 413

    def __init__(self, path: str, size: int, cap: int, *, at_least: bool = False,
                 stored: bool = False) -> None:
        what = (f"is {'at least ' if at_least else ''}{size} bytes" if stored else
                f"would be {'at least ' if at_least else ''}{size} bytes")
        tail = ("it was stored before the cap; read its head with a limit, or replace or delete "
                "it" if stored else "nothing was written")
        super().__init__(f"{path}: the file {what}, more than HANGO_MAX_FILE_BYTES "
                         f"({cap} bytes); {tail}")
        self.path, self.size, self.cap = path, size, cap


class PathConflict(HangoError, ValueError):
    """A file and a directory may not share a name (``/notes`` and ``/notes/x``).

    The database refuses it (a trigger in ``schema/20-integrity.sql``, serialised per first segment, so two
    racing writers cannot both win); ``other`` is the existing path it clashes with.
    """

    status: ClassVar[int] = 409

    def __init__(self, message: str, path: str, other: str) -> None:
        super().__init__(message)
        self.path, self.other = path, other


class QuotaExceeded(HangoError, RuntimeError):
    """The write would take the tenant over ``HANGO_TENANT_MAX_FILES`` or
    ``HANGO_TENANT_MAX_BYTES`` (``quota`` names which). Nothing was written. The database
    enforces it (``tenant_usage`` in ``schema/20-integrity.sql``), so concurrent writers cannot overshoot."""

    status: ClassVar[int] = 413

    def __init__(self, message: str, quota: str) -> None:
        super().__init__(message)
        self.quota = quota


class NoSuchVersion(FileNotFound):
    """A version a file never had (or, outside /memories/ and /skills/, one not kept)."""

    def __init__(self, path: str, version: int, why: str) -> None:
        HangoError.__init__(self, f"{path} has no version {version}: {why}")
        self.path, self.version = path, version


class VersionPruned(HangoError, LookupError):
    """A version of a file under /memories/ or /skills/ that is no longer kept: only the newest
    ``HANGO_HISTORY_MAX_VERSIONS`` earlier versions are."""

    status: ClassVar[int] = 410

    def __init__(self, path: str, version: int, oldest: int | None, kept: int) -> None:
        since = f"the oldest kept is {oldest}" if oldest is not None else "none is kept"
        super().__init__(f"version {version} of {path} is no longer kept ({since}): "
                         f"HANGO_HISTORY_MAX_VERSIONS={kept} keeps that many earlier versions "
                         "of a file under /memories/ and /skills/")
        self.path, self.version = path, version
