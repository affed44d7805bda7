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
- ``HEAD`` works wherever ``GET`` does: the same status and headers, no body.
- The database being unreachable is ``503``. Every error body is ``{"detail": "..."}``.

Bounds:

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

import asyncio
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import psycopg
import uvicorn
from anyio import CapacityLimiter
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hango import retention
from hango.agents import check_default_sources
from hango.api import agents, files, history, progress, run_views, runs
from hango.api.deps import Authenticate, _db_of, hango_error, unavailable
from hango.db import Database, DatabaseError, get_database
from hango.errors import HangoError
from hango.settings import Settings, get_settings

if TYPE_CHECKING:
    from hango.telemetry.server import Served

log = logging.getLogger("hango")
ROUTERS = (files, history, agents, runs, run_views, progress)

# The layout: this module builds the app (middleware, error handlers, routers) and serves it;
# deps.py is the request context (database, token, agent) and the one error mapping;
# files.py, agents.py and runs.py are the routes.


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


class HeadAsGet:
    """HEAD wherever GET works: answered as that GET is, status and headers (Content-Length,
    ETag) included, without the body (RFC 9110, section 9.3.2)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headless(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET", "hango_head": True}, receive, headless)


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


# --- the app -----------------------------------------------------------------------------------


def create_app(db: Database | None = None, settings: Settings | None = None, *,
               sweep: bool = False) -> FastAPI:
    """The files API over ``db`` (default: the process-wide database, opened on first use).
    ``sweep``: also run the retention sweep every ``HANGO_RUNS_SWEEP_SECONDS`` (``hango serve``
    does; a test or a notebook serving an app of its own does not).

    Raises :class:`~hango.settings.SettingsError` when a tenant-default source breaks a path rule:
    every run over HTTP would read it."""
    settings = check_default_sources(
        settings or (db.settings if db is not None else get_settings()))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.hango_loop = asyncio.get_running_loop()  # its plain GETs may pool on it
        sweeper = (asyncio.create_task(_sweep_every(app, settings.runs_sweep_seconds))
                   if sweep and settings.runs_sweep_seconds > 0 else None)
        yield
        if sweeper is not None:
            sweeper.cancel()
            with suppress(asyncio.CancelledError):
                await sweeper
        app.state.hango_loop = None
        served: Served | None = getattr(app.state, "hango_served", None)
        if served is not None:  # a worker of `hango serve`: flush what it buffered
            served.shutdown()
        opened: Database | None = app.state.hango_db
        if opened is not None:
            await opened.close_async()  # the plain GET's pool on this server's loop

    app = FastAPI(
        title="hango files API",
        version="1",
        description=__doc__ or "",
        redirect_slashes=False,
        lifespan=lifespan,
    )
    app.state.hango_db = db
    app.state.hango_settings = settings
    app.state.hango_loop = None  # the loop the lifespan runs on (deps.Authenticate)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(Authenticate)  # no body is read before the token is checked
    app.add_middleware(HeadAsGet)  # outermost: a HEAD is its GET from here on
    for module in ROUTERS:
        app.include_router(module.router)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"detail": _validation_message(exc)}, 422)

    async def database_down(request: Request, exc: Exception) -> JSONResponse:
        return unavailable(exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 405:  # Allow every method of the path, not one route's
            methods = {method for module in ROUTERS
                       for route in module.router.routes if isinstance(route, APIRoute)
                       and route.matches(request.scope)[0] is not Match.NONE
                       for method in route.methods or ()}
            allowed = sorted(methods | ({"HEAD"} if "GET" in methods else set()))
            asked = "HEAD" if request.scope.get("hango_head") else request.method
            return JSONResponse({"detail": f"method {asked} is not allowed here; "
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
    app.add_exception_handler(HangoError, hango_error)  # DatabaseError too: 503, Retry-After
    app.add_exception_handler(psycopg.OperationalError, database_down)
    return app


async def _sweep_every(app: FastAPI, seconds: float) -> None:
    """The retention sweep (:mod:`hango.retention`), every ``seconds``, on a thread of its own."""
    one = CapacityLimiter(1)
    while True:
        await asyncio.sleep(seconds)
        try:
            swept = await anyio.to_thread.run_sync(
                lambda: retention.sweep(_db_of(app), app.state.hango_settings), limiter=one)
        except (DatabaseError, psycopg.Error) as exc:
            log.warning("hango: the retention sweep failed, next in %g s: %s", seconds, exc)
        else:
            log.info("hango: %s", swept)


def worker_app() -> FastAPI:
    """The app of one ``hango serve --workers N`` process: its own pool, opened before it
    serves, its own telemetry, on the database, settings and ``OTEL_*`` of the environment it
    inherited; its log level is the one uvicorn was given (``--log-level``)."""
    app = create_app(get_database(), sweep=True)
    level = logging.getLevelName(logging.getLogger("uvicorn.error").getEffectiveLevel())
    with_server_telemetry(app, log_level=str(level).lower())
    return app


def with_server_telemetry(app: FastAPI, *, prometheus: bool = False,
                          log_level: str = "info") -> Served:
    """What ``hango serve`` adds to the app: telemetry from the environment
    (:func:`hango.telemetry.server.serve_telemetry`), the run line and warnings on stderr, and
    ``/metrics`` when ``prometheus``. The app's lifespan flushes it at shutdown."""
    from hango.telemetry.prometheus import add_metrics_route
    from hango.telemetry.server import console_logging, serve_telemetry

    served = serve_telemetry(prometheus=prometheus)
    console_logging(log_level)
    app.state.hango_telemetry = served.telemetry
    app.state.hango_served = served
    if served.registry is not None:
        add_metrics_route(app, served.registry)
    return served


def serve_in_thread(
    app: ASGIApp, host: str = "127.0.0.1", port: int = 0, **uvicorn_options: Any
) -> tuple[str, Callable[[], None]]:
    """Serve ``app`` with uvicorn in a background thread; return ``(base_url, stop)``.

    ``port=0`` picks a free port. Notebooks and tests use this to get real HTTP on loopback
    inside one process; ``hango serve`` is the standalone server. ``uvicorn_options`` go to
    ``uvicorn.Config`` (a test's short ``timeout_keep_alive``, a bench's ``lifespan="off"``).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP: asyncio sets NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, **{"log_level": "warning", "access_log": False,
                                                      **uvicorn_options}))
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
