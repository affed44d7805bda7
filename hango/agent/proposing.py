"""Proposing, inside a run: an agent's ask-mode write becomes a proposal, not a write.

:func:`hango.fs.path.check_write` raises ``ApprovalRequired``; the agent's tools
(:mod:`hango.agent.tools`) turn it into :func:`propose`'s :class:`~hango.agent.hooks.Interrupt`,
which stops the run ``interrupted`` and saves the proposal with it, under the agent's row lock so
parallel runs cannot pass ``HANGO_PROPOSALS_MAX_PENDING``, nor a member's runs their share of it
(``HANGO_PROPOSALS_MAX_PENDING_PER_MEMBER``). The proposal keeps who started the run. What a
proposal is and how an owner or admin decides it: :mod:`hango.agent.proposals`.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from hango.agent.hooks import Interrupt, RunContext
from hango.agent.proposals import Proposal, ProposalError, check_skill, unified_diff, view
from hango.agents import lock_agent
from hango.errors import EditError, FileNotFound
from hango.fs.writes import text_bytes
from hango.models.base import ToolCall
from hango.telemetry import ATTR_PROPOSAL_ID, EVENT_PROPOSAL_CREATED


def propose(ctx: RunContext, call: ToolCall, path: str, *, max_bytes: int,
            max_pending: int, max_pending_per_member: int | None = None) -> Interrupt:
    """Turn an ask-mode write into an :class:`Interrupt` that saves a proposal with the run.

    Raises :class:`ProposalError` (the agent reads it as a tool error, and the run goes on) when
    the edit does not apply, the content is over ``max_bytes`` or is not text (the write path's
    rule); the interrupt's ``persist`` raises it when the agent already has ``max_pending``
    proposals waiting, or the member who started the run ``max_pending_per_member``.
    """
    try:
        current = ctx.backend.read(path)
    except FileNotFound:
        current = None
    args = call.arguments
    if call.name == "edit_file":
        old, new = args.get("old_string"), args.get("new_string")
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            raise ProposalError("edit_file needs a non-empty string 'old_string' and a string "
                                "'new_string'")
        if current is None:
            raise FileNotFound(path)
        count = current.content.count(old)
        if count == 0 or (count > 1 and args.get("replace_all") is not True):
            raise EditError(f"{path}: the text to replace occurs {count} times; it must occur "
                            "once (or pass replace_all); nothing was proposed")
        content = current.content.replace(old, new)
    else:
        given = args.get("content")
        if not isinstance(given, str):
            raise ProposalError("argument 'content' must be a string")
        content = given
    if len(content.encode("utf-8")) > max_bytes:
        raise ProposalError(f"the proposed {path} is {len(content.encode('utf-8'))} bytes, over "
                            f"the file cap of {max_bytes} bytes; nothing was proposed")
    text_bytes(path, content)  # approve writes through the same rule: refuse it now
    proposal = Proposal(f"{ctx.run_id}-{call.id}", ctx.agent_id, ctx.run_id, call.id, path,
                        call.name, None if current is None else current.version, content,
                        check_skill(path, content, ctx.allowlist), "pending",
                        proposed_by=ctx.started_by)
    diff = unified_diff(path, None if current is None else current.content, content)

    def persist(conn: Any, run_id: str) -> None:
        # Under the agent's row lock, so parallel runs of one agent cannot pass the bound.
        lock_agent(conn, ctx.tenant_id, ctx.agent_id)
        (waiting,) = conn.execute(
            "SELECT count(*) FROM proposals WHERE tenant_id = %s AND agent_id = %s "
            "AND status = 'pending'", [ctx.tenant_id, ctx.agent_id]).fetchone()
        if waiting >= max_pending:  # the model reads this as the call's error; the run goes on
            raise ProposalError(f"this agent already has {max_pending} proposals waiting for a "
                                "decision (HANGO_PROPOSALS_MAX_PENDING); nothing was proposed")
        share = max_pending_per_member
        if share is not None and (ctx.started_by or "").startswith("member:"):
            (mine,) = conn.execute(
                "SELECT count(*) FROM proposals WHERE tenant_id = %s AND agent_id = %s "
                "AND status = 'pending' AND proposed_by = %s",
                [ctx.tenant_id, ctx.agent_id, ctx.started_by]).fetchone()
            if mine >= share:  # so that one member cannot fill the queue for everyone
                raise ProposalError(
                    f"the member who started this run already has {share} of this agent's "
                    "proposals waiting for a decision (HANGO_PROPOSALS_MAX_PENDING_PER_MEMBER); "
                    "nothing was proposed")
        conn.execute(
            """INSERT INTO proposals (tenant_id, agent_id, proposal_id, run_id, call_id, path,
                                      operation, base_version, content, skill, proposed_by)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            [ctx.tenant_id, ctx.agent_id, proposal.proposal_id, run_id, call.id, path, call.name,
             proposal.base_version, content.encode("utf-8"),
             None if proposal.skill is None else Jsonb(proposal.skill), ctx.started_by])
        ctx.event(EVENT_PROPOSAL_CREATED, **{ATTR_PROPOSAL_ID: proposal.proposal_id,
                                              "path": path, "operation": call.name})
        ctx.telemetry.record_proposal("proposed")

    return Interrupt("proposal", {**view(proposal), "diff": diff}, persist)
