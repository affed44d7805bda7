"""A request as people read it: one structure, one text. Every door that shows a prompt uses them.

:func:`request_view` turns a :class:`~hango.models.base.Request` (and the
:class:`~hango.models.base.Response` it got, if any) into plain JSON-able values: each system block
with its source, size and token estimate, where the cache breakpoints are, the messages, the
usage, and why the cache read nothing. :func:`render` turns that structure into text: the table
the notebooks print (``show_request``), or with ``width=None`` every block in full (what an
opt-in trace carries). Token counts are what the simulator bills (``ceil(bytes / 4)`` plus 3 per
block), not a provider's tokenizer; the tools line counts each tool's wire overhead too.
"""

from __future__ import annotations

import json
from typing import Any

from hango.models.base import Request, Response, _blank
from hango.models.simulated import positions

# Why a call read nothing from the cache, in words. The keys are the provider's cache-diagnostics
# reasons (the simulator gives the same ones), plus two for calls that carry no diagnostics.
MISS_REASONS: dict[str, str] = {
    "previous_message_not_found": "nothing to read yet: the first call with this prefix writes it",
    "below_minimum": "the prefix up to the breakpoint is below the model's minimum cacheable "
                     "length, so nothing is cached (make the stable part longer)",
    "system_changed": "this prompt leaves the previous call's cached prefix at a system block "
                      "(one changed or was added): only what comes before it is read",
    "tools_changed": "the tool definitions differ from the previous call's: nothing after them "
                     "is read",
    "messages_changed": "this prompt leaves the previous call's cached prefix at a message: "
                        "only what comes before it is read",
    "model_changed": "another model: each model has a cache of its own",
    "expired": "the cached prefix outlived its TTL with no read to refresh it",
    "outside_lookback": "the prefix is cached, but more than 20 blocks before every breakpoint",
    "unavailable": "the provider gave no reason",
    "no_breakpoint": "the request marks no cache breakpoint, so nothing is cached",
    "unknown": "the provider reports no cache diagnostics for this call",
}


def miss_legend() -> str:
    """Every reason of :data:`MISS_REASONS` with its words, one per line (the dashboard's key)."""
    return "\n".join(f"{reason}: {why}" for reason, why in MISS_REASONS.items())


def miss_reason(request: Request, response: Response) -> str | None:
    """Why ``response`` did not read (all of) its prefix from the cache; ``None`` on a full hit.

    The provider's diagnostics when it gave them; for a call that read nothing without any,
    ``no_breakpoint`` (caching was not asked for) or ``unknown``. A key of :data:`MISS_REASONS`.
    """
    diagnostics = response.diagnostics
    if diagnostics is not None and diagnostics.miss_reason is not None:
        return diagnostics.miss_reason
    usage = response.usage
    read = usage.cache_read_input_tokens  # None: the provider did not say, so neither can we
    if read is None or read or not usage.total_input_tokens or diagnostics is not None:
        return None
    return "unknown" if request.breakpoints else "no_breakpoint"


def system_tokens(request: Request) -> list[int]:
    """Each system block's tokens as the provider is charged for them (the simulator's count):
    its text, ``ceil(bytes / 4)``, plus the 3 tokens every block costs; 0 for a blank block,
    which is not sent. The table and the notebooks' bars print these numbers."""
    sent = iter(p.tokens for p in positions(request) if p.tier == "system")
    return [0 if _blank(block.text) else next(sent) for block in request.system]


