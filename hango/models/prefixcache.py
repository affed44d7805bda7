"""Automatic prefix caching: the simulator's second regime (OpenAI, vLLM, llama.cpp and alike).

Unlike the explicit regime of :mod:`hango.models.simulated` (Anthropic's breakpoints), nothing
marks what to cache: the server renders the Chat Completions body
(:func:`hango.models.chat.chat_request`) into one token stream and reuses the longest start of
it that an earlier call left in its cache. Its five rules and four assumptions, each with its
source: docs/learning/11-memory-and-skills.md, Appendix D.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from hango.models.base import Usage
from hango.models.chat import canonical_json

Token: TypeAlias = bytes | str  # a 4-byte slice of text, or a template's special token (str)
Granularity: TypeAlias = Literal["openai", "exact"] | int
HEADER_TOKENS = 4  # a role header per message (the explicit regime's MESSAGE_OVERHEAD)
ITEM_TOKENS = 3  # per tool definition and per tool call (its BLOCK_OVERHEAD)
OPENAI_MINIMUM, OPENAI_STEP = 1024, 128


@dataclass(frozen=True)
class PrefixRules:
    """Which prefix cache the simulator plays: its granularity, eviction and write billing."""

    granularity: Granularity = "openai"
    idle_seconds: float | None = 300.0
    capacity_tokens: int | None = None
    paid_writes: bool = False

    def __post_init__(self) -> None:
        g = self.granularity
        if g not in ("openai", "exact") and not (isinstance(g, int) and g >= 1):
            raise ValueError(f"granularity must be 'openai', 'exact' or a block size of at "
                             f"least 1 token, not {g!r}")
        if self.idle_seconds is not None and self.idle_seconds <= 0:
            raise ValueError(f"idle_seconds must be positive or None, not {self.idle_seconds!r}")
        if self.capacity_tokens is not None and self.capacity_tokens < 1:
            raise ValueError(f"capacity_tokens must be at least 1 or None, not "
                             f"{self.capacity_tokens!r}")

    def cuts(self, n: int) -> list[int]:
        """The prefix lengths of an ``n``-token prompt that can be cached, shortest first."""
        if self.granularity == "openai":
            return list(range(OPENAI_MINIMUM, n + 1, OPENAI_STEP))
        step = 1 if self.granularity == "exact" else int(self.granularity)
        return list(range(step, n + 1, step))


OPENAI = PrefixRules()  # the default: OpenAI's documented rules, free writes
VLLM = PrefixRules(16, idle_seconds=None)  # vLLM's default block size, no idle eviction
LLAMA_CPP = PrefixRules("exact", idle_seconds=None)


# --- the rendered stream ---

@dataclass(frozen=True)
class Segment:
    """One part of the rendered stream (a message, the tool definitions) and its tokens."""

    label: str
    tokens: tuple[Token, ...]


def _text(text: str) -> tuple[bytes, ...]:
    data = text.encode("utf-8")
    return tuple(data[i:i + 4] for i in range(0, len(data), 4))


def _special(kind: str, count: int) -> tuple[str, ...]:
    return tuple(f"<|{kind}:{k}|>" for k in range(count))


def _message(i: int, m: dict[str, Any]) -> Segment:
    tokens: list[Token] = [*_special(str(m["role"]), HEADER_TOKENS), *_text(m.get("content") or "")]
    for call in m.get("tool_calls", []):
        f = call["function"]
        tokens += [*_special("call", ITEM_TOKENS),
                   *_text(canonical_json({"name": f["name"], "arguments": f["arguments"]}))]
    return Segment(f"messages[{i}] {m['role']}", tuple(tokens))


def rendered(body: dict[str, Any]) -> list[Segment]:
    """The body as the reference template renders it: system message, tools, the rest."""
    messages = list(body["messages"])
    out = [_message(0, messages[0])] if messages and messages[0]["role"] == "system" else []
    if body.get("tools"):
        tokens: list[Token] = []
        for tool in body["tools"]:
            tokens += [*_special("tool", ITEM_TOKENS), *_text(canonical_json(tool["function"]))]
        out.append(Segment("tools", tuple(tokens)))
    out += [_message(i, m) for i, m in enumerate(messages) if not (i == 0 and out and
                                                                  m["role"] == "system")]
    return out


def rendered_tokens(body: dict[str, Any]) -> list[Token]:
    return [t for segment in rendered(body) for t in segment.tokens]


def common_prefix(a: Sequence[Token], b: Sequence[Token]) -> int:
    """How many tokens two prompts share from token 0."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# --- the cache ---

@dataclass
class Entry:
    end: int  # the prefix length this entry completes
    size: int  # tokens it adds to the one before it (what it costs in capacity)
    last_used: float


@dataclass(frozen=True)
class PrefixTrace:
    """What the prefix cache did for one call (for tables in notebooks)."""

    model: str
    started: float
    tokens: int
    read: int  # the longest cached cut found
    cached: int  # the longest cut of this prompt, now written
    changed_at: int | None  # first token unlike the previous prompt's (None: it only grew)


def _keys(model: str, tokens: Sequence[Token], cuts: Sequence[int]) -> list[str]:
    h = hashlib.sha256(model.encode("utf-8"))
    keys, done = [], 0
    for cut in cuts:
        for t in tokens[done:cut]:
            data = t if isinstance(t, bytes) else b"\x00" + t.encode("utf-8")
            h.update(len(data).to_bytes(2, "big") + data)
        done = cut
        keys.append(h.copy().hexdigest())
    return keys


class PrefixCache:
    """Entries scoped by model name (a prefix written under one model is never read by
    another): ``entries[model][prefix hash]``."""

    def __init__(self, rules: PrefixRules = OPENAI) -> None:
        self.rules = rules
        self.entries: dict[str, dict[str, Entry]] = {}

    def price(self, model: str, now: float, tokens: Sequence[Token]) -> tuple[Usage, int, int]:
        """Read the longest cached cut, write every cut, evict; the usage, read and cached."""
        rules, entries = self.rules, self.entries.setdefault(model, {})
        if rules.idle_seconds is not None:
            for key in [k for k, e in entries.items() if now >= e.last_used + rules.idle_seconds]:
                del entries[key]
        cuts = rules.cuts(len(tokens))
        keys = _keys(model, tokens, cuts)
        read = 0
        for cut, key in zip(cuts, keys, strict=True):  # from token 0: stop at the first miss
            if key not in entries:
                break
            read = cut
        for i, (cut, key) in enumerate(zip(cuts, keys, strict=True)):
            entries[key] = Entry(cut, cut - (cuts[i - 1] if i else 0), now)
        if rules.capacity_tokens is not None:
            held = sum(e.size for e in entries.values())
            for key in sorted(entries, key=lambda k: (entries[k].last_used, -entries[k].end)):
                if held <= rules.capacity_tokens:
                    break
                held -= entries.pop(key).size
        cached = cuts[-1] if cuts else 0
        total, written = len(tokens), cached - read if rules.paid_writes else 0
        return Usage(total - read - written, written, read), read, cached
