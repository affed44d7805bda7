"""Agent-written memory under approval: proposals, decisions, and what the agent is told.

In ``ask`` mode an agent's write under ``/memories/`` or ``/skills/`` is not executed: the run
stops ``interrupted`` with a **proposal** (path, operation, base version, whole content). That
half runs inside the run (:mod:`hango.agent.proposing`); this module is the other half. An owner
or admin decides: :func:`approve` writes through the one write path, in the transaction that
records the decision, against the base version (a changed file is a
:class:`ProposalConflict` with the fresh diff); :func:`reject` keeps a reason. Why a gate on a
path prefix: docs/learning/11-memory-and-skills.md §14.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from hango.agent.frontmatter import FrontmatterError, parse
from hango.db import Database
from hango.errors import HangoError, VersionConflict
from hango.fs import writes
from hango.fs.backend import PostgresBackend, decode_head
from hango.fs.files import Page
from hango.fs.history import unified_diff as unified_diff  # re-exported: proposing.py
from hango.fs.listing import InvalidCursor
from hango.fs.path import PREFIX_SKILLS, check_write
from hango.settings import Settings
from hango.telemetry import (
    ATTR_PROPOSAL_ID,
    EVENT_PROPOSAL_DECIDED,
    SPAN_DECIDE,
    Telemetry,
)

AFTER = ("Files under /memories/ and /skills/ are loaded at the start of a run, so the next run "
         "sees this change.")


class ProposalError(HangoError, ValueError):
    """A proposal cannot be made or decided; the message says why. Nothing was written."""

    status: ClassVar[int] = 422  # an invalid SKILL.md, content over the cap, no reason


class ProposalNotFound(ProposalError, LookupError):
    status: ClassVar[int] = 404

    def __init__(self, proposal_id: str) -> None:
        super().__init__(f"no proposal {proposal_id!r} for this agent")


class ProposalInvalid(ProposalError):
    """A SKILL.md that does not parse, or content over the file cap: it cannot be approved."""


class AlreadyDecided(ProposalError):
    status: ClassVar[int] = 409


class ProposalConflict(ProposalError):
    """The file changed since the proposal was made: nothing written; here is the fresh diff."""

    def __init__(self, proposal: Proposal, current_version: int | None, diff: str) -> None:
        now = "it was deleted" if current_version is None else f"it is at version {current_version}"
        super().__init__(f"{proposal.path} changed since proposal {proposal.proposal_id} was made "
                         f"against version {proposal.base_version}: {now}; nothing was written. "
                         "Read the fresh diff, then approve against the current version, edit, "
                         "or reject")
        self.proposal, self.current_version, self.diff = proposal, current_version, diff

    status: ClassVar[int] = 409

    def body(self) -> dict[str, Any]:
        return {"detail": str(self), "current_version": self.current_version, "diff": self.diff}


@dataclass(frozen=True)
class Proposal:
    proposal_id: str
    agent_id: str
    run_id: str
    call_id: str
    path: str
    operation: str
    base_version: int | None
    content: str
    skill: dict[str, Any] | None
    status: str
    decided_by: str | None = None
    decided_at: str | None = None
    reason: str | None = None
    edited: bool = False
    written_version: int | None = None
    proposed_by: str | None = None  # who started the run ("member:<token fingerprint>")
    created_at: str | None = None

    def tool_result(self) -> tuple[str, bool]:
        """What the agent reads as its pending call's result, and whether it is an error."""
        if self.status == "rejected":
            return (f"rejected by an owner or admin: {self.reason}. Nothing was written to "
                    f"{self.path}.", True)
        if self.edited:
            return (f"approved with the owner's edits: {self.path} written as version "
                    f"{self.written_version} (read it to see what was kept). {AFTER}", False)
        return f"approved: {self.path} written as version {self.written_version}. {AFTER}", False


_COLUMNS = ("proposal_id, agent_id, run_id, call_id, path, operation, base_version, content, "
            "skill, status, decided_by, to_char(decided_at AT TIME ZONE 'UTC', "
            "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), reason, edited, written_version, proposed_by, "
            "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")


def _row(row: Any) -> Proposal:
    return Proposal(row[0], row[1], row[2], row[3], row[4], row[5], row[6],
                    bytes(row[7]).decode("utf-8"), *row[8:])


