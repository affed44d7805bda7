"""What runs did, over HTTP: an agent's runs listed, and the prompt of each model call of a run.

- ``GET /v1/agents/{agent}/runs`` (``?status=``, ``?limit=``, ``?cursor=``): newest first, in
  pages (the cursor is the proposals listing's). Owners and admins see every run; a member the
  runs its own token started.
- ``GET /v1/agents/{agent}/runs/{run}/prompt``: each model call's request as people read it
  (:mod:`hango.prompts`): the system blocks with their source, size and token estimate, the
  tools, the messages, the breakpoints (tier, index, TTL), the usage and, when the cache read
  less, why (:data:`hango.models.view.MISS_REASONS`). JSON, or the text ``show_request`` prints
  with ``?format=text`` or ``Accept: text/plain`` (``?width=0``: every block in full). Owners and
  admins see any run's; a member only those of the runs its token started (403 otherwise).

A prompt holds what the run read: its memory, its skills index, the files it read, a
subagent's answer. Every role may read its tenant's files, so a member sees nothing it could
not read; what it cannot see is another member's conversation. Another tenant's run is 404.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field

from hango import prompts
from hango.agent import runs
from hango.api.deps import _Agent, _agent, _errors
from hango.api.runs import RunId
from hango.fs.path import WRITERS

router = APIRouter(prefix="/v1")


class RunRow(BaseModel):
    run_id: str
    status: str
    proposal_id: str | None = Field(description="What an interrupted run waits for.")
    started_by: str | None = Field(description="Role and token fingerprint; null: in code.")
    created_at: str
    updated_at: str


class RunList(BaseModel):
    runs: list[RunRow]
    next_cursor: str | None = Field(default=None, description="Pass it as ?cursor= for the "
                                    "next page; null on the last page.")


class PromptOut(BaseModel):
    run_id: str
    max_bytes: int = Field(description="HANGO_RUN_PROMPT_MAX_BYTES: what a run keeps.")
    calls: list[dict[str, Any]] = Field(description=(
        "One view per model call, in order (hango.models.view.request_view): model, tools, "
        "system (index, source, bytes, tokens, breakpoint, text), system_breakpoint, "
        "messages, breakpoints, response, usage, miss_reason and miss; clipped: its texts "
        "were cut to fit max_bytes."))


def _mine(agent: _Agent) -> str | None:
    """The runs a caller may see: all (``None``) for an owner or admin, its own for a member."""
    return None if agent.principal.role in WRITERS else agent.author


@router.get("/agents/{agent_id}/runs", summary="The agent's runs, newest first, a page at a "
            "time (a member: its own)", response_model=RunList, responses=_errors(404))
def list_runs(
    agent: Annotated[_Agent, Depends(_agent)],
    status: Literal["interrupted", "resuming", "done", "failed", "all"] = "all",
    limit: Annotated[int, Query(ge=1, le=1000, description="Runs per page.")] = 100,
    cursor: Annotated[str | None, Query(max_length=1024, description=(
        "The next_cursor of the previous page, unchanged."),
        json_schema_extra={"pattern": r"^[A-Za-z0-9_-]+$"})] = None,
) -> RunList:
    found = runs.list_runs(agent.db, agent.principal.tenant_id, agent.agent_id,
                           None if status == "all" else status, limit, cursor, _mine(agent))
    if not found and not agent.exists():
        raise agent.no_agent()
    return RunList(runs=[RunRow(**r) for r in found], next_cursor=found.next_cursor)


@router.get("/agents/{agent_id}/runs/{run_id}/prompt",
            summary="The prompt of each model call of a run (a member: its own runs)",
            response_model=PromptOut,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                             "description": "JSON, or with ?format=text the text rendering."},
                       **_errors(403, 404)})
def get_prompt(
    request: Request, agent: Annotated[_Agent, Depends(_agent)],
    run_id: RunId,
    format: Literal["json", "text"] | None = None,
    width: Annotated[int, Query(ge=0, le=10_000, description=(
        "Text only: characters of each block's preview; 0: every block in full."))] = 60,
) -> Any:
    row = runs.load(agent.db, agent.principal.tenant_id, run_id)  # RunNotFound: 404
    if row["agent_id"] != agent.agent_id:
        raise agent.missing(f"no run {run_id!r} for agent {agent.agent_id!r}")
    mine = _mine(agent)
    if mine is not None and row["started_by"] != mine:
        raise HTTPException(403, f"a member sees the prompts of the runs its own token started "
                                 f"only (this token is a {agent.principal.role}); an owner or "
                                 "admin sees every run's")
    views = prompts.load(agent.db, agent.principal.tenant_id, run_id)
    max_bytes = agent.backend.settings.run_prompt_max_bytes
    wants_text = format == "text" or (format is None and request.headers.get(
        "accept", "").split(",")[0].strip().startswith("text/plain"))
    if wants_text:
        return PlainTextResponse(prompts.render_text(run_id, views, max_bytes, width or None))
    return PromptOut(run_id=run_id, max_bytes=max_bytes, calls=views)
