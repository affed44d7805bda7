"""The files API: an agent's files and config over HTTP, for owners, admins and members.

This is the second door to the one filesystem (the agent's tools are the first). Both call
:func:`hango.fs.path.check_write`, so only an ``owner`` or ``admin`` writes under ``/memories/``
and ``/skills/``; a ``member`` reads everything in its tenant and writes elsewhere.

The contract, in the order a request is checked:

- ``Authorization: Bearer <token>`` (``hango token create``) names a tenant and a role; none, or
  an unknown, revoked or expired token is ``401``, before any of the body is read.
- A file path is the URL path after ``/files`` and is *rejected, never resolved*: ``..``, ``.``,
  ``//``, an encoded slash ``%2F``, control or invisible characters are ``422`` naming the rule.
- Another tenant's agent, or an agent that does not exist, is ``404`` (never ``403``: a caller
  learns nothing about other tenants).
- A write under a reserved prefix by a member is ``403`` naming the rule.
- A body over ``HANGO_MAX_BODY_BYTES`` is ``413``, refused from ``Content-Length`` before it is
  read, and counted while it is read; a file body that is not UTF-8 is ``422``.
- File contents travel as ``text/plain; charset=utf-8``. The version is the ``ETag`` (``"3"``).
  ``If-Match: "3"`` writes, edits or deletes only at version 3, else ``412`` and nothing is
  written; ``If-None-Match: *`` (or ``If-Match: "0"``) creates only.
- The database being unreachable is ``503``. Every error body is ``{"detail": "..."}``.

Bounds (issue 10):

- No file is larger than ``HANGO_MAX_FILE_BYTES``: a PUT body over it (from Content-Length, or
  counted as it arrives) or a PATCH whose result would exceed it is ``413`` naming the cap and
  the size; nothing is written. A GET of a file stored before the cap is ``409`` naming both.
- Listings come in pages: ``?limit=`` (default ``HANGO_LIST_PAGE_DEFAULT``, at most
  ``HANGO_LIST_PAGE_MAX``; a larger limit is reduced to it) and ``?cursor=`` (the previous
  page's ``next_cursor``, opaque); the last page has ``next_cursor: null``.
- A write that would take the tenant over ``HANGO_TENANT_MAX_FILES`` or
  ``HANGO_TENANT_MAX_BYTES`` is ``413`` naming the quota; nothing is written.
- A file and a directory may not share a name: writing ``/notes`` when ``/notes/x`` exists, or
  ``/notes/x`` when the file ``/notes`` exists, is ``409`` naming the conflict.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import unquote_to_bytes

import psycopg
import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi import Path as UrlPath
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hango.agents import (
    ID_PATTERN,
    AgentConfig,
    Principal,
    TokenInfo,
    list_agents,
    load_agent,
    owner_create_token,
    owner_list_tokens,
    owner_revoke_token,
    principal_for,
    save_agent,
)
from hango.db import Database, DatabaseError, get_database
from hango.fs.backend import (
    EditError,
    FileNotFound,
    FileTooLarge,
    NotText,
    PathConflict,
    PostgresBackend,
    QuotaExceeded,
    VersionConflict,
)
from hango.fs.path import PathError, ReservedPathError, check_write, clean
from hango.settings import Settings, get_settings

TEXT = "text/plain; charset=utf-8"


# --- wire models -------------------------------------------------------------------------------


_NO_NUL_SHAPE = r"^[^\x00]*$"


class ErrorBody(BaseModel):
    detail: str = Field(description="What was wrong, naming the input or the rule.")


class FileVersion(BaseModel):
    path: str
    version: int = Field(description="The file's version after the write (also the ETag).")


class EntryOut(BaseModel):
    path: str = Field(description="Absolute; a directory ends with /.")
    is_dir: bool
    size: int = Field(description="Bytes (0 for a directory).")
    version: int = Field(description="0 for a directory.")


class Listing(BaseModel):
    entries: list[EntryOut]
    next_cursor: str | None = Field(
        default=None, description="Pass as ?cursor= for the next page; null on the last page.")


class AgentList(BaseModel):
    agents: list[str]


class EditBody(BaseModel):
    """Replace the exact text ``old`` (which must occur once, unless ``replace_all``) by ``new``."""

    model_config = ConfigDict(extra="forbid")

    old: str = Field(min_length=1, description="Exact text to replace; must be non-empty.")
    new: str = Field(description="Replacement text (may be empty).")
    replace_all: bool = Field(default=False, description="Replace every occurrence.")


# --- errors ------------------------------------------------------------------------------------

_DESCRIPTIONS = {
    401: "No bearer token, or a token hango does not know, revoked or expired.",
    403: "The caller's role may not do this (the message names the rule).",
    404: "No such file, or no such agent in the caller's tenant.",
    409: "The edit's old text is missing or ambiguous (nothing was written), the file is not "
         "UTF-8 text, a file and a directory would share a name, or (GET) the file is larger "
         "than HANGO_MAX_FILE_BYTES.",
    412: "If-Match named a version the file is not at; nothing was written.",
    413: "The request body is larger than HANGO_MAX_BODY_BYTES, the file would be larger than "
         "HANGO_MAX_FILE_BYTES, or the tenant would exceed HANGO_TENANT_MAX_FILES or "
         "HANGO_TENANT_MAX_BYTES; nothing was written.",
    422: "Invalid input (path, agent id, header or body); the message names it.",
    503: "The database is unavailable.",
}
_ETAG = {"ETag": {"description": 'The file\'s version, quoted: "3".', "schema": {"type": "string"}}}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]}
            for code in (401, 422, 503, *codes)}


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes (HANGO_MAX_BODY_BYTES)")


class BodyLimit:
    """Refuse a body over ``max_bytes``: up front from Content-Length, and while it is read.

    A chunked body has no Content-Length, so the bytes are also counted as they arrive; the app
    never holds more than ``max_bytes`` plus one chunk in memory.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            error = BodyTooLarge(self.max_bytes)
            response = JSONResponse({"detail": error.detail}, 413, headers={"Connection": "close"})
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counted, send)


