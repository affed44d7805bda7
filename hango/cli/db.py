"""``hango serve`` and ``hango db ...``: the files API, and the database it runs on.

The embedded server is driven through :mod:`hango.embedded` (the one module that knows the
wheel); an external one (``HANGO_DATABASE_URL``) is only reported on, never started or stopped.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

from hango import embedded
from hango.cli.common import CliError, open_db, say
from hango.db import APP_ROLE
from hango.settings import MAX_WORKERS, Settings


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from hango.api.app import create_app

    host, port = args.host or settings.host, args.port or settings.port
    workers = settings.workers if args.workers is None else args.workers
    source = "HANGO_WORKERS" if args.workers is None else "--workers"  # name what the user gave
    if not 1 <= workers <= MAX_WORKERS:
        raise CliError(f"--workers must be from 1 to {MAX_WORKERS}, got {workers}")
    if args.metrics and workers > 1:
        raise CliError(f"--metrics needs one worker (got {source}={workers}): each worker "
                       "process would count only the requests it served")
    db = open_db(settings)  # starts the embedded server if needed, applies the schema once
    if host not in ("127.0.0.1", "localhost", "::1"):
        say(f"warning: serving on {host}: bearer tokens travel in clear over plain HTTP")
    say(f"hango files API on http://{host}:{port}  (docs: /docs; database: "
         f"{'embedded' if db.embedded else 'external'} {settings.database_name}"
         f"{f'; {workers} worker processes' if workers > 1 else ''})")
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it; exit cleanly instead, so the
    # database handle is released (the embedded server stops when its last user leaves).
    signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        if workers > 1:
            # Each worker is a new process that imports the app and opens its own pool, from
            # the same HANGO_* environment; this one keeps the socket, the workers and the
            # embedded server's handle (and stops the workers on SIGTERM or Ctrl-C).
            uvicorn.run("hango.api.app:worker_app", factory=True, host=host, port=port,
                        workers=workers, log_level=args.log_level)
            return 0
        app = create_app(db, settings, sweep=True)
        if args.metrics:  # Prometheus text format for a scraper on this machine (loopback only)
            from opentelemetry import metrics

            from hango.telemetry import add_metrics_route, prometheus_meter_provider

            provider, registry = prometheus_meter_provider()
            metrics.set_meter_provider(provider)  # every Telemetry() of this process records into it
            add_metrics_route(app, registry)
            say(f"metrics: http://{host}:{port}/metrics (loopback clients only)")
        uvicorn.run(app, host=host, port=port, log_level=args.log_level)
    finally:
        db.close()
    return 0


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)



# --- db ----------------------------------------------------------------------------------------


def _url(params: dict[str, Any]) -> str:
    """A ``postgresql://`` URL from conninfo parameters (a socket directory goes in the query)."""
    rest = {k: str(v) for k, v in params.items() if v not in (None, "")}
    user, password = rest.pop("user", ""), rest.pop("password", "")
    host, port, dbname = rest.pop("host", ""), rest.pop("port", ""), rest.pop("dbname", "")
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    netloc = auth + "@" if auth else ""
    if host and not host.startswith("/") and "," not in host:
        netloc += host + (f":{port}" if port else "")
    else:
        rest = {**({"host": host} if host else {}), **({"port": port} if port else {}), **rest}
    query = urlencode(rest, safe="/")
    return f"postgresql://{netloc}/{quote(dbname, safe='')}" + (f"?{query}" if query else "")


def _app_url(settings: Settings) -> str:
    if settings.database_url is not None:
        # The app connects with these credentials and switches to hango_app with SET ROLE.
        return _url({**conninfo_to_dict(settings.database_url), "dbname": settings.database_name})
    info = embedded.postmaster(embedded.pgdata_of(settings))
    if info is None:
        raise CliError("the embedded server is not running; start it with `hango db start`")
    return _url({"user": APP_ROLE, "dbname": settings.database_name,
                 "host": str(info.socket_dir), "port": info.port})


def cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    external = settings.database_url is not None
    action = args.action
    if action == "url":
        print(_app_url(settings))
        return 0
    if action == "psql":
        return _psql(args, settings)
    if action == "sweep":
        from hango.retention import sweep

        if not 1 <= args.tenants <= 100_000:
            raise CliError(f"--tenants must be from 1 to 100000, got {args.tenants}")
        db = open_db(settings)
        try:
            print(sweep(db, settings, tenants=args.tenants))
        finally:
            db.close()
        return 0
    if external:
        where = _url(conninfo_to_dict(settings.database_url or ""))
        if action in ("start", "stop"):
            raise CliError(f"HANGO_DATABASE_URL is set: the server is external ({where}); "
                           f"hango does not {action} it")
        try:
            with psycopg.connect(settings.database_url or "", connect_timeout=5) as conn:
                version = conn.info.server_version
        except psycopg.OperationalError as exc:
            print(f"external PostgreSQL (HANGO_DATABASE_URL): unreachable: {exc}".strip())
            return 1
        print(f"external PostgreSQL (HANGO_DATABASE_URL): reachable, server {version}, "
              f"database {settings.database_name}")
        return 0
    pgdata = embedded.pgdata_of(settings)
    if action == "start":
        # pinned: this process leaving, or the last notebook or server leaving, does not stop
        # it; `hango db stop` does.
        server = embedded.start_pinned(pgdata)
        open_db(settings).close()  # creates the database and applies the schema
        print(f"embedded PostgreSQL running (pid {server.get_pid()}), data {pgdata}, "
              f"database {settings.database_name}; stop it with `hango db stop`")
        return 0
    if action == "status":
        info = embedded.postmaster(pgdata)
        if info is None:
            print(f"embedded PostgreSQL: stopped (data {pgdata})")
            return 1
        print(f"embedded PostgreSQL: running (pid {info.pid}), data {pgdata}, "
              f"socket {info.socket_dir}, database {settings.database_name}")
        return 0
    assert action == "stop"
    print("embedded PostgreSQL stopped" if embedded.stop(pgdata) else
          "embedded PostgreSQL was not running")
    return 0


def _psql(args: argparse.Namespace, settings: Settings) -> int:
    db = open_db(settings)  # starts the embedded server if needed, creates the database
    try:
        conninfo = db.app_conninfo if args.app else db.admin_conninfo
        extra = list(args.psql_args)
        if extra[:1] == ["--"]:
            extra = extra[1:]
        env = dict(os.environ)
        if args.app and not db.embedded:  # the app role through SET ROLE, like the app
            env["PGOPTIONS"] = f"-c role={APP_ROLE}"
        return subprocess.call([embedded.pg_bin("psql"), conninfo, *extra], env=env)
    finally:
        db.close()
