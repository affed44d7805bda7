"""``SimulatedModel``: an offline, deterministic model whose *usage* follows a provider's rules.

Two caching regimes (``caching=``): ``"explicit"``, Anthropic's breakpoints priced on the very
Messages API body ``AnthropicModel`` sends, and ``"automatic"`` (:mod:`hango.models.prefixcache`).
The lessons are about what a prompt layout costs, and those numbers come from the provider's
documented rules, not from the answer: an offline model reproduces them exactly, for free, the
same on every run. Tokens are one documented approximation, :func:`count_tokens`. Its rules, and
the twelve choices the provider's docs leave open: docs/learning/11-memory-and-skills.md,
Appendix D.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Any, Literal, TypeAlias

from hango.models.base import (
    CacheDiagnostics,
    Request,
    Response,
    Tier,
    ToolCall,
    Usage,
    cache_scope,
    wire_request,
)
from hango.models.chat import chat_request
from hango.models.prefixcache import (
    OPENAI,
    PrefixCache,
    PrefixRules,
    PrefixTrace,
    Token,
    common_prefix,
    rendered_tokens,
)

TTL = Literal["5m", "1h"]
Caching = Literal["explicit", "automatic"]
CACHING: tuple[Caching, ...] = ("explicit", "automatic")
Refresh = Literal["all", "longest"]
REFRESH_ALL: Refresh = "all"  # a read refreshes every entry any breakpoint found
REFRESH_LONGEST: Refresh = "longest"  # a read refreshes only the entry it was billed from (A)
DEFAULT_REFRESH: Refresh = REFRESH_LONGEST
READINGS: tuple[Refresh, ...] = (REFRESH_ALL, REFRESH_LONGEST)
BLOCK_OVERHEAD = 3
MESSAGE_OVERHEAD = 4
MAX_BREAKPOINTS = 4
LOOKBACK = 20
TTL_SECONDS: dict[str, float] = {"5m": 5 * 60.0, "1h": 60 * 60.0}
TIERS: tuple[Tier, ...] = ("tools", "system", "messages")


def count_tokens(text: str) -> int:
    """Approximate tokens: ``ceil(utf8 bytes / 4)``. Anthropic's tokenizer is not public."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# --- Data tables: per-model numbers changed several times in 2026, so they live here as data. ---

@dataclass(frozen=True)
class MinimumRow:
    tokens: int
    source: str
    checked: str  # when this row was copied from its source