def _validation_message(exc: RequestValidationError) -> str:
    where = {"path": "URL", "query": "query", "header": "header", "body": "body"}
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ())]
        kind = where.get(loc[0], loc[0]) if loc else "request"
        name = ".".join(loc[1:]) or kind
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        ctx = err.get("ctx") or {}
        if err.get("type") == "json_invalid" and "error" in ctx:
            msg = f"{msg}: {ctx['error']}"
        parts.append(f"{name} ({kind}): {msg}")
    return "; ".join(parts) or "invalid request"


# --- request context ---------------------------------------------------------------------------


def _db(request: Request) -> Database:
    return _db_of(request.app)


def _db_of(app: Any) -> Database:
    db: Database | None = app.state.hango_db
    if db is None:
        try:
            db = get_database()
        except (psycopg.OperationalError, DatabaseError) as exc:
            raise DatabaseError(f"database unavailable: {exc}") from exc
        app.state.hango_db = db
    return db


_bearer = HTTPBearer(
    auto_error=False, description="A token from `hango token create TENANT --role ROLE`."
)


# Dependencies that do no I/O are ``async def``: FastAPI runs a plain ``def`` in a worker thread,
# and each such hop costs a thread hand-off per request (most of the files API's floor).
async def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    found = request.scope.get("state", {}).get("hango_principal")
    if isinstance(found, Principal):  # Authenticate (below) already checked it, before the body
        return found
    if credentials is None:
        raise HTTPException(401, _no_bearer(request.headers.get("authorization")),
                            headers={"WWW-Authenticate": 'Bearer realm="hango"'})
    token = credentials.credentials
    principal = await run_in_threadpool(lambda: principal_for(_db(request), token))
    if principal is None:
        raise HTTPException(401, _UNKNOWN_TOKEN, headers={
            "WWW-Authenticate": 'Bearer realm="hango", error="invalid_token"'})
    return principal


_UNKNOWN_TOKEN = "unknown bearer token (or revoked, or expired)"


def _no_bearer(given: str | None) -> str:
    why = ("missing Authorization header" if given is None
           else "the Authorization header is not 'Bearer <token>'")
    return f"{why}: send Authorization: Bearer <token>"


