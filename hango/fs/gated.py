"""before_run's reads: memory files and skills' heads, gated by the agent's change counter.

A run reads its memory files (``read_many``: one query sharing a byte budget) and its skills'
heads (``heads``: the first bytes of every ``SKILL.md``, one bounded scan) before it starts.
This module builds those queries. Most of the time nothing changed since the last run, so each
read can be *gated* (issue 14): it carries the change counter its cached result was read at, and
the database skips it when the agent's counter (kept by a trigger on ``agent_files``) is still
that; :func:`read_if_changed` sends them all in one round trip. ``PostgresBackend``'s
``read_many``, ``heads``, ``gated_*`` and ``read_if_changed`` methods call the functions here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, LiteralString

from psycopg import sql

from hango.db import BEGIN_APP
from hango.fs.path import clean, clean_dir

if TYPE_CHECKING:
    from hango.fs.backend import FileData, PostgresBackend

# The cut the ``skill_head`` generated column holds (schema.sql): the first 16384 bytes of each
# SKILL.md, ended after the first line that is exactly ``---``. The skills middleware's arguments.
SKILL_HEAD = ("SKILL.md", 16384, (b"\n---\n", b"\n---\r\n"))


# The app role and the tenant (db.BEGIN_APP); with prepared statements (psycopg prepares a
# statement on its fifth use), a generic plan too: re-planning them each time cost more than the
# gated run itself (0.2 of 0.27 ms). Behind a transaction-mode pooler they are off (db.py).
_BEGIN_GENERIC: LiteralString = (
    BEGIN_APP + ", set_config('plan_cache_mode', 'force_generic_plan', true)")


@dataclass(frozen=True)
class Gated:
    """One read for :func:`read_if_changed`: a query, its parameters, and the
    change counter its cached result was read at (``None``: nothing cached, always read)."""

    query: sql.Composable
    params: dict[str, Any]
    lenient: bool
    known: int | None


def like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _pattern_literal(pattern: str) -> str:
    """A LIKE pattern as SQL text: quotes doubled, ``%`` doubled for psycopg's placeholders."""
    return "'" + pattern.replace("'", "''").replace("%", "%%") + "'"


def read_many_query(backend: PostgresBackend, paths: Sequence[str],
                    limit: int) -> tuple[LiteralString, dict[str, Any]]:
    cleaned = list(dict.fromkeys(clean(p) for p in paths))
    return (
        """SELECT f.path,
                  substring(f.content FROM 1 FOR greatest(0, least(f.size, %(n)s
                      - coalesce(sum(f.size) OVER (ORDER BY s.ord ROWS BETWEEN
                                 UNBOUNDED PRECEDING AND 1 PRECEDING), 0)))::int),
                  f.version, f.size
             FROM unnest(%(p)s::text[]) WITH ORDINALITY AS s(path, ord)
             JOIN agent_files f ON f.tenant_id = %(t)s AND f.agent_id = %(a)s
                               AND f.path = s.path
            ORDER BY s.ord""",
        {**backend._ns(), "n": limit, "p": cleaned},
    )


def heads_query(backend: PostgresBackend, directories: Sequence[str], name: str, limit: int,
                max_per_dir: int | None, cut_after: Sequence[bytes],
                ) -> tuple[sql.Composed, dict[str, Any]]:
    dirs = list(dict.fromkeys(clean_dir(d) for d in directories))
    if not name or "/" in name or "\\" in name:
        raise ValueError(f"name must be a bare file name, got {name!r}")
    # Per directory, a range scan of the index (C collation: every path under "/skills/"
    # sorts in ["/skills/", "/skills0")), stopped by LIMIT; only then is a head cut.
    query = sql.SQL(
        """SELECT DISTINCT ON (f.path) f.path,
                  CASE WHEN stop.cut IS NULL THEN h.head
                       ELSE substring(h.head FROM 1 FOR stop.cut) END,
                  f.version, f.size
             FROM unnest(%(lo)s::text[], %(hi)s::text[]) AS d(lo, hi),
                  LATERAL (SELECT path, content, version, size FROM agent_files
                            WHERE tenant_id = %(t)s AND agent_id = %(a)s
                              AND path >= d.lo AND path < d.hi AND path LIKE {suffix}
                            ORDER BY path LIMIT %(max)s) AS f,
                  LATERAL (SELECT substring(f.content FROM 1 FOR %(n)s) AS head
                           OFFSET 0) AS h,  -- OFFSET 0: fetch each head once, not per use
                  LATERAL (SELECT min(position(m IN h.head) + length(m) - 1) AS cut
                             FROM unnest(%(stops)s::bytea[]) AS m
                            WHERE position(m IN h.head) > 0) AS stop
            ORDER BY f.path"""
    ).format(suffix=sql.SQL(_pattern_literal("%/" + like_escape(name))))
    return query, {**backend._ns(), "n": limit, "max": max_per_dir, "stops": list(cut_after),
                   "lo": dirs, "hi": [d[:-1] + "0" for d in dirs]}


