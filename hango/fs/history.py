"""The history of a file under ``/memories/`` or ``/skills/``: its versions, a diff, a restore.

The write path (:func:`hango.fs.writes.keep_previous`) copies a file's current version into
``agent_file_versions`` before each write or delete, keeping at most
``HANGO_HISTORY_MAX_VERSIONS``. Here it is read: :func:`versions` lists them (the current one
first), :func:`read_version` reads one (:class:`~hango.errors.VersionPruned`, 410, for one no
longer kept), :func:`diff` compares two, and :func:`restore` writes an earlier version back as
a new one, through :func:`hango.fs.writes.write` like any write (the cap, the quota, the text
rule, ``if_version``). Outside the reserved prefixes only the current version exists.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hango.errors import FileNotFound, FileTooLarge, NoSuchVersion, VersionPruned
from hango.fs import writes
from hango.fs.backend import FileData, decode_head
from hango.fs.path import clean

if TYPE_CHECKING:
    from hango.fs.backend import PostgresBackend

_WHEN = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
_VERSIONS = f"""
SELECT version, size, {_WHEN.format('updated_at')}, written_by, proposal_id, restored_from,
       true, NULL, NULL
  FROM agent_files WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
UNION ALL
SELECT version, size, {_WHEN.format('written_at')}, written_by, proposal_id, restored_from,
       false, {_WHEN.format('deleted_at')}, deleted_by
  FROM agent_file_versions WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
 ORDER BY 1 DESC LIMIT 1001"""
_CONTENT = """
SELECT substring(content FROM 1 FOR %(cap)s), size FROM agent_files
 WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s AND version = %(v)s
UNION ALL
SELECT substring(content FROM 1 FOR %(cap)s), size FROM agent_file_versions
 WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s AND version = %(v)s"""


@dataclass(frozen=True)
class Version:
    """One version of a file: who wrote it (or which proposal, or which version it restored)."""

    version: int
    size: int
    written_at: str
    written_by: str | None  # "owner:<token fingerprint>"; None: written in code
    proposal_id: str | None
    restored_from: int | None
    current: bool  # the file as it is now
    deleted_at: str | None = None  # the file's last version before it was deleted
    deleted_by: str | None = None


def versions(backend: PostgresBackend, path: str) -> list[Version]:
    """Every version kept, newest first (the current one, if the file exists, is first).
    :class:`FileNotFound` when there is neither a file nor a history."""
    path = clean(path)
    with backend.transaction() as conn:
        rows = conn.execute(_VERSIONS, {**backend.ns(), "p": path}).fetchall()
    if not rows:
        raise FileNotFound(path)
    return [Version(*row) for row in rows]


def read_version(backend: PostgresBackend, path: str, version: int) -> FileData:
    """Version ``version`` of a file, whole (at most ``HANGO_MAX_FILE_BYTES``, as a read).

    :class:`NoSuchVersion` (404) for a version it never had; :class:`VersionPruned` (410) for an
    earlier one no longer kept (or, outside ``/memories/`` and ``/skills/``, never kept)."""
    path = clean(path)
    cap = backend.max_file_bytes
    with backend.transaction() as conn:
        row = conn.execute(_CONTENT, {**backend.ns(), "p": path, "v": version,
                                      "cap": cap}).fetchone()
        known = [] if row is not None else conn.execute(
            _VERSIONS, {**backend.ns(), "p": path}).fetchall()
    if row is not None:
        if row[1] > cap:
            raise FileTooLarge(path, row[1], cap, stored=True)
        return FileData(path, decode_head(bytes(row[0]), row[1]), version, row[1])
    if not known:
        raise FileNotFound(path)
    kept = [Version(*r) for r in known]
    newest = kept[0].version
    if version > newest:
        raise NoSuchVersion(path, version, f"its newest is {newest}")
    if writes.kept_under(path) is None:
        raise NoSuchVersion(path, version, f"only its current version ({newest}) is kept: "
                            "earlier versions are kept under /memories/ and /skills/ only")
    oldest = min((v.version for v in kept if not v.current), default=None)
    raise VersionPruned(path, version, oldest, backend.settings.history_max_versions)


def unified_diff(path: str, old: str | None, new: str, labels: tuple[str, str] | None = None,
                 ) -> str:
    """``new`` as a unified diff against ``old`` (``None``: no file, shown as ``/dev/null``).
    ``labels``: the two headers (default ``a{path}`` and ``b{path}``)."""
    before, after = labels or ("/dev/null" if old is None else f"a{path}", f"b{path}")
    lines = difflib.unified_diff([] if old is None else old.splitlines(keepends=True),
                                 new.splitlines(keepends=True), before, after)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)


def diff(backend: PostgresBackend, path: str, old: int, new: int | None = None) -> str:
    """Version ``new`` (default: the current one) as a unified diff against version ``old``."""
    if new is None:
        new = versions(backend, path)[0].version
    a, b = read_version(backend, path, old), read_version(backend, path, new)
    return unified_diff(a.path, a.content, b.content, (f"a{a.path}@{old}", f"b{b.path}@{new}"))


def restore(backend: PostgresBackend, path: str, version: int,
            if_version: int | None = None) -> int:
    """Write version ``version`` back as the file's new version (also after a delete); return
    it. The earlier version is kept as it was; the write is any write's (its cap, the quota,
    ``if_version``: :class:`~hango.errors.VersionConflict` when the file moved on)."""
    try:
        old = read_version(backend, path, version)
    except FileTooLarge as exc:  # kept under a larger cap: this write would exceed the cap
        raise FileTooLarge(exc.path, exc.size, exc.cap) from None
    return writes.write(backend, old.path, old.content, if_version, restored_from=version)