def _bearer_token(header: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (as FastAPI's HTTPBearer reads it)."""
    scheme, _, token = (header or "").partition(" ")
    return token if scheme.lower() == "bearer" and token else None


class Authenticate:
    """Every ``/v1/`` request is authenticated before a byte of its body is read.

    FastAPI reads and parses a JSON body before it runs the route's dependencies, so without
    this a request with no token and a malformed body got 422, telling an anonymous caller
    about the body. Here a missing, unknown, revoked or expired token is 401 at once; a known
    one is kept in the request's state for the route's ``_principal`` dependency (one lookup).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        token = _bearer_token(header)
        status, detail, challenge = 401, _no_bearer(header), 'Bearer realm="hango"'
        if token is not None:
            try:
                db = _db_of(scope["app"])
                principal = await run_in_threadpool(principal_for, db, token)
            except (DatabaseError, psycopg.OperationalError) as exc:
                message = str(exc) if isinstance(exc, DatabaseError) else \
                    f"database unavailable: {exc}"
                await JSONResponse({"detail": message}, 503, headers={"Retry-After": "5"})(
                    scope, receive, send)
                return
            if principal is not None:
                scope.setdefault("state", {})["hango_principal"] = principal
                await self.app(scope, receive, send)
                return
            detail, challenge = _UNKNOWN_TOKEN, 'Bearer realm="hango", error="invalid_token"'
        headers = {"WWW-Authenticate": challenge}
        if Headers(scope=scope).get("content-length", "0") != "0" or \
                "transfer-encoding" in Headers(scope=scope):
            headers["Connection"] = "close"  # the unread body must not be taken for a request
        response = JSONResponse({"detail": detail}, status, headers=headers)
        await response(scope, receive, send)


@dataclass(frozen=True)
class _Agent:
    """One agent in the caller's tenant (not yet known to exist: see :meth:`missing`)."""

    db: Database
    principal: Principal
    agent_id: str
    settings: Settings | None = None

    @property
    def backend(self) -> PostgresBackend:
        return PostgresBackend(self.db, self.principal.tenant_id, self.agent_id, self.settings)

    def exists(self) -> bool:
        with self.db.tenant(self.principal.tenant_id) as conn:
            row = conn.execute("SELECT 1 FROM agents WHERE tenant_id = %s AND agent_id = %s",
                               [self.principal.tenant_id, self.agent_id]).fetchone()
        return row is not None

    def no_agent(self) -> HTTPException:
        return HTTPException(404, f"no agent {self.agent_id!r} in this tenant")

    def missing(self, message: str) -> HTTPException:
        """A 404; which one is only looked up when something was not found (the hot path of a
        successful request never pays for an existence check)."""
        return HTTPException(404, message) if self.exists() else self.no_agent()

    def refuse(self, exc: ReservedPathError) -> HTTPException:
        """A member writing a reserved path: 403, unless the agent is not theirs to see (404)."""
        return HTTPException(403, str(exc)) if self.exists() else self.no_agent()


AgentId = Annotated[str, UrlPath(pattern=ID_PATTERN, description="The agent's id.")]


async def _agent(
    request: Request, agent_id: AgentId, principal: Annotated[Principal, Depends(_principal)]
) -> _Agent:
    return _Agent(_db(request), principal, agent_id, request.app.state.hango_settings)


_PATH_RULES = (
    "The file's path without its leading /: `memories/AGENTS.md`. Segments are separated by a "
    "plain / (an encoded %2F is refused); no empty, `.` or `..` segment (refused, never "
    "resolved); no backslash, control, invisible or unassigned character; at most 255 bytes a "
    "segment and 1024 bytes in all. Only an owner or admin writes under `memories/` and `skills/`."
)
# Necessary, not sufficient: JSON Schema cannot say "Unicode category Cf" or "255 UTF-8 bytes".
_PATH_SHAPE = r"^[^/\\\x00-\x1f\x7f-\x9f]+(/[^/\\\x00-\x1f\x7f-\x9f]+)*$"
_QUERY_PATH_SHAPE = r"^/[^\\\x00-\x1f\x7f-\x9f]*$"  # absolute; no backslash or control


async def _file_path(
    request: Request,
    path: Annotated[str, UrlPath(description=_PATH_RULES,
                                 json_schema_extra={"pattern": _PATH_SHAPE})],
) -> str:
    """The file path from the URL: checked, never resolved."""
    raw: bytes = request.scope.get("raw_path") or b""
    if b"%2f" in raw.lower():
        raise HTTPException(422, "invalid path: an encoded slash (%2F) is not allowed; "
                                 "separate segments with a plain /")
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPException(422, "invalid path: its percent-escapes are not UTF-8") from None
    try:
        return clean("/" + path)
    except PathError as exc:
        raise HTTPException(422, str(exc)) from None


_VERSION_TAG = re.compile(r'\s*"(\d{1,18})"\s*')


async def _if_match(
    if_match: Annotated[str | None, Header(
        description='Write only at this version: "3". "0" means create only.'),
        WithJsonSchema({"type": "string", "pattern": r'^\s*("\d{1,18}"\s*)?$'})] = None,
) -> int | None:
    if if_match is None or not if_match.strip():
        return None
    found = _VERSION_TAG.fullmatch(if_match)
    if found is None:
        raise HTTPException(422, f'If-Match must be one quoted version such as "3" '
                                 f"(got {if_match!r})")
    return int(found[1])


async def _put_precondition(
    if_match: Annotated[int | None, Depends(_if_match)],
    if_none_match: Annotated[str | None, Header(
        description="`*`: create only, refuse (412) if the file exists."),
        WithJsonSchema({"type": "string", "pattern": r"^\s*\*?\s*$"})] = None,
) -> int | None:
    if if_none_match is None or not if_none_match.strip():
        return if_match
    if if_none_match.strip() != "*":
        raise HTTPException(422, f"If-None-Match supports only * (create only), "
                                 f"got {if_none_match!r}")
    if if_match is not None:
        raise HTTPException(422, "send If-Match or If-None-Match, not both")
    return 0


def _tag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


def _conflict(agent: _Agent, exc: VersionConflict) -> HTTPException:
    if exc.actual is None and not agent.exists():
        return agent.no_agent()
    headers = {} if exc.actual is None else _tag(exc.actual)
    if exc.expected == 0 and exc.actual is not None:
        return HTTPException(412, f"{exc.path} already exists (version {exc.actual}) and the "
                                  "write was create-only; nothing was written", headers=headers)
    return HTTPException(412, str(exc), headers=headers)


# --- routes ------------------------------------------------------------------------------------

class _AnyPath(Convertor[str]):
    """Starlette's ``path`` (``.*``) stops at a decoded newline (%0A), which would turn a bad
    path into a bare 404; this one routes it here, to be refused naming the rule."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("hango_path", _AnyPath())
router = APIRouter(prefix="/v1")
FILE_ROUTE = "/agents/{agent_id}/files/{path:hango_path}"


@router.get(
    FILE_ROUTE,
    summary="Read a file",
    response_class=Response,  # no media type of its own: errors are JSON, the 200 is text
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "headers": _ETAG,
                     "description": "The file's contents; the ETag is its version."},
               **_errors(404, 409)},
)
def read_file(
    agent: Annotated[_Agent, Depends(_agent)], path: Annotated[str, Depends(_file_path)]
) -> PlainTextResponse:
    try:
        data = agent.backend.read(path)
    except FileNotFound as exc:
        raise agent.missing(str(exc)) from None
    except NotText as exc:
        raise HTTPException(409, f"{path}: {exc}") from None
    except FileTooLarge as exc:
        raise HTTPException(409, str(exc)) from None
    return PlainTextResponse(data.content, media_type=TEXT, headers=_tag(data.version))


async def _read_text(request: Request, path: str, cap: int) -> str:
    """The body as text, refused (413) once it is known to exceed the file cap ``cap``: from
    Content-Length before reading, else as the chunks arrive (BodyLimit counts them too)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise HTTPException(413, str(FileTooLarge(path, int(declared), cap)))
    chunks, seen = [], 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > cap:
            raise HTTPException(413, str(FileTooLarge(path, seen, cap, at_least=True)))
        chunks.append(chunk)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(422, f"the body is not UTF-8 text (byte {exc.start} is invalid); "
                                 "file contents are UTF-8") from None


@router.put(
    FILE_ROUTE,
    summary="Create or replace a file",
    response_model=FileVersion,
    openapi_extra={"requestBody": {"required": False, "description": "The whole new content "
                   "as UTF-8 text; no body writes an empty file.", "content": {
        "text/plain": {"schema": {"type": "string"}}}}},
    responses={200: {"description": "Replaced.", "headers": _ETAG},
               201: {"model": FileVersion, "description": "Created.", "headers": _ETAG},
               **_errors(403, 404, 409, 412, 413)},
)
async def write_file(
    request: Request,
    response: Response,
    agent: Annotated[_Agent, Depends(_agent)],
    path: Annotated[str, Depends(_file_path)],
    if_version: Annotated[int | None, Depends(_put_precondition)],
) -> FileVersion:
    await run_in_threadpool(_may_write, agent, path)
    content = await _read_text(request, path, agent.backend.max_file_bytes)
    version = await run_in_threadpool(_write, agent, path, content, if_version)
    response.status_code = 201 if version == 1 else 200
    response.headers.update(_tag(version))
    return FileVersion(path=path, version=version)


def _may_write(agent: _Agent, path: str) -> None:
    try:
        check_write(path, agent.principal.role)
    except ReservedPathError as exc:
        raise agent.refuse(exc) from None


def _write(agent: _Agent, path: str, content: str, if_version: int | None) -> int:
    try:
        return agent.backend.write(path, content, if_version=if_version)
    except VersionConflict as exc:
        raise _conflict(agent, exc) from None
    except psycopg.errors.ForeignKeyViolation:
        raise agent.no_agent() from None
    except PathConflict as exc:
        raise HTTPException(409, str(exc)) from None
    except (FileTooLarge, QuotaExceeded) as exc:
        raise HTTPException(413, str(exc)) from None


@router.patch(
    FILE_ROUTE,
    summary="Edit a file: replace exact text",
    response_model=FileVersion,
    responses={200: {"description": "Edited.", "headers": _ETAG},
               **_errors(403, 404, 409, 412, 413)},
)
def edit_file(
    response: Response,
    agent: Annotated[_Agent, Depends(_agent)],
    path: Annotated[str, Depends(_file_path)],
    edit: EditBody,
    if_version: Annotated[int | None, Depends(_if_match)],
) -> FileVersion:
    _may_write(agent, path)
    try:
        version = agent.backend.edit(path, edit.old, edit.new, replace_all=edit.replace_all,
                                     if_version=if_version)
    except FileNotFound as exc:
        raise agent.missing(str(exc)) from None
    except (EditError, NotText) as exc:
        raise HTTPException(409, str(exc)) from None
    except VersionConflict as exc:
        raise _conflict(agent, exc) from None
    except (FileTooLarge, QuotaExceeded) as exc:
        raise HTTPException(413, str(exc)) from None
    response.headers.update(_tag(version))
    return FileVersion(path=path, version=version)


@router.delete(
    FILE_ROUTE,
    summary="Delete a file",
    status_code=204,
    response_class=Response,
    responses={204: {"description": "Deleted."}, **_errors(403, 404, 412)},
)
def delete_file(
    agent: Annotated[_Agent, Depends(_agent)],
    path: Annotated[str, Depends(_file_path)],
    if_version: Annotated[int | None, Depends(_if_match)],
) -> Response:
    _may_write(agent, path)
    try:
        agent.backend.delete(path, if_version=if_version)
    except FileNotFound as exc:
        raise agent.missing(str(exc)) from None
    except VersionConflict as exc:
        raise _conflict(agent, exc) from None
    return Response(status_code=204)


@router.get(
    "/agents/{agent_id}/files",
    summary="List a directory (?dir=) or match a pattern (?glob=)",
    response_model=Listing,
    responses=_errors(404),
)
def list_files(
    agent: Annotated[_Agent, Depends(_agent)],
    dir: Annotated[str | None, Query(description="A directory, default /.",
                                     json_schema_extra={"pattern": _QUERY_PATH_SHAPE})] = None,
    glob: Annotated[str | None, Query(description="An absolute pattern: * and ? within a "
                                                   "segment, ** across segments.",
                                      json_schema_extra={"pattern": _QUERY_PATH_SHAPE})] = None,
    limit: Annotated[int | None, Query(ge=1, description=(
        "Entries per page: default HANGO_LIST_PAGE_DEFAULT (1000), at most HANGO_LIST_PAGE_MAX "
        "(10000); a larger limit is reduced to the maximum."))] = None,
    cursor: Annotated[str | None, Query(max_length=8192, description=(
        "The next_cursor of the previous page, unchanged."),
        json_schema_extra={"pattern": r"^[A-Za-z0-9_-]+$"})] = None,
) -> Response:
    if dir is not None and glob is not None:
        raise HTTPException(422, "give ?dir= or ?glob=, not both")
    backend = agent.backend
    try:
        if glob is not None:
            page = backend.glob_entries(glob, limit, cursor)
        else:
            page = backend.ls(dir if dir is not None else "/", limit, cursor)
    except ValueError as exc:  # PathError, a pattern that is not absolute, an invalid cursor
        raise HTTPException(422, str(exc)) from None
    entries = [EntryOut(path=e.path, is_dir=e.is_dir, size=e.size, version=e.version)
               for e in page]
    if not entries and not agent.exists():
        raise agent.no_agent()
    # Serialised here, once (pydantic's Rust encoder): returned as a model, a page of 10,000
    # entries would be validated and encoded a second time by FastAPI, holding the GIL.
    return Response(Listing(entries=entries, next_cursor=page.next_cursor).model_dump_json(),
                    media_type="application/json")


@router.get("/agents", summary="The agents of the caller's tenant", response_model=AgentList,
            responses=_errors())
def get_agents(
    request: Request, principal: Annotated[Principal, Depends(_principal)]
) -> AgentList:
    return AgentList(agents=list_agents(_db(request), principal.tenant_id))


@router.get("/agents/{agent_id}", summary="An agent's config", response_model=AgentConfig,
            responses=_errors(404))
def get_agent(agent: Annotated[_Agent, Depends(_agent)]) -> AgentConfig:
    config = load_agent(agent.db, agent.principal.tenant_id, agent.agent_id)
    if config is None:
        raise agent.no_agent()
    return config


@router.put(
    "/agents/{agent_id}",
    summary="Create or replace an agent's config (owner or admin)",
    response_model=AgentConfig,
    responses={200: {"description": "Replaced."},
               201: {"model": AgentConfig, "description": "Created."},
               **_errors(403, 413)},
)
def put_agent(
    response: Response, agent: Annotated[_Agent, Depends(_agent)], config: AgentConfig
) -> AgentConfig:
    if agent.principal.role not in ("owner", "admin"):
        raise HTTPException(403, "only an owner or admin may create or replace an agent's "
                                 f"config (this token is a {agent.principal.role})")
    try:  # what the body alone cannot say: an agent may not name itself as its subagent
        config = config.for_agent(agent.agent_id)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])}
                                      for e in exc.errors()]) from None
    existed = agent.exists()
    save_agent(agent.db, agent.principal.tenant_id, agent.agent_id, config)
    response.status_code = 200 if existed else 201
    return config


