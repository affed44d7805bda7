"""Agents and tokens over HTTP: an agent's config, and an owner's tokens of its own tenant.

Any role reads the agents of its tenant and their config; an owner or admin creates or replaces
a config (:data:`hango.fs.path.WRITERS`); only an owner sets the tenant's defaults (every role
reads them), and lists, creates and revokes tokens, only in its own tenant (the SQL
functions check the caller's token again).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated

import psycopg
from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi import Path as UrlPath
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hango.agents import (
    LABEL_CONTROL,
    AgentConfig,
    Principal,
    TenantDefaults,
    TokenInfo,
    list_agents,
    load_agent,
    load_tenant_defaults,
    owner_create_token,
    owner_list_tokens,
    owner_revoke_token,
    save_agent,
    save_tenant_defaults,
)
from hango.api.deps import (
    _UNKNOWN_TOKEN,
    ErrorBody,
    _Agent,
    _agent,
    _bearer_token,
    _db,
    _errors,
    _principal,
)
from hango.fs.path import OWNER, WRITERS, Role

router = APIRouter(prefix="/v1")


class AgentList(BaseModel):
    agents: list[str]



@router.get("/agents", summary="The agents of the caller's tenant", response_model=AgentList,
            responses=_errors())
def get_agents(
    request: Request, principal: Annotated[Principal, Depends(_principal)]
) -> AgentList:
    return AgentList(agents=list_agents(_db(request), principal.tenant_id))


@router.get("/agents/{agent_id}", summary="An agent's config", response_model=AgentConfig,
            responses=_errors(404))
def get_agent(agent: Annotated[_Agent, Depends(_agent)]) -> AgentConfig:
    config = load_agent(agent.db, agent.principal.tenant_id, agent.agent_id)
    if config is None:
        raise agent.no_agent()
    return config


@router.put(
    "/agents/{agent_id}",
    summary="Create or replace an agent's config (owner or admin)",
    response_model=AgentConfig,
    responses={200: {"description": "Replaced."},
               201: {"model": AgentConfig, "description": "Created."},
               **_errors(403, 413)},
)
def put_agent(
    response: Response, agent: Annotated[_Agent, Depends(_agent)], config: AgentConfig
) -> AgentConfig:
    if agent.principal.role not in WRITERS:
        raise HTTPException(403, "only an owner or admin may create or replace an agent's "
                                 f"config (this token is a {agent.principal.role})")
    try:  # what the body alone cannot say: an agent may not name itself as its subagent
        config = config.for_agent(agent.agent_id)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])}
                                      for e in exc.errors()]) from None
    existed = agent.exists()
    save_agent(agent.db, agent.principal.tenant_id, agent.agent_id, config)
    response.status_code = 200 if existed else 201
    return config


# --- the tenant's defaults: an owner sets them, every role reads them --------------------------


class ServerDefaults(BaseModel):
    memory: list[str]
    skills: list[str]
    reserved_writes: str


class DefaultsOut(TenantDefaults):
    server: ServerDefaults = Field(description="The server's fallback for a key left out "
                                   "(HANGO_MEMORY_DEFAULT_SOURCES, HANGO_SKILLS_DEFAULT_SOURCES, "
                                   "HANGO_RESERVED_WRITES).")


def _defaults_out(request: Request, defaults: TenantDefaults | None) -> DefaultsOut:
    if defaults is None:  # the tenant was deleted since the token was checked
        raise _gone()
    s = request.app.state.hango_settings
    return DefaultsOut(**defaults.model_dump(), server=ServerDefaults(
        memory=s.memory_default_sources, skills=s.skills_default_sources,
        reserved_writes=s.reserved_writes))


@router.get("/tenant/defaults", summary="The tenant's defaults for its agents",
            response_model=DefaultsOut, responses=_errors())
def get_defaults(request: Request,
                 principal: Annotated[Principal, Depends(_principal)]) -> DefaultsOut:
    return _defaults_out(request, load_tenant_defaults(_db(request), principal.tenant_id))


@router.put("/tenant/defaults", summary="Set the tenant's defaults for its agents (owner)",
            response_model=DefaultsOut, responses=_errors(403))
def put_defaults(request: Request, principal: Annotated[Principal, Depends(_principal)],
                 body: TenantDefaults) -> DefaultsOut:
    """Memory sources, skills sources and the reserved-writes mode of every agent of the tenant
    whose own config names none; a key left out (or null) falls back to the server's setting."""
    if principal.role != OWNER:
        raise HTTPException(403, f"only an owner may set the tenant's defaults (this token is "
                                 f"a {principal.role})")
    return _defaults_out(request, save_tenant_defaults(
        _db(request), principal.tenant_id, body.model_dump()))


