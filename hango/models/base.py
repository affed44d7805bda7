"""What a model is asked and what it answers: ``Request``, ``Response``, ``Usage``, ``Model``.

The request records *where* its cache breakpoints are (tier and index), because the promises of
this layer are about positions: memory lands after the system breakpoint, the skills index before
it. ``Request.canonical()`` is the byte form a provider would see; the same inputs give the same
bytes on every call, or the prompt cache can never hit.

:func:`wire_request` renders a request as the Messages API body. It is the only renderer of that
wire: the Anthropic adapter sends its result and the simulator prices its result, so the two
agree by construction on every byte and every ``cache_control`` marker, and refuse the same
requests with the same :class:`InvalidRequest` message (the provider's 400 text where it is
known). The Chat Completions wire has its own one renderer, :func:`hango.models.chat.chat_request`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from hango.errors import HangoError

Tier = Literal["tools", "system", "messages"]
Role = Literal["user", "assistant"]


# The source of the block a request starts with to keep a tenant's cached prefixes its own
# (hango.agent.promptcache.tenant_scope). Calls in one scope are one cache's callers: the
# simulator compares a call with the previous call of its scope, never another tenant's.
CACHE_SCOPE_SOURCE = "tenant_cache_scope"


def cache_scope(request: Request) -> str:
    """The request's cache scope: its first block's text when that is a scope block, else ``""``."""
    first = request.system[0] if request.system else None
    return first.text if first is not None and first.source == CACHE_SCOPE_SOURCE else ""


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
    """Token usage as a provider reports it. ``input_tokens`` is only the uncached tail.

    ``cache_read_input_tokens`` is ``None`` when the provider did not say what it read (an
    OpenAI-compatible server that reports no ``prompt_tokens_details``): unknown, never 0. Then
    ``input_tokens`` is the whole prompt and :attr:`read_ratio` is ``None`` too.
    """

    input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int | None = 0
    output_tokens: int = 0
    # The part of ``cache_creation_input_tokens`` written with the 1-hour TTL (the provider's
    # ``usage.cache_creation.ephemeral_1h_input_tokens``); it is billed at 2x instead of 1.25x.
    cache_creation_1h_input_tokens: int = 0

    @property
    def total_input_tokens(self) -> int:
        """The whole prompt: OpenAI's ``prompt_tokens`` (which counts the cached part inside)."""
        return (self.input_tokens + self.cache_creation_input_tokens
                + (self.cache_read_input_tokens or 0))

    @property
    def read_ratio(self) -> float | None:
        """``hango.cache.read_ratio``: read / (read + creation + input); 0 for an empty prompt,
        ``None`` when the provider did not report what it read."""
        if self.cache_read_input_tokens is None:
            return None
        total = self.total_input_tokens
        return self.cache_read_input_tokens / total if total else 0.0

    def __add__(self, other: Usage) -> Usage:
        """The usage of two calls together; an unknown read makes the sum's read unknown."""
        reads = (self.cache_read_input_tokens, other.cache_read_input_tokens)
        return Usage(self.input_tokens + other.input_tokens,
                     self.cache_creation_input_tokens + other.cache_creation_input_tokens,
                     None if None in reads else sum(r or 0 for r in reads),
                     self.output_tokens + other.output_tokens,
                     self.cache_creation_1h_input_tokens + other.cache_creation_1h_input_tokens)


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
    id: str = ""  # the provider's id of this response (``gen_ai.response.id``)


class Model(Protocol):
    """Anything that answers a :class:`Request`: the offline simulator or a real provider."""

    name: str
    provider: str

    def complete(self, request: Request) -> Response: ...


class InvalidRequest(ValueError):
    """A request the provider would answer with 400. Raised before anything is sent or priced."""


class ModelError(HangoError, RuntimeError):
    """The model's endpoint failed, or answered what hango cannot use (no usage, a malformed
    tool call). The message names the endpoint and what was wrong; a run that meets it ends
    ``failed`` (a resume stays interrupted) instead of raising a traceback at its caller."""

    status: ClassVar[int] = 502


NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}  # a tool without arguments


def _blank(text: str) -> bool:
    """The API refuses text blocks without non-whitespace text (and they cannot be cached)."""
    return not text.strip()