# --- tokens: an owner's own tenant (issue 10.7) ------------------------------------------------


class TokenOut(BaseModel):
    """A token as it may be shown: never the secret."""

    id: str
    role: str
    label: str
    created_at: datetime
    last_used_at: datetime | None = Field(description="Recorded at most once a minute.")
    expires_at: datetime | None = Field(description="None: never expires.")

    @classmethod
    def of(cls, info: TokenInfo) -> TokenOut:
        fields = asdict(info)
        return cls(id=fields.pop("token_id"), **fields)


class TokenList(BaseModel):
    tokens: list[TokenOut]


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["owner", "admin", "member"]
    label: str = Field(default="", max_length=200, json_schema_extra={"pattern": _NO_NUL_SHAPE})
    expires_at: datetime | None = Field(
        default=None, description="When it stops working (ISO 8601; UTC unless it says); "
                                  "none: never.")


class TokenCreated(TokenOut):
    token: str = Field(description="The secret: shown this once, stored only as a digest.")


def _owner(request: Request, principal: Annotated[Principal, Depends(_principal)]) -> str:
    """The caller's own token, if it is an owner's (the SQL functions check it again)."""
    if principal.role != "owner":
        raise HTTPException(403, f"only an owner may list, create or revoke tokens (this token "
                                 f"is a {principal.role})")
    token = _bearer_token(request.headers.get("authorization"))
    assert token is not None  # _principal found it
    return token