def gated_read_many(backend: PostgresBackend, paths: Sequence[str], limit: int,
                    known: int | None) -> Gated:
    """``read_many`` as one read of :func:`read_if_changed`."""
    query, params = read_many_query(backend, paths, limit)
    return Gated(sql.SQL(query), params, False, known)


def gated_heads(backend: PostgresBackend, directories: Sequence[str], name: str, limit: int,
                known: int | None, max_per_dir: int | None = None,
                cut_after: Sequence[bytes] = ()) -> Gated:
    """``heads`` as one read of :func:`read_if_changed`; the skills cut is read from the
    ``skill_head`` column the database filled at write time (same bytes, small rows)."""
    if (name, limit, tuple(cut_after)) == SKILL_HEAD and max_per_dir is not None:
        return backend.gated_skill_heads(directories, max_per_dir, known)
    query, params = heads_query(backend, directories, name, limit, max_per_dir, cut_after)
    return Gated(query, params, True, known)


def skill_heads(backend: PostgresBackend, directories: Sequence[str],
                max_per_dir: int) -> list[FileData]:
    """``heads`` of every ``SKILL.md`` with the skills middleware's cut (its first
    ``HEAD_BYTES``, ended after the closing ``---``), read from the ``skill_head`` column
    that the database computes when the file is written: small rows, no per-scan cutting."""
    query, params = skill_heads_query(backend, directories, max_per_dir)
    with backend.transaction() as conn:
        rows = conn.execute(query, params, binary=True).fetchall()
    return backend._rows(rows, lenient=True)


def gated_skill_heads(backend: PostgresBackend, directories: Sequence[str], max_per_dir: int,
                      known: int | None) -> Gated:
    """:func:`skill_heads` as one read of :func:`read_if_changed`."""
    query, params = skill_heads_query(backend, directories, max_per_dir)
    return Gated(sql.SQL(query), params, True, known)


def skill_heads_query(backend: PostgresBackend, directories: Sequence[str],
                      max_per_dir: int) -> tuple[LiteralString, dict[str, Any]]:
    dirs = list(dict.fromkeys(clean_dir(d) for d in directories))
    return (
        """SELECT DISTINCT ON (f.path) f.path, f.skill_head, f.version, f.size
             FROM unnest(%(lo)s::text[], %(hi)s::text[]) AS d(lo, hi),
                  LATERAL (SELECT path, skill_head, version, size FROM agent_files
                            WHERE tenant_id = %(t)s AND agent_id = %(a)s
                              AND path >= d.lo AND path < d.hi AND path LIKE '%%/SKILL.md'
                            ORDER BY path LIMIT %(max)s) AS f
            ORDER BY f.path""",
        {**backend._ns(), "max": max_per_dir, "lo": dirs, "hi": [d[:-1] + "0" for d in dirs]},
    )


def read_if_changed(backend: PostgresBackend,
                    reads: Sequence[Gated]) -> list[tuple[int, list[FileData] | None]]:
    """For each read: the agent's change counter, and the rows when ``known`` is not that
    counter (``None`` when it is: the database skipped the read, nothing was sent).

    ONE protocol round trip, whatever changed: the app role, the tenant and every read go out
    together in pipeline mode with a single Sync, which makes them one implicit transaction
    (the role and tenant set with ``set_config(..., true)`` hold until that Sync, then are
    gone). Each read returns
    the counter it was gated on from its own snapshot, so its rows are never older than the
    counter they are cached under. Rows come back sorted by path.
    """
    gate = sql.SQL(
        """SELECT c.counter, q.*
             FROM (SELECT coalesce((SELECT counter FROM agent_changes
                                     WHERE tenant_id = %(t)s AND agent_id = %(a)s), 0)
                          AS counter) AS c
             LEFT JOIN LATERAL (SELECT * FROM ({}) AS s
                                 WHERE c.counter IS DISTINCT FROM %(known)s
                                OFFSET 0) AS q ON true""")  # OFFSET 0: a gate, not a filter
    db = backend.db
    # autocommit (statement()), so that psycopg adds no BEGIN or COMMIT of its own (each would
    # sync the pipeline)
    with db.statement() as conn:
        with conn.pipeline():
            conn.execute(_BEGIN_GENERIC if db.prepared else BEGIN_APP, [backend.tenant_id])
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
                out.append((counter, backend._rows(found, lenient=read.lenient)))
    return out
