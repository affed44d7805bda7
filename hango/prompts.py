"""The prompts of runs over HTTP: what each model call of a run received, kept with the run.

After a run (or a resumed run's part) the runs API keeps each model call's request as people
read it: :func:`hango.models.view.request_view` (the system blocks with their source, size and
token estimate, the tools, the messages, the breakpoints, the usage and why the cache read
nothing), the one view the notebooks' ``show_request`` and the trace's content print. Kept in
``run_prompts``, at most ``HANGO_RUN_PROMPT_MAX_BYTES`` a run: a call that does not fit what is
left has its texts cut to fit (fairly: :func:`hango.telemetry.content.clip_view`, as the
trace's content is), and once nothing is left only its headings stay (each block's source and
size, the usage, the miss reason). They go when their run goes (:mod:`hango.retention`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any, LiteralString, Protocol

from hango.db import Database
from hango.models.base import Request, Response
from hango.models.view import render, request_view
from hango.settings import Settings
from hango.telemetry.content import clip_view

MIN_TEXT = 256  # bytes of text below which a cut view keeps headings only


def _text(view: dict[str, Any]) -> str:
    """The view as it is kept: compact JSON (its UTF-8 length is what counts in the budget)."""
    return json.dumps(view, ensure_ascii=False, separators=(",", ":"))


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _bytes(view: dict[str, Any]) -> int:
    return _size(_text(view))


def bounded(view: dict[str, Any], budget: int) -> str:
    """``view`` as kept, encoded once: whole if it fits ``budget`` bytes (its ``clipped`` flag
    counted), else with its texts cut until it does; when even its headings do not fit, the
    headings (every text cut to nothing, said so)."""
    whole = _text({**view, "clipped": False})
    if _size(whole) <= budget:
        return whole
    share = budget
    while share >= MIN_TEXT:
        cut = copy.deepcopy(view)
        clip_view(cut, share)
        cut["clipped"] = True
        text = _text(cut)
        if _size(text) <= budget:
            return text
        share //= 2
    headings = copy.deepcopy(view)
    clip_view(headings, 0)
    return _text({**headings, "clipped": True})


class _Run(Protocol):
    run_id: str
    requests: list[Request]
    responses: list[Response]


def keep(db: Database, tenant_id: str, run: _Run, settings: Settings) -> None:
    """What a run over HTTP keeps of its calls (``HANGO_RUN_PROMPT_MAX_BYTES``)."""
    store(db, tenant_id, run.run_id, run.requests, run.responses, settings.run_prompt_max_bytes)


def _views(requests: Sequence[Request], responses: Sequence[Response], max_bytes: int,
           used: int) -> list[tuple[str, int]]:
    """Each call's view as kept, bounded by what is left of ``max_bytes`` after ``used``, and
    its size."""
    out = []
    for request, response in zip(requests, responses, strict=True):
        text = bounded(request_view(request, response), max(0, max_bytes - used))
        used += _size(text)
        out.append((text, _size(text)))
    return out


def store(db: Database, tenant_id: str, run_id: str, requests: Sequence[Request],
          responses: Sequence[Response], max_bytes: int) -> None:
    """Keep the views of a run's calls (numbered after those an earlier part of it kept)."""
    if not requests:
        return
    with db.tenant(tenant_id) as conn:
        # One store of a run at a time (a resumed part after the interrupted one): the run's row
        # locked first, then what was kept counted in a statement of its own, which sees what
        # a store that held the lock committed (one statement would count from before the wait).
        if conn.execute("SELECT 1 FROM runs WHERE tenant_id = %s AND run_id = %s "
                        "FOR NO KEY UPDATE", [tenant_id, run_id]).fetchone() is None:
            return
        found = conn.execute(
            "SELECT coalesce(max(call), 0), coalesce(sum(bytes), 0) FROM run_prompts "
            "WHERE tenant_id = %s AND run_id = %s", [tenant_id, run_id]).fetchone()
        assert found is not None  # an aggregate has a row
        views = _views(requests, responses, max_bytes, int(found[1]))
        conn.execute(_INSERT, [tenant_id, run_id, int(found[0]), [size for _, size in views],
                               f"[{','.join(text for text, _ in views)}]"])


# Every call of this part in one statement, numbered after the ``calls`` kept before it: the
# views as one JSON array (a text array is escaped element by element, in Python), the sizes.
_INSERT: LiteralString = """
    INSERT INTO run_prompts (tenant_id, run_id, call, view, bytes)
    SELECT %s, %s, %s + v.n, v.view, (%s::integer[])[v.n]
      FROM json_array_elements(%s::json) WITH ORDINALITY AS v(view, n)"""


# The views of a new run's calls, in the transaction that saves its row (the runs API sends
# both in one round trip): kept only while the run has none, numbered from 1. A run id used
# before keeps its views and gets fewer rows back than it sent: then store() appends them.
# The views go as a binary text array (%b): each element is sent as it is, where the text
# format would escape every quote of its JSON in Python (0.37 ms for one 12 KB view).
INSERT_FIRST: LiteralString = """
    INSERT INTO run_prompts (tenant_id, run_id, call, view, bytes)
    SELECT %(t)s, %(r)s, v.call, v.view::json, v.bytes
      FROM unnest(%(views)b::text[], %(sizes)s::int[]) WITH ORDINALITY AS v(view, bytes, call)
     WHERE NOT EXISTS (SELECT 1 FROM run_prompts WHERE tenant_id = %(t)s AND run_id = %(r)s)
    RETURNING 1"""


def first_params(tenant_id: str, run: _Run, settings: Settings) -> dict[str, Any]:
    """The parameters of :data:`INSERT_FIRST` for ``run`` (``HANGO_RUN_PROMPT_MAX_BYTES``)."""
    views = _views(run.requests, run.responses, settings.run_prompt_max_bytes, 0)
    return {"t": tenant_id, "r": run.run_id, "sizes": [size for _, size in views],
            "views": [text for text, _ in views]}


def load(db: Database, tenant_id: str, run_id: str) -> list[dict[str, Any]]:
    """The kept views of a run's calls, in order."""
    with db.tenant(tenant_id) as conn:
        rows = conn.execute("SELECT view FROM run_prompts WHERE tenant_id = %s AND run_id = %s "
                            "ORDER BY call", [tenant_id, run_id]).fetchall()
    return [row[0] for row in rows]


def render_text(run_id: str, views: Sequence[dict[str, Any]], max_bytes: int,
                width: int | None = 60) -> str:
    """The views as text, each call headed by its number: :func:`hango.models.view.render`."""
    kept = sum(_bytes(v) for v in views)
    lines = [f"run {run_id}: {len(views)} model call(s); {kept} bytes kept of "
             f"HANGO_RUN_PROMPT_MAX_BYTES={max_bytes}"]
    for i, view in enumerate(views, 1):
        cut = " (texts cut to fit)" if view.get("clipped") else ""
        lines += ["", f"--- call {i}{cut} ---", render(view, width)]
    return "\n".join(lines) + "\n"
