"""The one filesystem: rows of ``agent_files`` in one namespace ``{tenant_id, agent_id}``.

The backend is policy-free about *who* writes (that is :func:`hango.fs.path.check_write`, called
by both doors) but strict about *what* a path is: every method cleans its path first.
Each file carries a ``version`` for optimistic concurrency: pass ``if_version`` and a write that
lost a race is refused with :class:`VersionConflict` instead of silently overwriting.

Nothing here is unbounded (issue 10): no file exceeds ``HANGO_MAX_FILE_BYTES``
(:class:`FileTooLarge`, checked before the content is built); listings come in keyset pages
(:class:`Page`); and the database itself refuses a write that would take a tenant over its
quota (:class:`QuotaExceeded`) or give a file and a directory one name (:class:`PathConflict`).
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
from hango.fs import gated, listing
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


def decode_head(data: bytes) -> str:
    """Decode UTF-8 bytes that may end in the middle of a character (a byte-limited read)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(data) - 3 and exc.reason in ("unexpected end of data",):
            return data[: exc.start].decode("utf-8")
        raise NotText(f"not UTF-8 text at byte {exc.start}") from None


def _decode_lenient(data: bytes) -> str:
    """:func:`decode_head`, but bytes that are not UTF-8 become lone surrogates instead of
    failing the whole batch: one non-text SKILL.md must not fail the skills scan (and a run), and
    the frontmatter reader refuses such a head by itself ("not valid UTF-8", with its line)."""
    try:
        return decode_head(data)
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
                 settings: Settings | None = None) -> None:
        self.db = db
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.settings: Settings = settings or getattr(db, "settings", None) or get_settings()
        self.bytes_read = 0  # content bytes transferred from the database, for the caps' tests

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

    @contextmanager
    def _writing(self) -> Iterator[psycopg.Connection[Any]]:
        """A write transaction: the tenant's quotas set for the database to enforce, and the
        database's refusals (quota, file-or-directory) turned into this module's exceptions."""
        try:
            with self.db.tenant(self.tenant_id) as conn:
                conn.execute(
                    "SELECT set_config('hango.tenant_max_files', %s, true),"
                    "       set_config('hango.tenant_max_bytes', %s, true)",
                    [str(self.settings.tenant_max_files), str(self.settings.tenant_max_bytes)])
                yield conn
        except psycopg.errors.CheckViolation as exc:
            quota = {"hango_quota_files": "HANGO_TENANT_MAX_FILES",
                     "hango_quota_bytes": "HANGO_TENANT_MAX_BYTES"}.get(
                         exc.diag.constraint_name or "")
            if quota is None:
                raise
            raise QuotaExceeded(exc.diag.message_primary or str(exc), quota) from None
        except psycopg.errors.ExclusionViolation as exc:
            if exc.diag.constraint_name != "agent_files_file_or_directory":
                raise
            message = exc.diag.message_primary or str(exc)
            raise PathConflict(message, message.split(":", 1)[0],
                               exc.diag.message_detail or "") from None

    def _ns(self) -> dict[str, Any]:
        return {"t": self.tenant_id, "a": self.agent_id}

    def _rows(self, rows: list[tuple[str, bytes, int, int]], *,
              lenient: bool = False) -> list[FileData]:
        self.bytes_read += sum(len(r[1]) for r in rows)
        decode = _decode_lenient if lenient else decode_head
        return [FileData(path, decode(bytes(data)), version, size)
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
        with self.db.tenant(self.tenant_id) as conn:
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
        with self.db.tenant(self.tenant_id) as conn:
            rows = conn.execute(query, params, binary=True).fetchall()
        return self._rows(rows, lenient=True)

    def write(self, path: str, content: str, if_version: int | None = None) -> int:
        """Create or replace a file; return its new version."""
        path = clean(path)
        cap = self.max_file_bytes
        if len(content) > 4 * cap:  # UTF-8 has at least a byte a character: not even encoded
            raise FileTooLarge(path, len(content), cap, at_least=True)
        data = content.encode("utf-8")  # at most 16 x cap bytes
        if len(data) > cap:
            raise FileTooLarge(path, len(data), cap)
        params = {**self._ns(), "p": path, "c": data, "s": len(data), "v": if_version}
        with self._writing() as conn:
            if if_version is None:
                row = conn.execute(
                    """INSERT INTO agent_files (tenant_id, agent_id, path, content, size)
                       VALUES (%(t)s, %(a)s, %(p)s, %(c)s, %(s)s)
                       ON CONFLICT (tenant_id, agent_id, path) DO UPDATE
                          SET content = EXCLUDED.content, size = EXCLUDED.size,
                              version = agent_files.version + 1, updated_at = now()
                       RETURNING version""",
                    params,
                ).fetchone()
            elif if_version == 0:  # "only if it does not exist yet"
                row = conn.execute(
                    """INSERT INTO agent_files (tenant_id, agent_id, path, content, size)
                       VALUES (%(t)s, %(a)s, %(p)s, %(c)s, %(s)s)
                       ON CONFLICT DO NOTHING RETURNING version""",
                    params,
                ).fetchone()
            else:
                row = conn.execute(
                    """UPDATE agent_files SET content = %(c)s, size = %(s)s,
                              version = version + 1, updated_at = now()
                        WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
                          AND version = %(v)s
                    RETURNING version""",
                    params,
                ).fetchone()
            if row is None:
                assert if_version is not None
                raise VersionConflict(path, if_version, self._version(conn, path))
            return int(row[0])

    def _version(self, conn: Any, path: str) -> int | None:
        row = conn.execute(
            "SELECT version FROM agent_files WHERE tenant_id = %(t)s AND agent_id = %(a)s"
            " AND path = %(p)s",
            {**self._ns(), "p": path},
        ).fetchone()
        return None if row is None else int(row[0])

    def edit(
        self, path: str, old: str, new: str, *, replace_all: bool = False,
        if_version: int | None = None,
    ) -> int:
        """Replace the exact text ``old`` with ``new``; ``old`` must occur once (or ``replace_all``).

        The result's size is computed before the result is built: ``size + count x (len(new) -
        len(old))`` bytes, refused over ``HANGO_MAX_FILE_BYTES`` (a 65 KB edit of a 1 MiB file
        asking for 64 GiB is a :class:`FileTooLarge`, not a ``MemoryError``). The work is on
        UTF-8 bytes: in valid UTF-8 a needle only matches at character boundaries, so counting
        and replacing bytes is the same as on text.
        """
        path = clean(path)
        if old == "":
            raise EditError(f"{path}: the text to replace is empty")
        cap = self.max_file_bytes
        old_b, new_b = old.encode("utf-8"), new.encode("utf-8")
        with self._writing() as conn:
            # A file already over the cap (stored before it) is not even fetched unless the edit
            # could shrink it.
            row = conn.execute(
                """SELECT CASE WHEN size <= %(cap)s OR %(shrinks)s THEN content END, version, size
                     FROM agent_files
                    WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s FOR UPDATE""",
                {**self._ns(), "p": path, "cap": cap, "shrinks": len(new_b) < len(old_b)},
            ).fetchone()
            if row is None:
                raise FileNotFound(path)
            version, size = int(row[1]), int(row[2])
            if if_version is not None and if_version != version:
                raise VersionConflict(path, if_version, version)
            if row[0] is None:
                raise FileTooLarge(path, size, cap, at_least=True)
            data = bytes(row[0])
            decode_head(data)  # contents are UTF-8 text, else NotText
            count = data.count(old_b)
            if count == 0:
                raise EditError(f"{path}: the text to replace was not found; nothing was written")
            if count > 1 and not replace_all:
                raise EditError(
                    f"{path}: the text to replace occurs {count} times; give more context "
                    "so it is unique (or replace all); nothing was written"
                )
            result_size = len(data) + count * (len(new_b) - len(old_b))
            if result_size > cap:
                raise FileTooLarge(path, result_size, cap)
            data = data.replace(old_b, new_b)
            new_version = conn.execute(
                """UPDATE agent_files SET content = %(c)s, size = %(s)s,
                          version = version + 1, updated_at = now()
                    WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
                RETURNING version""",
                {**self._ns(), "p": path, "c": data, "s": len(data)},
            ).fetchone()
            assert new_version is not None
            return int(new_version[0])

    def delete(self, path: str, if_version: int | None = None) -> None:
        path = clean(path)
        with self.db.tenant(self.tenant_id) as conn:
            row = conn.execute(
                """DELETE FROM agent_files
                    WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
                      AND (%(v)s::bigint IS NULL OR version = %(v)s::bigint)
                RETURNING version""",
                {**self._ns(), "p": path, "v": if_version},
            ).fetchone()
            if row is None:
                actual = self._version(conn, path)
                if actual is None:
                    raise FileNotFound(path)
                assert if_version is not None
                raise VersionConflict(path, if_version, actual)

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
