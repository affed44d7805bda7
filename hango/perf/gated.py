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
from functools import lru_cache
from typing import Any, LiteralString

from psycopg import sql

from hango.agent.frontmatter import FENCES, HEAD_BYTES
from hango.agent.skills import SKILL_FILE
from hango.fs.files import FileData, Namespace, Read, ReadFiles
from hango.fs.queries import bounds, heads_query, read_many_query
from hango.perf.trip import Statement, one_trip


@dataclass(frozen=True)
class Gated:
    """One read for :func:`read_if_changed`: a query, its parameters, and the change counter
    its cached result was read at (``None``: nothing cached, always read)."""

    query: LiteralString | sql.Composed
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
        return Gated(query, params, False, known)
    if is_skill_head(declared):
        assert declared.max_per_dir is not None
        query, params = skill_heads_query(ns, declared.directories, declared.max_per_dir)
        return Gated(query, params, True, known)
    composed, params = heads_query(ns, declared.directories, declared.name, declared.limit,
                                   declared.max_per_dir, declared.cut_after)
    return Gated(composed, params, True, known)


_GATE_HEAD: LiteralString = """SELECT c.counter, q.*
     FROM (SELECT coalesce((SELECT counter FROM agent_changes
                             WHERE tenant_id = %(t)s AND agent_id = %(a)s), 0)
                  AS counter) AS c
     LEFT JOIN LATERAL (SELECT * FROM ("""
_GATE_TAIL: LiteralString = """) AS s
                         WHERE c.counter IS DISTINCT FROM %(known)s
                        OFFSET 0) AS q ON true"""  # OFFSET 0: a gate, not a filter


@lru_cache(maxsize=64)
def _gate(query: LiteralString) -> LiteralString:
    """A query text in its gate, composed once per text (the default stack has two)."""
    return _GATE_HEAD + query + _GATE_TAIL


def statement(read: Gated) -> Statement:
    """``read`` in its gate: the agent's change counter, and the rows only if it is not
    ``read.known``."""
    params = {**read.params, "known": read.known}
    if isinstance(read.query, str):
        return _gate(read.query), params
    return sql.SQL(_GATE_HEAD) + read.query + sql.SQL(_GATE_TAIL), params


def results(where: Namespace, reads: Sequence[Gated], rowsets: Sequence[list[tuple[Any, ...]]],
            ) -> list[tuple[int, list[FileData] | None]]:
    """What :func:`statement` returned for each read: the counter, and the files sorted by path
    (``None`` when the counter was ``known``: the database skipped the read, nothing was sent)."""
    out: list[tuple[int, list[FileData] | None]] = []
    for read, rows in zip(reads, rowsets, strict=True):
        counter = int(rows[0][0])
        if read.known == counter:
            out.append((counter, None))
        else:
            found = sorted((r[1:] for r in rows if r[1] is not None), key=lambda r: str(r[0]))
            out.append((counter, where.decoded(found, lenient=read.lenient)))
    return out


def read_if_changed(where: Namespace,
                    reads: Sequence[Gated]) -> list[tuple[int, list[FileData] | None]]:
    """For each read: the agent's change counter, and the rows when ``known`` is not that
    counter (``None`` when it is).

    ONE protocol round trip (:func:`~hango.perf.trip.one_trip`). Each read returns the counter
    from its own snapshot, so its rows are never older than the counter they are cached under.
    """
    return results(where, reads, one_trip(where.db, where.tenant_id,
                                          [statement(r) for r in reads]))
