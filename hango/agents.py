"""Tenants, agents and their config, and API tokens.

An agent's config lives in the ``agents`` table: its tool allowlist, its memory sources and its
skills sources. Sources left out fall back to the tenant-level defaults from settings
(``HANGO_MEMORY_DEFAULT_SOURCES``, ``HANGO_SKILLS_DEFAULT_SOURCES``). Every source must be an
absolute clean path under the matching reserved prefix; a bad entry is refused naming it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

import psycopg
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, WithJsonSchema, field_validator

from hango.db import Database
from hango.fs.path import PREFIX_MEMORIES, PREFIX_SKILLS, PathError, validate_source
from hango.fs.path import ROLES as ROLES  # re-exported: the CLI reads it here
from hango.settings import Settings, SettingsError

ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
TOOL_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


# What the JSON Schema (the files API's OpenAPI) says of each entry; the validators below decide.
_NO_NUL = r"^[^\x00]*$"
ToolName = Annotated[str, WithJsonSchema({"type": "string", "pattern": TOOL_PATTERN})]
AgentRef = Annotated[str, WithJsonSchema({"type": "string", "pattern": ID_PATTERN})]
_SEGMENT = r"[^/\\\x00-\x1f\x7f-\x9f]+"  # necessary, not sufficient: fs.path has every rule
MemorySource = Annotated[str, WithJsonSchema(
    {"type": "string", "pattern": rf"^/memories/{_SEGMENT}(/{_SEGMENT})*$"})]
SkillsSource = Annotated[str, WithJsonSchema(
    {"type": "string", "pattern": rf"^/skills(/{_SEGMENT})*/?$"})]


class AgentConfig(BaseModel):
    """What an agent may do and what it remembers. ``None`` sources mean the tenant defaults."""

    model_config = ConfigDict(extra="forbid")

    system_prompt: str = Field(default="You are a helpful agent.", max_length=100_000,
                               json_schema_extra={"pattern": _NO_NUL})
    tools: list[ToolName] = Field(
        default_factory=lambda: ["read_file", "write_file", "edit_file", "ls", "glob"],
        description="The allowlist: the only tools this agent may ever call.",
    )
    memory: list[MemorySource] | None = Field(default=None, max_length=32)
    skills: list[SkillsSource] | None = Field(default=None, max_length=32)
    subagents: list[AgentRef] = Field(default_factory=list,
                                      description="Agents the task tool may run.")
    max_steps: int = Field(default=12, ge=1, le=200)
    reserved_writes: Literal["refuse", "ask"] | None = Field(
        default=None, description="An agent write under /memories/ or /skills/: refuse (the "
        "phase-8 rule) or ask (a proposal an owner or admin decides); none: the tenant default "
        "HANGO_RESERVED_WRITES.")

    @field_validator("system_prompt")
    @classmethod
    def _storable(cls, value: str, info: ValidationInfo) -> str:
        if "\x00" in value:  # jsonb cannot hold U+0000
            raise ValueError(f"{info.field_name} contains U+0000 (NUL), which cannot be stored")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str]) -> list[str]:
        for i, name in enumerate(value):
            if not re.fullmatch(TOOL_PATTERN, name):
                raise ValueError(f"tools[{i}] {name!r} is not a tool name")
        return list(dict.fromkeys(value))

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: list[str] | None) -> list[str] | None:
        return _sources(value, PREFIX_MEMORIES, "memory")

    @field_validator("skills")
    @classmethod
    def _skills(cls, value: list[str] | None) -> list[str] | None:
        return _sources(value, PREFIX_SKILLS, "skills")

    @field_validator("subagents")
    @classmethod
    def _subagents(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # The config does not hold its own id: save_agent validates with context={"agent_id"}.
        me = (info.context or {}).get("agent_id")
        for i, name in enumerate(value):
            if not re.fullmatch(ID_PATTERN, name):
                raise ValueError(f"subagents[{i}] {name!r} is not an agent id")
            if name == me:
                raise ValueError(f"subagents[{i}] {name!r} is this agent itself; an agent "
                                 "cannot be its own subagent")
        return value

    def for_agent(self, agent_id: str) -> AgentConfig:
        """This config validated as agent ``agent_id``'s: refuses one that names itself a subagent.

        Raises pydantic's ``ValidationError`` (a ``ValueError``) naming ``subagents[i]``. Longer
        cycles (a -> b -> a) are legal configs; the ``task`` tool refuses them at run time.
        """
        return AgentConfig.model_validate(self.model_dump(), context={"agent_id": agent_id})


def _sources(value: list[str] | None, prefix: str, key: str) -> list[str] | None:
    if value is None:
        return None
    out = []
    for i, entry in enumerate(value):
        try:
            out.append(validate_source(entry, prefix))
        except PathError as exc:
            raise ValueError(f"{key}[{i}] {entry!r}: {exc.rule}") from None
    return out


def check_default_sources(settings: Settings) -> Settings:
    """``settings`` if its tenant-default sources pass every path rule, else :class:`SettingsError`
    naming the variable (settings.py, which imports nothing from hango, checks only the prefix).
    The CLI calls it before any command, ``create_app`` before serving, ``default_stack`` before
    a run (a script's or a notebook's too)."""
    try:
        _sources(settings.memory_default_sources, PREFIX_MEMORIES, "HANGO_MEMORY_DEFAULT_SOURCES")
        _sources(settings.skills_default_sources, PREFIX_SKILLS, "HANGO_SKILLS_DEFAULT_SOURCES")
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    return settings


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
    """Create a tenant (idempotent). An admin operation: runs as the superuser connection."""
    _check_id("tenant id", tenant_id)
    with db.admin() as conn:
        conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING",
                     [tenant_id])
    return tenant_id


def drop_tenant(db: Database, tenant_id: str) -> None:
    """Delete a tenant with its agents, files and tokens (notebooks start from a clean slate)."""
    with db.admin() as conn:
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
    """A tenant's tokens, oldest first (an admin operation, as the superuser connection)."""
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


