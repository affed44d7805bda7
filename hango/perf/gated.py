"""One round trip for every read a run makes before it starts, each gated on its change counter.

Every write of a file under ``/memories/`` (or ``/skills/``) gives the agent's ``memories`` (or
``skills``) counter in ``agent_changes`` a new value in the same transaction (a trigger in the
schema, 80-speed.sql). A read *gated* on the counter its cached result was built at returns only
the counter while nothing changed: a memory edit does not re-send the skills' heads.
:func:`read_if_changed` sends the app role, the tenant and every gated read in pipeline mode with
one Sync: one protocol round trip, whatever changed.

After a skills change, a scan whose cached rows were the whole of every source is a *delta*: the
database sends only the heads written since the counter the cache saw and the paths deleted
since, and :func:`results` merges them into the kept rows, giving the very rows the full scan
would read (the hook's ``build`` gets those). When that cannot be proven (a cache older than the
deltas the database keeps, a source over its cap, too many changes) it is the full scan.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, LiteralString

from psycopg import sql

from hango.agent.frontmatter import FENCES, HEAD_BYTES
from hango.agent.skills import SKILL_FILE
from hango.fs.files import FileData, Namespace, Read, ReadFiles
from hango.fs.path import PREFIX_MEMORIES, PREFIX_SKILLS, clean, clean_dir
from hango.fs.queries import bounds, heads_query, read_many_query
from hango.perf.trip import Statement, one_trip


@dataclass(frozen=True)
class Delta:
    """What a skills scan's delta merges into: the rows the cached build was made from (by path,
    fewer than ``per_dir`` under each of ``directories``: each source's whole set)."""

    kept: tuple[FileData, ...]
    directories: tuple[str, ...]
    per_dir: int
    full: LiteralString = ""  # the full scan's query, for a fall back


@dataclass(frozen=True)
class Gated:
    """One read for :func:`read_if_changed`: a query, its parameters, the change counter its
    cached result was read at (``None``: nothing cached, always read) and which counter that is;
    with ``delta``, only the changes since ``known`` are sent. ``sent`` is filled by
    :func:`results`: the files the database sent for it (a delta's deleted paths not counted)."""

    query: LiteralString | sql.Composed
    params: dict[str, Any]
    lenient: bool
    known: int | None
    counter: LiteralString = "greatest(memories, skills)"
    delta: Delta | None = None
    sent: list[int] = field(default_factory=list, compare=False)


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


def counter_of(declared: Read) -> LiteralString:
    """The counter that moves with every file ``declared`` can return: ``memories`` for a read
    under /memories/ only, ``skills`` under /skills/ only, else the later of the two."""
    paths = ([clean(p) for p in declared.paths] if isinstance(declared, ReadFiles)
             else [clean_dir(d) for d in declared.directories])
    for prefix, column in ((PREFIX_MEMORIES, "memories"), (PREFIX_SKILLS, "skills")):
        if paths and all(p.startswith(prefix) for p in paths):
            return column
    return "greatest(memories, skills)"


def delta_of(declared: Read, kept: Sequence[FileData] | None,
             full: LiteralString = "") -> Delta | None:
    """A delta over ``kept`` (the rows the cached build of ``declared`` was made from), when
    they are the whole of every source: fewer than the scan's limit under each."""
    if kept is None or isinstance(declared, ReadFiles) or not is_skill_head(declared):
        return None
    assert declared.max_per_dir is not None
    directories = tuple(dict.fromkeys(clean_dir(d) for d in declared.directories))
    if any(_under(kept, d) >= declared.max_per_dir for d in directories):
        return None  # the source's scan stopped at its limit: there may be more
    return Delta(tuple(kept), directories, declared.max_per_dir, full)


def _path(f: FileData) -> str:
    return f.path