def _gone() -> HTTPException:
    return HTTPException(401, _UNKNOWN_TOKEN, headers={
        "WWW-Authenticate": 'Bearer realm="hango", error="invalid_token"'})


@router.get("/tokens", summary="The tokens of the caller's tenant (owner)",
            response_model=TokenList, responses=_errors(403))
def get_tokens(request: Request, caller: Annotated[str, Depends(_owner)]) -> TokenList:
    return TokenList(tokens=[TokenOut.of(t) for t in owner_list_tokens(_db(request), caller)])


@router.post("/tokens", summary="Create a token in the caller's tenant (owner)", status_code=201,
             response_model=TokenCreated, responses=_errors(403, 409, 413))
def post_token(request: Request, caller: Annotated[str, Depends(_owner)],
               body: TokenCreate) -> TokenCreated:
    try:
        made = owner_create_token(_db(request), caller, body.role, body.label, body.expires_at)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    except psycopg.errors.CheckViolation as exc:
        raise HTTPException(409, str(exc.diag.message_primary or exc)) from None
    if made is None:  # revoked or expired since Authenticate looked it up
        raise _gone()
    token, info = made
    return TokenCreated(token=token, **TokenOut.of(info).model_dump())


@router.delete("/tokens/{token_id}", summary="Revoke a token of the caller's tenant (owner)",
               status_code=204, response_class=Response,
               responses={204: {"description": "Revoked: it is 401 from now on."},
                          **_errors(403, 404)})
