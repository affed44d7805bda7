"""The prompt in the trace, opt-in: what a chat span and the run span carry when capture is on.

Off by default; :data:`~hango.telemetry.names.CAPTURE_CONTENT_ENV` switches it, the variable the
OpenTelemetry GenAI instrumentations read. A chat span then gets, from one
:func:`~hango.models.view.request_view`:

* the conventions' ``gen_ai.system_instructions`` (one text part per system block, with its
  ``source`` and, on a marked block, its ``cache_breakpoint`` TTL), ``gen_ai.input.messages``
  and ``gen_ai.output.messages``, as JSON strings;
* ``input.value``: :func:`~hango.models.view.render` in full, the people's text with every block
  headed by its source and the breakpoint marked (Phoenix's and Langfuse's input pane), and
  ``output.value``: the answer.

Bounded: all of a span's captured attributes together stay under ``max_bytes``
(:data:`~hango.telemetry.names.CONTENT_MAX_BYTES` by default). The texts share it fairly: a text
shorter than its share stays whole, longer ones are cut to the same length with a marker saying
how much was cut; if that is not enough, the oldest messages are left out, and counted.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Mapping
from typing import Any

from hango.models.base import Request, Response
from hango.models.view import render, render_reply, request_view
from hango.telemetry.names import (
    ATTR_CONTENT_OMITTED_MESSAGES,
    CAPTURE_CONTENT_ENV,
    CAPTURE_OFF,
    CAPTURE_ON,
    GEN_AI_INPUT_MESSAGES,
    GEN_AI_OUTPUT_MESSAGES,
    GEN_AI_SYSTEM_INSTRUCTIONS,
    INPUT_MIME_TYPE,
    INPUT_VALUE,
    OUTPUT_MIME_TYPE,
    OUTPUT_VALUE,
)


def capture_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :data:`CAPTURE_CONTENT_ENV` asks for content on spans; a value it does not know
    is refused, naming the variable and the values it takes."""
    raw = (os.environ if environ is None else environ).get(CAPTURE_CONTENT_ENV, "")
    value = raw.strip().upper()
    if value in CAPTURE_ON:
        return True
    if value in CAPTURE_OFF:
        return False
    raise ValueError(f"{CAPTURE_CONTENT_ENV}={raw!r}: expected one of "
                     f"{', '.join(v for v in (*CAPTURE_OFF, *CAPTURE_ON) if v)} "
                     "(case-insensitive; unset means NO_CONTENT)")


