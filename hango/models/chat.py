"""``chat_request``: a :class:`~hango.models.base.Request` as a Chat Completions body.

The one renderer for this wire: ``OpenAIModel`` sends it and the simulator's automatic-prefix
regime prices it. This wire has no breakpoint, so the one rule: the system blocks up to the
request's system breakpoint are the **system message**; the blocks after it (memory) open the
**first user message**, which in every chat template read lands them after the tools
(docs/learning/11-memory-and-skills.md §4.6 says which). A tenant's cache-scope block
(:func:`~hango.models.base.cache_scope`) opens both messages: Mistral's templates start the
stream at the first user message, and that start must be the tenant's own too. Tool arguments go
out as canonical JSON (the same arguments are the same bytes).
"""

from __future__ import annotations

import json
from typing import Any

from hango.models.base import (
    NO_PARAMETERS,
    Message,
    Request,
    _blank,
    _content,
    cache_scope,
    check_breakpoints,
)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace variance: the same value, the same bytes."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _messages(msg: Message) -> list[dict[str, Any]]:
    if msg.role == "assistant":
        out: dict[str, Any] = {"role": "assistant",
                               "content": None if _blank(msg.text) else msg.text}
        if msg.tool_calls:
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name,
                                               "arguments": canonical_json(dict(c.arguments))}}
                                 for c in msg.tool_calls]
        return [out]
    rendered: list[dict[str, Any]] = [{"role": "tool", "tool_call_id": r.call_id,
                                       "content": r.content} for r in msg.tool_results]
    if not _blank(msg.text):
        rendered.append({"role": "user", "content": msg.text})
    return rendered


def split_system(request: Request) -> tuple[list[str], list[str]]:
    """The texts of the system message, and the texts that open the first user message: the
    blocks up to the system breakpoint, and the blocks after it (blank blocks are left out)."""
    at = request.system_breakpoint
    cut = len(request.system) if at is None else at + 1
    texts = [(i < cut, b.text) for i, b in enumerate(request.system) if not _blank(b.text)]
    return [t for stable, t in texts if stable], [t for stable, t in texts if not stable]


def chat_request(request: Request, model: str | None = None) -> dict[str, Any]:
    """The Chat Completions body for ``request`` (``chat.completions.create`` keyword arguments).

    Refuses what :func:`~hango.models.base.wire_request` refuses, with the same words: an empty
    message, a breakpoint index outside its tier.
    """
    check_breakpoints(request)
    for i, msg in enumerate(request.messages):
        _content(i, msg)  # the same refusal of an empty message as on the Messages API
    stable, after = split_system(request)
    messages: list[dict[str, Any]] = []
    if stable:
        messages.append({"role": "system", "content": "\n\n".join(stable)})
    rendered = [m for msg in request.messages for m in _messages(msg)]
    scope = cache_scope(request)
    if scope and stable:  # the scope opens the first user turn too (module docstring)
        after = [scope, *after]
    if after:
        opening = "\n\n".join(after)
        first = rendered[0] if rendered else None
        if first is not None and first["role"] == "user":
            rendered[0] = {**first, "content": f"{opening}\n\n{first['content']}"}
        else:  # the conversation opens with tool results: the context is a user turn before them
            rendered.insert(0, {"role": "user", "content": opening})
    messages += rendered
    body: dict[str, Any] = {"model": model or request.model, "messages": messages,
                            "max_tokens": request.max_tokens}
    if request.tools:
        body["tools"] = [{"type": "function",
                          "function": {"name": t.name, "description": t.description,
                                       "parameters": t.parameters or dict(NO_PARAMETERS)}}
                         for t in request.tools]
    return body
