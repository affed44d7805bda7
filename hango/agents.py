"""Tenants, agents and API tokens: their rows, and every statement on them.

An agent's config (:class:`~hango.agent_config.AgentConfig`, re-exported here) lives in the
``agents`` table; this module is the only one that reads or writes that table.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

import psycopg

from hango.agent_config import COURSE_AGENT as COURSE_AGENT
from hango.agent_config import ID_PATTERN as ID_PATTERN  # re-exported: callers import them here
from hango.agent_config import TOOL_PATTERN as TOOL_PATTERN
from hango.agent_config import AgentConfig as AgentConfig
from hango.agent_config import TenantDefaults as TenantDefaults
from hango.agent_config import check_default_sources as check_default_sources
from hango.db import Database
from hango.fs.path import ROLES as ROLES  # re-exported: the CLI reads it here


@dataclass(frozen=True)
class Principal:
    """Who is calling the files API: a tenant and a role."""

    tenant_id: str
    role: str


def _check_id(kind: str, value: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(ID_PATTERN, value):
        raise ValueError(f"{kind} {value!r} must match {ID_PATTERN}")
    return value


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def create_tenant(db: Database, tenant_id: str) -> str:
    """Create a tenant (idempotent). An admin operation, as the owner in that tenant."""
    _check_id("tenant id", tenant_id)
    with db.admin(tenant_id) as conn:
        conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING",
                     [tenant_id])
    return tenant_id


def drop_tenant(db: Database, tenant_id: str) -> None:
    """Delete a tenant with its agents, files and tokens (notebooks start from a clean slate)."""
    with db.admin(tenant_id) as conn:
        conn.execute("DELETE FROM tenants WHERE tenant_id = %s", [tenant_id])


@dataclass(frozen=True)
class TokenInfo:
    """What may be shown of a token: never the secret, which only its creator ever sees."""

    token_id: str
    role: str
    label: str
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None


# Unicode's Cc, Zl, Zp, the inside of a [...] class: no label holds one (an escape sequence would
# drive the terminal of whoever lists the tokens). The API's schema states the same pattern.
LABEL_CONTROL = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
_TOKEN_COLUMNS = "token_id, role, label, created_at, last_used_at, expires_at"
_DURATION = re.compile(r"(\d{1,6})([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def expiry_from(text: str, now: datetime | None = None) -> datetime:
    """``30d``, ``12h``, ``90m``, ``45s`` from now, or an ISO date/time (UTC unless it says)."""
    now = now or datetime.now(UTC)
    found = _DURATION.fullmatch(text.strip())
    if found:
        return now + timedelta(**{_UNITS[found[2]]: int(found[1])})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"expiry {text!r} is neither a duration such as 30d, 12h, 90m, 45s nor "
                         "an ISO date or time such as 2027-01-31 or 2027-01-31T12:00Z") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _check_token_fields(role: str, label: str, expires_at: datetime | None) -> datetime | None:
    if role not in ROLES:
        raise ValueError(f"role {role!r} must be one of {', '.join(ROLES)}")
    if not isinstance(label, str) or len(label) > 200:
        raise ValueError("label must be text of at most 200 characters")
    control = re.search(f"[{LABEL_CONTROL}]", label)
    if control is not None:
        raise ValueError(f"label must not contain control characters: U+{ord(control[0]):04X} "
                         f"at position {control.start()}")
    if expires_at is None:
        return None
    if expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)
    if expires_at <= datetime.now(UTC):
        raise ValueError(f"expiry {expires_at.isoformat()} is not in the future")
    return expires_at


def mint_token(db: Database, tenant_id: str, role: str, label: str = "",
               expires_at: datetime | None = None) -> tuple[str, str]:
    """Mint a bearer token; return ``(token, token_id)``. Only its SHA-256 digest is stored.

    ``expires_at`` (optional): from then on the token is refused (401), as if revoked."""
    expires_at = _check_token_fields(role, label, expires_at)
    token, token_id = "hango_" + secrets.token_urlsafe(24), secrets.token_hex(8)
    with db.admin() as conn:
        conn.execute(
            """INSERT INTO api_tokens (token_sha256, tenant_id, role, label, token_id, expires_at)
               VALUES (%s, %s, %s, %s, %s, %s)""",
            [token_digest(token), _check_id("tenant id", tenant_id), role, label, token_id,
             expires_at],
        )
    return token, token_id


def create_token(db: Database, tenant_id: str, role: str, label: str = "",
                 expires_at: datetime | None = None) -> str:
    """Mint a bearer token for a tenant (see :func:`mint_token`) and return it."""
    return mint_token(db, tenant_id, role, label, expires_at)[0]


def list_tokens(db: Database, tenant_id: str) -> list[TokenInfo]:
    """A tenant's tokens, oldest first (an admin operation: ``api_tokens`` has no RLS)."""
    with db.admin() as conn:
        rows = conn.execute(f"SELECT {_TOKEN_COLUMNS} FROM api_tokens WHERE tenant_id = %s "
                            "ORDER BY created_at, token_id", [tenant_id]).fetchall()
    return [TokenInfo(*row) for row in rows]