def _cut(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", errors="ignore")  # never half a character
    return f"{kept}… [cut: {len(data) - len(kept.encode('utf-8'))} of {len(data)} bytes]"


def fair_share(lengths: list[int], budget: int) -> int | None:
    """The longest a text may stay so that all of them fit ``budget``; ``None``: all fit whole.

    Texts shorter than their share stay whole and leave the rest to the longer ones."""
    if sum(lengths) <= budget:
        return None
    remaining, left = budget, len(lengths)
    for length in sorted(lengths):
        share = remaining // left
        if length > share:
            return share
        remaining, left = remaining - length, left - 1
    return remaining  # pragma: no cover - the sum exceeded the budget, so some text is longer


def clip_view(view: dict[str, Any], budget: int) -> None:
    """Cut the view's texts (in place) so that together they fit ``budget`` bytes."""
    texts: list[tuple[dict[str, Any], str]] = [(b, "text") for b in view["system"]]
    for m in view["messages"]:
        texts.append((m, "text"))
        texts += [(r, "content") for r in m["tool_results"]]
        texts += [(c, "arguments") for c in m["tool_calls"]]
    if "response" in view:
        texts.append((view["response"], "text"))
        texts += [(c, "arguments") for c in view["response"]["tool_calls"]]
    for holder, key in texts:  # arguments are measured, and cut, as their JSON text
        if key == "arguments":
            holder[key] = json.dumps(holder[key], sort_keys=True, ensure_ascii=False)
    share = fair_share([len(h[k].encode("utf-8")) for h, k in texts], budget)
    for holder, key in texts:
        if share is not None:
            holder[key] = _cut(holder[key], share)
        if key == "arguments":
            with contextlib.suppress(ValueError):  # cut: it stays the (marked) text
                holder[key] = json.loads(holder[key])


def _parts(m: dict[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "content": m["text"]}] if m["text"] else []
    return parts + [{"type": "tool_call", "id": c["id"], "name": c["name"],
                     "arguments": c["arguments"]} for c in m["tool_calls"]]


def _messages(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The conventions' input messages: tool results as role ``tool``, then any text."""
    out: list[dict[str, Any]] = []
    for m in view["messages"]:
        if m["tool_results"]:
            out.append({"role": "tool", "parts": [
                {"type": "tool_call_response", "id": r["call_id"], "response": r["content"],
                 **({"is_error": True} if r["is_error"] else {})} for r in m["tool_results"]]})
        if m["text"] or m["tool_calls"]:
            out.append({"role": m["role"], "parts": _parts(m)})
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _attributes(view: dict[str, Any]) -> dict[str, str]:
    system = [{"type": "text", "content": b["text"], "source": b["source"],
               **({"cache_breakpoint": b["breakpoint"]} if b["breakpoint"] else {})}
              for b in view["system"]]
    reply = view["response"]
    return {
        GEN_AI_SYSTEM_INSTRUCTIONS: _json(system),
        GEN_AI_INPUT_MESSAGES: _json(_messages(view)),
        GEN_AI_OUTPUT_MESSAGES: _json([{"role": "assistant", "parts": _parts(reply),
                                        "finish_reason": reply["stop_reason"]}]),
        INPUT_VALUE: render(view, width=None), INPUT_MIME_TYPE: "text/plain",
        OUTPUT_VALUE: render_reply(view), OUTPUT_MIME_TYPE: "text/plain",
    }


def size(attributes: Mapping[str, Any]) -> int:
    """Bytes of the string values (what the cap counts)."""
    return sum(len(v.encode("utf-8")) for v in attributes.values() if isinstance(v, str))


def chat_content(request: Request, response: Response, max_bytes: int) -> dict[str, Any]:
    """The content attributes of one chat span, at most ``max_bytes`` of text in all."""
    full = request_view(request, response)
    # Each text appears twice (the conventions' JSON and the rendered text): half the cap, less
    # an eighth for the JSON keys, sources and headings around them.
    budget, omitted = max(0, max_bytes // 2 - max_bytes // 8), 0
    while True:
        view = copy.deepcopy(full)
        view["messages"] = view["messages"][omitted:]
        clip_view(view, budget)
        attributes: dict[str, Any] = _attributes(view)
        if size(attributes) <= max_bytes:
            break
        if omitted < len(full["messages"]) - 1:  # the oldest messages go first, the last stays
            omitted += 1
        elif budget:
            budget //= 2  # texts that render larger than they are (many short lines)
        else:  # the headings alone are over the cap: say so rather than exceed it
            return {INPUT_VALUE: f"(the prompt is over the {max_bytes}-byte cap of captured "
                                 "content: left out)", INPUT_MIME_TYPE: "text/plain"}
    if omitted:
        attributes[ATTR_CONTENT_OMITTED_MESSAGES] = omitted
    return attributes


def run_content(prompt: str | None, output: str | None, max_bytes: int) -> dict[str, str]:
    """The run span's input (the user's message) and output (the final answer), bounded."""
    out: dict[str, str] = {}
    if prompt is not None:
        out |= {INPUT_VALUE: _cut(prompt, max_bytes // 2), INPUT_MIME_TYPE: "text/plain"}
    if output is not None:
        out |= {OUTPUT_VALUE: _cut(output, max_bytes // 2), OUTPUT_MIME_TYPE: "text/plain"}
    return out