def _under(rows: Sequence[FileData], directory: str) -> int:
    """How many of ``rows`` (sorted by path) are under ``directory`` (which ends with ``/``):
    the paths from ``directory`` up to ``directory[:-1] + "0"``, as the scan's range."""
    return (bisect.bisect_left(rows, directory[:-1] + "0", key=_path)
            - bisect.bisect_left(rows, directory, key=_path))


def gated(declared: Read, ns: dict[str, Any], known: int | None,
          kept: Sequence[FileData] | None = None) -> Gated:
    """``declared`` as one read of :func:`read_if_changed`; a delta over ``kept`` (the rows of
    the build cached at ``known``) when :func:`delta_of` allows one."""
    counter = counter_of(declared)
    if isinstance(declared, ReadFiles):
        query, params = read_many_query(ns, declared.paths, declared.limit)
        return Gated(query, params, False, known, counter)
    if is_skill_head(declared):
        assert declared.max_per_dir is not None
        query, params = skill_heads_query(ns, declared.directories, declared.max_per_dir)
        delta = (delta_of(declared, kept, query)
                 if known is not None and counter == "skills" else None)
        if delta is not None:
            query = _delta(query, counter)
        return Gated(query, params, True, known, counter, delta)
    composed, params = heads_query(ns, declared.directories, declared.name, declared.limit,
                                   declared.max_per_dir, declared.cut_after)
    return Gated(composed, params, True, known, counter)


def _gate_head(counter: LiteralString) -> LiteralString:
    return """SELECT c.counter, q.*
     FROM (SELECT coalesce((SELECT """ + counter + """ FROM agent_changes
                             WHERE tenant_id = %(t)s AND agent_id = %(a)s), 0)
                  AS counter) AS c
     LEFT JOIN LATERAL (SELECT * FROM ("""


_GATE_TAIL: LiteralString = """) AS s
                         WHERE c.counter IS DISTINCT FROM %(known)s
                        OFFSET 0) AS q ON true"""  # OFFSET 0: a gate, not a filter


@lru_cache(maxsize=64)
def _gate(query: LiteralString, counter: LiteralString) -> LiteralString:
    """A query text in its gate, composed once per text (the default stack has two)."""
    return _gate_head(counter) + query + _GATE_TAIL


@lru_cache(maxsize=16)
def _delta(full: LiteralString, counter: LiteralString) -> LiteralString:
    """The skills scan ``full`` as a delta: the counter, the oldest counter a delta may start
    from, and, when the counter moved, either the heads written since ``known`` with the paths
    deleted since (version NULL), when ``known`` is not older than that, or the whole scan.
    One statement, one snapshot: the rows are never older than the counter."""
    return """SELECT c.counter, c.since, q.*
     FROM (SELECT coalesce(x.""" + counter + """, 0) AS counter, x.skills_since AS since
             FROM (SELECT 1) AS one
             LEFT JOIN agent_changes x ON x.tenant_id = %(t)s AND x.agent_id = %(a)s) AS c
     LEFT JOIN LATERAL (SELECT * FROM (
         SELECT * FROM (SELECT path, skill_head, version, size FROM agent_files f
                         WHERE tenant_id = %(t)s AND agent_id = %(a)s AND changed > %(known)s
                           AND path LIKE '%%/SKILL.md'
                           AND EXISTS (SELECT 1 FROM unnest(%(lo)s::text[], %(hi)s::text[])
                                                  AS d(lo, hi)
                                        WHERE f.path >= d.lo AND f.path < d.hi)
                         ORDER BY changed LIMIT %(max)s) AS since_known
          WHERE c.since <= %(known)s
         UNION ALL
         SELECT path, NULL, NULL, NULL FROM agent_skill_deletions
          WHERE tenant_id = %(t)s AND agent_id = %(a)s AND changed > %(known)s
            AND c.since <= %(known)s
         UNION ALL
         SELECT * FROM (""" + full + """) AS whole
          WHERE c.since IS NULL OR c.since > %(known)s) AS s
                         WHERE c.counter IS DISTINCT FROM %(known)s
                        OFFSET 0) AS q ON true"""


