"""The one write path of the agent files: ``write``, ``edit`` and ``delete`` of a namespace.

Each is one transaction, or a savepoint in the caller's (``PostgresBackend.within``: approve
writes the file and the decision together). ``if_version`` refuses a write that lost a race
(:class:`VersionConflict`; ``0``: only a new file). No write exceeds ``HANGO_MAX_FILE_BYTES``
(:class:`FileTooLarge`) or stores what is not text (:class:`InvalidText`); the database refuses
the tenant's quota (:class:`QuotaExceeded`) and a file named like a directory
(:class:`PathConflict`). Under ``/memories/`` and ``/skills/`` each write and delete first keeps
the current version in ``agent_file_versions`` (:mod:`hango.fs.history`), with who wrote it.
Every door writes here: the files API, the tools, approve, restore; nothing else writes
``agent_files``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from hango.errors import (
    EditError,
    FileNotFound,
    FileTooLarge,
    InvalidText,
    NotText,
    PathConflict,
    QuotaExceeded,
    VersionConflict,
)
from hango.fs.files import Namespace
from hango.fs.path import clean, reserved_prefix


@contextmanager
def writing(backend: Namespace) -> Iterator[psycopg.Connection[Any]]:
    """A write transaction: the tenant's quotas set for the database to enforce, and the
    database's refusals (quota, file-or-directory) turned into hango's exceptions."""
    try:
        with backend.transaction() as conn:
            conn.execute(
                "SELECT set_config('hango.tenant_max_files', %s, true),"
                "       set_config('hango.tenant_max_bytes', %s, true)",
                [str(backend.settings.tenant_max_files), str(backend.settings.tenant_max_bytes)])
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


def text_bytes(path: str, content: str) -> bytes:
    """The text rule, the same for every door: ``content`` as UTF-8, and no U+0000 in it."""
    nul = content.find("\x00")
    if nul >= 0:
        raise InvalidText(f"{path}: file contents are text: U+0000 (NUL) at character {nul} is "
                          "not allowed; nothing was written")
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidText(f"{path}: character {exc.start} is a lone surrogate "
                          f"(U+{ord(content[exc.start]):04X}), which is not text; nothing was "
                          "written") from None


# --- history: the previous version of a file under /memories/ or /skills/ ----------------------

_PRUNE = """DELETE FROM agent_file_versions h USING agent_files f
             WHERE h.tenant_id = %(t)s AND h.agent_id = %(a)s AND h.path = %(p)s
               AND f.tenant_id = %(t)s AND f.agent_id = %(a)s AND f.path = %(p)s
               AND h.version <= f.version - %(k)s"""
# A version number kept already means the file was written around this path (plain SQL that
# reused a number): the first copy of that number stays.
_KEEP = """INSERT INTO agent_file_versions (tenant_id, agent_id, path, version, content, size,
                  written_at, written_by, proposal_id, restored_from, deleted_at, deleted_by)
           SELECT tenant_id, agent_id, path, version, content, size, updated_at, written_by,
                  proposal_id, restored_from, CASE WHEN %(gone)s THEN now() END,
                  CASE WHEN %(gone)s THEN %(by)s::text END
             FROM agent_files
            WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
              AND (%(v)s::bigint IS NULL OR version = %(v)s::bigint)
           ON CONFLICT DO NOTHING"""
# A new file's first version: after its history's last (a file deleted, then created again).
_FIRST = """(SELECT coalesce(max(version), 0) + 1 FROM agent_file_versions
              WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s)"""


def kept_under(path: str) -> str | None:
    """The reserved prefix a file lies under (``/memories`` itself, a file, is under none)."""
    prefix = reserved_prefix(path)
    return prefix if prefix is not None and path.startswith(prefix) else None


def history_lock(conn: Any, backend: Namespace, path: str) -> bool:
    """Whether ``path`` keeps a history (it is under a reserved prefix); if so, take the lock
    writers of the agent's ``/memories/`` (or ``/skills/``) queue on: the one the
    file-or-directory trigger takes (schema.sql), taken first, so each writer copies the version
    the previous one wrote, and locks come in one order (this one, the row, the usage)."""
    prefix = kept_under(path)
    if prefix is not None:
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended("
                     "%s || '/' || %s || '/' || %s, 0))",
                     [backend.tenant_id, backend.agent_id, prefix.strip("/")])
    return prefix is not None


def keep_previous(conn: Any, backend: Namespace, path: str, if_version: int | None,
                  *, deleting: bool = False) -> None:
    """Under a reserved prefix: copy the file's current version (if it is ``if_version``, when
    given) into its history, the oldest pruned first so at most ``HANGO_HISTORY_MAX_VERSIONS``
    stay."""
    if not history_lock(conn, backend, path):
        return
    params = {**backend.ns(), "p": path, "v": if_version, "gone": deleting,
              "by": backend.author, "k": backend.settings.history_max_versions}
    conn.execute(_PRUNE, params)
    conn.execute(_KEEP, params)


def write(backend: Namespace, path: str, content: str, if_version: int | None = None,
          *, proposal_id: str | None = None, restored_from: int | None = None) -> int:
    """Create or replace a file; return its new version. ``proposal_id``, ``restored_from``:
    where the content came from (an approved proposal, a restored version), kept with it."""
    path = clean(path)
    cap = backend.max_file_bytes
    if len(content) > 4 * cap:  # UTF-8 has at least a byte a character: not even encoded
        raise FileTooLarge(path, len(content), cap, at_least=True)
    data = text_bytes(path, content)  # at most 16 x cap bytes
    if len(data) > cap:
        raise FileTooLarge(path, len(data), cap)
    params = {**backend.ns(), "p": path, "c": data, "s": len(data), "v": if_version,
              "by": backend.author, "pr": proposal_id, "rf": restored_from}
    first = _FIRST if kept_under(path) is not None else "1"  # only a history has a number to follow
    insert = f"""INSERT INTO agent_files (tenant_id, agent_id, path, content, size, version,
                                          written_by, proposal_id, restored_from)
                 VALUES (%(t)s, %(a)s, %(p)s, %(c)s, %(s)s, {first}, %(by)s, %(pr)s, %(rf)s)"""
    with writing(backend) as conn:
        keep_previous(conn, backend, path, if_version)
        if if_version is None:
            row = conn.execute(
                f"""{insert}
                   ON CONFLICT (tenant_id, agent_id, path) DO UPDATE
                      SET content = EXCLUDED.content, size = EXCLUDED.size,
                          version = agent_files.version + 1, updated_at = now(),
                          written_by = EXCLUDED.written_by, proposal_id = EXCLUDED.proposal_id,
                          restored_from = EXCLUDED.restored_from
                   RETURNING version""",
                params,
            ).fetchone()
        elif if_version == 0:  # "only if it does not exist yet"
            row = conn.execute(f"{insert} ON CONFLICT DO NOTHING RETURNING version",
                               params).fetchone()
        else:
            row = conn.execute(
                """UPDATE agent_files SET content = %(c)s, size = %(s)s,
                          version = version + 1, updated_at = now(), written_by = %(by)s,
                          proposal_id = %(pr)s, restored_from = %(rf)s
                    WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
                      AND version = %(v)s
                RETURNING version""",
                params,
            ).fetchone()
        if row is None:
            assert if_version is not None
            raise VersionConflict(path, if_version, _version(backend, conn, path))
        return int(row[0])


def _version(backend: Namespace, conn: Any, path: str) -> int | None:
    row = conn.execute(
        "SELECT version FROM agent_files WHERE tenant_id = %(t)s AND agent_id = %(a)s"
        " AND path = %(p)s",
        {**backend.ns(), "p": path},
    ).fetchone()
    return None if row is None else int(row[0])


def edit(
    backend: Namespace, path: str, old: str, new: str, *, replace_all: bool = False,
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
    cap = backend.max_file_bytes
    old_b, new_b = text_bytes(path, old), text_bytes(path, new)
    with writing(backend) as conn:
        history_lock(conn, backend, path)  # before the row's lock (keep_previous, below)
        # A file already over the cap (stored before it) is not even fetched unless the edit
        # could shrink it.
        row = conn.execute(
            """SELECT CASE WHEN size <= %(cap)s OR %(shrinks)s THEN content END, version, size
                 FROM agent_files
                WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s FOR UPDATE""",
            {**backend.ns(), "p": path, "cap": cap, "shrinks": len(new_b) < len(old_b)},
        ).fetchone()
        if row is None:
            raise FileNotFound(path)
        version, size = int(row[1]), int(row[2])
        if if_version is not None and if_version != version:
            raise VersionConflict(path, if_version, version)
        if row[0] is None:
            raise FileTooLarge(path, size, cap, at_least=True)
        data = bytes(row[0])
        try:
            data.decode("utf-8")  # the whole file, not a head: all of it must be UTF-8 text
        except UnicodeDecodeError as exc:
            raise NotText(f"not UTF-8 text at byte {exc.start}") from None
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
        keep_previous(conn, backend, path, version)
        new_version = conn.execute(
            """UPDATE agent_files SET content = %(c)s, size = %(s)s,
                      version = version + 1, updated_at = now(), written_by = %(by)s,
                      proposal_id = NULL, restored_from = NULL
                WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
            RETURNING version""",
            {**backend.ns(), "p": path, "c": data, "s": len(data), "by": backend.author},
        ).fetchone()
        assert new_version is not None
        return int(new_version[0])


def delete(backend: Namespace, path: str, if_version: int | None = None) -> None:
    """Delete a file. Under a reserved prefix its last version stays in its history (marked
    deleted), so it can be restored. No quota is set: a delete is never refused for one."""
    path = clean(path)
    with backend.transaction() as conn:
        keep_previous(conn, backend, path, if_version, deleting=True)
        row = conn.execute(
            """DELETE FROM agent_files
                WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
                  AND (%(v)s::bigint IS NULL OR version = %(v)s::bigint)
            RETURNING version""",
            {**backend.ns(), "p": path, "v": if_version},
        ).fetchone()
        if row is None:
            actual = _version(backend, conn, path)
            if actual is None:
                raise FileNotFound(path)
            assert if_version is not None
            raise VersionConflict(path, if_version, actual)
