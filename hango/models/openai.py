"""``OpenAIModel``: the :class:`~hango.models.base.Model` interface over Chat Completions.

The optional extra (``pip install 'hango[openai]'``), on the official ``openai`` SDK, for any
server that speaks Chat Completions with tools (OpenAI, Ollama, vLLM, llama.cpp, LM Studio);
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` choose it. The body is
:func:`hango.models.chat.chat_request`; usage is mapped from OpenAI's convention (the cached part
inside ``prompt_tokens``); every failure is a :class:`~hango.models.base.ModelError` naming the
endpoint. The mapping: docs/learning/11-memory-and-skills.md, Appendix D.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai

from hango.models.base import ModelError, Request, Response, ToolCall, Usage
from hango.models.chat import chat_request
from hango.settings import SettingsError

STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens",
                "function_call": "tool_use"}
MAX_DETAIL = 300  # characters of a server's error text kept in a ModelError


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return exc.response.text or exc.message


def usage_from(usage: Any, where: str) -> Usage:
    """hango's :class:`Usage` from a Chat Completions ``usage`` object (OpenAI's convention)."""
    if usage is None:
        raise ModelError(f"{where} answered with no usage: hango needs prompt_tokens and "
                         "completion_tokens to count the run (a server that streams must send "
                         "its usage; this one sent none)")
    prompt, completion = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        raise ModelError(f"{where} answered with a usage without integer prompt_tokens and "
                         f"completion_tokens ({_clip(repr(usage))})")
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    written = getattr(details, "cache_write_tokens", None) if details is not None else None
    written = written if isinstance(written, int) else 0
    if cached is None:  # e.g. vLLM without --enable-prompt-tokens-details: unknown, not 0
        return Usage(prompt - written, written, None, completion)
    if not isinstance(cached, int) or cached < 0 or written < 0 or cached + written > prompt:
        raise ModelError(f"{where} answered with a usage that does not add up: cached_tokens "
                         f"{cached!r} and cache_write_tokens {written} are parts of "
                         f"prompt_tokens {prompt}")
    return Usage(prompt - cached - written, written, cached, completion)


def _tool_call(call: Any, n: int, where: str) -> ToolCall:
    function = getattr(call, "function", None)
    name = getattr(function, "name", None)
    if getattr(call, "type", "function") != "function" or not isinstance(name, str) or not name:
        raise ModelError(f"{where} returned a malformed tool call (number {n}): no function "
                         f"name ({_clip(repr(call))})")
    raw = getattr(function, "arguments", None) or "{}"
    try:
        arguments = json.loads(raw)
    except (TypeError, ValueError):
        arguments = None
    if not isinstance(arguments, dict):
        raise ModelError(f"{where} returned a malformed tool call: the arguments of {name!r} "
                         f"are not a JSON object ({_clip(str(raw))})")
    return ToolCall(getattr(call, "id", None) or f"call_{n}", name, arguments)


def from_chat_completion(completion: Any, where: str) -> Response:
    """A :class:`Response` from the SDK's ``ChatCompletion``: text, tool calls, usage."""
    choices = getattr(completion, "choices", None)
    if not choices:
        raise ModelError(f"{where} answered without a choice: not a Chat Completions response "
                         f"({_clip(repr(completion))})")
    message = getattr(choices[0], "message", None)
    calls = tuple(_tool_call(c, n, where)
                  for n, c in enumerate(getattr(message, "tool_calls", None) or (), 1))
    text = getattr(message, "content", None) or ""
    reason = getattr(choices[0], "finish_reason", None) or "stop"
    return Response(text, calls, usage_from(getattr(completion, "usage", None), where),
                    model=getattr(completion, "model", "") or "",
                    stop_reason="tool_use" if calls else STOP_REASONS.get(reason, reason))


class OpenAIModel:
    """A :class:`~hango.models.base.Model` that calls ``client.chat.completions.create``.

    Pass a ready ``client``, or ``api_key`` / ``base_url`` / ``max_retries`` / ``timeout`` to
    build one (the SDK reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` for what is left out).
    ``name`` is used when a request leaves ``model`` empty.
    """

    provider = "openai"

    def __init__(self, name: str, client: openai.OpenAI | None = None, *,
                 api_key: str | None = None, base_url: str | None = None, max_retries: int = 2,
                 timeout: float = 120.0) -> None:
        self.name = name
        try:
            self.client = client or openai.OpenAI(api_key=api_key, base_url=base_url,
                                                  max_retries=max_retries, timeout=timeout)
        except openai.OpenAIError as exc:  # no key: say which variables choose the server
            raise ModelError(f"the model {name}: {exc} (OPENAI_API_KEY for OpenAI; any value "
                             "with OPENAI_BASE_URL for a local server)") from None

    @property
    def endpoint(self) -> str:
        return str(self.client.base_url).rstrip("/")

    def complete(self, request: Request) -> Response:
        model = request.model or self.name
        where = f"the model {model} at {self.endpoint}"
        params = chat_request(request, model)
        try:
            completion = self.client.chat.completions.create(**params)
        except openai.APIConnectionError as exc:  # down, refused, timed out
            cause = exc.__cause__ or exc
            raise ModelError(f"{where} cannot be reached ({type(exc).__name__}: "
                             f"{_clip(str(cause))}); is the server running?") from None
        except openai.APIStatusError as exc:
            raise ModelError(f"{where} answered HTTP {exc.status_code}: "
                             f"{_clip(_server_message(exc))}") from None
        except openai.OpenAIError as exc:
            raise ModelError(f"{where} answered what is not a Chat Completions response: "
                             f"{_clip(str(exc))}") from None
        if not hasattr(completion, "choices"):  # e.g. a 200 with an HTML page
            raise ModelError(f"{where} answered what is not a Chat Completions response: "
                             f"{_clip(str(completion))}")
        return from_chat_completion(completion, where)


LOCAL_KEY = "unused"  # local servers (Ollama, llama.cpp, vLLM) ignore the key; the SDK wants one


def from_setting(value: str) -> OpenAIModel:
    """The model of ``HANGO_MODEL=openai:<model>``, on the server of ``OPENAI_BASE_URL`` (the
    SDK's variable; OpenAI itself when unset) with ``OPENAI_API_KEY`` (optional for a local
    server). Ollama's model names have colons too: only the first one is the separator."""
    name = value.partition(":")[2].strip()
    if not name:
        raise SettingsError(f"HANGO_MODEL={value!r}: name the model after 'openai:', e.g. "
                            "openai:gpt-4.1-mini or openai:qwen2.5:7b")
    base_url = os.environ.get("OPENAI_BASE_URL") or None
    key = os.environ.get("OPENAI_API_KEY") or (LOCAL_KEY if base_url else None)
    if key is None:
        raise SettingsError(f"HANGO_MODEL={value}: set OPENAI_API_KEY for OpenAI, or "
                            "OPENAI_BASE_URL for a local server (Ollama: "
                            "http://localhost:11434/v1); or unset HANGO_MODEL for the simulator")
    return OpenAIModel(name, api_key=key, base_url=base_url)