_DOC = "Anthropic prompt-caching docs, newest version (notes/prompt-caching.md §1.5)"
_NOW = "2026-11"
DEFAULT_MIN_CACHEABLE = 1024
MIN_CACHEABLE: dict[str, MinimumRow] = {
    "hango-sim-1": MinimumRow(1024, "hango teaching default (the classic Sonnet tier)", _NOW),
    # 512
    "claude-fable-5-1": MinimumRow(512, _DOC, _NOW),
    "claude-mythos-5-1": MinimumRow(512, _DOC, _NOW),
    "claude-opus-5": MinimumRow(512, _DOC, _NOW),
    "claude-fable-5": MinimumRow(512, _DOC + "; 2048 in anthropics/skills (2026-07)", _NOW),
    "claude-mythos-5": MinimumRow(512, _DOC, _NOW),
    # 1,024
    "claude-opus-4-8": MinimumRow(1024, _DOC + "; 4096 in anthropics/skills (2026-07)", _NOW),
    "claude-sonnet-5": MinimumRow(1024, _DOC, _NOW),
    "claude-sonnet-4-6": MinimumRow(1024, _DOC + "; 2048 in the early-2026 doc", _NOW),
    "claude-sonnet-4-5": MinimumRow(1024, _DOC, _NOW),
    "claude-opus-4-1": MinimumRow(1024, _DOC, _NOW),
    "claude-opus-4": MinimumRow(1024, _DOC, _NOW),
    "claude-sonnet-4": MinimumRow(1024, _DOC, _NOW),
    # 2,048
    "claude-mythos-preview": MinimumRow(2048, _DOC, _NOW),
    "claude-opus-4-7": MinimumRow(2048, _DOC + "; 4096 in anthropics/skills (2026-07)", _NOW),
    "claude-3-5-haiku": MinimumRow(2048, _DOC, _NOW),
    # 4,096
    "claude-opus-4-6": MinimumRow(4096, _DOC, _NOW),
    "claude-opus-4-5": MinimumRow(4096, _DOC, _NOW),
    "claude-haiku-4-5": MinimumRow(4096, _DOC, _NOW),
}
STRICTEST_MIN_CACHEABLE = max(row.tokens for row in MIN_CACHEABLE.values())


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens. Writes cost 1.25x (5m) or 2x (1h) input; reads ``read``x."""

    input: float
    output: float
    read: float
    source: str
    checked: str  # when this row was copied from its source


WRITE_5M, WRITE_1H = 1.25, 2.0
PRICES: dict[str, Price] = {
    "hango-sim-1": Price(3.0, 15.0, 0.1, "priced as Sonnet 4.6 for teaching", "2026-11"),
    "claude-sonnet-4-6": Price(3.0, 15.0, 0.1, "prompt-caching docs, pricing (notes §1.8)",
                               "2026-11"),
}


def _lookup(table: dict[str, Any], model: str) -> Any:
    """The row of ``model``, or of the model it is a dated snapshot of (``claude-sonnet-4-5-20250929``
    is ``claude-sonnet-4-5``). A newer model is not an older one's snapshot: ``claude-opus-5-5``
    gets no row from ``claude-opus-5``."""
    return table.get(model, table.get(re.sub(r"-\d{8}$", "", model)))


def min_cacheable_tokens(model: str) -> int:
    """The shortest prefix (in tokens) ``model`` will cache.

    A model the table does not know gets the strictest known minimum (4,096), with a warning
    naming it: predicting a hit the provider would not give is the worse mistake.
    """
    row: MinimumRow | None = _lookup(MIN_CACHEABLE, model)
    if row is None:
        warnings.warn(f"no minimum cacheable length is known for model {model!r}; using the "
                      f"strictest known value, {STRICTEST_MIN_CACHEABLE} tokens (add a row to "
                      "hango.models.simulated.MIN_CACHEABLE)", stacklevel=2)
        return STRICTEST_MIN_CACHEABLE
    return row.tokens


def price_of(model: str) -> Price:
    """The price row ``model`` is billed at. A model missing from :data:`PRICES` is priced like
    ``hango-sim-1``, that is as Sonnet 4.6, with a warning naming it (its real price may differ)."""
    price: Price | None = _lookup(PRICES, model)
    if price is None:
        warnings.warn(f"no price is known for model {model!r}; priced as Sonnet 4.6 "
                      f"(${PRICES['hango-sim-1'].input:g} in, ${PRICES['hango-sim-1'].output:g} "
                      "out per million tokens; add a row to hango.models.simulated.PRICES)",
                      stacklevel=3)
        return PRICES["hango-sim-1"]
    return price


def cost(usage: Usage, model: str) -> float:
    """Dollars for one call: uncached input 1x, 5m writes 1.25x, 1h writes 2x, reads 0.1x, at
    :func:`price_of` ``model`` (``hango-sim-1``, the course's model, at Sonnet 4.6's prices)."""
    price = price_of(model)
    one_hour = usage.cache_creation_1h_input_tokens
    five_min = usage.cache_creation_input_tokens - one_hour
    weighted = (usage.input_tokens + WRITE_5M * five_min + WRITE_1H * one_hour
                + price.read * (usage.cache_read_input_tokens or 0))
    return (price.input * weighted + price.output * usage.output_tokens) / 1_000_000


# --- Positions ---

@dataclass(frozen=True)
class Position:
    """One lookback position: its tier, a label for tables, its tokens and its canonical bytes."""

    tier: Tier
    label: str
    tokens: int
    data: bytes = field(repr=False)
    message: int | None = None  # index of the message it belongs to


def _unmarked(block: dict[str, Any]) -> dict[str, Any]:
    """A wire block without its ``cache_control``: the marker moves, the prompt does not."""
    return {k: v for k, v in block.items() if k != "cache_control"}


def _ttl(block: dict[str, Any]) -> TTL | None:
    marker = block.get("cache_control")
    if marker is None:
        return None
    return "1h" if marker.get("ttl") == "1h" else "5m"


def _position(tier: Tier, label: str, tokens: int, content: dict[str, Any],
              message: int | None = None) -> Position:
    data = _canonical({"tier": tier, **content}).encode("utf-8")
    return Position(tier, label, tokens, data, message)


def _block_tokens(block: dict[str, Any]) -> int:
    if block["type"] == "tool_use":
        return count_tokens(_canonical({"name": block["name"], "input": block["input"]}))
    if block["type"] == "tool_result":
        return count_tokens(block["content"])
    return count_tokens(block["text"])


def wire_positions(params: dict[str, Any]) -> tuple[list[Position], list[tuple[int, TTL]]]:
    """Lookback positions of a wire body (:func:`~hango.models.base.wire_request`), in ``tools →
    system → messages`` order, and ``(position, ttl)`` for each ``cache_control`` marker on it."""
    out: list[Position] = []
    marks: dict[int, TTL] = {}

    def mark(*blocks: dict[str, Any]) -> None:
        for block in blocks:
            ttl = _ttl(block)
            if ttl is not None:
                at = len(out) - 1
                marks[at] = "1h" if "1h" in (ttl, marks.get(at)) else "5m"

    for i, tool in enumerate(params.get("tools", [])):
        spec = _unmarked(tool)
        out.append(_position("tools", f"tools[{i}] {tool['name']}",
                             count_tokens(_canonical(spec)) + BLOCK_OVERHEAD, spec))
        mark(tool)
    for i, block in enumerate(params.get("system", [])):
        out.append(_position("system", f"system[{i}]", _block_tokens(block) + BLOCK_OVERHEAD,
                             {"text": block["text"]}))
        mark(block)
    for i, msg in enumerate(params["messages"]):
        runs: list[list[dict[str, Any]]] = []
        for block in msg["content"]:  # a run of tool_use (or tool_result) blocks is one position
            if runs and block["type"] != "text" and runs[-1][0]["type"] == block["type"]:
                runs[-1].append(block)
            else:
                runs.append([block])
        for n, run in enumerate(runs):
            kind = run[0]["type"]
            tokens = sum(_block_tokens(b) + BLOCK_OVERHEAD for b in run)
            tokens += 0 if n else MESSAGE_OVERHEAD
            label = f"messages[{i}].{kind}" + (f"×{len(run)}" if len(run) > 1 else "")
            out.append(_position("messages", label, tokens,
                                 {"message": i, "role": msg["role"], "type": kind,
                                  "blocks": [_unmarked(b) for b in run]}, message=i))
            mark(*run)
    return out, sorted(marks.items())


def positions(request: Request) -> list[Position]:
    """The request's lookback positions, as :func:`wire_request` renders it."""
    return wire_positions(wire_request(request))[0]