def check_skill(path: str, content: str, allowlist: frozenset[str]) -> dict[str, Any] | None:
    """For a proposed ``SKILL.md``: its name, or why it is invalid, and the tools it would lose."""
    if not (path.startswith(PREFIX_SKILLS) and path.endswith("/SKILL.md")):
        return None
    try:
        fm = parse(content)
    except FrontmatterError as exc:
        return {"error": str(exc)}
    declared = list(fm.allowed_tools or ())
    return {"name": fm.name, "allowed_tools": declared,
            "dropped_tools": [t for t in declared if t not in allowlist]}


def view(p: Proposal) -> dict[str, Any]:
    """A proposal as plain data (the API's body, the run's ``interrupt``)."""
    return {"proposal_id": p.proposal_id, "agent_id": p.agent_id, "run_id": p.run_id,
            "path": p.path, "operation": p.operation, "base_version": p.base_version,
            "content": p.content, "skill": p.skill, "status": p.status,
            "decided_by": p.decided_by, "decided_at": p.decided_at, "reason": p.reason,
            "edited": p.edited, "written_version": p.written_version,
            "proposed_by": p.proposed_by, "created_at": p.created_at}


# --- deciding (an owner or admin) --------------------------------------------------------------


def list_proposals(db: Database, tenant_id: str, agent_id: str,
                   status: str | None = "pending", limit: int = 100,
                   cursor: str | None = None) -> Page[Proposal]:
    """One page of proposals, oldest first; ``cursor``: the previous page's ``next_cursor``."""
    after = cursor_after(cursor)
    with db.tenant(tenant_id) as conn:
        rows = conn.execute(
            f"""SELECT {_COLUMNS} FROM proposals
                 WHERE tenant_id = %s AND agent_id = %s AND (%s::text IS NULL OR status = %s)
                   AND (%s::timestamptz IS NULL
                        OR (created_at, proposal_id) > (%s::timestamptz, %s::text))
                 ORDER BY created_at, proposal_id LIMIT %s""",
            [tenant_id, agent_id, status, status, after[0], after[0], after[1],
             limit + 1]).fetchall()
    found = [_row(r) for r in rows[:limit]]
    more = len(rows) > limit
    last = found[-1] if more else None
    return Page(found, None if last is None else cursor_of(last.created_at, last.proposal_id))


