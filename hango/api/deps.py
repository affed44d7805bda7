"""The files API's request context: the database, the caller (a bearer token), the agent.

Every route of ``/v1/`` builds on these: :class:`Authenticate` checks the token before a byte of
the body is read, :func:`_principal` hands the caller to a route, :func:`_agent` names one agent
in the caller's tenant. :func:`hango_error` is the one place a :class:`hango.errors.HangoError`
becomes its HTTP status: a route lets the error rise instead of translating it itself.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
from fastapi import Depends, HTTPException, Request
from fastapi import Path as UrlPath
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from hango.agents import ID_PATTERN, Principal, agent_exists, principal_for
from hango.api.plain_get import file_response, plain_get, read_as
from hango.db import Database, DatabaseError, get_database
from hango.db_errors import Contention, aborted
from hango.errors import HangoError
from hango.fs.backend import PostgresBackend
from hango.settings import Settings

# --- error bodies, as the OpenAPI document describes them ------------------------------------


class ErrorBody(BaseModel):
    detail: str = Field(description="What was wrong, naming the input or the rule.")


_DESCRIPTIONS = {
    401: "No bearer token, or a token hango does not know, revoked or expired.",
    403: "The caller's role may not do this (the message names the rule).",
    404: "No such file, or no such agent in the caller's tenant.",
    409: "The edit's old text is missing or ambiguous (nothing was written), the file is not "
         "UTF-8 text, a file and a directory would share a name, or (GET) the file is larger "
         "than HANGO_MAX_FILE_BYTES.",
    410: "That version of the file is no longer kept (HANGO_HISTORY_MAX_VERSIONS).",
    412: "If-Match named a version the file is not at; nothing was written.",
    413: "The request body is larger than HANGO_MAX_BODY_BYTES, the file would be larger than "
         "HANGO_MAX_FILE_BYTES, or the tenant would exceed HANGO_TENANT_MAX_FILES or "
         "HANGO_TENANT_MAX_BYTES; nothing was written.",
    422: "Invalid input (path, agent id, header or body); the message names it.",
    503: "The database is unavailable.",
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]}
            for code in (401, 422, 503, *codes)}


# --- the database and the caller -------------------------------------------------------------


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
    The lookup is one statement on the event loop (:func:`hango.api.plain_get.read_as`: no
    transaction around it, no hand-off to a worker thread), made for every request: nothing
    about a token is kept between requests. A plain GET of a file is answered here when the
    file is there: the same statement read it.
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
            # One statement: who the token is and, for a plain GET of a file, the file too.
            agent_id, path = plain_get(scope) or (None, None)
            try:
                db = _db_of(scope["app"])
                state = scope["app"].state
                on_loop = state.hango_loop is asyncio.get_running_loop()
                principal, found = await read_as(db, token, agent_id, path,
                                                 state.hango_settings.max_file_bytes,
                                                 on_loop=on_loop)
            except (DatabaseError, psycopg.OperationalError) as exc:
                await unavailable(exc)(scope, receive, send)
                return
            if found is not None:
                await file_response(found)(scope, receive, send)
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


# --- the agent -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Agent:
    """One agent in the caller's tenant (not yet known to exist: see :meth:`missing`)."""

    db: Database
    principal: Principal
    agent_id: str
    settings: Settings | None = None
    author: str | None = None  # the caller, as a file's history and a run record it (author)

    @property
    def backend(self) -> PostgresBackend:
        return PostgresBackend(self.db, self.principal.tenant_id, self.agent_id, self.settings,
                               author=self.author)

    def exists(self) -> bool:
        return agent_exists(self.db, self.principal.tenant_id, self.agent_id)

    def no_agent(self) -> HTTPException:
        return HTTPException(404, f"no agent {self.agent_id!r} in this tenant")

    def missing(self, message: str) -> HTTPException:
        """A 404; which one is only looked up when something was not found (the hot path of a
        successful request never pays for an existence check)."""
        return HTTPException(404, message) if self.exists() else self.no_agent()


AgentId = Annotated[str, UrlPath(pattern=ID_PATTERN, description="The agent's id.")]


def author(request: Request, principal: Principal) -> str:
    """The caller as a file's history, runs and proposals record it: its role and its token's
    fingerprint (never the token): ``member:1a2b3c4d5e6f``."""
    token = request.headers.get("authorization", "").partition(" ")[2]
    return f"{principal.role}:{hashlib.sha256(token.encode()).hexdigest()[:12]}"


async def _agent(
    request: Request, agent_id: AgentId, principal: Annotated[Principal, Depends(_principal)]
) -> _Agent:
    agent = _Agent(_db(request), principal, agent_id, request.app.state.hango_settings,
                   author(request, principal))
    request.scope.setdefault("state", {})["hango_agent"] = agent  # for hango_error, below
    return agent


# --- the one mapping from errors to statuses -------------------------------------------------


def _response(agent: _Agent | None, exc: HangoError) -> JSONResponse:
    if agent is not None and exc.may_hide_agent():
        try:
            exists = agent.exists()
        except (psycopg.OperationalError, DatabaseError) as down:
            return unavailable(down)
        if not exists:
            return JSONResponse({"detail": agent.no_agent().detail}, 404)
    return JSONResponse(exc.body(), exc.status, headers=exc.headers() or None)


async def hango_error(request: Request, exc: Exception) -> JSONResponse:
    """A :class:`HangoError` a route let rise: its status, its body and headers. A "not found"
    or "forbidden" about an agent the caller's tenant does not have is that agent's 404 (the
    existence check runs only here, on the error path)."""
    assert isinstance(exc, HangoError)
    agent = request.scope.get("state", {}).get("hango_agent")
    if not isinstance(agent, _Agent) or not exc.may_hide_agent():
        return _response(None, exc)
    return await run_in_threadpool(_response, agent, exc)


def unavailable(exc: Exception) -> JSONResponse:
    """The database is away (503, and when to try again), aborted a transaction to break a
    deadlock (409, try again), or refused what hango sent (:class:`hango.db.DatabaseRefused`:
    500 naming the error class and what to check). Never PostgreSQL's DETAIL or CONTEXT (they
    can quote rows)."""
    if aborted(exc):
        exc = Contention()
    if not isinstance(exc, DatabaseError):
        exc = DatabaseError(f"database unavailable: {exc}")
    return JSONResponse(exc.body(), exc.status, headers=exc.headers() or None)