def statement(read: Gated) -> Statement:
    """``read`` in its gate: the agent's change counter, and the rows only if it is not
    ``read.known``."""
    params = {**read.params, "known": read.known}
    if read.delta is not None:
        assert isinstance(read.query, str)
        return read.query, params
    if isinstance(read.query, str):
        return _gate(read.query, read.counter), params
    return sql.SQL(_gate_head(read.counter)) + read.query + sql.SQL(_GATE_TAIL), params


def results(where: Namespace, reads: Sequence[Gated], rowsets: Sequence[list[tuple[Any, ...]]],
            ) -> list[tuple[int, list[FileData] | None]]:
    """What :func:`statement` returned for each read: the counter, and the files sorted by path
    (``None`` when the counter was ``known``: the database skipped the read, nothing was sent).
    A delta is merged into its kept rows; one that cannot be proven equal to the full scan is
    read again in full, all such in one more round trip."""
    out: list[tuple[int, list[FileData] | None]] = []
    again: list[int] = []
    for i, (read, rows) in enumerate(zip(reads, rowsets, strict=True)):
        counter = int(rows[0][0])
        if read.known == counter:
            out.append((counter, None))
            read.sent.append(0)
        elif read.delta is not None:
            merged = _merged(where, read, read.delta, rows)
            out.append((counter, merged))
            if merged is None:
                again.append(i)
        else:
            found = sorted((r[1:] for r in rows if r[1] is not None), key=lambda r: str(r[0]))
            out.append((counter, where.decoded(found, lenient=read.lenient)))
            read.sent.append(len(found))
    if again:
        whole = [Gated(r.delta.full, r.params, r.lenient, None, r.counter)
                 for r in (reads[i] for i in again) if r.delta is not None]
        for i, read, got in zip(again, whole, read_if_changed(where, whole), strict=True):
            out[i] = got
            reads[i].sent.append(sum(read.sent))
    return out


def _merged(where: Namespace, read: Gated, delta: Delta,
            rows: list[tuple[Any, ...]]) -> list[FileData] | None:
    """The rows of a delta's answer (counter, since, then path, head, version, size): the
    whole scan when ``since`` said the delta could not start at ``known``, else the kept rows
    with the deleted paths out and the changed heads in; ``None`` when too much changed (the
    delta hit its limit) or a source is now over the scan's limit."""
    since = rows[0][1]
    found = [r[2:] for r in rows if r[2] is not None]
    read.sent.append(sum(1 for r in found if r[2] is not None))
    if since is None or read.known is None or since > read.known:
        return where.decoded(sorted(found, key=lambda r: str(r[0])), lenient=True)
    changed = [r for r in found if r[2] is not None]
    if len(changed) >= delta.per_dir:
        return None
    out = list(delta.kept)  # sorted by path; each change found by bisection
    for path in (str(r[0]) for r in found if r[2] is None):
        at = bisect.bisect_left(out, path, key=_path)
        if at < len(out) and out[at].path == path:
            del out[at]
    for f in where.decoded(changed, lenient=True):
        at = bisect.bisect_left(out, f.path, key=_path)
        if at < len(out) and out[at].path == f.path:
            out[at] = f
        else:
            out.insert(at, f)
    if any(_under(out, d) > delta.per_dir for d in delta.directories):
        return None
    return out


def read_if_changed(where: Namespace,
                    reads: Sequence[Gated]) -> list[tuple[int, list[FileData] | None]]:
    """For each read: the agent's change counter, and the rows when ``known`` is not that
    counter (``None`` when it is).

    ONE protocol round trip (:func:`~hango.perf.trip.one_trip`), two when a delta falls back to
    the full scan. Each read returns the counter from its own snapshot, so its rows are never
    older than the counter they are cached under.
    """
    return results(where, reads, one_trip(where.db, where.tenant_id,
                                          [statement(r) for r in reads]))
