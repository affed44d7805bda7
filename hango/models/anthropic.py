"""``AnthropicModel``: the :class:`~hango.models.base.Model` interface over the real Messages API.

The optional extra (``pip install hango[anthropic]``); nothing else imports this module. It is a
thin translation, so that a notebook can swap the simulator for the real API and compare usage:

- ``ToolSpec`` → ``tools=[{name, description, input_schema}]``; ``Block`` → ``system=[{type:
  "text", text}]`` (the array form: an explicit ``cache_control`` needs it); ``Message`` →
  ``messages`` with ``tool_result`` blocks before the text of a user turn, and the text before the
  ``tool_use`` blocks of an assistant turn (the simulator counts positions in the same order).
- Each ``Breakpoint`` becomes ``"cache_control": {"type": "ephemeral"}`` (plus ``"ttl": "1h"``)
  on that tool, that system block, or the *last* content block of that message. The API itself
  enforces the limit of four and answers 400 beyond it.
- Usage comes back as :class:`~hango.models.base.Usage`; the cache counts may be ``null`` on the
  wire and become 0. ``input_tokens`` stays the uncached remainder, as the API reports it.
- ``diagnostics=True`` opts in to the provider's cache diagnostics: each call sends the previous
  response's id, and ``cache_miss_reason`` comes back as ``Response.diagnostics``.
"""

from __future__ import annotations

from typing import Any

import anthropic

from hango.models.base import CacheDiagnostics, Message, Request, Response, ToolCall, Usage


def _content(msg: Message) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for r in msg.tool_results:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.call_id,
                                 "content": r.content}
        if r.is_error:
            block["is_error"] = True
        results.append(block)
    calls = [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
             for c in msg.tool_calls]
    text = [{"type": "text", "text": msg.text}] if msg.text or not (results or calls) else []
    return [*results, *text] if msg.role == "user" else [*text, *calls]


def to_anthropic_params(request: Request, model: str | None = None) -> dict[str, Any]:
    """The ``messages.create`` keyword arguments for ``request`` (also handy to print)."""
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description,
         "input_schema": t.parameters or {"type": "object", "properties": {}}}
        for t in request.tools]
    system: list[dict[str, Any]] = [{"type": "text", "text": b.text} for b in request.system]
    messages: list[dict[str, Any]] = [{"role": m.role, "content": _content(m)}
                                      for m in request.messages]
    for bp in request.breakpoints:
        marker: dict[str, Any] = {"type": "ephemeral"}
        if bp.ttl == "1h":
            marker["ttl"] = "1h"
        if bp.tier == "tools":
            tools[bp.index]["cache_control"] = marker
        elif bp.tier == "system":
            system[bp.index]["cache_control"] = marker
        else:
            messages[bp.index]["content"][-1]["cache_control"] = marker
    params: dict[str, Any] = {"model": model or request.model, "max_tokens": request.max_tokens,
                              "messages": messages}
    if tools:
        params["tools"] = tools
    if system:
        params["system"] = system
    return params


def from_anthropic_message(message: anthropic.types.Message) -> Response:
    """A :class:`Response` from the SDK's ``Message``: text, tool calls, usage, stop reason."""
    texts, calls = [], []
    for block in message.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            calls.append(ToolCall(block.id, block.name, dict(block.input)))
    u = message.usage
    one_hour = u.cache_creation.ephemeral_1h_input_tokens if u.cache_creation else 0
    usage = Usage(input_tokens=u.input_tokens,
                  cache_creation_input_tokens=u.cache_creation_input_tokens or 0,
                  cache_read_input_tokens=u.cache_read_input_tokens or 0,
                  output_tokens=u.output_tokens,
                  cache_creation_1h_input_tokens=one_hour or 0)
    diagnostics = None
    reason = message.diagnostics.cache_miss_reason if message.diagnostics else None
    if reason is not None:  # null means "diagnosis pending": report nothing rather than a hit
        diagnostics = CacheDiagnostics(reason.type, getattr(reason, "cache_missed_input_tokens", 0))
    return Response("\n".join(texts), tuple(calls), usage, model=message.model,
                    stop_reason=message.stop_reason or "end_turn", diagnostics=diagnostics)


class AnthropicModel:
    """A :class:`~hango.models.base.Model` that calls ``client.messages.create``.

    Pass a ready ``client``, or ``api_key`` / ``base_url`` / ``max_retries`` to build one (the key
    defaults to ``ANTHROPIC_API_KEY``). ``name`` is used when a request leaves ``model`` empty.
    """

    provider = "anthropic"

    def __init__(self, name: str, client: anthropic.Anthropic | None = None, *,
                 api_key: str | None = None, base_url: str | None = None, max_retries: int = 2,
                 diagnostics: bool = False) -> None:
        self.name = name
        self.client = client or anthropic.Anthropic(api_key=api_key, base_url=base_url,
                                                    max_retries=max_retries)
        self.diagnostics = diagnostics
        self._previous_id: str | None = None

    def complete(self, request: Request) -> Response:
        params = to_anthropic_params(request, request.model or self.name)
        if self.diagnostics:
            params["diagnostics"] = {"previous_message_id": self._previous_id}
        message = self.client.messages.create(**params)
        self._previous_id = message.id
        return from_anthropic_message(message)
