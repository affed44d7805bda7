"""Runs and proposals over HTTP: run an agent in the server, decide what it proposed, resume.

- ``POST /v1/agents/{agent}/runs`` ``{"prompt": ...}`` runs the agent here, with the model named
  by ``HANGO_MODEL`` (by default the offline simulator, acting on the conventions of
  :mod:`hango.models.acting`). Any role may run. The answer: run id, status (``done``,
  ``interrupted``, ``failed``), text, usage per model call (with why a call read less from the
  cache, when the model says), cache read ratio, warnings, the pending proposal if any, and the
  trace id.
- ``GET /v1/agents/{agent}/runs/{run}`` shows how a run ended (or what it waits for).
- ``POST /v1/agents/{agent}/runs/{run}/resume`` continues an interrupted run once its proposal
  is decided. Two resumes at once: one runs, the other gets 409 saying when its claim expires.
  Each saved call runs once (:mod:`hango.agent.resuming`).
- ``POST /v1/agents/{agent}/runs/{run}/release`` frees the claim of a resume that died (owners
  and admins), so the run can be resumed at once instead of when the claim expires.
- ``GET /v1/agents/{agent}/proposals`` (``?status=pending|approved|rejected|all``, ``?limit=``,
  ``?cursor=``: oldest first, in pages), ``GET .../proposals/{id}`` (with a unified diff against
  the file as it is now),
  ``POST .../proposals/{id}/approve`` ``{"content"?, "base_version"?, "reason"?}`` and
  ``POST .../proposals/{id}/reject`` ``{"reason"}``: owners and admins only (a member: 403;
  another tenant's agent: 404). A conflict (the file changed since) is 409 with the fresh diff.

A model that fails is 502 naming it (:class:`~hango.models.base.ModelError`); a transaction the
database aborted to break a deadlock is 409 with Retry-After; neither body carries more.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi import Path as UrlPath
from pydantic import BaseModel, ConfigDict, Field

from hango import prompts
from hango.agent import proposals, resuming, runs
from hango.agent.runs import summary
from hango.agent.runtime import Agent, RunResult
from hango.api.deps import ErrorBody, _Agent, _agent, author
from hango.api.files import TEXT_SHAPE
from hango.api.run_limits import RunLimits
from hango.fs.path import WRITERS
from hango.models.acting import acting_policy
from hango.models.base import InvalidRequest, Model
from hango.models.simulated import SimulatedModel
from hango.perf.agent import CachedAgent, NoAgent
from hango.perf.trip import Statement, one_trip
from hango.settings import Settings, SettingsError
from hango.telemetry import Telemetry

router = APIRouter(prefix="/v1")
RunId = Annotated[str, UrlPath(pattern=r"^[A-Za-z0-9._-]{1,128}$")]
ProposalId = Annotated[str, UrlPath(pattern=r"^[A-Za-z0-9._-]{1,200}$")]


class RunBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1, max_length=100_000, description="The user's message.")


class RunOut(BaseModel):
    run_id: str
    status: Literal["done", "interrupted", "failed", "resuming"]
    stop_reason: str | None = None
    text: str = ""
    usage: list[dict[str, int | str | None]] = Field(
        default_factory=list, description="Token usage of each model call, in order; "
        "cache_read_input_tokens is null where the provider did not report it. "
        "cache_miss_reason: why the call did not read more from the cache (below_minimum: the "
        "prefix through the breakpoint is shorter than the model's minimum cacheable length, so "
        "nothing is ever cached; expired, tools_changed, system_changed, messages_changed, "
        "model_changed, previous_message_not_found, outside_lookback), null on a full hit or "
        "where the model gives no diagnostics.")
    cache_read_ratio: float | None = Field(default=0.0, description="null: not reported.")
    warnings: list[str] = Field(default_factory=list)
    proposal: dict[str, Any] | None = Field(default=None,
                                            description="What an interrupted run waits for.")
    trace_id: str = ""
    resumed: bool = False
    claim_expires_at: str | None = Field(
        default=None, description="While resuming: when the resume's claim expires unless it "
        "renews it (it does while it runs).")


class ProposalOut(BaseModel):
    proposal_id: str
    agent_id: str
    run_id: str
    path: str
    operation: str
    base_version: int | None
    content: str | None = Field(description="The proposed content (in a listing: null; show one "
                                            "proposal to read it).")
    skill: dict[str, Any] | None = Field(
        description="For a SKILL.md: its name, or why it is invalid, and dropped_tools: the "
                    "allowed_tools this agent's allowlist would drop.")
    status: str
    decided_by: str | None
    decided_at: str | None
    reason: str | None
    edited: bool
    written_version: int | None
    proposed_by: str | None = Field(default=None, description="Who started the run that "
                                    "proposed it (role:token fingerprint); null: a run in code.")
    created_at: str | None = None
    diff: str | None = Field(default=None, description="Unified diff against the current file.")


class ProposalList(BaseModel):
    proposals: list[ProposalOut]
    next_cursor: str | None = Field(default=None, description="Pass it as ?cursor= for the "
                                    "next page; null on the last page.")


class ApproveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str | None = Field(default=None, description="The owner's edit of the content.",
                                json_schema_extra={"pattern": TEXT_SHAPE})
    base_version: int | None = Field(default=None, ge=1, description="Approve against this "
                                     "version (after a conflict showed the fresh diff).")
    reason: str | None = Field(default=None, max_length=2000,
                               json_schema_extra={"pattern": TEXT_SHAPE})


class RejectBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000, description="The agent reads it.",
                        json_schema_extra={"pattern": TEXT_SHAPE})


def _err(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {c: {"model": ErrorBody} for c in (401, 404, 422, 503, *codes)}


# --- the server's model and agents -------------------------------------------------------------


def model_from_settings(settings: Settings) -> Model:
    """``HANGO_MODEL``: ``hango-sim-*`` (offline, acting on :data:`~hango.models.acting.CONVENTIONS`),
    ``claude-*`` with the extra and a key, or ``openai:<model>`` for any OpenAI-compatible server
    (``hango.models.openai``)."""
    name = settings.model
    if name.startswith("openai:"):
        try:
            from hango.models.openai import from_setting
        except ImportError:
            raise SettingsError(f"HANGO_MODEL={name} needs the openai extra: "
                                "pip install 'hango[openai]'") from None
        return from_setting(name)
    if name.startswith("hango-sim"):
        # The served simulator acts on the published conventions (hango.models.acting); the
        # library's SimulatedModel() keeps its echo. The last call only: a server runs for hours.
        return SimulatedModel(name, policy=acting_policy, history=1)
    if name.startswith("claude"):
        if not os.environ.get("ANTHROPIC_API_KEY"):
            raise SettingsError(f"HANGO_MODEL={name}: set ANTHROPIC_API_KEY, or unset "
                                "HANGO_MODEL for the offline simulator")
        try:
            from hango.models.anthropic import AnthropicModel
        except ImportError:
            raise SettingsError(f"HANGO_MODEL={name} needs the anthropic extra: "
                                "pip install 'hango[anthropic]'") from None
        return AnthropicModel(name)
    raise SettingsError(f"HANGO_MODEL={name!r}: expected hango-sim-1, a claude-* model name "
                        "or openai:<model>")


def _server_agent(request: Request, agent: _Agent) -> CachedAgent:
    """The agent, on the cached stack with its config read in before_run's round trip (the
    server's choice: :class:`~hango.perf.agent.CachedAgent`), with
    the server's one model (its prompt cache outlives a request: a resumed
    run reads what the interrupted one wrote) and one :class:`Telemetry` (a new one per request
    would cost its instruments each time, and the API's proxy providers keep every one).
    Tests and notebooks may set ``app.state`` ``hango_model``, ``hango_telemetry``,
    ``hango_run_ids`` and ``hango_settings`` first."""
    state = request.app.state
    settings: Settings = getattr(state, "hango_settings", None) or agent.db.settings
    if getattr(state, "hango_model", None) is None:
        try:
            state.hango_model = model_from_settings(settings)
        except SettingsError as exc:
            raise HTTPException(503, f"no model to run with: {exc}") from None
    return CachedAgent(agent.db, agent.principal.tenant_id, agent.agent_id, state.hango_model,
                       settings=settings, telemetry=_telemetry(request),
                       run_ids=getattr(state, "hango_run_ids", None),
                       started_by=_who(request, agent))


def _telemetry(request: Request) -> Telemetry:
    state = request.app.state
    if getattr(state, "hango_telemetry", None) is None:
        state.hango_telemetry = Telemetry()
    telemetry: Telemetry = state.hango_telemetry
    return telemetry


def _who(request: Request, agent: _Agent) -> str:
    """The caller as runs and proposals record it (:func:`hango.api.deps.author`)."""
    return agent.author or author(request, agent.principal)


def _decider(request: Request, agent: _Agent, what: str = "see or decide proposals") -> str:
    """Owners and admins decide; the answer names who (:func:`_who`)."""
    if agent.principal.role not in WRITERS:
        raise (HTTPException(403, f"only an owner or admin may {what} (this token is a "
                                  f"{agent.principal.role})")
               if agent.exists() else agent.no_agent())
    return _who(request, agent)


def _out(result: dict[str, Any], run_id: str, status: str,
         claim_expires_at: str | None = None) -> RunOut:
    return RunOut(run_id=run_id, status=status,  # type: ignore[arg-type]
                  stop_reason=result.get("stop_reason"), text=result.get("text", ""),
                  usage=result.get("usage", []),
                  cache_read_ratio=result.get("cache_read_ratio", 0.0),
                  warnings=result.get("warnings", []), proposal=result.get("interrupt"),
                  trace_id=result.get("trace_id", ""), resumed=result.get("resumed", False),
                  claim_expires_at=claim_expires_at)


# --- runs --------------------------------------------------------------------------------------


def _limits(request: Request) -> RunLimits:
    """This process's run threads and per-tenant counts (:mod:`hango.api.run_limits`)."""
    state = request.app.state
    if getattr(state, "hango_run_limits", None) is None:
        settings: Settings = state.hango_settings
        state.hango_run_limits = RunLimits(settings.run_threads, settings.tenant_max_runs)
    return state.hango_run_limits  # type: ignore[no-any-return]


@router.post("/agents/{agent_id}/runs", summary="Run the agent in the server (any role)",
             response_model=RunOut, status_code=201, responses=_err(409, 413, 429, 502))
async def create_run(request: Request, agent: Annotated[_Agent, Depends(_agent)],
                     body: RunBody) -> RunOut:
    return await _limits(request).run(agent.principal.tenant_id,
                                      lambda: _create_run(request, agent, body))


def _create_run(request: Request, agent: _Agent, body: RunBody) -> RunOut:
    a = _server_agent(request, agent)
    # The config is read in the round trip of before_run's reads (CachedAgent): it tells that
    # the agent exists. A ModelError rises to its 502 (deps.py), naming the model and the
    # provider's message.
    try:
        result = a.run(body.prompt)
    except NoAgent:
        raise agent.no_agent() from None
    except InvalidRequest as exc:  # the provider would refuse it (a blank prompt): said first
        raise HTTPException(422, f"prompt: {exc}") from None
    record(a, result, agent.backend.settings)
    return _out(summary(result), result.run_id, result.status)


def record(a: Agent, result: RunResult, settings: Settings) -> None:
    """Keep a new run's row and the views of its calls: one transaction in one round trip
    (an interrupted run saved its row when it paused: its views are kept after it)."""
    tenant = a.tenant_id
    if result.status == "interrupted":
        prompts.keep(a.db, tenant, result, settings)
        return
    row = runs.save_params(tenant, a.agent_id, result.run_id, result.status, None,
                           summary(result), started_by=a.started_by)
    statements: list[Statement] = [(runs.SAVE, row)]
    if result.requests:
        statements.append((prompts.INSERT_FIRST, prompts.first_params(tenant, result, settings)))
    kept = one_trip(a.db, tenant, statements)
    if result.requests and len(kept[1]) < len(result.requests):  # the id was used before
        prompts.keep(a.db, tenant, result, settings)


@router.get("/agents/{agent_id}/runs/{run_id}", summary="How a run ended, or what it waits for",
            response_model=RunOut, responses=_err())
def get_run(agent: Annotated[_Agent, Depends(_agent)], run_id: RunId) -> RunOut:
    row = runs.load(agent.db, agent.principal.tenant_id, run_id)  # RunNotFound: 404
    if row["agent_id"] != agent.agent_id:
        raise agent.missing(f"no run {run_id!r} for agent {agent.agent_id!r}")
    return _out(row["result"], run_id, row["status"], row["claim_expires_at"])


@router.post("/agents/{agent_id}/runs/{run_id}/resume",
             summary="Continue an interrupted run once its proposal is decided (any role)",
             response_model=RunOut, responses=_err(409, 429, 502))
async def resume_run(request: Request, agent: Annotated[_Agent, Depends(_agent)],
                     run_id: RunId) -> RunOut:
    return await _limits(request).run(agent.principal.tenant_id,
                                      lambda: _resume_run(request, agent, run_id))


def _resume_run(request: Request, agent: _Agent, run_id: RunId) -> RunOut:
    # RunError: 404 or 409; ModelError: 502, and the run is resumable again (deps.py).
    result = _server_agent(request, agent).resume(run_id)
    prompts.keep(agent.db, agent.principal.tenant_id, result, agent.backend.settings)
    return _out(summary(result, {}), result.run_id, result.status)


@router.post("/agents/{agent_id}/runs/{run_id}/release",
             summary="Free the claim of a resume that died (owner or admin)",
             response_model=RunOut, responses=_err(403, 409))
def release_run(request: Request, agent: Annotated[_Agent, Depends(_agent)],
                run_id: RunId) -> RunOut:
    _decider(request, agent, "release a run's claim")
    row = runs.load(agent.db, agent.principal.tenant_id, run_id)  # RunNotFound: 404
    if row["agent_id"] != agent.agent_id:
        raise agent.missing(f"no run {run_id!r} for agent {agent.agent_id!r}")
    if not resuming.release(agent.db, agent.principal.tenant_id, run_id):
        raise runs.RunConflict(f"run {run_id} is {row['status']}, not being resumed: there is "
                               "no claim to release")
    return _out(row["result"], run_id, "interrupted")


# --- proposals ---------------------------------------------------------------------------------


def _proposal(p: proposals.Proposal, diff: str | None = None) -> ProposalOut:
    return ProposalOut(**proposals.view(p), diff=diff)


@router.get("/agents/{agent_id}/proposals",
            summary="Proposals, oldest first, a page at a time (owner or admin)",
            response_model=ProposalList, responses=_err(403))
def list_proposals(
    request: Request, agent: Annotated[_Agent, Depends(_agent)],
    status: Literal["pending", "approved", "rejected", "all"] = "pending",
    limit: Annotated[int, Query(ge=1, le=1000, description="Proposals per page.")] = 100,
    cursor: Annotated[str | None, Query(max_length=1024, description=(
        "The next_cursor of the previous page, unchanged."),
        json_schema_extra={"pattern": r"^[A-Za-z0-9_-]+$"})] = None,
) -> ProposalList:
    _decider(request, agent)
    found = proposals.list_proposals(agent.db, agent.principal.tenant_id, agent.agent_id,
                                     None if status == "all" else status, limit, cursor)
    if not found and not agent.exists():
        raise agent.no_agent()
    # A listing leaves the contents out: 100 proposals of up to a file cap each is not a page.
    return ProposalList(proposals=[_proposal(p).model_copy(update={"content": None})
                                   for p in found], next_cursor=found.next_cursor)


@router.get("/agents/{agent_id}/proposals/{proposal_id}",
            summary="One proposal with its diff against the current file (owner or admin)",
            response_model=ProposalOut, responses=_err(403))
def show_proposal(request: Request, agent: Annotated[_Agent, Depends(_agent)],
                  proposal_id: ProposalId) -> ProposalOut:
    _decider(request, agent)
    p, diff = proposals.get(agent.db, agent.principal.tenant_id, agent.agent_id, proposal_id)
    return _proposal(p, diff)


@router.post("/agents/{agent_id}/proposals/{proposal_id}/approve",
             summary="Approve (optionally with edited content); writes against the base version",
             response_model=ProposalOut, responses=_err(403, 409, 413))
def approve_proposal(request: Request, agent: Annotated[_Agent, Depends(_agent)],
                     proposal_id: ProposalId,
                     body: ApproveBody | None = None) -> ProposalOut:
    by = _decider(request, agent)
    edit = body or ApproveBody()
    a = _server_agent(request, agent)
    try:
        allowlist = frozenset(a.load_config().tools)
    except LookupError:
        raise agent.no_agent() from None
    # A ProposalError rises to its status (deps.py): not found 404, a conflict 409 with the
    # fresh diff, already decided 409, an invalid SKILL.md or content over the cap 422.
    return _proposal(proposals.approve(
        agent.db, agent.principal.tenant_id, agent.agent_id, proposal_id, by=by,
        role=agent.principal.role, content=edit.content, base_version=edit.base_version,
        reason=edit.reason, allowlist=allowlist, settings=a.settings, telemetry=a.telemetry))


@router.post("/agents/{agent_id}/proposals/{proposal_id}/reject",
             summary="Reject with a reason the agent will read", response_model=ProposalOut,
             responses=_err(403, 409))
def reject_proposal(request: Request, agent: Annotated[_Agent, Depends(_agent)],
                    proposal_id: ProposalId, body: RejectBody) -> ProposalOut:
    by = _decider(request, agent)
    return _proposal(proposals.reject(
        agent.db, agent.principal.tenant_id, agent.agent_id, proposal_id, by=by,
        role=agent.principal.role, reason=body.reason, telemetry=_telemetry(request)))