def _content(i: int, msg: Message) -> list[dict[str, Any]]:
    """A message's content blocks: tool results before the text of a user turn, the text before
    the tool calls of an assistant turn. A blank text is no block; a message left with no block
    at all is refused (the API rejects empty content and empty text blocks)."""
    results: list[dict[str, Any]] = []
    for r in msg.tool_results:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.call_id,
                                 "content": r.content}
        if r.is_error:
            block["is_error"] = True
        results.append(block)
    calls: list[dict[str, Any]] = [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
        for c in msg.tool_calls]
    text: list[dict[str, Any]] = [] if _blank(msg.text) else [{"type": "text", "text": msg.text}]
    content = [*results, *text] if msg.role == "user" else [*text, *calls]
    if not content:
        raise InvalidRequest(f"messages[{i}] ({msg.role}) is empty: the provider refuses a "
                             "message without content and a text block without non-whitespace "
                             "text; send some text")
    return content


def _marker(ttl: str) -> dict[str, Any]:
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


def check_breakpoints(request: Request) -> None:
    """A breakpoint index must be inside its tier: ``-1`` is refused, never read as "the last"."""
    sizes = {"tools": len(request.tools), "system": len(request.system),
             "messages": len(request.messages)}
    for bp in request.breakpoints:
        if not 0 <= bp.index < sizes[bp.tier]:
            raise InvalidRequest(f"breakpoint {bp.tier}[{bp.index}] is outside the request "
                                 f"({sizes[bp.tier]} {bp.tier}; an index counts from 0, "
                                 "never from the end)")


def wire_request(request: Request, model: str | None = None) -> dict[str, Any]:
    """The Messages API body for ``request`` (``messages.create`` keyword arguments).

    - A tool without parameters gets ``{"type": "object", "properties": {}}``.
    - Blank system blocks are left out. A breakpoint on one moves to the block before it (the
      prefix through a blank block *is* the prefix through the block before it), or is dropped
      when nothing precedes it.
    - A breakpoint index must be inside its tier: ``-1`` is refused, never read as "the last".
    - A ``messages`` breakpoint marks the last content block of that message.
    - Two breakpoints on one block are one marker, and the longer TTL wins.
    - More than 4 markers, or a 1-hour marker after a 5-minute one (in ``tools → system →
      messages`` order), is the provider's 400, raised here as :class:`InvalidRequest`.
    """
    check_breakpoints(request)
    tools = [{"name": t.name, "description": t.description,
              "input_schema": t.parameters or dict(NO_PARAMETERS)} for t in request.tools]
    system: list[dict[str, Any]] = []
    at_system: list[int | None] = []  # request system index -> wire system index (None: blank)
    for b in request.system:
        at_system.append(None if _blank(b.text) else len(system))
        if not _blank(b.text):
            system.append({"type": "text", "text": b.text})
    contents = [_content(i, m) for i, m in enumerate(request.messages)]
    messages: list[dict[str, Any]] = [{"role": m.role, "content": c}
                                      for m, c in zip(request.messages, contents, strict=True)]
    # Wire blocks in processing order, and where each breakpoint lands among them.
    order: list[tuple[str, dict[str, Any]]] = [
        *((f"tools.{i}", t) for i, t in enumerate(tools)),
        *((f"system.{i}", b) for i, b in enumerate(system)),
        *((f"messages.{i}.content.{j}", c) for i, content in enumerate(contents)
          for j, c in enumerate(content))]
    ttls: dict[int, str] = {}  # index into ``order`` -> ttl
    for bp in request.breakpoints:
        if bp.tier == "tools":
            at: int | None = bp.index
        elif bp.tier == "system":
            kept = [w for w in at_system[: bp.index + 1] if w is not None]
            at = len(tools) + kept[-1] if kept else (len(tools) - 1 if tools else None)
        else:
            at = len(tools) + len(system) + sum(len(c) for c in contents[: bp.index + 1]) - 1
        if at is not None:
            ttls[at] = "1h" if "1h" in (bp.ttl, ttls.get(at)) else "5m"
    if len(ttls) > 4:
        raise InvalidRequest("A maximum of 4 blocks with cache_control may be provided. "
                             f"Found {len(ttls)}.")
    seen_5m = False
    for at in sorted(ttls):
        if ttls[at] == "1h" and seen_5m:
            raise InvalidRequest(
                f"{order[at][0]}.cache_control.ttl: a ttl='1h' cache_control block must not "
                "come after a ttl='5m' cache_control block. Note that blocks are processed in "
                "the following order: `tools`, `system`, `messages`.")
        seen_5m = seen_5m or ttls[at] == "5m"
        order[at][1]["cache_control"] = _marker(ttls[at])
    params: dict[str, Any] = {"model": model or request.model, "max_tokens": request.max_tokens,
                              "messages": messages}
    if tools:
        params["tools"] = tools
    if system:
        params["system"] = system
    return params


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
