"""PromptCache: where the cache breakpoints go, and how long the stable prefix lives.

Its position in the stack *is* its behaviour: the system breakpoint goes on the last block
contributed before it (tools, base prompt, skills index: one cached prefix; memory after it).
Around each model call it adds a *conversation* breakpoint on the last message, and makes any
caller's markers valid (one a block, no 1-hour marker after a 5-minute one). The first system
block is the tenant's own scope, so no tenant reads another's prefix. Why a 1-hour prefix, and
why a scope per tenant: docs/learning/11-memory-and-skills.md §4.5 and §4.7.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Literal

from hango.agent.hooks import ModelCall, RunContext
from hango.models.base import CACHE_SCOPE_SOURCE, Block, Breakpoint, Request, Response, Tier

MAX_BREAKPOINTS = 4  # the provider's limit: "A maximum of 4 blocks with cache_control"
TTLS = ("5m", "1h")
_TIER_ORDER: dict[Tier, int] = {"tools": 0, "system": 1, "messages": 2}
SCOPE_SOURCE = CACHE_SCOPE_SOURCE


def tenant_scope(tenant_id: str) -> Block:
    """The tenant's own first system block: no cached prefix of one tenant matches another's.
    A digest, so it does not show the tenant id; it need not be secret (no tenant can remove
    its own)."""
    digest = hashlib.sha256(f"hango cache scope\n{tenant_id}".encode()).hexdigest()[:16]
    return Block(f"cache scope: {digest}", SCOPE_SOURCE)


def normalize(breakpoints: tuple[Breakpoint, ...] | list[Breakpoint]) -> tuple[Breakpoint, ...]:
    """One breakpoint per block (the longer TTL wins), in ``tools → system → messages`` order,
    with every breakpoint before a 1-hour one lifted to 1 hour."""
    by_block: dict[tuple[Tier, int], Breakpoint] = {}
    for bp in breakpoints:
        key = (bp.tier, bp.index)
        if key not in by_block or bp.ttl == "1h":
            by_block[key] = bp
    ordered = sorted(by_block.values(), key=lambda b: (_TIER_ORDER[b.tier], b.index))
    last_hour = max((i for i, b in enumerate(ordered) if b.ttl == "1h"), default=-1)
    return tuple(replace(b, ttl="1h") if i < last_hour else b for i, b in enumerate(ordered))


class PromptCache:
    """Marks the system breakpoint (by its place in the chain) and a conversation breakpoint."""

    name = "prompt_cache"
    marks_breakpoint = True

    def __init__(self, conversation: bool = True, prefix_ttl: Literal["5m", "1h"] = "1h") -> None:
        if prefix_ttl not in TTLS:
            raise ValueError(f"prefix_ttl must be '5m' or '1h', not {prefix_ttl!r}")
        self.conversation = conversation
        self.prefix_ttl = prefix_ttl

    def wrap_model_call(self, ctx: RunContext, request: Request, call_next: ModelCall) -> Response:
        # A marker on a tool would write a prefix without the tenant's scope: onto system[0].
        marks = [Breakpoint("system", 0, b.ttl) if b.tier == "tools" and request.system else b
                 for b in request.breakpoints]
        prefix = request.system_breakpoint  # the stable prefix: the last system breakpoint
        if prefix is not None and self.prefix_ttl == "1h":
            marks.append(Breakpoint("system", prefix, "1h"))  # merged with it by normalize()
        if self.conversation and request.messages:
            last = Breakpoint("messages", len(request.messages) - 1)
            if len(normalize([*marks, last])) <= MAX_BREAKPOINTS:
                marks.append(last)
        return call_next(replace(request, breakpoints=normalize(marks)))
