"""Runs that outlive their process: the state of an interrupted run, kept in PostgreSQL.

A run that stops ``interrupted`` saves what resume needs in the ``runs`` table (under RLS):
the messages so far, the system blocks and breakpoints of its last request (so the resumed
request's prefix is byte-identical, and the provider reads it from the cache), the pending tool
call with the calls of the same turn, and a digest of the agent's config. Any process can resume
it; a claim makes sure only one does at a time, and each saved call runs once
(:mod:`hango.agent.resuming`).

A run over HTTP also records how it ended (``done`` or ``failed``), so ``GET`` can show it.
"""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import asdict
from typing import Any, ClassVar, LiteralString, Protocol

from psycopg.types.json import Json

from hango.agent.proposals import cursor_after, cursor_of
from hango.db import Database
from hango.db_errors import Contention
from hango.errors import HangoError
from hango.fs.files import Page
from hango.models.base import (
    Block,
    Breakpoint,
    Message,
    Response,
    ToolCall,
    ToolResult,
    Usage,
)

RETRIES = 3  # tries of the transaction that saves an interrupted run, if PostgreSQL aborts it


class RunError(HangoError, RuntimeError):
    """A run cannot be resumed; the message says why (pending, already resumed, config changed)."""

    status: ClassVar[int] = 409


class RunNotFound(RunError, LookupError):
    status: ClassVar[int] = 404

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r} in this tenant")


class RunConflict(RunError):
    """Resume raced another resume, or the run waits for a decision, or it has ended."""


class LeaseLost(RunConflict):
    """This resume's claim expired or was released: what it marked done is kept, no more."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id}: this resume's claim expired or was released, so it "
                         "stopped; each call it marked done is kept and will not run again. "
                         "GET the run to see its state, and resume it again")


def digest(config_json: str, model: str) -> str:
    """What a resumed run must still match: the agent's config and the model's name."""
    return hashlib.sha256(f"{model}\n{config_json}".encode()).hexdigest()[:32]


# --- (de)serialising a conversation ---------------------------------------------------------


def call_to_json(c: ToolCall) -> dict[str, Any]:
    return {"id": c.id, "name": c.name, "arguments": dict(c.arguments)}


def call_from_json(d: dict[str, Any]) -> ToolCall:
    return ToolCall(d["id"], d["name"], dict(d["arguments"]))


def result_from_json(d: dict[str, Any]) -> ToolResult:
    return ToolResult(d["call_id"], d["content"], bool(d["is_error"]))


def message_to_json(m: Message) -> dict[str, Any]:
    return {"role": m.role, "text": m.text, "tool_calls": [call_to_json(c) for c in m.tool_calls],
            "tool_results": [asdict(r) for r in m.tool_results]}


def message_from_json(d: dict[str, Any]) -> Message:
    return Message(d["role"], d["text"], tuple(call_from_json(c) for c in d["tool_calls"]),
                   tuple(result_from_json(r) for r in d["tool_results"]))


def blocks_to_json(blocks: tuple[Block, ...]) -> list[dict[str, str]]:
    return [{"text": b.text, "source": b.source} for b in blocks]


def blocks_from_json(items: list[dict[str, str]]) -> tuple[Block, ...]:
    return tuple(Block(b["text"], b["source"]) for b in items)


def breakpoints_to_json(marks: tuple[Breakpoint, ...]) -> list[dict[str, Any]]:
    return [asdict(b) for b in marks]


def breakpoints_from_json(items: list[dict[str, Any]]) -> tuple[Breakpoint, ...]:
    return tuple(Breakpoint(b["tier"], b["index"], b["ttl"]) for b in items)


def snapshot(messages: list[Message], frozen: tuple[tuple[Block, ...], tuple[Breakpoint, ...]],
             config_digest: str, steps: int, proposal_id: str | None, started_by: str | None,
             done: list[ToolResult], pending: ToolCall | None,
             rest: list[ToolCall]) -> dict[str, Any]:
    """What resume needs, as JSON: the conversation, the system blocks and breakpoints to keep,
    and the turn (results so far, the call waiting for a decision if any, the calls after it).
    A string may hold U+0000: the ``runs`` columns are json, which keeps it escaped."""
    return {"messages": [message_to_json(m) for m in messages],
            "system": blocks_to_json(frozen[0]), "breakpoints": breakpoints_to_json(frozen[1]),
            "digest": config_digest, "steps": steps, "proposal_id": proposal_id,
            "started_by": started_by,
            "turn": {"done": [asdict(r) for r in done],
                     "pending": None if pending is None else call_to_json(pending),
                     "rest": [call_to_json(c) for c in rest]}}


class _Outcome(Protocol):
    text: str
    stop_reason: str
    responses: list[Response]
    warnings: list[str]
    interrupt: dict[str, Any] | None
    trace_id: str

    @property
    def status(self) -> str: ...
    @property
    def usage(self) -> Usage: ...


def summary(result: _Outcome, saved: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run's outcome as kept in ``runs.result`` and answered over HTTP."""
    calls = [{"input_tokens": r.usage.input_tokens,
              "cache_creation_input_tokens": r.usage.cache_creation_input_tokens,
              "cache_read_input_tokens": r.usage.cache_read_input_tokens,
              "output_tokens": r.usage.output_tokens,
              # why it did not read more (below_minimum, expired, ...), as the model diagnosed
              "cache_miss_reason": r.diagnostics.miss_reason if r.diagnostics else None}
             for r in result.responses]
    return {"status": result.status, "stop_reason": result.stop_reason, "text": result.text,
            "usage": calls, "cache_read_ratio": result.usage.read_ratio,
            "warnings": list(result.warnings), "interrupt": result.interrupt,
            "trace_id": result.trace_id, "resumed": saved is not None}


