"""Listings in keyset pages: a directory's children (``ls``) and a pattern's matches (``glob``).

Nothing here is unbounded: a listing comes in :class:`Page` s of at most
``HANGO_LIST_PAGE_MAX`` entries, each page holding an opaque cursor to the next. A cursor names
the last path of its page, never an offset, so a page costs the same index probes wherever it
starts. Each function takes the :class:`~hango.fs.files.Namespace` it lists.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import TYPE_CHECKING, ClassVar

from hango.errors import HangoError
from hango.fs.files import Entry, Namespace, Page
from hango.fs.path import PathError, clean_dir

if TYPE_CHECKING:
    from hango.settings import Settings


class InvalidCursor(HangoError, ValueError):
    """A listing cursor that this listing did not hand out."""

    status: ClassVar[int] = 422


def page_size(settings: Settings, limit: int | None) -> int:
    """``limit``, or the default page size, never above ``HANGO_LIST_PAGE_MAX``."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise ValueError(f"limit must be a positive whole number, got {limit!r}")
    return min(limit if limit is not None else settings.list_page_default,
               settings.list_page_max)


def encode_cursor(kind: str, query: str, after: str) -> str:
    raw = json.dumps([kind, query, after], ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str, kind: str, query: str) -> str:
    """The path a page ends at, from a cursor this listing (``kind`` and ``query``) handed out."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        got_kind, got_query, after = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise InvalidCursor(f"invalid cursor {cursor[:40]!r}: pass back the next_cursor of the "
                            "previous page unchanged") from None
    if (got_kind, got_query) != (kind, query) or not isinstance(after, str):
        raise InvalidCursor(f"invalid cursor: it belongs to another listing ({got_kind} "
                            f"{got_query!r}), not to {kind} {query!r}")
    return after


def glob_to_regex(pattern: str) -> str:
    """``**`` spans directories, ``*`` and ``?`` stay within one segment. Anchored both ends."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "^" + "".join(out) + "$"


def ls(backend: Namespace, path: str = "/", limit: int | None = None,
       cursor: str | None = None) -> Page[Entry]:
    """One page of a directory's direct children, in byte order of their path (a directory's
    path ends with ``/``): files with size and version, and subdirectories.

    Keyset pagination by a *skip scan*: each step is one probe of the primary key for the
    first path after the previous entry; after a subdirectory it jumps past the whole
    subtree (C collation: everything under ``/notes/`` sorts before ``/notes0``). A page of
    ``n`` entries costs ``n + 1`` index probes, however many files the directory holds.
    """
    directory = clean_dir(path)
    size = page_size(backend.settings, limit)
    if cursor is None:
        lo = directory
    else:
        after = decode_cursor(cursor, "ls", directory)
        if not after.startswith(directory) or after == directory:
            raise InvalidCursor("invalid cursor: it does not lie in this directory")
        lo = after[:-1] + "0" if after.endswith("/") else after + "\x01"
    with backend.transaction() as conn:
        rows = conn.execute(
            """WITH RECURSIVE walk(n, path, size, version, child, is_dir) AS (
                   SELECT 1, f.path, f.size, f.version, c.child, c.is_dir
                     FROM (SELECT path, size, version FROM agent_files
                            WHERE tenant_id = %(t)s AND agent_id = %(a)s
                              AND path >= %(lo)s AND path < %(hi)s
                            ORDER BY path LIMIT 1) f,
                          LATERAL (SELECT split_part(substr(f.path, %(k)s), '/', 1) AS child,
                                          strpos(substr(f.path, %(k)s), '/') > 0 AS is_dir) c
                 UNION ALL
                   SELECT w.n + 1, f.path, f.size, f.version, c.child, c.is_dir
                     FROM walk w,
                          LATERAL (SELECT path, size, version FROM agent_files
                                    WHERE tenant_id = %(t)s AND agent_id = %(a)s
                                      AND path >= CASE WHEN w.is_dir
                                                       THEN %(dir)s || w.child || '0'
                                                       ELSE w.path || chr(1) END
                                      AND path < %(hi)s
                                    ORDER BY path LIMIT 1) f,
                          LATERAL (SELECT split_part(substr(f.path, %(k)s), '/', 1) AS child,
                                          strpos(substr(f.path, %(k)s), '/') > 0 AS is_dir) c
                    WHERE w.n <= %(n)s)
               SELECT child, is_dir, size, version FROM walk ORDER BY n""",
            {**backend.ns(), "lo": lo, "hi": directory[:-1] + "0", "dir": directory,
             "k": len(directory) + 1, "n": size},
        ).fetchall()
    entries = [
        Entry(directory + child + ("/" if is_dir else ""), bool(is_dir),
              0 if is_dir else int(nbytes), 0 if is_dir else int(version))
        for child, is_dir, nbytes, version in rows
    ]
    more = len(entries) > size
    return Page(entries[:size],
                encode_cursor("ls", directory, entries[size - 1].path) if more else None)


def glob_entries(backend: Namespace, pattern: str, limit: int | None = None,
                 cursor: str | None = None) -> Page[Entry]:
    """One page of the files matching ``pattern``, with each file's size and version.

    One query: a range scan of the primary key from the pattern's literal directory prefix
    (or from the cursor), filtered by the pattern's regular expression. The scan examines at
    most ``HANGO_GLOB_SCAN_MAX`` paths per page, so a pattern that matches little in a large
    tree cannot make one request scan it all: the page then comes back short (even empty)
    with a ``next_cursor`` at the last path examined.
    """
    if not isinstance(pattern, str) or not pattern.startswith("/"):
        raise ValueError(f"glob pattern must be absolute, got {pattern!r}")
    try:  # with its wildcards set aside, a pattern obeys the path rules (no NUL, no '..')
        clean_dir(re.sub(r"[*?]", "x", pattern))
    except PathError as exc:
        raise PathError(pattern, exc.rule) from None
    size = page_size(backend.settings, limit)
    scan = backend.settings.glob_scan_max
    literal = re.split(r"[*?]", pattern, maxsplit=1)[0]
    prefix = literal[: literal.rfind("/") + 1]
    lo = prefix
    if cursor is not None:
        after = decode_cursor(cursor, "glob", pattern)
        if not after.startswith(prefix):
            raise InvalidCursor("invalid cursor: it does not lie under this pattern's prefix")
        lo = after + "\x01"  # the first path after it (no path holds a control character)
    with backend.transaction() as conn:
        rows = conn.execute(
            """SELECT path, size, version, hit, n FROM (
                   SELECT path, size, version, path ~ %(re)s AS hit,
                          row_number() OVER (ORDER BY path) AS n
                     FROM (SELECT path, size, version FROM agent_files
                            WHERE tenant_id = %(t)s AND agent_id = %(a)s
                              AND path >= %(lo)s AND path < %(hi)s
                            ORDER BY path LIMIT %(scan)s) s) x
                WHERE hit OR n = %(scan)s
                ORDER BY path LIMIT %(rows)s""",
            {**backend.ns(), "re": glob_to_regex(pattern), "lo": lo,
             "hi": prefix[:-1] + "0", "scan": scan, "rows": size + 2},
        ).fetchall()
    hits = [Entry(p, False, int(b), int(v)) for p, b, v, hit, _ in rows if hit]
    if len(hits) > size:  # a full page, and more matches after it
        return Page(hits[:size], encode_cursor("glob", pattern, hits[size - 1].path))
    if rows and rows[-1][4] == scan:
        # the scan used its whole budget: more may match after the last path it examined
        return Page(hits, encode_cursor("glob", pattern, rows[-1][0]))
    return Page(hits)
