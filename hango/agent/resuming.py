"""Resuming an interrupted run exactly once: the claim is a lease, each saved call is marked done.

**The claim is a lease** (:class:`Lease`): ``HANGO_RUN_LEASE_SECONDS`` long, renewed by a
heartbeat thread every third of that while the resume runs, one short statement each. No
session-level lock: nothing is held between statements, so it works behind a transaction-mode
pooler, and no pooled connection waits through a model call. A resume whose process died stops
renewing, and its claim expires; an owner or admin may release it sooner (:func:`release`).

**Exactly once.** The saved calls (the rest of the interrupted turn, then each turn of the
resumed run, saved before its calls run) are each marked done with their result in
``run_calls``: a file write in the same transaction as the write, any other call right after it
ran. A later resume runs only the calls not marked, and hands the model the recorded results of
the others. So a file write happens exactly once; another call (a subagent's run) at least once,
if its process dies between the call and its mark; a model call may be paid twice (the one that
failed, and the resume's). A run that is never interrupted does none of this.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from psycopg.types.json import Json

from hango.agent import proposals, runs
from hango.agent.hooks import Interrupt, RunContext
from hango.agent.runs import LeaseLost, RunConflict, RunError, RunNotFound
from hango.agent.stack import Stack
from hango.db import Database, DatabaseError
from hango.fs.backend import PostgresBackend
from hango.models.base import Block, Breakpoint, Message, ToolCall, ToolResult


class Lease:
    """A resume's claim on a run: ``seconds`` long, renewed every third of that by a heartbeat
    thread while the resume runs (``with lease:``). ``state`` is the run's saved state and
    ``done`` the saved calls an earlier resume already ran, by call id, with their results."""

    def __init__(self, db: Database, tenant_id: str, agent_id: str, run_id: str, token: str,
                 seconds: float, state: dict[str, Any], done: dict[str, ToolResult]) -> None:
        self.db, self.tenant_id, self.agent_id = db, tenant_id, agent_id
        self.run_id, self.token = run_id, token
        self.seconds, self.state, self.done = seconds, state, done
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._renew, name=f"hango-lease-{run_id}",
                                      daemon=True)

    def __enter__(self) -> Lease:
        self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._beat.join()

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            with contextlib.suppress(DatabaseError):  # the database is away: try at the next beat
                with self.db.tenant(self.tenant_id) as conn:
                    held = conn.execute(
                        """UPDATE runs SET claim_expires_at = now() + make_interval(secs => %s)
                            WHERE tenant_id = %s AND run_id = %s AND claim_token = %s""",
                        [self.seconds, self.tenant_id, self.run_id, self.token]).rowcount
                if not held:
                    return  # released or taken over: the next mark says so (LeaseLost)

    def mark_done(self, result: ToolResult, conn: Any = None) -> None:
        """Record a saved call as done, with its result: in ``conn``'s transaction (where the
        call's file write is), or in one of its own. :class:`LeaseLost` if this resume no
        longer holds the run: ``conn``'s transaction then rolls back, the write with it."""
        if conn is None:
            with self.db.tenant(self.tenant_id) as own:
                self.mark_done(result, own)
            return
        row = conn.execute(
            """WITH held AS (UPDATE runs SET updated_at = now()
                              WHERE tenant_id = %s AND run_id = %s AND claim_token = %s
                          RETURNING tenant_id, run_id)
               INSERT INTO run_calls (tenant_id, run_id, call_id, result)
               SELECT tenant_id, run_id, %s, %s FROM held RETURNING 1""",
            [self.tenant_id, self.run_id, self.token, result.call_id,
             Json(asdict(result))]).fetchone()
        if row is None:
            raise LeaseLost(self.run_id)
        self.done[result.call_id] = result

    def checkpoint(self, state: dict[str, Any]) -> None:
        """Save a new turn of the resumed run before its calls run: they are saved calls now."""
        with self.db.tenant(self.tenant_id) as conn:
            row = conn.execute(
                """UPDATE runs SET state = %s, updated_at = now()
                    WHERE tenant_id = %s AND run_id = %s AND claim_token = %s RETURNING 1""",
                [Json(state), self.tenant_id, self.run_id, self.token]).fetchone()
            if row is None:
                raise LeaseLost(self.run_id)
            conn.execute("DELETE FROM run_calls WHERE tenant_id = %s AND run_id = %s",
                         [self.tenant_id, self.run_id])
        self.state, self.done = state, {}


