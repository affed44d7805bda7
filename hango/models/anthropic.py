"""``AnthropicModel``: the :class:`~hango.models.base.Model` interface over the real Messages API.

The optional extra (``pip install hango[anthropic]``); nothing else imports this module. A thin
translation: the body is :func:`hango.models.base.wire_request`, the one renderer the simulator
prices too, so the two agree on every byte and refuse the same requests
(:class:`~hango.models.base.InvalidRequest`) before anything is sent. Usage comes back as
:class:`~hango.models.base.Usage`. The wire mapping, field by field:
docs/learning/11-memory-and-skills.md, Appendix D.
"""

from __future__ import annotations

from typing import Any

import anthropic

from hango.models.base import (
    CacheDiagnostics,
    Request,
    Response,
    ToolCall,
    Usage,
    wire_request,
)


def to_anthropic_params(request: Request, model: str | None = None) -> dict[str, Any]:
    """The ``messages.create`` keyword arguments for ``request``: :func:`wire_request` itself.

    The simulator prices the same function's output, so what is sent is what was priced.
    """
    return wire_request(request, model)


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
                    stop_reason=message.stop_reason or "end_turn", diagnostics=diagnostics,
                    id=message.id)


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
