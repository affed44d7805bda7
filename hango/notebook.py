"""Readable views for the notebooks: a request as a table of blocks, usage per call.

Everything here prints plain, deterministic text (no ids, no clocks), so nbval can compare the
committed outputs of the course with what the code produces today.
"""

from __future__ import annotations

from collections.abc import Sequence

from hango.models.base import Request, Response
from hango.models.simulated import count_tokens, positions


def _preview(text: str, width: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def show_request(request: Request, width: int = 60) -> None:
    """Print the tools, the system blocks (with the breakpoint marked) and the messages."""
    tool_tokens = sum(p.tokens for p in positions(request) if p.tier == "tools")
    print(f"tools: {', '.join(t.name for t in request.tools) or '(none)'}  "
          f"(~{tool_tokens} tokens)")
    print("system blocks:")
    breakpoint_at = request.system_breakpoint
    for i, block in enumerate(request.system):
        mark = "  <- cache breakpoint" if i == breakpoint_at else ""
        print(f"  [{i}] {block.source:<22} ~{count_tokens(block.text):>5} tok  "
              f"{_preview(block.text, width)}{mark}")
    print(f"messages: {len(request.messages)}; breakpoints: "
          + ", ".join(f"{b.tier}[{b.index}]" for b in request.breakpoints))


def show_index(request: Request) -> None:
    """Print the skills index block exactly as the model sees it."""
    for block in request.system:
        if block.source == "skills":
            print(block.text)
            return
    print("(no skills index in this request)")


def usage_rows(responses: Sequence[Response]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for i, response in enumerate(responses, 1):
        u = response.usage
        reason = response.diagnostics.miss_reason if response.diagnostics else None
        rows.append({"call": i, "input": u.input_tokens, "cache_write": u.cache_creation_input_tokens,
                     "cache_read": u.cache_read_input_tokens, "read_ratio": round(u.read_ratio, 3),
                     "miss_reason": reason or "-"})
    return rows


def show_usage(responses: Sequence[Response]) -> None:
    """Print one line per model call: uncached input, cache writes, cache reads, read ratio."""
    print(f"{'call':>4} {'input':>7} {'write':>7} {'read':>7} {'ratio':>6}  why not read")
    for row in usage_rows(responses):
        print(f"{row['call']:>4} {row['input']:>7} {row['cache_write']:>7} "
              f"{row['cache_read']:>7} {row['read_ratio']:>6.3f}  {row['miss_reason']}")