# --- the store ---------------------------------------------------------------------------------


SAVE: LiteralString = """
    INSERT INTO runs (tenant_id, agent_id, run_id, status, state, result, proposal_id, started_by)
    VALUES (%(t)s, %(a)s, %(r)s, %(s)s, %(state)s, %(result)s, %(p)s, %(by)s)
    ON CONFLICT (tenant_id, run_id) DO UPDATE
       SET status = EXCLUDED.status, state = EXCLUDED.state, result = EXCLUDED.result,
           proposal_id = EXCLUDED.proposal_id, claimed_at = NULL, claim_token = NULL,
           claim_expires_at = NULL, updated_at = now()
     WHERE %(lease)s::text IS NULL OR runs.claim_token = %(lease)s
    RETURNING 1"""


def save_params(tenant_id: str, agent_id: str, run_id: str, status: str,
                state: dict[str, Any] | None, result: dict[str, Any],
                proposal_id: str | None = None, lease: str | None = None,
                started_by: str | None = None) -> dict[str, Any]:
    """The parameters of :data:`SAVE` (without a lease it always saves: one row back)."""
    return {"t": tenant_id, "a": agent_id, "r": run_id, "s": status, "p": proposal_id,
            "state": None if state is None else Json(state), "result": Json(result),
            "lease": lease, "by": started_by}


def save(conn: Any, tenant_id: str, agent_id: str, run_id: str, status: str,
         state: dict[str, Any] | None, result: dict[str, Any],
         proposal_id: str | None = None, lease: str | None = None,
         started_by: str | None = None) -> None:
    """Insert or replace a run's row (inside the caller's transaction). ``lease``: the claim
    token of the resume saving it; :class:`LeaseLost` when it no longer holds the run.
    ``started_by``: who started it, kept from its first save on."""
    row = conn.execute(SAVE, save_params(tenant_id, agent_id, run_id, status, state, result,
                                         proposal_id, lease, started_by)).fetchone()
    if row is None:
        raise LeaseLost(run_id)
    if lease is not None:  # its calls are in the state now, or the run has ended
        conn.execute("DELETE FROM run_calls WHERE tenant_id = %s AND run_id = %s",
                     [tenant_id, run_id])


