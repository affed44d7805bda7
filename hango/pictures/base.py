"""What every picture shares: the colours, a fixed style, and :class:`Picture` (its PNG and its
words)."""

from __future__ import annotations

import io
from typing import Any

BLUE, ORANGE, GREEN, RED, GREY, TEAL = "#4c78a8", "#f58518", "#54a24b", "#e45756", "#9d9d9d", "#72b7b2"
STYLE: Any = {"font.family": "DejaVu Sans", "svg.hashsalt": "hango", "figure.dpi": 100,
         "savefig.dpi": 100, "path.simplify": False}


class Picture:
    """A figure shown as a PNG; ``repr()`` is what it shows, in words."""

    def __init__(self, figure: Any, text: str) -> None:
        self.figure = figure
        self.text = text

    def png(self) -> bytes:
        import matplotlib as mpl

        out = io.BytesIO()
        with mpl.rc_context(STYLE):
            self.figure.savefig(out, format="png", bbox_inches="tight", metadata={"Software": None})
        return out.getvalue()

    def _repr_png_(self) -> bytes:
        return self.png()

    def __repr__(self) -> str:
        return self.text


def _figure(width: float, height: float, **kwargs: Any) -> tuple[Any, Any]:
    import matplotlib as mpl

    mpl.use("Agg", force=False)  # the lab's inline backend is Agg too; nothing opens a window
    import matplotlib.pyplot as plt

    with mpl.rc_context(STYLE):
        fig, axes = plt.subplots(figsize=(width, height), **kwargs)
    plt.close(fig)  # shown once, as the cell's value, not again by the inline backend
    return fig, axes


def _bare(ax: Any) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)


def _box(x: float, y: float, width: float, colour: str) -> Any:
    from matplotlib.patches import FancyBboxPatch

    return FancyBboxPatch((x, y - 0.34), width, 0.68, boxstyle="round,pad=0.02,rounding_size=0.1",
                          color=colour, linewidth=0)
