"""The room view: every learner of a workshop at a glance, for the instructor; and the checks a
learner's notebooks send to the shared server it reads.

A learner's seat is a tenant (``hango workshop provision``). Their notebooks, run with
``HANGO_SERVER_URL`` and ``HANGO_TOKEN``, send each ``check()`` here (:func:`record_check`, one
row per exercise, under the seat's row-level security); notebook 09's runs and proposals run on
the server itself. :func:`room` reads every seat of a prefix at once, which crosses tenants: row
-level security is forced for the tables' owner too, so it says so (``all_tenants=True``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hango.agents import _check_id
from hango.db import Database

EXERCISE_ID = re.compile(r"^[0-9]{2}\.[0-9]{1,2}$")
MESSAGE_MAX = 2000  # characters of a check's message kept (the table's bound)
STATUSES = ("done", "interrupted", "resuming", "failed")


def record_check(db: Database, tenant: str, exercise_id: str, passed: bool, message: str) -> None:
    """Keep one check of ``exercise_id`` for the seat: its last try, and its first pass."""
    if not EXERCISE_ID.match(exercise_id):
        raise ValueError(f"exercise id {exercise_id!r} is not NN.N (such as 06.2)")
    text = message[:MESSAGE_MAX]
    with db.tenant(tenant) as conn:
        conn.execute(
            """INSERT INTO learner_checks AS c (tenant_id, exercise_id, passed_at, verified,
                                                last_passed, last_message)
               VALUES (%(t)s, %(e)s, CASE WHEN %(p)s THEN now() END, CASE WHEN %(p)s THEN %(m)s END,
                       %(p)s, %(m)s)
               ON CONFLICT (tenant_id, exercise_id) DO UPDATE
                  SET tries = LEAST(c.tries, 1000000) + 1, last_tried_at = now(),
                      last_passed = EXCLUDED.last_passed, last_message = EXCLUDED.last_message,
                      passed_at = COALESCE(c.passed_at, EXCLUDED.passed_at),
                      verified = COALESCE(c.verified, EXCLUDED.verified)""",
            {"t": tenant, "e": exercise_id, "p": passed, "m": text})


def passed_checks(db: Database, tenant: str) -> dict[str, str]:
    """``{exercise id: what its first pass verified}`` for the seat."""
    with db.tenant(tenant) as conn:
        rows = conn.execute("SELECT exercise_id, verified FROM learner_checks"
                            " WHERE passed_at IS NOT NULL ORDER BY exercise_id").fetchall()
    return {str(e): str(v) for e, v in rows}


@dataclass(frozen=True)
class Learner:
    """One seat as the room view shows it."""

    tenant: str
    last_activity: datetime | None
    runs: dict[str, int] = field(default_factory=dict)
    pending: int = 0
    passed: int = 0
    stuck_on: str | None = None  # the exercise whose last check said NOT YET, the latest one
    last_error: str | None = None
    last_error_at: datetime | None = None


_ROOM = """
SELECT t.tenant_id,
       GREATEST((SELECT max(updated_at) FROM runs r WHERE r.tenant_id = t.tenant_id),
                (SELECT max(last_tried_at) FROM learner_checks c WHERE c.tenant_id = t.tenant_id),
                (SELECT max(updated_at) FROM agent_files f WHERE f.tenant_id = t.tenant_id),
                (SELECT max(decided_at) FROM proposals p WHERE p.tenant_id = t.tenant_id),
                (SELECT max(last_used_at) FROM api_tokens k WHERE k.tenant_id = t.tenant_id)),
       (SELECT json_object_agg(status, n) FROM (SELECT status, count(*) AS n FROM runs r
                                                 WHERE r.tenant_id = t.tenant_id GROUP BY status) s),
       (SELECT count(*) FROM proposals p WHERE p.tenant_id = t.tenant_id AND p.status = 'pending'),
       (SELECT count(*) FROM learner_checks c WHERE c.tenant_id = t.tenant_id
                                                AND c.passed_at IS NOT NULL),
       f.run_id, f.updated_at, f.stop_reason, f.warning,
       n.exercise_id, n.last_tried_at, n.last_message
  FROM tenants t
  LEFT JOIN LATERAL (
        SELECT run_id, updated_at, result->>'stop_reason' AS stop_reason,
               result->'warnings'->>(json_array_length(result->'warnings') - 1) AS warning
          FROM runs r WHERE r.tenant_id = t.tenant_id AND r.status = 'failed'
         ORDER BY updated_at DESC LIMIT 1) f ON true
  LEFT JOIN LATERAL (
        SELECT exercise_id, last_tried_at, last_message FROM learner_checks c
         WHERE c.tenant_id = t.tenant_id AND NOT c.last_passed
         ORDER BY last_tried_at DESC LIMIT 1) n ON true
 WHERE t.tenant_id ~ %s
 ORDER BY t.tenant_id
 LIMIT %s
"""


def room(db: Database, prefix: str = "learner", limit: int = 1000) -> list[Learner]:
    """Every seat ``{prefix}-NN``: last activity, runs by status, pending proposals, exercises
    passed, the last error (a failed run, or a check that said NOT YET, the later of the two)."""
    _check_id("tenant id", f"{prefix}-01")  # the id rule allows no regular-expression metacharacter
    # An admin read across tenants: row-level security is forced for the owner, who says so.
    with db.admin(all_tenants=True) as conn:
        rows = conn.execute(_ROOM, [f"^{prefix}-[0-9]+$", limit]).fetchall()
    return [_learner(row) for row in rows]


def _learner(row: Any) -> Learner:
    (tenant, active, runs, pending, passed, run_id, failed_at, stop_reason, warning,
     exercise_id, tried_at, message) = row
    errors = []
    if run_id is not None:
        errors.append((failed_at, f"run {run_id} failed ({stop_reason}): {warning or ''}".rstrip(": ")))
    if exercise_id is not None:
        errors.append((tried_at, f"NOT YET {exercise_id}: {message}"))
    when, text = max(errors, key=lambda e: e[0]) if errors else (None, None)
    return Learner(str(tenant), active, {str(k): int(v) for k, v in (runs or {}).items()},
                   int(pending), int(passed), exercise_id, text, when)


def _ago(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "never"
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def render(learners: list[Learner], exercises: int, now: datetime, width: int = 60) -> str:
    """The room as a table, one seat a line (``now`` makes it the same for the same rows)."""
    runs_head = "/".join(STATUSES)
    lines = [f"{len(learners)} seat(s) at {now:%H:%M:%S %Z}".rstrip(),
             f"{'seat':<14} {'last activity':<14} {'runs ' + runs_head:<38} {'pending':>7} "
             f"{'passed':>7}  last error"]
    for s in learners:
        runs = "/".join(str(s.runs.get(status, 0)) for status in STATUSES)
        error = "-" if s.last_error is None else (
            f"{_ago(s.last_error_at, now)}: " + " ".join(s.last_error.split()))
        if len(error) > width:
            error = error[:width - 1] + "…"
        lines.append(f"{s.tenant:<14} {_ago(s.last_activity, now):<14} {runs:<38} {s.pending:>7} "
                     f"{f'{s.passed}/{exercises}':>7}  {error}")
    if not learners:
        lines.append("(no seat matches: provision them with `hango workshop provision`)")
    return "\n".join(lines)