def pause(db: Database, tenant_id: str, agent_id: str, run_id: str, state: dict[str, Any],
          proposal_id: str | None, persist: Any, lease: str | None = None) -> None:
    """Save an interrupted run and what it waits for (``persist(conn, run_id)``: its proposal)
    in one transaction. A transaction PostgreSQL aborted to break a deadlock or a serialization
    failure (:class:`~hango.db.Contention`: nothing of it was kept) is tried again."""
    for attempt in range(1, RETRIES + 1):
        try:
            with db.tenant(tenant_id) as conn:
                save(conn, tenant_id, agent_id, run_id, "interrupted", state, {}, proposal_id,
                     lease, state.get("started_by"))  # the summary: once the run has stopped
                if persist is not None:
                    persist(conn, run_id)
            return
        except Contention:
            if attempt == RETRIES:
                raise
            time.sleep(random.uniform(0, 0.05 * attempt))  # apart, so they do not meet again


def set_result(conn: Any, tenant_id: str, run_id: str, result: dict[str, Any]) -> None:
    conn.execute("UPDATE runs SET result = %s, updated_at = now() WHERE tenant_id = %s "
                 "AND run_id = %s", [Json(result), tenant_id, run_id])


EXPIRES = "to_char(claim_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
_UTC = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"


def load(db: Database, tenant_id: str, run_id: str) -> dict[str, Any]:
    """A run's row as a dict; :class:`RunNotFound` if this tenant has no such run."""
    with db.tenant(tenant_id) as conn:
        row = conn.execute(
            f"""SELECT agent_id, status, result, proposal_id,
                       CASE WHEN status = 'resuming' THEN {EXPIRES} END, started_by FROM runs
                WHERE tenant_id = %s AND run_id = %s""", [tenant_id, run_id]).fetchone()
    if row is None:
        raise RunNotFound(run_id)
    return {"run_id": run_id, "agent_id": row[0], "status": row[1], "result": row[2],
            "proposal_id": row[3], "claim_expires_at": row[4], "started_by": row[5]}


def not_resumable(run_id: str, status: str, result: dict[str, Any] | None) -> RunConflict:
    """Why a run that is not interrupted cannot be resumed, naming what it really is."""
    if (result or {}).get("resumed"):
        return RunConflict(f"run {run_id} was already resumed and is {status}; nothing was "
                           "run again")
    if status in ("done", "failed"):
        return RunConflict(f"run {run_id} was never interrupted: it ended {status} without "
                           "waiting for a decision, so there is nothing to resume; start a new "
                           "run instead")
    return RunConflict(f"run {run_id} is {status}, not interrupted: there is nothing to resume")


def list_runs(db: Database, tenant_id: str, agent_id: str, status: str | None = None,
              limit: int = 100, cursor: str | None = None,
              started_by: str | None = None) -> Page[dict[str, Any]]:
    """One page of an agent's runs, newest first (``status``: only those; ``started_by``: only
    the runs that caller started); ``cursor``: the previous page's ``next_cursor``."""
    before = cursor_after(cursor)
    with db.tenant(tenant_id) as conn:
        rows = conn.execute(
            f"""SELECT run_id, status, proposal_id, started_by,
                       {_UTC.format("created_at")}, {_UTC.format("updated_at")}
                  FROM runs
                 WHERE tenant_id = %(t)s AND agent_id = %(a)s
                   AND (%(s)s::text IS NULL OR status = %(s)s)
                   AND (%(by)s::text IS NULL OR started_by = %(by)s)
                   AND (%(at)s::timestamptz IS NULL
                        OR (created_at, run_id) < (%(at)s::timestamptz, %(id)s::text))
                 ORDER BY created_at DESC, run_id DESC LIMIT %(n)s""",
            {"t": tenant_id, "a": agent_id, "s": status, "by": started_by, "at": before[0],
             "id": before[1], "n": limit + 1}).fetchall()
    # No field of ``result``: a json value holding an escaped U+0000 fails every json operator.
    found = [{"run_id": r[0], "status": r[1], "proposal_id": r[2], "started_by": r[3],
              "created_at": r[4], "updated_at": r[5]} for r in rows[:limit]]
    last = found[-1] if len(rows) > limit else None
    return Page(found, None if last is None else cursor_of(last["created_at"], last["run_id"]))
