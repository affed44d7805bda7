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

from hango.agents import (
    AgentConfig,
    create_tenant,
    expiry_from,
    list_tokens,
    load_agent,
    mint_token,
    revoke_token,
    save_agent,
)
from hango.cli.common import CliError, open_db, say
from hango.db import Database
from hango.settings import Settings


def _missing_tenant(tenant: str) -> CliError:
    return CliError(f"no tenant {tenant!r}: create it with `hango tenant create {tenant}`")


def cmd_tenant(args: argparse.Namespace, settings: Settings) -> int:
    db = open_db(settings)
    try:
        print(create_tenant(db, args.name))
    finally:
        db.close()
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

    with db.admin() as conn:
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
    db = open_db(settings)
    try:
        save_agent(db, args.tenant, args.agent, config)
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
            found = p.list_proposals(db, args.tenant, args.agent,
                                     None if args.status == "all" else args.status)
            for item in found:
                print(f"{item.proposal_id}\t{item.status}\t{item.operation}\t{item.path}")
            if not found:
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

    db = open_db(settings)
    try:
        seats = provision(db, args.learners, prefix=args.prefix, agent=args.agent)
    finally:
        db.close()
    sys.stdout.write(as_csv(seats))
    say(f"{len(seats)} learners provisioned; the tokens are shown only this once")
    return 0