def claim(db: Database, tenant_id: str, agent_id: str, run_id: str,
          seconds: float) -> Lease:
    """Take an interrupted run for resuming; exactly one caller wins.

    The row is locked while it is checked and marked ``resuming``, so of two resumes at the
    same moment one gets the :class:`Lease` and the other a :class:`RunConflict` saying so,
    and when the claim it holds expires. A run whose proposal is still pending, or that has
    ended, is refused the same way; nothing changes.
    """
    token = secrets.token_hex(8)
    with db.tenant(tenant_id) as conn:
        row = conn.execute(
            f"""SELECT r.status, r.state, r.proposal_id, p.status,
                       coalesce(r.claim_expires_at > now(), false), {runs.EXPIRES}, r.result
                 FROM runs r LEFT JOIN proposals p
                   ON p.tenant_id = r.tenant_id AND p.proposal_id = r.proposal_id
                WHERE r.tenant_id = %s AND r.agent_id = %s AND r.run_id = %s
                  FOR UPDATE OF r""",
            [tenant_id, agent_id, run_id]).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        status, state, proposal_id, decision, held, expires, result = row
        if status == "resuming" and held:
            raise RunConflict(f"run {run_id} is already being resumed by another request; its "
                              f"claim expires at {expires} unless that resume renews it (it "
                              "does while it runs). GET the run to see how it ends; if that "
                              "resume died, an owner or admin can release the claim")
        if status not in ("interrupted", "resuming"):
            raise runs.not_resumable(run_id, status, result)
        if decision == "pending":
            raise RunConflict(f"run {run_id} waits for proposal {proposal_id}, which is still "
                              "pending: an owner or admin must approve or reject it first")
        conn.execute("""UPDATE runs SET status = 'resuming', claimed_at = now(), claim_token = %s,
                               claim_expires_at = now() + make_interval(secs => %s),
                               updated_at = now()
                         WHERE tenant_id = %s AND run_id = %s""",
                     [token, seconds, tenant_id, run_id])
        done = conn.execute("SELECT result FROM run_calls WHERE tenant_id = %s AND run_id = %s",
                            [tenant_id, run_id]).fetchall()
    assert isinstance(state, dict)
    return Lease(db, tenant_id, agent_id, run_id, token, seconds, state,
                 {r.call_id: r for r in (runs.result_from_json(d) for (d,) in done)})


def release(db: Database, tenant_id: str, run_id: str, token: str | None = None) -> bool:
    """Give a claimed run back: this resume's (``token``: it failed, its marks are kept), or
    whichever resume holds it (an owner or admin freeing the claim of one that died; if it is
    still running, its next mark raises :class:`LeaseLost` and what it did up to there stays).
    Returns whether a claim was released."""
    with db.tenant(tenant_id) as conn:
        row = conn.execute(
            """UPDATE runs SET status = 'interrupted', claimed_at = NULL, claim_token = NULL,
                               claim_expires_at = NULL, updated_at = now()
                WHERE tenant_id = %s AND run_id = %s AND status = 'resuming'
                  AND (%s::text IS NULL OR claim_token = %s) RETURNING 1""",
            [tenant_id, run_id, token, token]).fetchone()
    return row is not None


def token(lease: Lease | None) -> str | None:
    """The claim token runs.save checks (``None``: a run that was never interrupted)."""
    return None if lease is None else lease.token


def conversation(lease: Lease, config_digest: str) -> list[Message]:
    """The saved conversation, if the agent's config and model (``config_digest``) are still
    those the run was interrupted with; a :class:`~hango.agent.runs.RunError` otherwise."""
    if lease.state["digest"] != config_digest:
        raise RunError(f"run {lease.run_id}: the agent's config or model changed since the run "
                       "was interrupted, so its conversation no longer matches; nothing was run. "
                       "Restore the config, or start a new run")
    return [runs.message_from_json(m) for m in lease.state["messages"]]


Frozen = tuple[tuple[Block, ...], tuple[Breakpoint, ...]]


def saved_turn(lease: Lease) -> tuple[Frozen, list[ToolResult], list[ToolCall]]:
    """The saved turn: the system blocks to keep, the results so far (the decided call's, and
    those of the calls an earlier resume marked done), and the calls still to run, in order."""
    state, turn = lease.state, lease.state["turn"]
    frozen = (runs.blocks_from_json(state["system"]),
              runs.breakpoints_from_json(state["breakpoints"]))
    done = [runs.result_from_json(r) for r in turn["done"]]
    if turn["pending"] is not None:
        done.append(ToolResult(turn["pending"]["id"], *proposals.result_for(
            lease.db, lease.tenant_id, lease.agent_id, state["proposal_id"])))
    rest = [runs.call_from_json(c) for c in turn["rest"]]
    done += [lease.done[c.id] for c in rest if c.id in lease.done]
    return frozen, done, [c for c in rest if c.id not in lease.done]


def replay(ctx: RunContext, stack: Stack, messages: Sequence[Message],
           done: Sequence[ToolResult]) -> None:
    """Pass the calls made before the interrupt (``done``: those of the saved turn) through the
    tool wrappers again with their recorded results, so a wrapper's state (what it narrowed)
    is what it was. Nothing runs."""
    recorded = {r.call_id: r for m in messages for r in m.tool_results}
    recorded.update((r.call_id, r) for r in done)
    for m in messages:
        for call in m.tool_calls:
            if call.id in recorded:
                with contextlib.suppress(Interrupt):
                    stack.call_tool(ctx, call, lambda c: recorded[c.id])


def run_once(ctx: RunContext, lease: Lease, writes_files: bool,
             run: Callable[[], ToolResult]) -> ToolResult:
    """A saved call, marked done with its result: a file write (``writes_files``) in the same
    transaction as the write, so exactly once; any other call right after it ran."""
    if not writes_files:
        result = run()
        lease.mark_done(result)
        return result
    with lease.db.tenant(lease.tenant_id) as conn:
        own = ctx.backend
        ctx.backend = PostgresBackend(lease.db, ctx.tenant_id, ctx.agent_id).within(conn)
        try:
            result = run()
        finally:
            ctx.backend = own
        lease.mark_done(result, conn)
    return result
