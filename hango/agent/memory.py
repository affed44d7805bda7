"""MemoryMiddleware: always-on context from files, loaded once per run.

``before_run`` reads the configured sources (default ``/memories/AGENTS.md``) in one query that
transfers at most the byte cap, then builds one block per source, framed and headed by its path.
It sits after PromptCache, so its blocks follow the cache breakpoint. It has no tool (an owner
edits memory through the files API) and no ``wrap_model_call``. Why the frame looks as it does,
and what the cap says when it cuts: docs/learning/11-memory-and-skills.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hango.agent.hooks import RunContext, StateKey
from hango.fs.files import FileData, ReadFiles, read
from hango.models.base import Block
from hango.telemetry import (
    ATTR_MEMORY_BYTES,
    ATTR_MEMORY_SOURCES,
    EVENT_MEMORY_MISSING,
    SPAN_MEMORY_LOAD,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span

_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
# A "<" that a reader would take for the start of the frame's own tag. Between "<", "/" and
# "memory": whitespace, and the characters that show as nothing (they would hide a tag from a
# plain substring check but not from a reader): Unicode's Default_Ignorable_Code_Point set, from
# DerivedCoreProperties.txt (Unicode 15.0; tests/test_memory.py checks these ranges against it).
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
_INVISIBLE = "[\\s" + "".join(f"{chr(a)}-{chr(b)}" for a, b in DEFAULT_IGNORABLE) + "]*"
_FRAME_TAG = re.compile(rf"<(?={_INVISIBLE}/?{_INVISIBLE}memory)", re.IGNORECASE)
TRUNCATION_MARKER = (
    "\n[... truncated: {path} is {size} bytes; HANGO_MEMORY_MAX_BYTES={cap}{left_out}]")
LEFT_OUT_MARKER = "\n[... left out: {paths}; HANGO_MEMORY_MAX_BYTES={cap}]"


@dataclass
class MemoryState:
    """What this run loaded: (path, text) in source order."""

    loaded: list[tuple[str, str]] = field(default_factory=list)


def strip_comments(text: str) -> str:
    """Remove every complete ``<!-- ... -->``; an unterminated one is left as written."""
    return _COMMENT.sub("", text)


def frame_safe(text: str) -> str:
    """``text`` with every ``<`` that would start a ``<memory``/``</memory`` tag as ``&lt;``."""
    return _FRAME_TAG.sub("&lt;", text)


def frame(path: str, text: str) -> str:
    """One memory block: ``text`` (already :func:`frame_safe`) inside its path's frame."""
    attr = (path.replace("&", "&amp;").replace('"', "&quot;")
            .replace("<", "&lt;").replace(">", "&gt;"))
    return f'<memory path="{attr}">\n{text}\n</memory>'


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def cut_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` that is at most ``max_bytes`` of UTF-8."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore")


class MemoryMiddleware:
    """Reader + PromptContributor. Not a ModelWrapper: blocks land by chain position alone."""

    name = "memory"
    span = SPAN_MEMORY_LOAD

    def __init__(self, sources: Sequence[str] | None = None, max_bytes: int = 65536,
                 default_sources: Sequence[str] = ("/memories/AGENTS.md",)) -> None:
        """``sources`` overrides the agent's config; ``default_sources`` is the tenant default
        for an agent whose config names none (``default_stack`` passes the settings' values)."""
        self.sources = list(sources) if sources is not None else None
        self.max_bytes = max_bytes
        self.default_sources = list(default_sources)
        self.key: StateKey[MemoryState] = StateKey("memory", MemoryState)

    def reads(self, ctx: RunContext) -> list[ReadFiles]:
        """One read: the sources in order, sharing the byte cap in SQL (a 10 MiB file costs
        64 KiB)."""
        sources = self.sources if self.sources is not None else (
            ctx.config.memory if ctx.config.memory is not None else self.default_sources)
        return [ReadFiles(tuple(sources), self.max_bytes)]

    def before_run(self, ctx: RunContext) -> None:
        """Read, then build."""
        started = time.perf_counter()
        with ctx.telemetry.span(self.span) as span:
            self.build(ctx, [read(ctx.backend, r) for r in self.reads(ctx)])
            self.report(ctx, span, time.perf_counter() - started)

    def build(self, ctx: RunContext, rows: Sequence[list[FileData]]) -> None:
        """The blocks of the sources that exist, in order, within the cap; a warning for the
        rest."""
        (sources,), (files,) = self.reads(ctx), rows
        state, found = ctx.state(self.key), {f.path: f for f in files}
        for path in dict.fromkeys(sources.paths):
            if path not in found:
                ctx.warn(f"memory source {path} does not exist; skipped",
                         event=EVENT_MEMORY_MISSING, path=path)
        present = [found[p] for p in dict.fromkeys(sources.paths) if p in found]
        budget = self.max_bytes
        for i, data in enumerate(present):
            text = frame_safe(strip_comments(data.content))
            if not data.truncated and _bytes(text) <= budget:
                budget -= _bytes(text)
                state.loaded.append((data.path, text))
                continue
            # Over the cap: cut this source (or leave it out whole when none of it fits), leave
            # out the ones after it, and stop.
            self._over_cap(ctx, state, data.path, data.size, text, budget,
                           [d.path for d in present[i + 1:]])
            break
        ctx.attributes[ATTR_MEMORY_SOURCES] = [p for p, _ in state.loaded]  # published
        ctx.attributes[ATTR_MEMORY_BYTES] = sum(_bytes(t) for _, t in state.loaded)

    def report(self, ctx: RunContext, span: Span, seconds: float) -> None:
        """What the load measured, on its span and in the metrics."""
        loaded = ctx.state(self.key).loaded
        total = sum(_bytes(t) for _, t in loaded)
        span.set_attribute(ATTR_MEMORY_SOURCES, [p for p, _ in loaded])
        span.set_attribute(ATTR_MEMORY_BYTES, total)
        ctx.telemetry.record_memory_load(seconds, total, len(loaded))

    def _over_cap(self, ctx: RunContext, state: MemoryState, path: str, size: int, text: str,
                  budget: int, after: list[str]) -> None:
        """The source that does not fit: truncated if some of it fits, else left out whole.

        Every marker is inside the budget, so the model sees where its memory stops whenever
        there is room to say so; the warning says it always.
        """
        cap = self.max_bytes
        left_out = f"; left out: {', '.join(after)}" if after else ""
        marker = frame_safe(TRUNCATION_MARKER.format(path=path, size=size, cap=cap,
                                                     left_out=left_out))
        kept = cut_utf8(text, budget - _bytes(marker)) if budget > _bytes(marker) else ""
        if kept:
            state.loaded.append((path, kept + marker))
            ctx.warn(f"memory source {path} truncated at HANGO_MEMORY_MAX_BYTES={cap}{left_out}")
            return
        whole = [path, *after]
        notice = frame_safe(LEFT_OUT_MARKER.format(paths=", ".join(whole), cap=cap))
        if state.loaded and _bytes(notice) <= budget:  # said at the end of the last block
            last_path, last_text = state.loaded[-1]
            state.loaded[-1] = (last_path, last_text + notice)
        ctx.warn(f"memory source{'s' if after else ''} {', '.join(whole)} left out whole at "
                 f"HANGO_MEMORY_MAX_BYTES={cap}: no room for any of {'them' if after else 'it'}")

    def system_blocks(self, ctx: RunContext) -> Sequence[Block]:
        return [Block(frame(path, text), path) for path, text in ctx.state(self.key).loaded]
