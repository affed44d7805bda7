"""Runs that outlive their process: the state of an interrupted run, kept in PostgreSQL.

A run that stops ``interrupted`` saves what resume needs in the ``runs`` table (under RLS):
the messages so far, the system blocks and breakpoints of its last request (so the resumed
request's prefix is byte-identical, and the provider reads it from the cache), the pending tool
call with the calls of the same turn, and a digest of the agent's config. Any process can resume
it; a claim (``status = 'resuming'``) makes sure only one does.

A run over HTTP also records how it ended (``done`` or ``failed``), so ``GET`` can show it.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from typing import Any, ClassVar, Protocol

from psycopg.types.json import Jsonb

from hango.db import Database
from hango.errors import HangoError
from hango.models.base import (
    Block,
    Breakpoint,
    Message,
    Response,
    ToolCall,
    ToolResult,
    Usage,
)

CLAIM_SECONDS = 600  # a resume that died (its process killed) frees its claim after this long


class RunError(HangoError, RuntimeError):
    """A run cannot be resumed; the message says why (pending, already resumed, config changed)."""

    status: ClassVar[int] = 409


class RunNotFound(RunError, LookupError):
    status: ClassVar[int] = 404

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r} in this tenant")


class RunConflict(RunError):
    """Resume raced another resume, or the run waits for a decision, or it has ended."""


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
             config_digest: str, steps: int, proposal_id: str | None,
             done: list[ToolResult], pending: ToolCall, rest: list[ToolCall]) -> dict[str, Any]:
    """What resume needs, as JSON: the conversation, the system blocks and breakpoints to keep,
    and the interrupted turn (results so far, the pending call, the calls after it)."""
    return {"messages": [message_to_json(m) for m in messages],
            "system": blocks_to_json(frozen[0]), "breakpoints": breakpoints_to_json(frozen[1]),
            "digest": config_digest, "steps": steps, "proposal_id": proposal_id,
            "turn": {"done": [asdict(r) for r in done], "pending": call_to_json(pending),
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


def save(conn: Any, tenant_id: str, agent_id: str, run_id: str, status: str,
         state: dict[str, Any] | None, result: dict[str, Any],
         proposal_id: str | None = None) -> None:
    """Insert or replace a run's row (inside the caller's transaction)."""
    conn.execute(
        """INSERT INTO runs (tenant_id, agent_id, run_id, status, state, result, proposal_id)
           VALUES (%s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (tenant_id, run_id) DO UPDATE
              SET status = EXCLUDED.status, state = EXCLUDED.state, result = EXCLUDED.result,
                  proposal_id = EXCLUDED.proposal_id, claimed_at = NULL, updated_at = now()""",
        [tenant_id, agent_id, run_id, status, None if state is None else Jsonb(state),
         Jsonb(result), proposal_id])


def set_result(conn: Any, tenant_id: str, run_id: str, result: dict[str, Any]) -> None:
    conn.execute("UPDATE runs SET result = %s, updated_at = now() WHERE tenant_id = %s "
                 "AND run_id = %s", [Jsonb(result), tenant_id, run_id])


def load(db: Database, tenant_id: str, run_id: str) -> dict[str, Any]:
    """A run's row as a dict; :class:`RunNotFound` if this tenant has no such run."""
    with db.tenant(tenant_id) as conn:
        row = conn.execute(
            """SELECT agent_id, status, result, proposal_id FROM runs
                WHERE tenant_id = %s AND run_id = %s""", [tenant_id, run_id]).fetchone()
    if row is None:
        raise RunNotFound(run_id)
    return {"run_id": run_id, "agent_id": row[0], "status": row[1], "result": row[2],
            "proposal_id": row[3]}


def claim(db: Database, tenant_id: str, agent_id: str, run_id: str) -> dict[str, Any]:
    """Take an interrupted run for resuming and return its state; exactly one caller wins.

    The row is locked while it is checked and marked ``resuming``, so of two resumes at the
    same moment one gets the state and the other a :class:`RunConflict` saying so. A run whose
    proposal is still pending, or that has ended, is refused the same way; nothing changes.
    """
    with db.tenant(tenant_id) as conn:
        row = conn.execute(
            """SELECT r.status, r.state, r.proposal_id, p.status,
                      r.claimed_at < now() - make_interval(secs => %s), r.result
                 FROM runs r LEFT JOIN proposals p
                   ON p.tenant_id = r.tenant_id AND p.proposal_id = r.proposal_id
                WHERE r.tenant_id = %s AND r.agent_id = %s AND r.run_id = %s
                  FOR UPDATE OF r""",
            [CLAIM_SECONDS, tenant_id, agent_id, run_id]).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        status, state, proposal_id, decision, stale, result = row
        if status == "resuming" and not stale:
            raise RunConflict(f"run {run_id} is already being resumed by another request; "
                              f"GET it to see how it ends")
        if status not in ("interrupted", "resuming"):
            raise not_resumable(run_id, status, result)
        if decision == "pending":
            raise RunConflict(f"run {run_id} waits for proposal {proposal_id}, which is still "
                              "pending: an owner or admin must approve or reject it first")
        conn.execute("""UPDATE runs SET status = 'resuming', claimed_at = now(),
                               updated_at = now()
                         WHERE tenant_id = %s AND run_id = %s""", [tenant_id, run_id])
    assert isinstance(state, dict)
    return state


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


def release(db: Database, tenant_id: str, run_id: str) -> None:
    """Give a claimed run back (its resume failed before it could save anything)."""
    with db.tenant(tenant_id) as conn:
        conn.execute("""UPDATE runs SET status = 'interrupted', claimed_at = NULL
                         WHERE tenant_id = %s AND run_id = %s AND status = 'resuming'""",
                     [tenant_id, run_id])
