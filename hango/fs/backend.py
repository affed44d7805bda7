"""The one filesystem: rows of ``agent_files`` in one namespace ``{tenant_id, agent_id}``.

Policy-free about *who* writes (:func:`hango.fs.path.check_write`, called by both doors), strict
about *what* a path is: every method cleans its path first. Each file carries a ``version``
(``if_version``: a lost race is a :class:`VersionConflict`). Nothing is unbounded: the file cap,
keyset pages, and the database's own quota and file-or-directory refusals. Its types are
:mod:`hango.fs.files`, its read queries :mod:`hango.fs.queries`, its write path
:mod:`hango.fs.writes`, its listings :mod:`hango.fs.listing`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
from hango.fs import listing, queries, writes
from hango.fs.files import Backend, Entry, FileData, Namespace, Page, decode_head
from hango.fs.listing import InvalidCursor
from hango.fs.path import clean
from hango.settings import Settings, get_settings

# The storage's errors (defined in hango.errors), file types and listings are re-exported here:
# ``from hango.fs.backend import FileNotFound, Page`` keeps working.
__all__ = [
    "Backend", "EditError", "Entry", "FileData", "FileNotFound", "FileTooLarge",
    "InvalidCursor", "NotText", "Page", "PathConflict", "PostgresBackend",
    "QuotaExceeded", "VersionConflict", "decode_head",
]


class PostgresBackend(Namespace):
    """:class:`Backend` over ``agent_files``; every statement runs with the tenant set (RLS)."""

    def __init__(self, db: Database, tenant_id: str, agent_id: str,
                 settings: Settings | None = None,
                 conn: psycopg.Connection[Any] | None = None, *,
                 author: str | None = None) -> None:
        super().__init__(db, tenant_id, agent_id,
                         settings or getattr(db, "settings", None) or get_settings(), conn,
                         author=author)

    def within(self, conn: psycopg.Connection[Any]) -> PostgresBackend:
        """This backend inside the caller's transaction ``conn`` (one of this tenant): each call
        is a savepoint in it, so a refused write leaves the transaction usable, and what it
        writes commits with whatever else the caller does there, or not at all."""
        return PostgresBackend(self.db, self.tenant_id, self.agent_id, self.settings, conn,
                               author=self.author)

    def page_size(self, limit: int | None) -> int:
        """``limit``, or the default page size, never above ``HANGO_LIST_PAGE_MAX``."""
        return listing.page_size(self.settings, limit)

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
        query, params = queries.read_many_query(self.ns(), paths, limit)
        with self.transaction() as conn:
            rows = conn.execute(query, params, binary=True).fetchall()
        return self.decoded(rows)

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
        query, params = queries.heads_query(self.ns(), directories, name, limit, max_per_dir,
                                            cut_after)
        with self.transaction() as conn:
            rows = conn.execute(query, params, binary=True).fetchall()
        return self.decoded(rows, lenient=True)

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