def delete_token(request: Request, caller: Annotated[str, Depends(_owner)],
                 token_id: Annotated[str, UrlPath(pattern=r"^[0-9a-f]{1,64}$")]) -> Response:
    if not owner_revoke_token(_db(request), caller, token_id):
        raise HTTPException(404, f"no token {token_id!r} in this tenant")
    return Response(status_code=204)


# --- the app -----------------------------------------------------------------------------------


def create_app(db: Database | None = None, settings: Settings | None = None) -> FastAPI:
    """The files API over ``db`` (default: the process-wide database, opened on first use)."""
    settings = settings or (db.settings if db is not None else get_settings())
    app = FastAPI(
        title="hango files API",
        version="1",
        description=__doc__ or "",
        redirect_slashes=False,
    )
    app.state.hango_db = db
    app.state.hango_settings = settings
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(Authenticate)  # outermost: no body is read before the token is checked
    app.include_router(router)
    from hango.api.runs import router as runs_router  # runs.py builds on this module's deps

    app.include_router(runs_router)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"detail": _validation_message(exc)}, 422)

    async def unavailable(request: Request, exc: Exception) -> JSONResponse:
        message = str(exc) if isinstance(exc, DatabaseError) else f"database unavailable: {exc}"
        return JSONResponse({"detail": message}, 503, headers={"Retry-After": "5"})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 405:  # Allow every method of the path, not one route's
            allowed = sorted({method for route in router.routes
                              if isinstance(route, APIRoute)
                              and route.matches(request.scope)[0] is not Match.NONE
                              for method in route.methods or ()})
            return JSONResponse({"detail": f"method {request.method} is not allowed here; "
                                           f"allowed: {', '.join(allowed)}"},
                                405, headers={"Allow": ", ".join(allowed)})
        if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not read JSON
            cause = exc.__cause__
            why = (f"it is not UTF-8 (byte {cause.start} is invalid)"
                   if isinstance(cause, UnicodeDecodeError) else str(cause))
            return JSONResponse({"detail": f"the JSON body could not be read: {why}"}, 422)
        return await http_exception_handler(request, exc)

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(DatabaseError, unavailable)
    app.add_exception_handler(psycopg.OperationalError, unavailable)
    return app


def serve_in_thread(
    app: ASGIApp, host: str = "127.0.0.1", port: int = 0
) -> tuple[str, Callable[[], None]]:
    """Serve ``app`` with uvicorn in a background thread; return ``(base_url, stop)``.

    ``port=0`` picks a free port. Notebooks and tests use this to get real HTTP on loopback
    inside one process; ``hango serve`` is the standalone server.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP: asyncio sets NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"hango-api-{bound}")
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError(f"the API server did not start on {host}:{bound}")
        time.sleep(0.005)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

    netloc = f"[{host}]" if family == socket.AF_INET6 else host
    return f"http://{netloc}:{bound}", stop
