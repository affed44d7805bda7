"""``chat_request``: a :class:`~hango.models.base.Request` as a Chat Completions body.

The one renderer for this wire, as :func:`~hango.models.base.wire_request` is for the Messages
API: ``OpenAIModel`` sends its result and the simulator's automatic-prefix regime prices its
result, so the two agree on every byte.

This wire has no cache breakpoint to place. The server's chat template turns the body into one
token stream, and an automatic prefix cache reuses only the longest unchanged start of that
stream. Templates disagree on where the tool definitions go: Qwen2.5/Qwen3 put them at the end
of the system message, Llama 3.x at the start of the first message after it, Mistral before the
last user message. So anything inside the system message may sit *before* the tools, and an edit
there loses them. Hence the one rule of this renderer:

- the system blocks up to the request's system breakpoint (base prompt, skills index) are the
  **system message**;
- the blocks after it (memory) open the **first user message**, before the user's own text;
- a tenant's cache-scope block (the request's first, :func:`~hango.models.base.cache_scope`)
  opens both: Mistral's templates put the system text before the *last* user message, so the
  stream starts with the first user message, and that start must be the tenant's own too.

In every template above that lands memory after the tools, the base prompt and the skills
index. It is text of the first user turn, not a message of its own: Mistral's templates refuse
two user messages in a row and newer Qwen ones a second system message, while Ollama merges both
into one anyway (docs/learning/11-memory-and-skills.md, "Any model" says which templates were
read). A request without a system breakpoint keeps every block in the system message.

Tool calls go out as ``tool_calls`` with their arguments as canonical JSON text (sorted keys:
the same arguments are the same bytes, or the cache misses); tool results as ``tool`` messages
before the user's text of the same turn.
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