def request_view(request: Request, response: Response | None = None) -> dict[str, Any]:
    """The request (and its answer) as plain values: dicts, lists, strings and numbers.

    ``system[i]`` has ``index``, ``source``, ``bytes``, ``tokens``, ``text`` and ``breakpoint``
    (the TTL of a marker on that block, or ``None``); ``system_breakpoint`` is the last marked
    system block, the end of the cached prefix. With a response: ``response``, ``usage`` and
    ``miss_reason`` with its ``miss`` explanation (:data:`MISS_REASONS`).
    """
    marks: dict[tuple[str, int], str] = {}
    for b in request.breakpoints:
        key = (b.tier, b.index)
        marks[key] = "1h" if "1h" in (b.ttl, marks.get(key)) else b.ttl
    view: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "tools": [{"name": t.name, "breakpoint": marks.get(("tools", i))}
                  for i, t in enumerate(request.tools)],
        "tools_tokens": sum(p.tokens for p in positions(request) if p.tier == "tools"),
        "system": [{"index": i, "source": b.source, "bytes": len(b.text.encode("utf-8")),
                    "tokens": tokens, "breakpoint": marks.get(("system", i)),
                    "text": b.text}
                   for i, (b, tokens) in enumerate(zip(request.system, system_tokens(request),
                                                       strict=True))],
        "system_breakpoint": request.system_breakpoint,
        "messages": [{"index": i, "role": m.role, "text": m.text,
                      "tool_calls": [{"id": c.id, "name": c.name, "arguments": dict(c.arguments)}
                                     for c in m.tool_calls],
                      "tool_results": [{"call_id": r.call_id, "content": r.content,
                                        "is_error": r.is_error} for r in m.tool_results],
                      "breakpoint": marks.get(("messages", i))}
                     for i, m in enumerate(request.messages)],
        "breakpoints": [{"tier": b.tier, "index": b.index, "ttl": b.ttl}
                        for b in request.breakpoints],
    }
    if response is not None:
        u = response.usage
        reason = miss_reason(request, response)
        view["response"] = {
            "id": response.id, "model": response.model, "stop_reason": response.stop_reason,
            "text": response.text,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": dict(c.arguments)}
                           for c in response.tool_calls]}
        view["usage"] = {"input_tokens": u.input_tokens,
                         "cache_creation_input_tokens": u.cache_creation_input_tokens,
                         "cache_read_input_tokens": u.cache_read_input_tokens,
                         "output_tokens": u.output_tokens, "read_ratio": u.read_ratio}
        view["miss_reason"] = reason
        view["miss"] = MISS_REASONS.get(reason, reason) if reason is not None else None
    return view


def _preview(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _head(block: dict[str, Any]) -> str:
    return f"[{block['index']}] {block['source']:<22} ~{block['tokens']:>5} tok"


def _mark(block: dict[str, Any], system_breakpoint: int | None) -> str:
    return "  <- cache breakpoint" if block["index"] == system_breakpoint else ""


def _call_lines(calls: list[dict[str, Any]]) -> list[str]:
    return [f"calls {c['name']} {json.dumps(c['arguments'], sort_keys=True)} (id {c['id']})"
            for c in calls]


def _message_lines(message: dict[str, Any]) -> list[str]:
    head = f"  [{message['index']}] {message['role']}"
    lines = [f"{head}: {message['text']}"] if message["text"].strip() else []
    lines += [f"{head} {line}" for line in _call_lines(message["tool_calls"])]
    for r in message["tool_results"]:
        lines.append(f"{head} result{' (error)' if r['is_error'] else ''} for {r['call_id']}: "
                     f"{r['content']}")
    return [line.replace("\n", "\n      ") for line in lines]  # a text's next lines indented


def _count(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def _ratio(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f}"


def render_reply(view: dict[str, Any]) -> str:
    """What the model answered (a view with a response): its text, then each tool call."""
    reply = view["response"]
    lines = [reply["text"]] if reply["text"].strip() else []
    return "\n".join([*lines, *_call_lines(reply["tool_calls"])])


def render(view: dict[str, Any], width: int | None = 60) -> str:
    """The view as text: tools, system blocks (the breakpoint marked), messages, usage.

    ``width`` cuts each block to a one-line preview (the table ``show_request`` prints);
    ``None`` prints every block and message in full.
    """
    lines = [f"tools: {', '.join(t['name'] for t in view['tools']) or '(none)'}  "
             f"(~{view['tools_tokens']} tokens)",
             "system blocks (tokens: the text's bytes / 4, plus 3 per block):"]
    cut = view["system_breakpoint"]
    for block in view["system"]:
        if width is None:
            lines.append(f"  {_head(block)}{_mark(block, cut)}")
            lines += ["      " + line for line in block["text"].splitlines()]
        else:
            lines.append(f"  {_head(block)}  {_preview(block['text'], width)}{_mark(block, cut)}")
    lines.append(f"messages: {len(view['messages'])}; breakpoints: "
                 + ", ".join(f"{b['tier']}[{b['index']}]" for b in view["breakpoints"]))
    if width is None:
        for message in view["messages"]:
            lines += _message_lines(message)
    usage = view.get("usage")
    if usage is not None:
        lines.append(f"usage: input {usage['input_tokens']}, cache write "
                     f"{usage['cache_creation_input_tokens']}, cache read "
                     f"{_count(usage['cache_read_input_tokens'])}, output "
                     f"{usage['output_tokens']}; read ratio {_ratio(usage['read_ratio'])}")
        if view["miss_reason"] is not None:
            lines.append(f"cache: {view['miss_reason']}: {view['miss']}")
    return "\n".join(lines)