def load_agent(db: Database, tenant_id: str, agent_id: str) -> AgentConfig | None:
    with db.tenant(tenant_id) as conn:
        row = conn.execute(
            "SELECT config FROM agents WHERE tenant_id = %s AND agent_id = %s",
            [tenant_id, agent_id],
        ).fetchone()
    return None if row is None else AgentConfig.model_validate(row[0])


def agent_exists(db: Database, tenant_id: str, agent_id: str) -> bool:
    with db.tenant(tenant_id) as conn:
        row = conn.execute("SELECT 1 FROM agents WHERE tenant_id = %s AND agent_id = %s",
                           [tenant_id, agent_id]).fetchone()
    return row is not None


def lock_agent(conn: psycopg.Connection[Any], tenant_id: str, agent_id: str) -> None:
    """Hold the agent's row lock until ``conn``'s transaction ends: a bound counted per agent
    (pending proposals) is then checked by one run of that agent at a time."""
    conn.execute("SELECT 1 FROM agents WHERE tenant_id = %s AND agent_id = %s FOR UPDATE",
                 [tenant_id, agent_id])


def create_seats(db: Database, seats: Sequence[tuple[str, str, str]],
                 config: AgentConfig) -> None:
    """Each ``(tenant, agent, owner token)``: the tenant, the agent with ``config`` and the token,
    all in one transaction. Existing tenants and agents are kept as they are."""
    body = config.model_dump_json(exclude_none=False)
    with db.admin() as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING",
                        [[tenant] for tenant, _, _ in seats])
        cur.executemany(
            "INSERT INTO agents (tenant_id, agent_id, config) VALUES (%s, %s, %s)"
            " ON CONFLICT DO NOTHING", [[tenant, agent, body] for tenant, agent, _ in seats])
        cur.executemany(
            "INSERT INTO api_tokens (token_sha256, tenant_id, role, label)"
            " VALUES (%s, %s, 'owner', 'workshop')",
            [[token_digest(token), tenant] for tenant, _, token in seats])


def list_agents(db: Database, tenant_id: str) -> list[str]:
    with db.tenant(tenant_id) as conn:
        rows = conn.execute(
            "SELECT agent_id FROM agents WHERE tenant_id = %s ORDER BY agent_id", [tenant_id]
        ).fetchall()
    return [r[0] for r in rows]


