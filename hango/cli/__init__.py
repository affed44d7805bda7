"""The ``hango`` command: serve the files API, run the database, mint tenants, tokens and agents.

Every subcommand is a thin shell over a Python function a notebook can call directly
(:mod:`hango.agents`, :func:`hango.api.app.create_app`). Values go to stdout (a token, a URL, a
config) so they compose in a shell: ``TOKEN=$(hango token create acme --role owner)``; messages
and errors go to stderr, and a failure exits non-zero.

Here: the parser and :func:`main`. The commands: :mod:`hango.cli.db` (``serve``, ``db``),
:mod:`hango.cli.admin` (``tenant``, ``token``, ``agent``, ``proposals``, ``workshop``),
:mod:`hango.cli.files` (``files``, ``skills``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from hango.agents import ROLES, check_default_sources
from hango.cli.admin import (
    cmd_agent,
    cmd_proposals,
    cmd_runs,
    cmd_tenant,
    cmd_token,
    cmd_workshop,
)
from hango.cli.common import CliError
from hango.cli.db import cmd_db, cmd_serve
from hango.cli.files import cmd_files, cmd_skills
from hango.db import DatabaseError
from hango.embedded import EmbeddedError
from hango.settings import SettingsError, get_settings
from hango.telemetry.names import PHOENIX_LOCAL_ENDPOINT
from hango.workshop import AGENT as WORKSHOP_AGENT

__all__ = ["CliError", "main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hango", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the files API (loopback by default)")
    serve.add_argument("--host", help="interface (default HANGO_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default HANGO_PORT, 8765)")
    serve.add_argument("--workers", type=int,
                       help="server processes sharing the port (default HANGO_WORKERS, 1)")
    serve.add_argument("--log-level", default="info",
                       choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument("--metrics", action="store_true",
                       help="also serve /metrics (Prometheus text format) to loopback clients")
    serve.add_argument("--phoenix", nargs="?", const=PHOENIX_LOCAL_ENDPOINT, metavar="URL",
                       help="send traces to Arize Phoenix (`make traces`; default URL "
                            f"{PHOENIX_LOCAL_ENDPOINT}, or $PHOENIX_COLLECTOR_ENDPOINT)")
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
    sweep = db_sub.add_parser("sweep", help="delete runs (and their proposals) past "
                              "HANGO_RUNS_KEEP_DAYS or HANGO_RUNS_KEEP_MAX once, and count them")
    sweep.add_argument("--tenants", type=int, default=1000,
                       help="at most this many tenants, least recently swept first (1000)")
    db.set_defaults(func=cmd_db)

    tenant = sub.add_parser("tenant", help="tenants")
    tenant_sub = tenant.add_subparsers(dest="action", required=True, metavar="ACTION")
    tenant_create = tenant_sub.add_parser("create", help="create a tenant (idempotent)")
    tenant_create.add_argument("name")
    defaults = tenant_sub.add_parser(
        "defaults", help="show the tenant's defaults for its agents, or change the flags given")
    defaults.add_argument("name", metavar="tenant")
    defaults.add_argument("--memory", nargs="+", metavar="PATH", help="memory files")
    defaults.add_argument("--skills", nargs="+", metavar="DIR", help="skills directories")
    defaults.add_argument("--reserved-writes", choices=["refuse", "ask"])
    defaults.add_argument("--unset", nargs="+", choices=["memory", "skills", "reserved-writes"],
                          help="back to the server's HANGO_* setting")
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
    agent_create = agent_sub.add_parser(
        "create", help="create an agent (refused if it exists: change it with `agent set`)")
    agent_set = agent_sub.add_parser(
        "set", help="change only the given settings of an existing agent; the rest stays")
    for each, default in ((agent_create, " (default: {})"), (agent_set, "")):
        each.add_argument("tenant")
        each.add_argument("agent")
        each.add_argument("--tools", nargs="+", metavar="TOOL", help="the allowlist" + default.format(
            "the filesystem tools, and task with --subagents"))
        each.add_argument("--memory", nargs="+", metavar="PATH",
                          help="memory files under /memories/" + default.format("tenant default"))
        each.add_argument("--skills", nargs="+", metavar="DIR", help="skills directories under "
                          "/skills/" + default.format("tenant default"))
        each.add_argument("--subagents", nargs="+", metavar="AGENT",
                          help="agents its task tool may run" + default.format("none"))
        each.add_argument("--system-prompt", metavar="TEXT", help="its base prompt" + default.format(
            "hango's realistic base prompt, long enough to be cached; hango.agent.base_prompt"))
        each.add_argument("--reserved-writes", choices=["refuse", "ask"],
                          help="agent writes under /memories/, /skills/: refused, or proposed"
                               + default.format("HANGO_RESERVED_WRITES"))
    agent.set_defaults(func=cmd_agent)

    files = sub.add_parser("files", help="sync a local folder with an agent's files (over HTTP)")
    files_sub = files.add_subparsers(dest="action", required=True, metavar="ACTION")
    files_push = files_sub.add_parser("push", help="write LOCAL_DIR's files under REMOTE_DIR")
    files_push.add_argument("local", metavar="LOCAL_DIR")
    files_push.add_argument("remote", metavar="REMOTE_DIR", help="e.g. /skills/")
    files_pull = files_sub.add_parser("pull", help="copy REMOTE_DIR's files into LOCAL_DIR")
    files_pull.add_argument("remote", metavar="REMOTE_DIR")
    files_pull.add_argument("local", metavar="LOCAL_DIR")
    files_pull.add_argument("--force", action="store_true",
                            help="replace local files edited since the last pull")
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
    run = sub.add_parser("runs", help="an agent's runs")
    run_sub = run.add_subparsers(dest="action", required=True, metavar="ACTION")
    runs_list = run_sub.add_parser("list", help="the runs, newest first: id, status, "
                                   "created, started by, the proposal it waits for")
    runs_list.add_argument("tenant")
    runs_list.add_argument("agent")
    runs_list.add_argument("--status", default="all",
                           choices=["interrupted", "resuming", "done", "failed", "all"])
    release = run_sub.add_parser(
        "release", help="free the claim of a resume that died, so the run can be resumed now")
    for name in ("tenant", "agent", "run"):
        release.add_argument(name)
    run.set_defaults(func=cmd_runs)
    workshop = sub.add_parser("workshop", help="many learners at once")
    workshop_sub = workshop.add_subparsers(dest="action", required=True, metavar="ACTION")
    provision = workshop_sub.add_parser(
        "provision", help="a tenant, an owner token and an agent per learner; CSV on stdout")
    provision.add_argument("--learners", type=int, required=True)
    provision.add_argument("--prefix", default="learner", help="tenant ids are PREFIX-01 ...")
    provision.add_argument("--agent", default=WORKSHOP_AGENT,
                           help=f"the agent id each learner gets (default: {WORKSHOP_AGENT}, as "
                                "in the README and the notebooks)")
    provision.add_argument("--revoke-earlier", action="store_true",
                           help="revoke the owner tokens an earlier provision made for them")
    remove = workshop_sub.add_parser(
        "remove", help="delete every tenant PREFIX-NN, with its agents, files and tokens")
    remove.add_argument("--prefix", default="learner")
    remove.add_argument("--yes", action="store_true", help="yes, delete them")
    room = workshop_sub.add_parser(
        "room", help="every learner PREFIX-NN: last activity, runs by status, pending proposals, "
                     "exercises passed, the last error (an admin read across tenants)")
    room.add_argument("--prefix", default="learner")
    room.add_argument("--watch", type=float, metavar="SECONDS",
                      help="redraw every SECONDS (at least 1) until --for has passed or Ctrl-C")
    room.add_argument("--for", dest="watch_for", type=float, default=3600, metavar="SECONDS",
                      help="how long --watch goes on (default 3600, at most 86400)")
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
        return int(args.func(args, check_default_sources(get_settings())))
    except (CliError, SettingsError, DatabaseError, EmbeddedError, ValueError) as exc:
        print(f"hango: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader left (``hango workshop room --watch 5 | head``)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141
