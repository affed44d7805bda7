"""What a model is asked and what it answers: ``Request``, ``Response``, ``Usage``, ``Model``.

The request records *where* its cache breakpoints are (tier and index), because the promises of
this layer are about positions: memory lands after the system breakpoint, the skills index before
it. ``Request.canonical()`` is the byte form a provider would see; the same inputs give the same
bytes on every call, or the prompt cache can never hit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Tier = Literal["tools", "system", "messages"]
Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Block:
    """One system block. ``source`` names who contributed it (a middleware or a file path)."""

    text: str
    source: str = ""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)  # JSON Schema of the arguments


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: str
    is_error: bool = False


@dataclass(frozen=True)
class Message:
    """A user turn (text and/or tool results) or an assistant turn (text and/or tool calls)."""

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()


@dataclass(frozen=True)
class Breakpoint:
    """A ``cache_control`` marker on the block at ``index`` of ``tier``."""

    tier: Tier
    index: int
    ttl: Literal["5m", "1h"] = "5m"


@dataclass(frozen=True)
class Request:
    model: str
    tools: tuple[ToolSpec, ...]
    system: tuple[Block, ...]
    messages: tuple[Message, ...]
    breakpoints: tuple[Breakpoint, ...] = ()
    max_tokens: int = 1024

    @property
    def system_breakpoint(self) -> int | None:
        """Index of the last system block marked for caching, or None."""
        marks = [b.index for b in self.breakpoints if b.tier == "system"]
        return max(marks) if marks else None

    def canonical(self) -> bytes:
        """The request as deterministic JSON bytes (sorted keys, no whitespace variance)."""
        return json.dumps(_plain(self), sort_keys=True, ensure_ascii=False,
                          separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class Usage:
    """Token usage as a provider reports it. ``input_tokens`` is only the uncached tail."""

    input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    output_tokens: int = 0
    # The part of ``cache_creation_input_tokens`` written with the 1-hour TTL (the provider's
    # ``usage.cache_creation.ephemeral_1h_input_tokens``); it is billed at 2x instead of 1.25x.
    cache_creation_1h_input_tokens: int = 0

    @property
    def total_input_tokens(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def read_ratio(self) -> float:
        """``hango.cache.read_ratio``: read / (read + creation + input); 0 for an empty prompt."""
        total = self.total_input_tokens
        return self.cache_read_input_tokens / total if total else 0.0


@dataclass(frozen=True)
class CacheDiagnostics:
    """Why a call did not read the cache, like the provider's cache diagnostics.

    ``miss_reason`` is ``None`` on a full hit, else one of ``model_changed``, ``tools_changed``,
    ``system_changed``, ``messages_changed``, ``previous_message_not_found`` (first call),
    ``expired``, ``below_minimum``, ``outside_lookback`` (the prefix is unchanged and its entry is
    alive, but more than 20 positions before every breakpoint) or the provider's ``unavailable``.
    """

    miss_reason: str | None
    missed_input_tokens: int = 0


@dataclass(frozen=True)
class Response:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    stop_reason: str = "end_turn"
    diagnostics: CacheDiagnostics | None = None


class Model(Protocol):
    """Anything that answers a :class:`Request`: the offline simulator or a real provider."""

    name: str
    provider: str

    def complete(self, request: Request) -> Response: ...


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
