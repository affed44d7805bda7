"""The one filesystem: rows of ``agent_files`` in one namespace ``{tenant_id, agent_id}``.

The backend is policy-free about *who* writes (that is :func:`hango.fs.path.check_write`, called
by both doors) but strict about *what* a path is: every method cleans its path first.
Each file carries a ``version`` for optimistic concurrency: pass ``if_version`` and a write that
lost a race is refused with :class:`VersionConflict` instead of silently overwriting.

Nothing here is unbounded (issue 10): no file exceeds ``HANGO_MAX_FILE_BYTES``
(:class:`FileTooLarge`, checked before the content is built); listings come in keyset pages
(:class:`Page`); and the database itself refuses a write that would take a tenant over its
quota (:class:`QuotaExceeded`) or give a file and a directory one name (:class:`PathConflict`).
:class:`PostgresBackend` is the one entry; its write path is :mod:`hango.fs.writes`, its listings
:mod:`hango.fs.listing`, its gated reads :mod:`hango.fs.gated`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from hango.db import Database
from hango.errors import (
    EditError,
    FileNotFound,
    FileTooLarge,
    NotText,
    PathConflict,
    QuotaExceeded,
    VersionConflict,
)
from hango.fs import gated, listing, writes
from hango.fs.gated import SKILL_HEAD, Gated, like_escape
from hango.fs.listing import Entry, InvalidCursor, Page
from hango.fs.path import clean
from hango.settings import Settings, get_settings

# The storage's errors (defined in hango.errors), listings and gated reads are re-exported here:
# ``from hango.fs.backend import FileNotFound, Page`` keeps working.
__all__ = [
    "SKILL_HEAD", "Backend", "EditError", "Entry", "FileData", "FileNotFound", "FileTooLarge",
    "Gated", "InvalidCursor", "NotText", "Page", "PathConflict", "PostgresBackend",
    "QuotaExceeded", "VersionConflict", "decode_head", "like_escape",
]


@dataclass(frozen=True)
class FileData:
    path: str
    content: str
    version: int
    size: int  # the whole file's size in bytes, even when ``content`` is a truncated head

    @property
    def truncated(self) -> bool:
        return len(self.content.encode("utf-8")) < self.size


def decode_head(data: bytes, size: int | None = None) -> str:
    """Decode UTF-8 bytes that may end in the middle of a character (a byte-limited read).

    With ``size`` (the file's whole length), a cut character is dropped only if the read was cut
    (``len(data) < size``): a whole file ending mid-character is not UTF-8 text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        cut = size is None or len(data) < size
        if cut and exc.start >= len(data) - 3 and exc.reason in ("unexpected end of data",):
            return data[: exc.start].decode("utf-8")
        raise NotText(f"not UTF-8 text at byte {exc.start}") from None


def _decode_lenient(data: bytes, size: int | None = None) -> str:
    """:func:`decode_head`, but bytes that are not UTF-8 become lone surrogates instead of
    failing the whole batch: one non-text SKILL.md must not fail the skills scan (and a run), and
    the frontmatter reader refuses such a head by itself ("not valid UTF-8", with its line)."""
    try:
        return decode_head(data, size)
    except NotText:
        return data.decode("utf-8", "surrogateescape")


class Backend(Protocol):
    """What memory, skills, the tools and the files API need from a filesystem."""

    tenant_id: str
    agent_id: str

    def read(self, path: str, limit: int | None = None) -> FileData: ...
    def read_many(self, paths: Sequence[str], limit: int) -> list[FileData]: ...
    def heads(self, directories: Sequence[str], name: str, limit: int,
              max_per_dir: int | None = None, cut_after: Sequence[bytes] = ()) -> list[FileData]:
        ...
    def write(self, path: str, content: str, if_version: int | None = None) -> int: ...
    def edit(
        self, path: str, old: str, new: str, *, replace_all: bool = False,
        if_version: int | None = None,
    ) -> int: ...
    def delete(self, path: str, if_version: int | None = None) -> None: ...
    def ls(self, path: str = "/", limit: int | None = None,
           cursor: str | None = None) -> Page[Entry]: ...
    def glob(self, pattern: str, limit: int | None = None,
             cursor: str | None = None) -> Page[str]: ...


class PostgresBackend:
    """:class:`Backend` over ``agent_files``; every statement runs with the tenant set (RLS)."""

    def __init__(self, db: Database, tenant_id: str, agent_id: str,
                 settings: Settings | None = None,
                 conn: psycopg.Connection[Any] | None = None, *,
                 author: str | None = None) -> None:
        self.db = db
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.settings: Settings = settings or getattr(db, "settings", None) or get_settings()
        self.conn = conn  # the caller's transaction it works in (within), or None: its own
        self.author = author  # who writes through it ("owner:<token fingerprint>"), kept per version
        self.bytes_read = 0  # content bytes transferred from the database, for the caps' tests

    def within(self, conn: psycopg.Connection[Any]) -> PostgresBackend:
        """This backend inside the caller's transaction ``conn`` (one of this tenant): each call
        is a savepoint in it, so a refused write leaves the transaction usable, and what it
        writes commits with whatever else the caller does there, or not at all."""
        return PostgresBackend(self.db, self.tenant_id, self.agent_id, self.settings, conn,
                               author=self.author)

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A transaction of this tenant, or a savepoint in the caller's (:meth:`within`)."""
        if self.conn is None:
            with self.db.tenant(self.tenant_id) as conn:
                yield conn
        else:
            with self.conn.transaction():
                yield self.conn

    @property
    def max_file_bytes(self) -> int:
        return self.settings.max_file_bytes

    def page_size(self, limit: int | None) -> int:
        """``limit``, or the default page size, never above ``HANGO_LIST_PAGE_MAX``."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise ValueError(f"limit must be a positive whole number, got {limit!r}")
        ceiling = self.settings.list_page_max
        return min(limit if limit is not None else self.settings.list_page_default, ceiling)

    def _ns(self) -> dict[str, Any]:
        return {"t": self.tenant_id, "a": self.agent_id}

    def _rows(self, rows: list[tuple[str, bytes, int, int]], *,
              lenient: bool = False) -> list[FileData]:
        self.bytes_read += sum(len(r[1]) for r in rows)
        decode = _decode_lenient if lenient else decode_head
        return [FileData(path, decode(bytes(data), size), version, size)
                for path, data, version, size in rows]

    def read(self, path: str, limit: int | None = None) -> FileData:
        """Read a file; with ``limit``, only its first ``limit`` bytes leave the database.

        Without ``limit`` the whole file, which is at most ``HANGO_MAX_FILE_BYTES``: a file
        stored before the cap (or under a larger one) raises :class:`FileTooLarge`, and at most
        the cap's bytes are transferred to find that out.
        """
        path = clean(path)
        cap = self.max_file_bytes
        found = self.read_many([path], limit if limit is not None else cap)
        if not found:
            raise FileNotFound(path)
        if limit is None and found[0].size > cap:
            raise FileTooLarge(path, found[0].size, cap, stored=True)
        return found[0]

    def read_many(self, paths: Sequence[str], limit: int) -> list[FileData]:
        """Several files in one query, sharing ``limit`` bytes *in SQL*; missing ones absent.

        Files come back in the order given; each gets at most what the earlier ones left of
        ``limit``, so the whole query never transfers more than ``limit`` bytes of content.
        """
        query, params = gated.read_many_query(self, paths, limit)
        with self.transaction() as conn:
            rows = conn.execute(query, params, binary=True).fetchall()
        return self._rows(rows)

    def heads(self, directories: Sequence[str], name: str, limit: int,
              max_per_dir: int | None = None, cut_after: Sequence[bytes] = ()) -> list[FileData]:
        """Every ``{dir}**/{name}`` at any depth, only the first ``limit`` bytes of each.

        One query, ordered by path. With ``max_per_dir``, at most that many files are read
        under each directory (the first ones by path), so the scan itself is bounded. With
        ``cut_after``, a head ends after the first of those byte strings it contains (the skills
        scan passes the closing ``---`` fence, so only frontmatter leaves the database). The suffix
        is a literal in the SQL text, so for ``SKILL.md`` the planner can always prove, and use,
        the partial index that holds only ``SKILL.md`` rows.
        """
        query, params = gated.heads_query(self, directories, name, limit, max_per_dir,
                                          cut_after)
        with self.transaction() as conn:
            rows = conn.execute(query, params, binary=True).fetchall()
        return self._rows(rows, lenient=True)

    # --- the write path, one transaction each: hango.fs.writes ---------------------------------

    def write(self, path: str, content: str, if_version: int | None = None) -> int:
        """Create or replace a file; return its new version (:func:`hango.fs.writes.write`)."""
        return writes.write(self, path, content, if_version)

    def edit(self, path: str, old: str, new: str, *, replace_all: bool = False,
             if_version: int | None = None) -> int:
        """Replace the exact text ``old`` with ``new``, which must occur once unless
        ``replace_all``; return the new version (:func:`hango.fs.writes.edit`)."""
        return writes.edit(self, path, old, new, replace_all=replace_all, if_version=if_version)

    def delete(self, path: str, if_version: int | None = None) -> None:
        """Delete a file (:func:`hango.fs.writes.delete`)."""
        writes.delete(self, path, if_version)

    def ls(self, path: str = "/", limit: int | None = None,
           cursor: str | None = None) -> Page[Entry]:
        """One page of a directory's direct children, in byte order of their path
        (:func:`hango.fs.listing.ls`: a keyset skip scan, ``n + 1`` index probes a page)."""
        return listing.ls(self, path, limit, cursor)

    def glob(self, pattern: str, limit: int | None = None,
             cursor: str | None = None) -> Page[str]:
        """One page of the paths matching ``pattern`` (``/skills/**/SKILL.md``), in byte order."""
        page = self.glob_entries(pattern, limit, cursor)
        return Page([e.path for e in page], page.next_cursor)

    def glob_entries(self, pattern: str, limit: int | None = None,
                     cursor: str | None = None) -> Page[Entry]:
        """:meth:`glob` with each file's size and version (:func:`hango.fs.listing.glob_entries`:
        one range scan, at most ``HANGO_GLOB_SCAN_MAX`` paths examined a page)."""
        return listing.glob_entries(self, pattern, limit, cursor)

    # --- before_run's reads, gated by the agent's change counter (issue 14): hango.fs.gated --

    def gated_read_many(self, paths: Sequence[str], limit: int, known: int | None) -> Gated:
        """:meth:`read_many` as one read of :meth:`read_if_changed`."""
        return gated.gated_read_many(self, paths, limit, known)

    def gated_heads(self, directories: Sequence[str], name: str, limit: int, known: int | None,
                    max_per_dir: int | None = None, cut_after: Sequence[bytes] = ()) -> Gated:
        """:meth:`heads` as one read of :meth:`read_if_changed` (the skills cut: its column)."""
        return gated.gated_heads(self, directories, name, limit, known, max_per_dir, cut_after)

    def skill_heads(self, directories: Sequence[str], max_per_dir: int) -> list[FileData]:
        """:meth:`heads` of every ``SKILL.md`` with the skills cut, from ``skill_head``."""
        return gated.skill_heads(self, directories, max_per_dir)

    def gated_skill_heads(self, directories: Sequence[str], max_per_dir: int,
                          known: int | None) -> Gated:
        """:meth:`skill_heads` as one read of :meth:`read_if_changed`."""
        return gated.gated_skill_heads(self, directories, max_per_dir, known)

    def read_if_changed(self, reads: Sequence[Gated]) -> list[tuple[int, list[FileData] | None]]:
        """For each read: the agent's change counter, and its rows unless ``known`` is that
        counter; one protocol round trip (:func:`hango.fs.gated.read_if_changed`)."""
        return gated.read_if_changed(self, reads)
