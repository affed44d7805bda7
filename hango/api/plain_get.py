"""A plain GET of a file in one round trip: the files API's hot path.

``GET /v1/agents/{agent_id}/files/{path}`` with no query and no body is what clients send most.
:class:`hango.api.deps.Authenticate`, which checks every token anyway, answers it itself: one
call of the database function ``hango_read_file`` looks the token up and, as the token's tenant
(row-level security applies), reads the file. One statement, one round trip (no BEGIN, no
COMMIT), on the event loop (no hand-off to a worker thread), no routing and no dependencies.

It answers only a ``200``, built by :func:`file_response`, as the route builds it. Anything else
goes on to the route with the caller already known, and the route answers as it always has: no
such file or agent (404), a file over the cap or not UTF-8 (409), a path the rules refuse (422).
An unknown, revoked or expired token is ``401`` here too: nothing is cached between requests.
Every other request's token is looked up by the same statement with no file asked for (no
agent, no path): one round trip on the event loop, where a transaction in a worker thread took
four round trips and two thread hand-offs.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import HTTPException
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import Scope

from hango.agents import ID_PATTERN, Principal, token_digest
from hango.db import Database
from hango.fs.backend import FileData, NotText, decode_head
from hango.fs.path import PathError, clean

TEXT = "text/plain; charset=utf-8"
_FILES = "/v1/agents/"


def etag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


def file_response(data: FileData) -> PlainTextResponse:
    """A file's 200: its contents as UTF-8 text, its version as the ETag."""
    return PlainTextResponse(data.content, media_type=TEXT, headers=etag(data.version))


def file_path(raw_path: bytes, path: str) -> str:
    """The file path from the URL (``path``, after ``/files``): checked, never resolved.

    Raises ``HTTPException(422)`` for an encoded slash or escapes that are not UTF-8, and
    :class:`hango.fs.path.PathError` (422, naming the rule) for the rest.
    """
    if b"%2f" in raw_path.lower():
        raise HTTPException(422, "invalid path: an encoded slash (%2F) is not allowed; "
                                 "separate segments with a plain /")
    try:
        unquote_to_bytes(raw_path).decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPException(422, "invalid path: its percent-escapes are not UTF-8") from None
    return clean("/" + path)


def plain_get(scope: Scope) -> tuple[str, str] | None:
    """``(agent_id, path)`` when ``scope`` is a GET of a file with no query and no body, and
    both are valid (as the route would find them); ``None`` for any other request."""
    url = str(scope.get("path", ""))
    if scope.get("method") != "GET" or scope.get("query_string") or not url.startswith(_FILES):
        return None
    agent_id, _, rest = url[len(_FILES):].partition("/")
    if not rest.startswith("files/") or not re.fullmatch(ID_PATTERN, agent_id):
        return None
    headers = Headers(scope=scope)
    if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
        return None
    try:
        return agent_id, file_path(scope.get("raw_path") or b"", rest[len("files/"):])
    except (HTTPException, PathError):
        return None


READ_FILE = "SELECT * FROM hango_read_file(%s, %s, %s, %s)"


async def read_as(db: Database, token: str, agent_id: str | None, path: str | None, cap: int,
                  *, on_loop: bool) -> tuple[Principal | None, FileData | None]:
    """Who ``token`` is and, as that tenant, ``path`` of agent ``agent_id``: one statement.
    With no ``agent_id`` and ``path`` (any request but a plain GET), who ``token`` is alone.

    ``on_loop``: on the event loop (:meth:`hango.db.Database.statement_async`), for a loop whose
    end closes its pool (the app's lifespan ran on it); otherwise in a worker thread, as for a
    ``TestClient`` used outside ``with``, which runs each request on a loop of its own.

    ``(None, None)``: the token is unknown, revoked or expired. ``(principal, None)``: the
    route must answer (no such file, over ``cap`` bytes, or not UTF-8).
    """
    args = [token_digest(token), agent_id, path, cap]
    if on_loop:
        async with db.statement_async() as conn:
            row = await (await conn.execute(READ_FILE, args, binary=True)).fetchone()
    else:
        row = await run_in_threadpool(read_row, db, args)
    return found_file(path, cap, row)


def read_row(db: Database, args: list[Any]) -> tuple[Any, ...] | None:
    """:data:`READ_FILE`'s row, in the calling thread (blocking): ``args`` as :func:`read_as`
    builds them."""
    with db.statement() as conn:
        return conn.execute(READ_FILE, args, binary=True).fetchone()


def found_file(path: str | None, cap: int, row: tuple[Any, ...] | None
               ) -> tuple[Principal | None, FileData | None]:
    """What :data:`READ_FILE`'s row says: see :func:`read_as`."""
    if row is None:
        return None, None
    tenant_id, role, content, version, size = row
    principal = Principal(tenant_id, role)
    if path is None or content is None or size > cap:
        return principal, None
    try:
        return principal, FileData(path, decode_head(bytes(content), size), version, size)
    except NotText:
        return principal, None
