"""MemoryMiddleware: always-on context from files, loaded once per run.

Exactly two hooks, and deliberately no ``wrap_model_call``:

- ``before_run`` reads every configured source (default ``/memories/AGENTS.md``) in ONE query
  that transfers at most the byte cap from the database, strips HTML comments, enforces the
  total cap across sources, and keeps the result in this middleware's private state.
- ``system_blocks`` returns one block per source, headed by its path so the agent knows where
  to edit (with ``edit_file``: there is no memory tool, and the agent may not write there; an
  owner or admin edits memory through the files API).

Memory is re-read at the start of every run, in effect: an edit made between runs is in the next
run's prompt. In fact the read is skipped, in SQL, while the agent's change counter (bumped by a
trigger on every write under ``/memories/`` or ``/skills/``) has not moved, and the last result is
replayed (:mod:`hango.agent.snapshot`). Because Memory sits *after* PromptCache, its blocks land after
the cache breakpoint: editing memory never invalidates the cached prefix before it.

HTML comments: ``<!-- ... -->`` is removed wherever it appears, including inside code fences
(the file is treated as text, not parsed as Markdown, so a comment in a fence is a comment too).
An *unterminated* ``<!--`` is kept as written: dropping everything after it would silently
hide the rest of the file, which is the worse surprise.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from hango.agent import snapshot
from hango.agent.hooks import RunContext, StateKey
from hango.models.base import Block
from hango.settings import Settings, get_settings
from hango.telemetry import (
    ATTR_MEMORY_BYTES,
    ATTR_MEMORY_SOURCES,
    EVENT_MEMORY_MISSING,
    SPAN_MEMORY_LOAD,
)

_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
TRUNCATION_MARKER = (
    "\n[... truncated: {path} is {size} bytes; HANGO_MEMORY_MAX_BYTES={cap}{left_out}]")


@dataclass
class MemoryState:
    """What this run loaded: (path, text) in source order, and what was left out."""

    loaded: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    truncated: bool = False


def strip_comments(text: str) -> str:
    """Remove every complete ``<!-- ... -->``; an unterminated one is left as written."""
    return _COMMENT.sub("", text)


def cut_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` that is at most ``max_bytes`` of UTF-8."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore")


class MemoryMiddleware:
    """RunHook + PromptContributor. Not a ModelWrapper: blocks land by chain position alone."""

    name = "memory"

    def __init__(self, sources: Sequence[str] | None = None, max_bytes: int | None = None,
                 settings: Settings | None = None) -> None:
        self.sources = list(sources) if sources is not None else None
        self._settings = settings
        self.max_bytes = max_bytes if max_bytes is not None else self.settings.memory_max_bytes
        self.key: StateKey[MemoryState] = StateKey("memory", MemoryState)

    @property
    def settings(self) -> Settings:
        return self._settings or get_settings()

    def before_run(self, ctx: RunContext) -> None:
        sources = self.sources if self.sources is not None else ctx.config.memory_sources(
            self.settings)
        state = ctx.state(self.key)
        started = time.perf_counter()
        with ctx.telemetry.span(SPAN_MEMORY_LOAD) as span:
            # One query; each file cut to the cap in SQL, so a 10 MiB file costs 64 KiB. Or,
            # when no memory file changed since the last run, that run's result, replayed.
            lookup = snapshot.lookup(ctx, snapshot.Read("files", tuple(sources), self.max_bytes))
            if lookup.built is not None:
                snapshot.replay(ctx, lookup.built)
                state.loaded, state.missing, state.truncated = lookup.built.value
                state.loaded, state.missing = list(state.loaded), list(state.missing)
            else:
                found = {f.path: f for f in lookup.rows}
                present = []
                for path in dict.fromkeys(sources):
                    if path in found:
                        present.append(found[path])
                    else:
                        state.missing.append(path)
                        ctx.warn(f"memory source {path} does not exist; skipped",
                                 event=EVENT_MEMORY_MISSING, path=path)
                budget = self.max_bytes
                for i, data in enumerate(present):
                    text = strip_comments(data.content)
                    if not data.truncated and len(text.encode("utf-8")) <= budget:
                        budget -= len(text.encode("utf-8"))
                        state.loaded.append((data.path, text))
                        continue
                    # Over the cap: cut this source, name the ones after it, and stop. The marker
                    # is inside the budget, so the model always sees where its memory was cut.
                    state.truncated = True
                    left_out = [d.path for d in present[i + 1:]]
                    marker = TRUNCATION_MARKER.format(
                        path=data.path, size=data.size, cap=self.max_bytes,
                        left_out=f"; left out: {', '.join(left_out)}" if left_out else "")
                    room = budget - len(marker.encode("utf-8"))
                    if room >= 0:
                        state.loaded.append((data.path, cut_utf8(text, room) + marker))
                    ctx.warn(f"memory source {data.path} truncated at HANGO_MEMORY_MAX_BYTES="
                             f"{self.max_bytes}" + (f"; left out: {', '.join(left_out)}"
                                                    if left_out else ""))
                    break
                lookup.store((tuple(state.loaded), tuple(state.missing), state.truncated))
            total = sum(len(t.encode("utf-8")) for _, t in state.loaded)
            ctx.memory_bytes = total
            ctx.memory_sources = [p for p, _ in state.loaded]
            span.set_attribute(ATTR_MEMORY_SOURCES, ctx.memory_sources)
            span.set_attribute(ATTR_MEMORY_BYTES, total)
        ctx.telemetry.record_memory_load(time.perf_counter() - started, total, len(state.loaded))

    def system_blocks(self, ctx: RunContext) -> Sequence[Block]:
        return [Block(f"<memory path=\"{path}\">\n{text}\n</memory>", path)
                for path, text in ctx.state(self.key).loaded]