# --- tokens: an owner's own tenant --------------------------------------------------------------


class TokenOut(BaseModel):
    """A token as it may be shown: never the secret."""

    id: str
    role: str
    label: str
    created_at: datetime
    last_used_at: datetime | None = Field(description="Recorded at most once a minute.")
    expires_at: datetime | None = Field(description="None: never expires.")

    @classmethod
    def of(cls, info: TokenInfo) -> TokenOut:
        fields = asdict(info)
        return cls(id=fields.pop("token_id"), **fields)


class TokenList(BaseModel):
    tokens: list[TokenOut]


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role
    label: str = Field(default="", max_length=200,
                       json_schema_extra={"pattern": f"^[^{LABEL_CONTROL}]*$"})
    expires_at: datetime | None = Field(
        default=None, description="When it stops working (ISO 8601; UTC unless it says); "
                                  "none: never.")


class TokenCreated(TokenOut):
    token: str = Field(description="The secret: shown this once, stored only as a digest.")


def _owner(request: Request, principal: Annotated[Principal, Depends(_principal)]) -> str:
    """The caller's own token, if it is an owner's (the SQL functions check it again)."""
    if principal.role != OWNER:
        raise HTTPException(403, f"only an owner may list, create or revoke tokens (this token "
                                 f"is a {principal.role})")
    token = _bearer_token(request.headers.get("authorization"))
    assert token is not None  # _principal found it
    return token


def _gone() -> HTTPException:
    return HTTPException(401, _UNKNOWN_TOKEN, headers={
        "WWW-Authenticate": 'Bearer realm="hango", error="invalid_token"'})


@router.get("/tokens", summary="The tokens of the caller's tenant (owner)",
            response_model=TokenList, responses=_errors(403))
def get_tokens(request: Request, caller: Annotated[str, Depends(_owner)]) -> TokenList:
    return TokenList(tokens=[TokenOut.of(t) for t in owner_list_tokens(_db(request), caller)])


@router.post("/tokens", summary="Create a token in the caller's tenant (owner)", status_code=201,
             response_model=TokenCreated, responses=_errors(403, 409, 413))
def post_token(request: Request, caller: Annotated[str, Depends(_owner)],
               body: TokenCreate) -> TokenCreated:
    try:
        made = owner_create_token(_db(request), caller, body.role, body.label, body.expires_at)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    except psycopg.errors.CheckViolation as exc:
        raise HTTPException(409, str(exc.diag.message_primary or exc)) from None
    if made is None:  # revoked or expired since Authenticate looked it up
        raise _gone()
    token, info = made
    return TokenCreated(token=token, **TokenOut.of(info).model_dump())


@router.delete("/tokens/{token_id}", summary="Revoke a token of the caller's tenant (owner)",
               status_code=204, response_class=Response,
               responses={204: {"description": "Revoked: it is 401 from now on."},
                          **_errors(403, 404),
                          409: {"model": ErrorBody, "description": "It is the tenant's last "
                                "owner token (nothing was revoked): create another first."}})
def delete_token(request: Request, caller: Annotated[str, Depends(_owner)],
                 token_id: Annotated[str, UrlPath(pattern=r"^[0-9a-f]{1,64}$")]) -> Response:
    try:
        revoked = owner_revoke_token(_db(request), caller, token_id)
    except psycopg.errors.CheckViolation as exc:  # the tenant's last live owner token
        raise HTTPException(409, str(exc.diag.message_primary or exc)) from None
    if revoked is None:  # the caller's own token was revoked or expired since Authenticate
        raise _gone()
    if not revoked:
        raise HTTPException(404, f"no token {token_id!r} in this tenant")
    return Response(status_code=204)