def revoke_token(db: Database, token_id: str) -> str | None:
    """Delete a token by id: from the next request on it is 401. Returns its tenant, or None."""
    with db.admin() as conn:
        row = conn.execute("DELETE FROM api_tokens WHERE token_id = %s RETURNING tenant_id",
                           [token_id]).fetchone()
    return None if row is None else str(row[0])


def principal_for(db: Database, token: str) -> Principal | None:
    """Who a token is: ``None`` when unknown, revoked or expired."""
    with db.app() as conn:
        row = conn.execute("SELECT tenant_id, role FROM hango_principal(%s)",
                           [token_digest(token)]).fetchone()
    return None if row is None else Principal(row[0], row[1])


# An owner's own tokens, over the API: as hango_app, through the SECURITY DEFINER functions,
# which find the tenant from the caller's own (live, owner) token and nothing else.

def owner_list_tokens(db: Database, caller: str) -> list[TokenInfo]:
    with db.app() as conn:
        rows = conn.execute(f"SELECT {_TOKEN_COLUMNS} FROM hango_token_list(%s)",
                            [token_digest(caller)]).fetchall()
    return [TokenInfo(*row) for row in rows]


def owner_create_token(db: Database, caller: str, role: str, label: str = "",
                       expires_at: datetime | None = None) -> tuple[str, TokenInfo] | None:
    """A new token in the caller's tenant, or ``None`` if the caller is not a live owner."""
    expires_at = _check_token_fields(role, label, expires_at)
    token = "hango_" + secrets.token_urlsafe(24)
    with db.app() as conn:
        row = conn.execute(f"SELECT {_TOKEN_COLUMNS} FROM hango_token_create(%s, %s, %s, %s, %s, %s)",
                           [token_digest(caller), token_digest(token), secrets.token_hex(8),
                            role, label, expires_at]).fetchone()
    return None if row is None else (token, TokenInfo(*row))


def owner_revoke_token(db: Database, caller: str, token_id: str) -> bool | None:
    """``False``: the caller's tenant has no such token; ``None``: the caller is no live owner
    now. The tenant's last live owner token is a ``CheckViolation``: nothing is revoked."""
    with db.app() as conn:
        row = conn.execute("SELECT hango_token_revoke(%s, %s)",
                           [token_digest(caller), token_id]).fetchone()
    return None if row is None or row[0] is None else bool(row[0])


def save_agent(db: Database, tenant_id: str, agent_id: str,
               config: AgentConfig | None = None) -> AgentConfig:
    """Create or replace an agent's config in its tenant."""
    _check_id("agent id", agent_id)
    config = (config or AgentConfig()).for_agent(agent_id)
    with db.tenant(tenant_id) as conn:
        conn.execute(
            """INSERT INTO agents (tenant_id, agent_id, config) VALUES (%s, %s, %s)
               ON CONFLICT (tenant_id, agent_id) DO UPDATE
                  SET config = EXCLUDED.config, updated_at = now()""",
            [tenant_id, agent_id, config.model_dump_json(exclude_none=False)],
        )
    return config


def create_agent(db: Database, tenant_id: str, agent_id: str,
                 config: AgentConfig) -> AgentConfig | None:
    """Create an agent; ``None`` (and nothing changed) when the tenant has one of that id."""
    _check_id("agent id", agent_id)
    config = config.for_agent(agent_id)
    with db.tenant(tenant_id) as conn:
        row = conn.execute(
            """INSERT INTO agents (tenant_id, agent_id, config) VALUES (%s, %s, %s)
               ON CONFLICT (tenant_id, agent_id) DO NOTHING RETURNING 1""",
            [tenant_id, agent_id, config.model_dump_json(exclude_none=False)]).fetchone()
    return config if row is not None else None


def update_agent(db: Database, tenant_id: str, agent_id: str,
                 changes: dict[str, Any]) -> AgentConfig | None:
    """Change only ``changes`` in an existing agent's config, validated whole; ``None`` when
    there is no such agent. The row is locked while it is read and written, so two updates at
    once each keep the other's fields. A bad value raises pydantic's ``ValidationError``."""
    _check_id("agent id", agent_id)
    with db.tenant(tenant_id) as conn:
        row = conn.execute("SELECT config FROM agents WHERE tenant_id = %s AND agent_id = %s "
                           "FOR UPDATE", [tenant_id, agent_id]).fetchone()
        if row is None:
            return None
        config = AgentConfig.model_validate({**row[0], **changes},
                                            context={"agent_id": agent_id})
        conn.execute("UPDATE agents SET config = %s, updated_at = now() "
                     "WHERE tenant_id = %s AND agent_id = %s",
                     [config.model_dump_json(exclude_none=False), tenant_id, agent_id])
    return config