def breakpoint_positions(request: Request) -> list[tuple[int, TTL]]:
    """``(position index, ttl)`` for each marker on the wire, sorted; raises the provider's 400s
    (:class:`~hango.models.base.InvalidRequest`)."""
    return wire_positions(wire_request(request))[1]


def prefix_keys(model: str, pos: Sequence[Position]) -> list[str]:
    """``H[i]``: SHA-256 over the model name and the bytes of positions ``0..i``."""
    h = hashlib.sha256(model.encode("utf-8"))
    keys = []
    for p in pos:
        h.update(len(p.data).to_bytes(8, "big") + p.data)  # length-prefixed: no ambiguity
        keys.append(h.copy().hexdigest())
    return keys


# --- The cache store ---

@dataclass
class CacheEntry:
    tokens: int
    ttl: TTL
    expires_at: float


class CacheStore:
    """Cache entries scoped by model: ``entries[model][prefix hash]``.

    Each ``SimulatedModel`` makes its own; pass one store to two models to show that an entry
    written under one model name is never read under another.
    """

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, CacheEntry]] = {}

    def for_model(self, model: str) -> dict[str, CacheEntry]:
        return self.entries.setdefault(model, {})


@dataclass(frozen=True)
class CacheTrace:
    """What the cache did for one call, position by position (for tables in notebooks)."""

    model: str
    started: float
    positions: tuple[Position, ...]
    keys: tuple[str, ...]
    breakpoints: tuple[int, ...]
    hits: tuple[int, ...]
    writes: tuple[int, ...]
    minimum: int
    cached: int  # C: tokens through the last breakpoint that reached the minimum, else 0
    last_eligible: int | None  # its position index


# --- Replies ---

