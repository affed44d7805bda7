"""Retention: how long ``runs`` and ``proposals`` are kept, and their place in a tenant's usage.

Every run over HTTP leaves a row, and a proposal belongs to its run (deleting a run deletes its
proposals). A **sweep** keeps each tenant's history bounded:

- an ended run (``done`` or ``failed``) is deleted once it is older than ``HANGO_RUNS_KEEP_DAYS``
  (counted from its last change), or once it is not among the tenant's newest
  ``HANGO_RUNS_KEEP_MAX`` ended runs, with its proposals;
- a run **waiting for a decision** (its proposal is pending) is never touched: deleting it would
  lose the proposal an owner has not read. The pending cap (``HANGO_PROPOSALS_MAX_PENDING`` per
  agent) bounds those instead;
- a run whose proposal was decided but that nobody resumed within ``HANGO_RUNS_KEEP_DAYS`` of the
  decision is **ended**, not deleted: ``failed``, stop reason ``expired``, its saved state dropped
  and a warning in its result saying why, so ``GET`` of it tells what happened. It is then an
  ended run like any other.

Then the tenant's ``runs`` (rows) and ``run_bytes`` (saved state and results, as stored, plus the
proposed contents and the prompts the runs kept, :mod:`hango.prompts`) are written to its
``tenant_usage`` row, with the time of the sweep. They are counted there, not refused: a
history never stops the next run; the two bounds above keep it small. Counting at the sweep,
not on every write, adds no lock to a run.

A sweep is bounded: at most ``tenants`` tenants (least recently swept first), and at most
``batch`` rows per statement, each tenant in transactions of its own; what is left waits for the
next sweep. ``hango serve`` sweeps every ``HANGO_RUNS_SWEEP_SECONDS``; ``hango db sweep`` once.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg.types.json import Json

from hango.db import Database
from hango.settings import Settings

ENDED = "status IN ('done', 'failed')"
_WAITING = """NOT EXISTS (SELECT 1 FROM proposals p WHERE p.tenant_id = r.tenant_id
                             AND p.run_id = r.run_id AND p.status = 'pending')"""
EXPIRED = ("not resumed within HANGO_RUNS_KEEP_DAYS={days:g} days of its decision: ended by the "
           "retention sweep, its saved state dropped; start a new run")

_BY_AGE = f"""
DELETE FROM runs WHERE tenant_id = %(t)s AND run_id IN (
    SELECT r.run_id FROM runs r
     WHERE r.tenant_id = %(t)s AND r.{ENDED} AND {_WAITING}
       AND r.updated_at < now() - make_interval(secs => %(keep)s)
     ORDER BY r.updated_at LIMIT %(batch)s)"""
_BY_COUNT = f"""
DELETE FROM runs WHERE tenant_id = %(t)s AND run_id IN (
    SELECT r.run_id FROM runs r
     WHERE r.tenant_id = %(t)s AND r.{ENDED} AND {_WAITING}
     ORDER BY r.updated_at DESC, r.run_id DESC OFFSET %(max)s LIMIT %(batch)s)"""
# The decided runs nobody resumed in time; they are ended (in Python: a result is json, which may
# hold an escaped U+0000 that jsonb's operators refuse).
_EXPIRING = """
SELECT x.run_id, x.result FROM runs x LEFT JOIN proposals p
    ON p.tenant_id = x.tenant_id AND p.proposal_id = x.proposal_id
 WHERE x.tenant_id = %(t)s AND x.status = 'interrupted'
   AND CASE WHEN p.proposal_id IS NULL  -- waiting for nothing: its own age
            THEN x.updated_at < now() - make_interval(secs => %(keep)s)
            ELSE p.status <> 'pending'
                 AND p.decided_at < now() - make_interval(secs => %(keep)s) END
 LIMIT %(batch)s FOR UPDATE OF x"""
_EXPIRE = """
UPDATE runs SET status = 'failed', state = NULL, updated_at = now(), result = %s
 WHERE tenant_id = %s AND run_id = %s"""
_COUNT = """
INSERT INTO tenant_usage AS u (tenant_id, runs, run_bytes, runs_swept_at)
SELECT %(t)s, count(*),
       coalesce(sum(coalesce(pg_column_size(r.state), 0) + pg_column_size(r.result)), 0)
       + (SELECT coalesce(sum(octet_length(p.content)), 0) FROM proposals p
           WHERE p.tenant_id = %(t)s)
       + (SELECT coalesce(sum(k.bytes), 0) FROM run_prompts k WHERE k.tenant_id = %(t)s),
       now()
  FROM runs r WHERE r.tenant_id = %(t)s
ON CONFLICT (tenant_id) DO UPDATE
   SET runs = EXCLUDED.runs, run_bytes = EXCLUDED.run_bytes, runs_swept_at = now()"""
_NEXT_TENANTS = """
SELECT t.tenant_id FROM tenants t LEFT JOIN tenant_usage u USING (tenant_id)
 ORDER BY u.runs_swept_at NULLS FIRST, t.tenant_id LIMIT %s"""


@dataclass
class Swept:
    """What one sweep did."""

    tenants: int = 0
    by_age: int = 0  # ended runs deleted for their age
    by_count: int = 0  # ended runs deleted beyond the newest HANGO_RUNS_KEEP_MAX
    expired: int = 0  # decided, never resumed: ended

    def __str__(self) -> str:
        return (f"swept {self.tenants} tenants: deleted {self.by_age} runs older than the keep "
                f"time and {self.by_count} beyond the keep count; ended {self.expired} runs "
                "never resumed")


def sweep(db: Database, settings: Settings, *, tenants: int = 100, batch: int = 1000) -> Swept:
    """One bounded pass over the ``tenants`` least recently swept tenants (module docstring)."""
    done = Swept()
    with db.admin(all_tenants=True) as conn:  # across tenants: said so (row-level security)
        due = [tenant for (tenant,) in conn.execute(_NEXT_TENANTS, [tenants]).fetchall()]
    for tenant in due:
        _sweep(db, tenant, settings, batch, done)
    return done


def sweep_tenant(db: Database, tenant_id: str, settings: Settings, *,
                 batch: int = 1000) -> Swept:
    """The same pass over one tenant."""
    done = Swept()
    _sweep(db, tenant_id, settings, batch, done)
    return done


def _sweep(db: Database, tenant: str, settings: Settings, batch: int, done: Swept) -> None:
    args = {"t": tenant, "keep": settings.runs_keep_days * 86400, "max": settings.runs_keep_max,
            "batch": batch, "why": EXPIRED.format(days=settings.runs_keep_days)}
    with db.admin(tenant) as conn:  # the deletes, then the count: never both locks at once
        expiring = conn.execute(_EXPIRING, args).fetchall()
        conn.cursor().executemany(_EXPIRE, [
            [Json({**(result or {}), "status": "failed", "stop_reason": "expired",
                   "warnings": [*(result or {}).get("warnings", []), args["why"]]}),
             tenant, run_id] for run_id, result in expiring])
        done.expired += len(expiring)
        done.by_age += conn.execute(_BY_AGE, args).rowcount
        done.by_count += conn.execute(_BY_COUNT, args).rowcount
    with db.admin(tenant) as conn:
        conn.execute(_COUNT, args)
    done.tenants += 1