def load_agent(db: Database, tenant_id: str, agent_id: str) -> AgentConfig | None:
    with db.tenant(tenant_id) as conn:
        row = conn.execute(
            "SELECT config FROM agents WHERE tenant_id = %s AND agent_id = %s",
            [tenant_id, agent_id],
        ).fetchone()
    return None if row is None else AgentConfig.model_validate(row[0])


# A run's config: the agent's row and its tenant's defaults, as JSON text (the speed layer sends
# it in the round trip that starts a run, and keeps what it parsed by that text).
RUN_CONFIG_QUERY: LiteralString = (
    "SELECT a.config::text, t.defaults::text FROM agents a JOIN tenants t USING (tenant_id) "
    "WHERE a.tenant_id = %(t)s AND a.agent_id = %(a)s")


def run_config(config_json: str, defaults_json: str) -> AgentConfig:
    """A row of :data:`RUN_CONFIG_QUERY` as the config a run uses."""
    return TenantDefaults.model_validate_json(defaults_json).apply(
        AgentConfig.model_validate_json(config_json))


def load_run_config(db: Database, tenant_id: str, agent_id: str) -> AgentConfig | None:
    """An agent's config with what it leaves out taken from its tenant's defaults: one query
    (a run's). Still ``None`` where neither sets it: the server's settings decide then."""
    with db.tenant(tenant_id) as conn:
        row = conn.execute(RUN_CONFIG_QUERY, {"t": tenant_id, "a": agent_id}).fetchone()
    return None if row is None else run_config(row[0], row[1])


def load_tenant_defaults(db: Database, tenant_id: str) -> TenantDefaults | None:
    """A tenant's defaults; ``None`` when there is no such tenant."""
    with db.tenant(tenant_id) as conn:
        row = conn.execute("SELECT defaults FROM tenants WHERE tenant_id = %s",
                           [tenant_id]).fetchone()
    return None if row is None else TenantDefaults.model_validate(row[0])


def save_tenant_defaults(db: Database, tenant_id: str,
                         changes: dict[str, Any]) -> TenantDefaults | None:
    """Change only ``changes`` in a tenant's defaults (a value ``None``: back to the server's
    setting), validated whole, under the tenant's row lock; ``None`` when there is no tenant.
    A bad value raises pydantic's ``ValidationError``."""
    with db.tenant(tenant_id) as conn:
        row = conn.execute("SELECT defaults FROM tenants WHERE tenant_id = %s FOR NO KEY UPDATE",
                           [tenant_id]).fetchone()
        if row is None:
            return None
        defaults = TenantDefaults.model_validate({**row[0], **changes})
        conn.execute("UPDATE tenants SET defaults = %s WHERE tenant_id = %s",
                     [defaults.model_dump_json(exclude_none=True), tenant_id])
    return defaults


def agent_exists(db: Database, tenant_id: str, agent_id: str) -> bool:
    with db.tenant(tenant_id) as conn:
        row = conn.execute("SELECT 1 FROM agents WHERE tenant_id = %s AND agent_id = %s",
                           [tenant_id, agent_id]).fetchone()
    return row is not None


def lock_agent(conn: psycopg.Connection[Any], tenant_id: str, agent_id: str) -> None:
    """Hold the agent's row lock until ``conn``'s transaction ends: a bound counted per agent
    (pending proposals) is then checked by one run of that agent at a time.

    ``FOR NO KEY UPDATE``, not ``FOR UPDATE``: a row inserted into ``runs`` (or any table whose
    foreign key names the agent) takes ``FOR KEY SHARE`` on the agent's row, which conflicts
    with ``FOR UPDATE`` only. Two runs that each had inserted their run and then asked for
    ``FOR UPDATE`` waited on each other's ``KEY SHARE``: a deadlock, and PostgreSQL killed one."""
    conn.execute("SELECT 1 FROM agents WHERE tenant_id = %s AND agent_id = %s "
                 "FOR NO KEY UPDATE", [tenant_id, agent_id])


def add_agents(conn: psycopg.Connection[Any], seats: Sequence[tuple[str, str]],
               config: AgentConfig) -> None:
    """Each ``(tenant, agent)`` that does not exist yet, with ``config``, in the caller's
    transaction (a workshop's seats); existing agents are kept as they are."""
    body = config.model_dump_json(exclude_none=False)
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO agents (tenant_id, agent_id, config) VALUES (%s, %s, %s)"
                        " ON CONFLICT DO NOTHING", [[tenant, agent, body] for tenant, agent in seats])


def list_agents(db: Database, tenant_id: str) -> list[str]:
    with db.tenant(tenant_id) as conn:
        rows = conn.execute(
            "SELECT agent_id FROM agents WHERE tenant_id = %s ORDER BY agent_id", [tenant_id]
        ).fetchall()
    return [r[0] for r in rows]


