"""The two read queries a run makes before it starts, built from plain values.

``read_many``: several files in one query sharing a byte budget *in SQL*. ``heads``: the first
bytes of every ``{dir}**/{name}``, one bounded range scan per directory. Each builder takes the
namespace as query parameters (``{"t": tenant, "a": agent}``) and returns the query and its
parameters; the backend runs them (and the speed layer sends them in one gated round trip).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg import sql

from hango.fs.path import clean, clean_dir


def like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _pattern_literal(pattern: str) -> str:
    """A LIKE pattern as SQL text: quotes doubled, ``%`` doubled for psycopg's placeholders."""
    return "'" + pattern.replace("'", "''").replace("%", "%%") + "'"


def read_many_query(ns: dict[str, Any], paths: Sequence[str],
                    limit: int) -> tuple[LiteralString, dict[str, Any]]:
    """Files in the order given; each gets at most what the earlier ones left of ``limit``."""
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
        {**ns, "n": limit, "p": cleaned},
    )


def bounds(directories: Sequence[str]) -> dict[str, list[str]]:
    """Each directory as a range of the primary key: C collation sorts every path under
    ``/skills/`` in ``["/skills/", "/skills0")``."""
    dirs = list(dict.fromkeys(clean_dir(d) for d in directories))
    return {"lo": dirs, "hi": [d[:-1] + "0" for d in dirs]}


def heads_query(ns: dict[str, Any], directories: Sequence[str], name: str, limit: int,
                max_per_dir: int | None, cut_after: Sequence[bytes],
                ) -> tuple[sql.Composed, dict[str, Any]]:
    """Per directory, a range scan of the index stopped by LIMIT; only then is a head cut."""
    if not name or "/" in name or "\\" in name:
        raise ValueError(f"name must be a bare file name, got {name!r}")
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
    return query, {**ns, "n": limit, "max": max_per_dir, "stops": list(cut_after),
                   **bounds(directories)}