@dataclass(frozen=True)
class Reply:
    """What the simulated model says: text, tool calls, or both."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


ReplyLike: TypeAlias = str | Reply | Sequence[ToolCall]
Policy: TypeAlias = Callable[[Request], ReplyLike]
ScriptEntry: TypeAlias = ReplyLike | Policy


def tool_call(name: str, arguments: dict[str, Any] | None = None) -> ToolCall:
    """A scripted tool call; the model gives it the next deterministic id (``call_1``, …)."""
    return ToolCall("", name, dict(arguments or {}))


def _clip(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def echo_policy(request: Request) -> Reply:
    """The default: always a short deterministic text, never a tool call (so a run ends)."""
    last = next((m for m in reversed(request.messages) if m.role == "user"), None)
    if last is None:
        return Reply("(hango-sim) Nothing to answer.")
    if last.tool_results:
        seen = "; ".join(f"{r.call_id}: {_clip(r.content, 40)}" for r in last.tool_results)
        return Reply(f"(hango-sim) Read {len(last.tool_results)} tool result(s). {seen}")
    return Reply(f"(hango-sim) You said: {_clip(last.text)}")


def _as_reply(value: ReplyLike) -> Reply:
    if isinstance(value, str):
        return Reply(value)
    if isinstance(value, Reply):
        return value
    return Reply("", tuple(value))


# --- The model ---

SCOPES_KEPT = 1024  # cache scopes (tenants) whose previous call the diagnostics remember


def _remember(last: dict[str, Any], scope: str, value: Any) -> None:
    """``last[scope] = value``, the newest last, at most :data:`SCOPES_KEPT` scopes."""
    last.pop(scope, None)
    last[scope] = value
    if len(last) > SCOPES_KEPT:
        del last[next(iter(last))]


class SimulatedModel:
    """A deterministic offline :class:`~hango.models.base.Model` with provider-faithful usage.

    ``policy`` is a callable ``request -> reply`` or a script: a list of replies used in order,
    each a text, a list of tool calls, a :class:`Reply`, or a function of the request. ``calls``
    keeps every ``(request, response)``; ``traces`` the matching :class:`CacheTrace`. With
    ``history=N`` they keep only the last ``N`` (a server's model answers for hours: ``hango
    serve`` keeps 1, which the next call's diagnostics compare with).

    ``refresh`` is the open rule of which entries a read refreshes (module docstring, assumption
    11): ``"longest"`` (the default) or ``"all"``.

    ``caching="automatic"`` prices the Chat Completions body ``OpenAIModel`` sends under
    automatic prefix caching instead, with ``rules`` (:class:`~hango.models.prefixcache.PrefixRules`,
    default OpenAI's); its per-call record is ``prefix_traces`` (``traces`` stays empty).
    """

    provider = "hango-sim"

    def __init__(
        self,
        name: str = "hango-sim-1",
        *,
        policy: Policy | Sequence[ScriptEntry] | None = None,
        clock: Callable[[], float] = time.monotonic,
        min_cacheable: int | None = None,
        store: CacheStore | None = None,
        refresh: Refresh = DEFAULT_REFRESH,
        history: int | None = None,
        caching: Caching = "explicit",
        rules: PrefixRules = OPENAI,
    ) -> None:
        if caching not in CACHING:
            raise ValueError(f"caching must be 'explicit' or 'automatic', not {caching!r}")
        if isinstance(policy, str):
            raise TypeError("a script is a list of replies, not one string")
        if refresh not in (REFRESH_ALL, REFRESH_LONGEST):
            raise ValueError(f"refresh must be {REFRESH_ALL!r} or {REFRESH_LONGEST!r}, "
                             f"not {refresh!r}")
        if history is not None and history < 1:
            raise ValueError(f"history must be at least 1 (or None: keep every call), "
                             f"not {history!r}")
        self.name = name
        self.history = history
        self.refresh = refresh
        self.clock = clock
        self.min_cacheable = min_cacheable
        self.store = store if store is not None else CacheStore()
        self._policy: Policy | None = policy if callable(policy) else None
        self._script: list[ScriptEntry] | None = None
        if policy is None:
            self._policy = echo_policy
        elif not callable(policy):
            self._script = list(policy)
        self._next_call_id = 0
        self._answered = 0
        self.calls: list[tuple[Request, Response]] = []
        self.traces: list[CacheTrace] = []
        self.caching = caching
        self.prefix_cache = PrefixCache(rules)
        self.prefix_traces: list[PrefixTrace] = []
        # The previous call of each cache scope (base.cache_scope): diagnostics compare a call
        # with the last one of its own scope, so one tenant's answer says nothing of another's.
        self._last_trace: dict[str, CacheTrace] = {}
        self._last_prompts: dict[str, list[Token]] = {}
        # One model may serve many threads (hango serve's runs): one call's cache accounting
        # at a time (a policy runs outside it).
        self._lock = threading.Lock()

    @property
    def rules(self) -> PrefixRules:
        return self.prefix_cache.rules

    def complete(self, request: Request) -> Response:
        started = self.clock()
        model = request.model or self.name
        # The body the adapter would send; a request it would refuse fails here, unchanged.
        body = (chat_request(request, model) if self.caching == "automatic"
                else wire_request(request, model))
        # max_tokens=0 is a pre-warm: write the cache, generate nothing. The reply is made with
        # no lock held: a policy may take its time (a test's model waits on an event), and other
        # threads' calls go on meanwhile; only the cache accounting below is one call at a time.
        reply = Reply() if request.max_tokens == 0 else self._reply(request)
        with self._lock:
            if self.caching == "automatic":
                return self._price_automatic(request, model, started, body, reply)
            return self._price(request, model, started, body, reply)

    def _price(self, request: Request, model: str, started: float, body: dict[str, Any],
               reply: Reply) -> Response:
        """Anthropic's rules: entries at breakpoints, the 20-position lookback, TTLs."""
        pos, marks = wire_positions(body)
        scope = cache_scope(request)
        prev = self._last_trace.get(scope)
        # Was the previous call's cache still alive when this call started? (Asked before this
        # call rewrites the store, to tell "expired" from "outside_lookback".)
        prev_alive = prev is not None and prev.last_eligible is not None and self._alive(
            prev.model, prev.keys[prev.last_eligible], started)
        trace, usage = self._cache(model, started, pos, marks)
        _remember(self._last_trace, scope, trace)
        diagnostics = None  # no breakpoint: caching was not asked for, so there is no verdict
        if marks:
            diagnostics = self._diagnose(trace, usage, prev, prev_alive)
        return self._answer(request, model, reply, usage, diagnostics, trace)

    def _price_automatic(self, request: Request, model: str, started: float,
                         body: dict[str, Any], reply: Reply) -> Response:
        """The automatic prefix regime: price the Chat Completions body."""
        tokens = rendered_tokens(body)
        usage, read, cached = self.prefix_cache.price(model, started, tokens)
        scope = cache_scope(request)
        previous = self._last_prompts.get(scope)
        _remember(self._last_prompts, scope, tokens)
        same = None if previous is None else common_prefix(previous, tokens)
        changed = None if previous is None or same == len(previous) else same  # or only grew
        return self._answer(request, model, reply, usage, None,
                            PrefixTrace(model, started, len(tokens), read, cached, changed))

    def _answer(self, request: Request, model: str, reply: Reply, usage: Usage,
                diagnostics: CacheDiagnostics | None, trace: CacheTrace | PrefixTrace) -> Response:
        """Count the output, keep the call (and its trace) within ``history``, answer."""
        stop = ("max_tokens" if request.max_tokens == 0
                else "tool_use" if reply.tool_calls else "end_turn")
        out = count_tokens(reply.text) + sum(
            count_tokens(_canonical({"name": c.name, "input": c.arguments}))
            for c in reply.tool_calls)
        response = Response(reply.text, reply.tool_calls, replace(usage, output_tokens=out),
                            model=model, stop_reason=stop, diagnostics=diagnostics,
                            id=f"msg_sim_{self._answered + 1:06d}")  # this model's n-th answer
        self.calls.append((request, response))
        if isinstance(trace, PrefixTrace):
            self.prefix_traces.append(trace)
        else:
            self.traces.append(trace)
        self._answered += 1
        if self.history is not None:
            del self.calls[:-self.history], self.traces[:-self.history]
            del self.prefix_traces[:-self.history]
        return response

    def _alive(self, model: str, key: str, now: float) -> bool:
        entry = self.store.for_model(model).get(key)
        return entry is not None and now < entry.expires_at

    def _cache(self, model: str, now: float, pos: list[Position],
               marks: list[tuple[int, TTL]]) -> tuple[CacheTrace, Usage]:
        """§1.11 steps 2-7: hash, look back, find A / B / C, price the prefix, update the store."""
        keys = prefix_keys(model, pos)
        upto = list(accumulate(p.tokens for p in pos))  # P[i]: tokens through position i
        total = upto[-1] if upto else 0
        entries = self.store.for_model(model)
        minimum = self.min_cacheable
        if minimum is None:
            minimum = min_cacheable_tokens(model)
        eligible = [(b, ttl) for b, ttl in marks if upto[b] >= minimum]
        hits: list[int] = []
        for b, _ in marks if eligible else []:
            for j in range(b, max(b - LOOKBACK, -1), -1):  # the breakpoint counts as the first
                if self._alive(model, keys[j], now):
                    hits.append(j)
                    break
        read = max((upto[j] for j in hits), default=0)  # A
        last = eligible[-1][0] if eligible else None
        cached = upto[last] if last is not None else 0  # C
        one_hour = max((upto[b] for b, ttl in eligible if ttl == "1h" and upto[b] > read),
                       default=read)  # B
        writes = [(b, ttl) for b, ttl in eligible if upto[b] > read]  # only at breakpoints
        for b, ttl in writes:
            entries[keys[b]] = CacheEntry(upto[b], ttl, now + TTL_SECONDS[ttl])
        # A read refreshes an entry's lifetime, keeping its TTL class. Which entries: the open
        # rule (assumption 11), a switch: every entry a breakpoint found, or only the longest.
        refreshed = hits if self.refresh == REFRESH_ALL else [
            j for j in hits if upto[j] == read][:1]
        for j in refreshed:
            entries[keys[j]].expires_at = now + TTL_SECONDS[entries[keys[j]].ttl]
        usage = Usage(input_tokens=total - max(cached, read),
                      cache_creation_input_tokens=cached - read,
                      cache_read_input_tokens=read,
                      cache_creation_1h_input_tokens=one_hour - read)
        trace = CacheTrace(model, now, tuple(pos), tuple(keys), tuple(b for b, _ in marks),
                           tuple(hits), tuple(b for b, _ in writes), minimum, cached, last)
        return trace, usage

    def _diagnose(self, trace: CacheTrace, usage: Usage, prev: CacheTrace | None,
                  prev_alive: bool) -> CacheDiagnostics:
        """Why this call did not read more, judged against the previous call (assumption 10)."""
        read = usage.cache_read_input_tokens or 0  # the simulator always knows what it read
        if trace.last_eligible is None:
            return CacheDiagnostics("below_minimum", max(0, prev.cached - read) if prev else 0)
        if read == trace.cached:
            return CacheDiagnostics(None)
        if prev is None:
            return CacheDiagnostics("previous_message_not_found")
        missed = prev.cached - read
        if missed <= 0:
            return CacheDiagnostics(None)
        if prev.model != trace.model:
            return CacheDiagnostics("model_changed", missed)
        same = 0
        while (same < min(len(prev.keys), len(trace.keys))
               and prev.keys[same] == trace.keys[same]):
            same += 1
        assert prev.last_eligible is not None  # prev.cached > read >= 0
        if same <= prev.last_eligible:  # the previous cached prefix was edited
            tiers = [p.positions[same].tier for p in (prev, trace) if same < len(p.positions)]
            return CacheDiagnostics(f"{min(tiers, key=TIERS.index)}_changed", missed)
        return CacheDiagnostics("outside_lookback" if prev_alive else "expired", missed)

    def _reply(self, request: Request) -> Reply:
        if self._script is not None:
            with self._lock:  # each entry once, in order, whichever thread asks
                if not self._script:
                    raise RuntimeError(f"{self.name}: the script has no reply left for call "
                                       f"{self._answered + 1}")
                entry = self._script.pop(0)
            reply = _as_reply(entry(request) if callable(entry) else entry)
        else:
            assert self._policy is not None
            reply = _as_reply(self._policy(request))
        calls = []
        with self._lock:
            for c in reply.tool_calls:
                if not c.id:
                    self._next_call_id += 1
                    c = ToolCall(f"call_{self._next_call_id}", c.name, c.arguments)
                calls.append(c)
        return Reply(reply.text, tuple(calls))


def replay(calls: Sequence[tuple[float, Request, Response]], *, name: str = "hango-sim-1",
           refresh: Refresh = DEFAULT_REFRESH, min_cacheable: int | None = None,
           caching: Caching = "explicit", rules: PrefixRules = OPENAI) -> list[Response]:
    """Price recorded calls again, each at a new start time, on a fresh cache.

    ``calls`` are ``(start seconds, request, recorded response)``. The requests of a scripted
    run do not depend on the clock, so one recorded conversation can be priced at any pace,
    under either refresh reading, and under either caching regime (the same requests, two
    columns). The replies (and so the output tokens) are the recorded ones.
    """
    starts = [start for start, _, _ in calls]
    if starts != sorted(starts):
        raise ValueError("replay: start times must not go backwards")
    now = [0.0]
    model = SimulatedModel(name, policy=[Reply(r.text, r.tool_calls) for _, _, r in calls],
                           clock=lambda: now[0], min_cacheable=min_cacheable, refresh=refresh,
                           caching=caching, rules=rules)
    out = []
    for start, request, _ in calls:
        now[0] = start
        out.append(model.complete(request))
    return out