def cursor_of(created_at: str | None, row_id: str) -> str:
    """A keyset listing's cursor: the last row's time and id, opaque (the runs listing too)."""
    text = json.dumps([created_at, row_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def cursor_after(cursor: str | None) -> tuple[str | None, str | None]:
    """The time and id a :func:`cursor_of` holds; :class:`InvalidCursor` naming a bad one."""
    if cursor is None:
        return None, None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created, proposal_id = json.loads(base64.urlsafe_b64decode(padded))
        if not (isinstance(created, str) and isinstance(proposal_id, str)):
            raise ValueError
        datetime.fromisoformat(created)
    except (ValueError, TypeError):  # binascii.Error and json.JSONDecodeError are ValueErrors
        raise InvalidCursor(f"invalid cursor {cursor[:40]!r}: pass back the next_cursor of "
                            "the previous page unchanged") from None
    return created, proposal_id


def get(db: Database, tenant_id: str, agent_id: str, proposal_id: str) -> tuple[Proposal, str]:
    """A proposal and its unified diff against the file as it is *now*."""
    with db.tenant(tenant_id) as conn:
        proposal = _fetch(conn, tenant_id, agent_id, proposal_id, lock=False)
        current = _current(conn, tenant_id, agent_id, proposal.path)
    return proposal, unified_diff(proposal.path, current, proposal.content)


def _fetch(conn: Any, tenant_id: str, agent_id: str, proposal_id: str, *,
           lock: bool) -> Proposal:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM proposals WHERE tenant_id = %s AND agent_id = %s "
        f"AND proposal_id = %s{' FOR UPDATE' if lock else ''}",
        [tenant_id, agent_id, proposal_id]).fetchone()
    if row is None:
        raise ProposalNotFound(proposal_id)
    return _row(row)


def _current(conn: Any, tenant_id: str, agent_id: str, path: str) -> str | None:
    """The file as it is now (for a diff); ``None``: there is none."""
    row = conn.execute("SELECT content FROM agent_files WHERE tenant_id = %s AND agent_id = %s "
                       "AND path = %s", [tenant_id, agent_id, path]).fetchone()
    return None if row is None else decode_head(bytes(row[0]), len(row[0]))


def approve(db: Database, tenant_id: str, agent_id: str, proposal_id: str, *, by: str,
            role: str, content: str | None = None, base_version: int | None = None,
            reason: str | None = None, allowlist: frozenset[str] = frozenset(),
            settings: Settings | None = None, telemetry: Telemetry | None = None) -> Proposal:
    """Write the proposal (or ``content``, the owner's edit) against its base version.

    ``base_version`` re-bases an approval on the version a :class:`ProposalConflict` showed.
    One transaction: the file is written through :func:`hango.fs.writes.write` (every rule of a
    write applies, with ``settings``' caps and quotas), and the decision commits with it or not
    at all.
    """
    tel = telemetry or Telemetry()
    check_reason(reason)
    with db.tenant(tenant_id) as conn:
        p = _fetch(conn, tenant_id, agent_id, proposal_id, lock=True)
        if p.status != "pending":
            if p.status == "approved" and content is None:
                return p  # the same decision again: safe, nothing written twice
            raise AlreadyDecided(f"proposal {proposal_id} was already {p.status} by "
                                 f"{p.decided_by} at {p.decided_at}; nothing changed")
        check_write(p.path, role)  # the same rule as any API write (a member: refused)
        final = p.content if content is None else content
        skill = check_skill(p.path, final, allowlist)
        if skill is not None and "error" in skill:
            raise ProposalInvalid(f"{p.path} is not a valid SKILL.md, so it cannot be approved "
                                  f"(edit it or reject): {skill['error']}")
        base = p.base_version if base_version is None else base_version
        files = PostgresBackend(db, tenant_id, agent_id, settings, author=by).within(conn)
        try:  # if_version=0: only if the file still does not exist
            version = writes.write(files, p.path, final, if_version=base or 0,
                                   proposal_id=p.proposal_id)
        except VersionConflict as exc:
            tel.record_proposal("conflict")
            current = _current(conn, tenant_id, agent_id, p.path)
            raise ProposalConflict(p, exc.actual, unified_diff(p.path, current, final)) from None
        edited = content is not None and content != p.content
        conn.execute(
            """UPDATE proposals SET status = 'approved', decided_by = %s, decided_at = now(),
                      reason = %s, edited = %s, written_version = %s
                WHERE tenant_id = %s AND proposal_id = %s""",
            [by, reason, edited, version, tenant_id, proposal_id])
        decided = _fetch(conn, tenant_id, agent_id, proposal_id, lock=False)
    outcome = "approved_with_edits" if edited else "approved"
    tel.record_proposal(outcome)
    _event(tel, decided, outcome)
    return decided


def check_reason(reason: str | None) -> None:
    """A reason is kept in a text column, which cannot hold U+0000: refused, naming it."""
    if reason is not None and "\x00" in reason:
        raise ProposalError("reason contains U+0000 (NUL), which cannot be stored; nothing "
                            "was decided")


def reject(db: Database, tenant_id: str, agent_id: str, proposal_id: str, *, by: str,
           role: str, reason: str, telemetry: Telemetry | None = None) -> Proposal:
    """Decide no, with a reason the agent will read. Nothing is written."""
    if not reason.strip():
        raise ProposalError("a rejection needs a reason (the agent reads it)")
    check_reason(reason)
    tel = telemetry or Telemetry()
    with db.tenant(tenant_id) as conn:
        p = _fetch(conn, tenant_id, agent_id, proposal_id, lock=True)
        if p.status == "rejected":
            return p
        if p.status != "pending":
            raise AlreadyDecided(f"proposal {proposal_id} was already {p.status} by "
                                 f"{p.decided_by} at {p.decided_at}; nothing changed")
        check_write(p.path, role)
        conn.execute(
            """UPDATE proposals SET status = 'rejected', decided_by = %s, decided_at = now(),
                      reason = %s WHERE tenant_id = %s AND proposal_id = %s""",
            [by, reason, tenant_id, proposal_id])
        decided = _fetch(conn, tenant_id, agent_id, proposal_id, lock=False)
    tel.record_proposal("rejected")
    _event(tel, decided, "rejected")
    return decided


def _event(tel: Telemetry, p: Proposal, outcome: str) -> None:
    with tel.span(SPAN_DECIDE) as span:
        span.add_event(EVENT_PROPOSAL_DECIDED, {ATTR_PROPOSAL_ID: p.proposal_id,
                                                "outcome": outcome, "path": p.path,
                                                "decided_by": p.decided_by or ""})


def result_for(db: Database, tenant_id: str, agent_id: str, proposal_id: str) -> tuple[str, bool]:
    """The decided proposal's tool result (for resume)."""
    with db.tenant(tenant_id) as conn:
        return _fetch(conn, tenant_id, agent_id, proposal_id, lock=False).tool_result()
