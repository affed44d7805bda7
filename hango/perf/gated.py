"""One round trip for every read a run makes before it starts, each gated on the change counter.

Every write of a file under ``/memories/`` or ``/skills/`` (through any door, plain SQL included)
gives the agent's row of ``agent_changes`` a new counter value in the same transaction (a trigger
in the schema). A read *gated* on the counter its cached result was built at returns only the
counter while nothing changed. :func:`read_if_changed` sends the app role, the tenant and every
gated read in pipeline mode with one Sync: one protocol round trip, whatever changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

from psycopg import sql

from hango.agent.frontmatter import FENCES, HEAD_BYTES
from hango.agent.skills import SKILL_FILE
from hango.db import BEGIN_APP
from hango.fs.files import FileData, Namespace, Read, ReadFiles
from hango.fs.queries import bounds, heads_query, read_many_query

# The app role and the tenant (db.BEGIN_APP); with prepared statements (psycopg prepares a
# statement on its fifth use), a generic plan too: re-planning them each time cost more than the
# gated run itself (0.2 of 0.27 ms). Behind a transaction-mode pooler they are off (db.py).
_BEGIN_GENERIC: LiteralString = (
    BEGIN_APP + ", set_config('plan_cache_mode', 'force_generic_plan', true)")


@dataclass(frozen=True)
class Gated:
    """One read for :func:`read_if_changed`: a query, its parameters, and the change counter
    its cached result was read at (``None``: nothing cached, always read)."""

    query: sql.Composable
    params: dict[str, Any]
    lenient: bool
    known: int | None


def is_skill_head(declared: Read) -> bool:
    """The skills scan's cut, which the ``skill_head`` column holds (filled at write time)."""
    return (not isinstance(declared, ReadFiles) and declared.name == SKILL_FILE
            and declared.limit == HEAD_BYTES and declared.cut_after == FENCES
            and declared.max_per_dir is not None)


def skill_heads_query(ns: dict[str, Any], directories: Sequence[str],
                      max_per_dir: int) -> tuple[LiteralString, dict[str, Any]]:
    """The skills scan from the ``skill_head`` column: the same bytes, small rows, no cutting."""
    return (
        """SELECT DISTINCT ON (f.path) f.path, f.skill_head, f.version, f.size
             FROM unnest(%(lo)s::text[], %(hi)s::text[]) AS d(lo, hi),
                  LATERAL (SELECT path, skill_head, version, size FROM agent_files
                            WHERE tenant_id = %(t)s AND agent_id = %(a)s
                              AND path >= d.lo AND path < d.hi AND path LIKE '%%/SKILL.md'
                            ORDER BY path LIMIT %(max)s) AS f
            ORDER BY f.path""",
        {**ns, "max": max_per_dir, **bounds(directories)},
    )


def gated(declared: Read, ns: dict[str, Any], known: int | None) -> Gated:
    """``declared`` as one read of :func:`read_if_changed`."""
    if isinstance(declared, ReadFiles):
        query, params = read_many_query(ns, declared.paths, declared.limit)
        return Gated(sql.SQL(query), params, False, known)
    if is_skill_head(declared):
        assert declared.max_per_dir is not None
        query, params = skill_heads_query(ns, declared.directories, declared.max_per_dir)
        return Gated(sql.SQL(query), params, True, known)
    composed, params = heads_query(ns, declared.directories, declared.name, declared.limit,
                                   declared.max_per_dir, declared.cut_after)
    return Gated(composed, params, True, known)


def read_if_changed(where: Namespace,
                    reads: Sequence[Gated]) -> list[tuple[int, list[FileData] | None]]:
    """For each read: the agent's change counter, and the rows when ``known`` is not that
    counter (``None`` when it is: the database skipped the read, nothing was sent).

    ONE protocol round trip: the role and tenant, set with ``set_config(..., true)``, hold until
    the single Sync, which makes the whole pipeline one implicit transaction. Each read returns
    the counter from its own snapshot, so its rows are never older than the counter they are
    cached under. Rows come back sorted by path.
    """
    gate = sql.SQL(
        """SELECT c.counter, q.*
             FROM (SELECT coalesce((SELECT counter FROM agent_changes
                                     WHERE tenant_id = %(t)s AND agent_id = %(a)s), 0)
                          AS counter) AS c
             LEFT JOIN LATERAL (SELECT * FROM ({}) AS s
                                 WHERE c.counter IS DISTINCT FROM %(known)s
                                OFFSET 0) AS q ON true""")  # OFFSET 0: a gate, not a filter
    db = where.db
    # autocommit (statement()), so that psycopg adds no BEGIN or COMMIT of its own (each would
    # sync the pipeline)
    with db.statement() as conn:
        with conn.pipeline():
            conn.execute(_BEGIN_GENERIC if db.prepared else BEGIN_APP, [where.tenant_id])
            cursors = [conn.execute(gate.format(r.query), {**r.params, "known": r.known},
                                    binary=True) for r in reads]
        out: list[tuple[int, list[FileData] | None]] = []
        for read, cur in zip(reads, cursors, strict=True):
            rows = cur.fetchall()
            counter = int(rows[0][0])
            if read.known == counter:
                out.append((counter, None))
            else:
                found = sorted((r[1:] for r in rows if r[1] is not None),
                               key=lambda r: str(r[0]))
                out.append((counter, where.decoded(found, lenient=read.lenient)))
    return out
