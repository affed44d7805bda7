"""``hango serve`` and ``hango db ...``: the files API, and the database it runs on.

The embedded server is driven through :mod:`hango.embedded` (the one module that knows the
wheel); an external one (``HANGO_DATABASE_URL``) is only reported on, never started or stopped.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess

import psycopg
from psycopg.conninfo import conninfo_to_dict

from hango import embedded
from hango.cli.common import CliError, open_db, say
from hango.db import APP_ROLE, database_name
from hango.db_errors import hide_password, server_said, url_of
from hango.doctor import connection_budget, status
from hango.settings import MAX_WORKERS, Settings


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from hango.api.app import create_app, with_server_telemetry

    host, port = args.host or settings.host, args.port or settings.port
    workers = settings.workers if args.workers is None else args.workers
    source = "HANGO_WORKERS" if args.workers is None else "--workers"  # name what the user gave
    if not 1 <= workers <= MAX_WORKERS:
        raise CliError(f"--workers must be from 1 to {MAX_WORKERS}, got {workers}")
    if args.metrics and workers > 1:
        raise CliError(f"--metrics needs one worker (got {source}={workers}): each worker "
                       "process would count only the requests it served")
    _say_telemetry(args)
    db = open_db(settings)  # starts the embedded server if needed, applies the schema once
    if host not in ("127.0.0.1", "localhost", "::1"):
        say(f"warning: serving on {host}: bearer tokens travel in clear over plain HTTP")
    say(f"hango files API on http://{host}:{port}  (docs: /docs; database: "
         f"{'embedded' if db.embedded else 'external'} {db.name}"
         f"{f'; {workers} worker processes' if workers > 1 else ''})")
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it; exit cleanly instead, so the
    # database handle is released (the embedded server stops when its last user leaves).
    signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        if workers > 1:
            # Each worker is a new process that imports the app and opens its own pool, from
            # the same HANGO_* environment; this one keeps the socket, the workers and the
            # embedded server's handle (and stops the workers on SIGTERM or Ctrl-C), and holds
            # no connection.
            db.close()
            uvicorn.run("hango.api.app:worker_app", factory=True, host=host, port=port,
                        workers=workers, log_level=args.log_level)
            return 0
        app = create_app(db, settings, sweep=True)
        # The app's lifespan flushes it at shutdown: the last runs' spans reach the backend.
        with_server_telemetry(app, prometheus=args.metrics, log_level=args.log_level)
        if args.metrics:  # Prometheus text format for a scraper on this machine (loopback only)
            say(f"metrics: http://{host}:{port}/metrics (loopback clients only)")
        uvicorn.run(app, host=host, port=port, log_level=args.log_level)
    finally:
        db.close()
    return 0


def _say_telemetry(args: argparse.Namespace) -> None:
    """Where the server's telemetry goes; refuses a setting it cannot honour before serving."""
    from hango.telemetry.content import capture_from_env
    from hango.telemetry.server import langfuse_keys, server_endpoints

    if args.phoenix:  # the workers inherit it: one setting for every process
        os.environ["PHOENIX_COLLECTOR_ENDPOINT"] = args.phoenix
    capture = capture_from_env()
    where = [f"{signal} -> {url}" for signal, url in server_endpoints().items() if url]
    if os.environ.get("PHOENIX_COLLECTOR_ENDPOINT"):
        where.append(f"traces -> Phoenix {os.environ['PHOENIX_COLLECTOR_ENDPOINT']}")
    if langfuse_keys() is not None:
        where.append(f"traces -> Langfuse {os.environ.get('LANGFUSE_BASE_URL', 'cloud')}")
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        where = ["off (OTEL_SDK_DISABLED=true)"]
    say("telemetry: " + ("; ".join(where) if where else
                         "not exported (set OTEL_EXPORTER_OTLP_ENDPOINT, --phoenix or the "
                         "LANGFUSE_* keys)")
        + ("; prompts captured (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)"
           if capture and where else ""))


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)



# --- db ----------------------------------------------------------------------------------------


def _app_url(settings: Settings) -> str:
    if settings.database_url is not None:
        # The app connects with these credentials; each of its transactions takes hango_app.
        return url_of({**conninfo_to_dict(settings.database_url),
                       "dbname": database_name(settings)}, password=True)
    info = embedded.postmaster(embedded.pgdata_of(settings))
    if info is None:
        raise CliError("the embedded server is not running; start it with `hango db start`")
    return url_of({"user": APP_ROLE, "dbname": database_name(settings),
                   "host": str(info.socket_dir), "port": info.port}, password=True)


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
        where = hide_password(_app_url(settings))
        if action in ("start", "stop"):
            raise CliError(f"HANGO_DATABASE_URL is set: the server is external ({where}); "
                           f"hango does not {action} it")
        return _status(f"external PostgreSQL ({where})", _app_url(settings), settings)
    pgdata = embedded.pgdata_of(settings)
    if action == "start":
        # pinned: this process leaving, or the last notebook or server leaving, does not stop
        # it; `hango db stop` does.
        server = embedded.start_pinned(pgdata)
        db = open_db(settings)  # creates the database and applies the schema
        db.close()
        print(f"embedded PostgreSQL running (pid {server.get_pid()}), data {pgdata}, "
              f"database {db.name}; stop it with `hango db stop`")
        return 0
    if action == "status":
        info = embedded.postmaster(pgdata)
        if info is None:  # a state, not an error: the next notebook or command starts it
            print(f"embedded PostgreSQL: stopped (data {pgdata}); it starts on first use, "
                  "or with `hango db start`")
            return 0
        using = embedded.users(pgdata)
        count = len([pid for pid in using if pid != embedded.PIN])
        held = ("pinned by `hango db start`" if embedded.PIN in using else
                "stops when the last process using it exits" if count else
                "by no live process (its last user was killed): `hango db stop` stops it")
        return _status(f"embedded PostgreSQL: running (pid {info.pid}), data {pgdata}, "
                       f"socket {info.socket_dir}; used by {count} process(es), {held}",
                       _app_url(settings), settings)
    assert action == "stop"
    print("embedded PostgreSQL stopped" if embedded.stop(pgdata) else
          "embedded PostgreSQL was not running")
    return 0


def _status(server: str, app_url: str, settings: Settings) -> int:
    """``hango db status``: the server, and what a transaction of the app runs as."""
    name = database_name(settings)
    try:
        found = status(app_url, settings)
    except psycopg.OperationalError as exc:
        said = server_said(exc)
        if f'database "{name}" does not exist' in said:
            print(f"{server}: reachable; database {name} does not exist yet (hango creates it "
                  "at its first start, if the URL's role may)")
            return 1
        print(f"{server}: unreachable: {said}")
        return 1
    except psycopg.Error as exc:
        print(f"{server}: reachable, but a transaction of the app could not start: "
              f"{type(exc).__name__}: {server_said(exc)}")
        return 1
    print(f"{server}: reachable, server {found.version}, database {name}")
    print(f"  connects as: {found.login}" + (" (a superuser: it bypasses row-level security)"
                                              if found.superuser else " (not a superuser)"))
    if not found.set_up:
        print("  hango is not set up in this database yet: its first start does it")
        return 0
    print(f"  a transaction of the app runs as: {found.app_role}")
    print(f"  row-level security: forced on {found.forced} of {found.tables} tenant tables")
    print(f"  pooler: HANGO_DATABASE_POOLER={settings.database_pooler} (prepared statements "
          f"{'off' if settings.database_pooler == 'transaction' else 'on'})")
    print(f"  connections: {connection_budget(settings)}")
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
