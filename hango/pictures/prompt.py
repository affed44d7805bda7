"""A request to scale (notebooks 00, 02, 03) and a run's spans as a tree (08)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hango.models.base import Request, _blank
from hango.models.simulated import positions
from hango.pictures.base import BLUE, GREEN, ORANGE, TEAL, Picture, _figure


def draw_request(request: Request, title: str = "") -> Picture:
    """The request as the provider reads it, left to right, widths in tokens: the tools, each
    system block, the messages; the cache breakpoint as a line. Everything left of the line is
    the cached prefix; what is right of it may change without invalidating it."""
    segments: list[tuple[str, int]] = []
    sources = iter(b.source for b in request.system if not _blank(b.text))  # as sent, in order
    for p in positions(request):
        label = next(sources) if p.tier == "system" else p.tier
        if segments and p.tier != "system" and segments[-1][0] == label:
            segments[-1] = (label, segments[-1][1] + p.tokens)
        else:
            segments.append((label, p.tokens))
    cut = request.system_breakpoint
    cut_after = None if cut is None else 1 + cut + (1 if request.tools else 0)
    total = sum(tokens for _, tokens in segments)
    fig, ax = _figure(9, 2.6)
    left, outside = 0, 0
    for i, (label, tokens) in enumerate(segments):
        cached = cut_after is not None and i < cut_after
        ax.barh(0, tokens, left=left, color=BLUE if cached else ORANGE, edgecolor="white", height=0.5)
        text = f"{label}\n{tokens} tok"
        if tokens >= 0.12 * total:
            ax.text(left + tokens / 2, 0, text, ha="center", va="center", fontsize=8, color="white")
        else:  # too narrow to hold its label: write it above or below, with a leader line
            y = (0.55 + 0.38 * (outside // 2)) * (1 if outside % 2 == 0 else -1)
            ax.annotate(text, (left + tokens / 2, 0.25 if y > 0 else -0.25), (left + tokens / 2, y),
                        ha="center", va="center", fontsize=8,
                        arrowprops={"arrowstyle": "-", "color": "grey"})
            outside += 1
        left += tokens
        if cut_after is not None and i == cut_after - 1:
            ax.axvline(left, color="black", linestyle="--", linewidth=1.5)
            ax.text(left, -1.35, "cache breakpoint ", fontsize=8, ha="right", va="bottom")
    ax.set_ylim(-1.4, 1.4)
    ax.set_xlim(0, left)
    ax.set_yticks([])
    ax.set_xlabel("tokens, in the order the provider reads them (blue: cached prefix)")
    ax.set_title(title or "The request, left to right", fontsize=10)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    prefix = sum(t for i, (_, t) in enumerate(segments) if cut_after is not None and i < cut_after)
    parts = ", ".join(f"{label} {tokens}" for label, tokens in segments)
    return Picture(fig, f"picture: {title or 'the request'}: {total} tokens, {prefix} in the "
                        f"cached prefix ({parts})")


def draw_span_tree(spans: Sequence[Any], title: str = "") -> Picture:
    """A run's spans as a tree of boxes: each row one span, indented under its parent, in the
    order they started. Drawn from structure, not timing, so the picture is the same every run."""
    from matplotlib.patches import Rectangle

    by_id = {s.context.span_id: s for s in spans}
    children: dict[int | None, list[Any]] = {}
    for s in sorted(spans, key=lambda s: s.start_time or 0):
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in by_id else None
        children.setdefault(parent, []).append(s)
    rows: list[tuple[int, Any]] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in children.get(parent, []):
            rows.append((depth, span))
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    fig, ax = _figure(9, 0.32 * len(rows) + 0.6)
    palette = {"agent.run": BLUE, "agent.before_run": TEAL, "chat": ORANGE, "execute_tool": GREEN}
    for row, (depth, span) in enumerate(rows):
        colour = next((c for prefix, c in palette.items() if span.name.startswith(prefix)), "#b279a2")
        ax.add_patch(Rectangle((depth * 0.6, -row - 0.4), 6.0 - depth * 0.6, 0.8, color=colour, alpha=0.85))
        events = len(span.events)
        ax.text(depth * 0.6 + 0.1, -row, span.name + (f"   ({events} event{'s' * (events != 1)})"
                                                    if events else ""),
                va="center", fontsize=8, color="white")
    ax.set_xlim(0, 6.2)
    ax.set_ylim(-len(rows) + 0.4, 0.6)
    ax.axis("off")
    ax.set_title(title or "The spans of one run (indented under their parent)", fontsize=10)
    fig.tight_layout()
    events = sum(len(s.events) for _, s in rows)
    return Picture(fig, f"picture: {title or 'the spans of one run'}: {len(rows)} spans, "
                        f"{events} events, {max((d for d, _ in rows), default=0) + 1} levels deep")
