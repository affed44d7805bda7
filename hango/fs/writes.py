"""The one write path of the agent files: ``write``, ``edit`` and ``delete`` of a namespace.

Each is one transaction, or a savepoint in the caller's when the namespace works inside one
(``PostgresBackend.within``: approving a proposal writes the file and the decision together). A
file carries a ``version`` for optimistic concurrency: pass ``if_version`` and a write that
lost a race is refused with :class:`VersionConflict` instead of silently overwriting
(``if_version=0``: only if the file does not exist yet). No write makes a file larger than
``HANGO_MAX_FILE_BYTES`` (:class:`FileTooLarge`, checked before the content is built) or stores
what is not text (:class:`InvalidText`: U+0000, a lone surrogate), and the database refuses one
that would take the tenant over its quota (:class:`QuotaExceeded`) or give a file and a
directory one name (:class:`PathConflict`). Every door writes through here: the files API, the
agent's tools, approve; no other code inserts or updates ``agent_files``.
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
from hango.fs.path import clean


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


def write(backend: Namespace, path: str, content: str, if_version: int | None = None) -> int:
    """Create or replace a file; return its new version."""
    path = clean(path)
    cap = backend.max_file_bytes
    if len(content) > 4 * cap:  # UTF-8 has at least a byte a character: not even encoded
        raise FileTooLarge(path, len(content), cap, at_least=True)
    data = text_bytes(path, content)  # at most 16 x cap bytes
    if len(data) > cap:
        raise FileTooLarge(path, len(data), cap)
    params = {**backend.ns(), "p": path, "c": data, "s": len(data), "v": if_version}
    with writing(backend) as conn:
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
        new_version = conn.execute(
            """UPDATE agent_files SET content = %(c)s, size = %(s)s,
                      version = version + 1, updated_at = now()
                WHERE tenant_id = %(t)s AND agent_id = %(a)s AND path = %(p)s
            RETURNING version""",
            {**backend.ns(), "p": path, "c": data, "s": len(data)},
        ).fetchone()
        assert new_version is not None
        return int(new_version[0])


def delete(backend: Namespace, path: str, if_version: int | None = None) -> None:
    path = clean(path)
    with backend.transaction() as conn:
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
