"""``hango tenant|token|agent|proposals|workshop``: what an operator does at the shell.

Each is a thin shell over :mod:`hango.agents`, :mod:`hango.agent.proposals` or
:mod:`hango.workshop`, which a notebook calls directly.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from pydantic import ValidationError

from hango.agent.base_prompt import BASE_PROMPT
from hango.agents import (
    AgentConfig,
    create_agent,
    create_tenant,
    expiry_from,
    list_tokens,
    load_agent,
    load_tenant_defaults,
    mint_token,
    revoke_token,
    save_tenant_defaults,
    update_agent,
)
from hango.cli.common import CliError, open_db, say
from hango.db import Database
from hango.errors import HangoError
from hango.settings import Settings


def _missing_tenant(tenant: str) -> CliError:
    return CliError(f"no tenant {tenant!r}: create it with `hango tenant create {tenant}`")


def cmd_tenant(args: argparse.Namespace, settings: Settings) -> int:
    """``tenant create``; ``tenant defaults``: show, or change only the flags given (as an
    owner's ``PUT /v1/tenant/defaults``; ``--unset``: back to the server's setting)."""
    db = open_db(settings)
    try:
        if args.action == "create":
            print(create_tenant(db, args.name))
            return 0
        changes: dict[str, Any] = {key.replace("-", "_"): None for key in args.unset or ()}
        for key in ("memory", "skills", "reserved_writes"):
            value = _split(getattr(args, key)) if key != "reserved_writes" else args.reserved_writes
            if value is not None:
                changes[key] = value
        defaults = (save_tenant_defaults(db, args.name, changes) if changes
                    else load_tenant_defaults(db, args.name))
        if defaults is None:
            raise _missing_tenant(args.name)
    except ValidationError as exc:
        raise CliError("; ".join(str(e["msg"]).removeprefix("Value error, ")
                                 for e in exc.errors())) from None
    finally:
        db.close()
    print(json.dumps({**defaults.model_dump(), "server": {
        "memory": settings.memory_default_sources, "skills": settings.skills_default_sources,
        "reserved_writes": settings.reserved_writes}}, indent=2))
    return 0


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    expires = expiry_from(args.expires) if getattr(args, "expires", None) else None
    db = open_db(settings)
    try:
        if args.action == "create":
            token, token_id = mint_token(db, args.tenant, args.role, args.label, expires)
            print(token)
            say(f"token id {token_id}" + (f", expires {expires:%Y-%m-%d %H:%M:%S %Z}"
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
            now = datetime.now(UTC)
            if not any(t.role == "owner" and (t.expires_at is None or t.expires_at > now)
                       for t in list_tokens(db, tenant)):
                say(f"note: tenant {tenant} has no owner token now; `hango token create "
                    f"{tenant} --role owner` makes one")
    except psycopg.errors.ForeignKeyViolation:
        raise _missing_tenant(args.tenant) from None
    finally:
        db.close()
    return 0


def _print_tokens(db: Database, tenant: str) -> None:
    """One line a token, tab-separated: never the secret (only its digest is stored)."""
    def when(moment: datetime | None, none: str) -> str:
        return none if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    with db.admin(tenant) as conn:
        if conn.execute("SELECT 1 FROM tenants WHERE tenant_id = %s", [tenant]).fetchone() is None:
            raise _missing_tenant(tenant)
    print("\t".join(("id", "role", "label", "created", "last_used", "expires")))
    for t in list_tokens(db, tenant):
        print("\t".join((t.token_id, t.role, _printable(t.label),
                         when(t.created_at, "-"), when(t.last_used_at, "never"),
                         when(t.expires_at, "never"))))


def _printable(text: str) -> str:
    """``text`` with each character a terminal would act on, or not show, written as its
    escape (``\\x1b``): labels stored before control characters were refused, or by SQL."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _split(values: list[str] | None) -> list[str] | None:
    """``--tools a b`` and ``--tools a,b`` both work."""
    if values is None:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def cmd_agent(args: argparse.Namespace, settings: Settings) -> int:
    """``agent create`` refuses an existing agent (its config would be replaced whole, earlier
    ``--tools`` or ``--memory`` lost); ``agent set`` changes only the flags given."""
    fields: dict[str, Any] = {}
    for key in ("tools", "memory", "skills", "subagents"):
        value = _split(getattr(args, key))
        if value is not None:
            fields[key] = value
    for key in ("system_prompt", "reserved_writes"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    where = f"{args.agent!r} in tenant {args.tenant!r}"
    if args.action == "set" and not fields:
        raise CliError("nothing to change: give at least one of --tools, --memory, --skills, "
                       "--subagents, --system-prompt, --reserved-writes")
    db = open_db(settings)
    try:
        if args.action == "create":
            if "subagents" in fields and "tools" not in fields:  # or it could not call them
                fields["tools"] = [*AgentConfig().tools, "task"]
            config = create_agent(db, args.tenant, args.agent,
                                  AgentConfig(**{"system_prompt": BASE_PROMPT, **fields}))
            if config is None:
                raise CliError(f"agent {where} already exists; nothing was changed. To change "
                               f"some of its settings: `hango agent set {args.tenant} "
                               f"{args.agent} --tools ...` (only the flags you give change)")
        else:
            config = update_agent(db, args.tenant, args.agent, fields)
            if config is None:
                raise CliError(f"no agent {where}: create it with `hango agent create "
                               f"{args.tenant} {args.agent}`")
    except ValidationError as exc:
        raise CliError("; ".join(str(e["msg"]).removeprefix("Value error, ")
                                 for e in exc.errors())) from None
    except psycopg.errors.ForeignKeyViolation:
        raise _missing_tenant(args.tenant) from None
    finally:
        db.close()
    print(json.dumps(config.model_dump(), indent=2))
    return 0


# --- proposals ---------------------------------------------------------------------------------


def cmd_proposals(args: argparse.Namespace, settings: Settings) -> int:
    """What the proposals endpoints do, for an operator at the shell (who acts as an admin)."""
    import getpass

    from hango.agent import proposals as p

    db = open_db(settings)
    by = f"cli:{getattr(args, 'by', None) or getpass.getuser()}"
    try:
        if args.action == "list":
            cursor, seen = None, 0
            while True:  # page after page, oldest first
                found = p.list_proposals(db, args.tenant, args.agent,
                                         None if args.status == "all" else args.status,
                                         cursor=cursor)
                for item in found:
                    print(f"{item.proposal_id}\t{item.status}\t{item.operation}\t{item.path}")
                seen += len(found)
                if (cursor := found.next_cursor) is None:
                    break
            if not seen:
                say(f"no {args.status} proposals for {args.tenant}/{args.agent}")
        elif args.action == "show":
            item, diff = p.get(db, args.tenant, args.agent, args.id)
            print(json.dumps({**p.view(item), "diff": diff}, indent=2))
        elif args.action == "approve":
            content = Path(args.content_file).read_text("utf-8") if args.content_file else None
            config = load_agent(db, args.tenant, args.agent)
            item = p.approve(db, args.tenant, args.agent, args.id, by=by, role="admin",
                             content=content, base_version=args.base_version, reason=args.reason,
                             allowlist=frozenset(config.tools if config else ()),
                             settings=settings)
            print(f"approved: {item.path} is at version {item.written_version}")
        else:
            item = p.reject(db, args.tenant, args.agent, args.id, by=by, role="admin",
                            reason=args.reason)
            print(f"rejected: {item.proposal_id} ({item.reason})")
    except p.ProposalConflict as exc:
        raise CliError(f"{exc}\n{exc.diff}") from None
    except (HangoError, LookupError) as exc:  # a proposal error, a cap, a quota, a conflict
        raise CliError(str(exc)) from None
    finally:
        db.close()
    return 0


def cmd_runs(args: argparse.Namespace, settings: Settings) -> int:
    """``hango runs list``: newest first, page after page (as ``GET .../runs``); ``hango runs
    release``: free the claim of a resume that died (as the API's release)."""
    from hango.agent import resuming, runs

    db = open_db(settings)
    try:
        if args.action == "list":
            cursor, seen = None, 0
            while True:
                found = runs.list_runs(db, args.tenant, args.agent,
                                       None if args.status == "all" else args.status,
                                       cursor=cursor)
                for r in found:
                    print("\t".join((r["run_id"], r["status"], r["created_at"],
                                     r["started_by"] or "-", r["proposal_id"] or "-")))
                seen += len(found)
                if (cursor := found.next_cursor) is None:
                    break
            if not seen:
                say(f"no {'' if args.status == 'all' else args.status + ' '}runs for "
                    f"{args.tenant}/{args.agent}")
            return 0
        run = runs.load(db, args.tenant, args.run)
        if run["agent_id"] != args.agent or not resuming.release(db, args.tenant, args.run):
            raise CliError(f"run {args.run} of {args.tenant}/{args.agent} is "
                           f"{run['status'] if run['agent_id'] == args.agent else 'not there'}"
                           ", not being resumed: there is no claim to release")
        print(f"released: run {args.run} is interrupted again; resume it to go on")
    except runs.RunNotFound as exc:
        raise CliError(str(exc)) from None
    finally:
        db.close()
    return 0


# --- workshop ----------------------------------------------------------------------------------


def cmd_workshop(args: argparse.Namespace, settings: Settings) -> int:
    from hango.workshop import as_csv, provision, remove

    if args.action == "room":
        return _room(args, settings)
    if args.action == "remove" and not args.yes:
        raise CliError(f"this deletes every tenant {args.prefix}-NN with all its files and "
                       "tokens: add --yes to do it")
    db = open_db(settings)
    try:
        if args.action == "remove":
            gone = remove(db, args.prefix)
            print(f"removed {len(gone)} tenant(s)" + (f": {gone[0]} ... {gone[-1]}" if gone else
                                                     f"; none matched {args.prefix}-NN"))
            return 0
        provisioned = provision(db, args.learners, prefix=args.prefix, agent=args.agent,
                                revoke_earlier=args.revoke_earlier)
    finally:
        db.close()
    sys.stdout.write(as_csv(provisioned.seats))
    say(provisioned.summary())
    return 0


def _room(args: argparse.Namespace, settings: Settings) -> int:
    """The room view, once or redrawn every ``--watch`` seconds for at most ``--for`` seconds."""
    import time

    from hango.exercises import EXERCISES
    from hango.room import render, room

    if args.watch is not None and not 1 <= args.watch <= 3600:
        raise CliError(f"--watch takes 1 to 3600 seconds, got {args.watch:g}")
    if not 0 < args.watch_for <= 86400:
        raise CliError(f"--for takes up to 86400 seconds, got {args.watch_for:g}")
    db = open_db(settings)
    try:
        ends = time.monotonic() + args.watch_for
        while True:
            table = render(room(db, args.prefix), len(EXERCISES), datetime.now(UTC))
            if args.watch is not None and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[2J")  # redraw in place
            print(table, flush=True)
            if args.watch is None or time.monotonic() + args.watch > ends:
                return 0
            time.sleep(args.watch)
            if args.watch is not None and not sys.stdout.isatty():
                print()
    finally:
        db.close()
