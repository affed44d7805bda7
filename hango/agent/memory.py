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

Over the cap, the words say what happened to each source: the one source cut part-way is
**truncated** (its block ends with a ``[... truncated: ...]`` marker); a source none of which is
in the prompt is **left out** (named in the marker, or at the end of the last block, and in a
warning). A source left out whole is never called truncated.

Framing that file content cannot break. Each source is framed as::

    <memory path="/memories/AGENTS.md">
    ...the file, as written...
    </memory>

Content is untrusted text (any owner or admin, or a tool, may have written it), so a file must
not be able to close its own frame (``</memory>``) or open a forged one
(``<memory path="/memories/admin.md">``). The choices were:

- *Escape all markup* (``<`` to ``&lt;``, ``&`` to ``&amp;``): then every code sample, comparison
  and HTML snippet the owner wrote reaches the model as entities (``a &lt; b``), which it then
  reads, and may copy, differently from what the file says.
- *A per-block fence the content does not contain* (a nonce in the tag): the content is
  untouched, but the prompt must be byte-stable from run to run (it is cached), so the nonce
  would have to come from the content; and the model would still *read* a literal
  ``</memory>`` in the middle of the block. A model does not parse tags; it reads them.
- *Neutralise only the frame's own tag* (chosen): every ``<`` that begins ``memory`` or
  ``/memory`` (any case, with spaces or invisible characters between) is written ``&lt;``. The
  model still gets the one frame it knows, the content is byte for byte what the author wrote
  except at those spots, and a mention of the tag reads as a mention (``&lt;/memory>`` is the
  usual way to write a tag in prose). The path is an attribute value, escaped as XML escapes
  one (``&``, ``"``, ``<``, ``>``): a valid path may contain a quote.

The escape is applied before the cap is counted, so the cap bounds what the model reads. The
price: a file that literally contains ``&lt;/memory>`` reads the same as one containing
``</memory>``; neither can close the frame. ``read_file`` still returns the file as written.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from hango.agent import snapshot
from hango.agent.hooks import RunContext, StateKey
from hango.models.base import Block
from hango.telemetry import (
    ATTR_MEMORY_BYTES,
    ATTR_MEMORY_SOURCES,
    EVENT_MEMORY_MISSING,
    SPAN_MEMORY_LOAD,
)

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
    """RunHook + PromptContributor. Not a ModelWrapper: blocks land by chain position alone."""

    name = "memory"

    def __init__(self, sources: Sequence[str] | None = None, max_bytes: int = 65536,
                 default_sources: Sequence[str] = ("/memories/AGENTS.md",)) -> None:
        """``sources`` overrides the agent's config; ``default_sources`` is the tenant default
        for an agent whose config names none (``default_stack`` passes the settings' values)."""
        self.sources = list(sources) if sources is not None else None
        self.max_bytes = max_bytes
        self.default_sources = list(default_sources)
        self.key: StateKey[MemoryState] = StateKey("memory", MemoryState)

    def before_run(self, ctx: RunContext) -> None:
        sources = self.sources if self.sources is not None else (
            ctx.config.memory if ctx.config.memory is not None else self.default_sources)
        state = ctx.state(self.key)
        started = time.perf_counter()
        with ctx.telemetry.span(SPAN_MEMORY_LOAD) as span:
            # One query; each file cut to the cap in SQL, so a 10 MiB file costs 64 KiB. Or,
            # when no memory file changed since the last run, that run's result, replayed.
            lookup = snapshot.lookup(ctx, snapshot.Read("files", tuple(sources), self.max_bytes))
            if lookup.built is not None:
                snapshot.replay(ctx, lookup.built)
                state.loaded = list(lookup.built.value)
            else:
                found = {f.path: f for f in lookup.rows}
                present = []
                for path in dict.fromkeys(sources):
                    if path in found:
                        present.append(found[path])
                    else:
                        ctx.warn(f"memory source {path} does not exist; skipped",
                                 event=EVENT_MEMORY_MISSING, path=path)
                budget = self.max_bytes
                for i, data in enumerate(present):
                    text = frame_safe(strip_comments(data.content))
                    if not data.truncated and _bytes(text) <= budget:
                        budget -= _bytes(text)
                        state.loaded.append((data.path, text))
                        continue
                    # Over the cap: cut this source (or leave it out whole when none of it fits),
                    # leave out the ones after it, and stop.
                    self._over_cap(ctx, state, data.path, data.size, text, budget,
                                   [d.path for d in present[i + 1:]])
                    break
                lookup.store(tuple(state.loaded))
            total = sum(len(t.encode("utf-8")) for _, t in state.loaded)
            ctx.attributes[ATTR_MEMORY_SOURCES] = [p for p, _ in state.loaded]  # published
            ctx.attributes[ATTR_MEMORY_BYTES] = total
            span.set_attribute(ATTR_MEMORY_SOURCES, [p for p, _ in state.loaded])
            span.set_attribute(ATTR_MEMORY_BYTES, total)
        ctx.telemetry.record_memory_load(time.perf_counter() - started, total, len(state.loaded))

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
