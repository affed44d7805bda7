"""Where things run and how they went: tenants and namespaces (07), a proposal's states (09),
the pace of memory edits (06)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hango.pictures.base import BLUE, GREEN, GREY, ORANGE, RED, TEAL, Picture, _bare, _figure


def draw_tenants(db: Any, tenants: Sequence[str]) -> Picture:
    """Each tenant a box; in it each agent's namespace ``{tenant, agent}`` with its files, the
    memory and skills it loads marked; an arrow from an agent to each subagent it may call."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    from hango.agents import list_agents, load_agent
    from hango.fs.backend import PostgresBackend

    layout = []
    for tenant in tenants:
        agents = []
        for agent in list_agents(db, tenant):
            config = load_agent(db, tenant, agent)
            files = PostgresBackend(db, tenant, agent).glob("/**")
            agents.append((agent, files, list(config.subagents) if config else [],
                           list(config.tools) if config else []))
        layout.append((tenant, agents))
    width = max(len(a) for _, a in layout) * 3.6 + 0.4
    fig, ax = _figure(min(12.0, 1.1 + width * 0.95), 2.2 * len(layout) + 0.6)
    where: dict[tuple[str, str], tuple[float, float]] = {}
    for row, (tenant, agents) in enumerate(layout):
        top = -row * 2.4
        ax.add_patch(FancyBboxPatch((0, top - 2.05), width, 2.0, boxstyle="round,pad=0.02",
                                    facecolor="#f4f4f4", edgecolor=GREY))
        ax.text(0.15, top - 0.2, f"tenant {tenant}  (row-level security: its rows only)",
                fontsize=8.5, weight="bold", va="center")
        for col, (agent, files, _, tools) in enumerate(agents):
            x = 0.3 + col * 3.6
            ax.add_patch(FancyBboxPatch((x, top - 1.9), 3.2, 1.45, boxstyle="round,pad=0.02",
                                        facecolor="white", edgecolor=BLUE))
            ax.text(x + 0.1, top - 0.62, f"{{{tenant}, {agent}}}", fontsize=8, color=BLUE,
                    weight="bold", va="center")
            for i, path in enumerate(files[:3]):
                colour = ORANGE if path.startswith("/memories/") else GREEN if \
                    path.startswith("/skills/") else "black"
                ax.text(x + 0.15, top - 0.92 - 0.24 * i, path, fontsize=7, color=colour,
                        family="DejaVu Sans Mono", va="center")
            if len(files) > 3:
                ax.text(x + 0.15, top - 1.62, f"… {len(files) - 3} more", fontsize=7)
            if not files:
                ax.text(x + 0.15, top - 0.92, "(no files)", fontsize=7, color=GREY)
            ax.text(x + 0.15, top - 1.78, "tools: " + ", ".join(tools), fontsize=7, va="center",
                    color="#666666")
            where[tenant, agent] = (x, top)
    for tenant, agents in layout:
        for agent, _, subagents, _ in agents:
            for sub in subagents:
                if (tenant, sub) in where:
                    (x0, y0), (x1, y1) = where[tenant, agent], where[tenant, sub]
                    ax.add_patch(FancyArrowPatch((x0 + 3.2, y0 - 0.6), (x1, y1 - 0.6),
                                                 arrowstyle="-|>", mutation_scale=12, color=TEAL))
                    ax.text((x0 + 3.2 + x1) / 2, y0 - 0.45, "task", fontsize=7.5, color=TEAL,
                            ha="center")
    ax.text(0, -2.4 * len(layout) + 0.15, "orange: memory it loads (/memories/), green: its skills "
            "(/skills/); a task arrow carries only the subagent's answer back", fontsize=7.5)
    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(-2.4 * len(layout), 0.1)
    _bare(ax)
    ax.set_title("Tenants, agents and their namespaces", fontsize=10)
    fig.tight_layout()
    said = "; ".join(f"{t}: " + ", ".join(f"{a} ({len(f)} files{', task -> ' + '/'.join(s) if s else ''})"
                                         for a, f, s, _ in agents) for t, agents in layout)
    return Picture(fig, f"picture: {said}")


# --- 09: a proposal's states ---------------------------------------------------------------------------


def draw_proposals(runs: Sequence[Mapping[str, Any]], proposals: Sequence[Mapping[str, Any]]) -> Picture:
    """The states a run and its proposal go through (running, interrupted, decided, resumed),
    with the runs of this notebook on the arrows they took."""
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    by_run = {p["run_id"]: p for p in proposals}
    edges: dict[str, list[str]] = {k: [] for k in ("done", "interrupted", "approved", "edited",
                                                   "rejected", "pending", "resumed")}
    for run in runs:
        rid, proposal = run["run_id"], by_run.get(run["run_id"])
        if proposal is None:
            edges["done"].append(rid)
            continue
        edges["interrupted"].append(rid)
        decided = proposal["status"]
        if decided == "pending":
            edges["pending"].append(rid)
        else:
            edges["edited" if proposal.get("edited") else decided].append(rid)
            if run.get("resumed") or run["status"] == "done":
                edges["resumed"].append(rid)
    states = {"run": (0.9, 3.0), "done": (0.9, 1.0), "interrupted": (3.6, 3.0),
              "approved": (6.3, 4.0), "rejected": (6.3, 2.0), "resumed": (9.1, 3.0)}
    words = {"run": "a run starts", "done": "done\n(no proposal)",
             "interrupted": "interrupted\n(a proposal waits)",
             "approved": "approved\n(written at its\nbase version)",
             "rejected": "rejected\n(nothing written)",
             "resumed": "resumed, then done\n(the agent reads\nthe decision)"}
    fig, ax = _figure(12, 4.8)
    boxes = {}
    for name, (x, y) in states.items():
        colour = {"interrupted": ORANGE, "approved": GREEN, "rejected": RED}.get(name, BLUE)
        boxes[name] = FancyBboxPatch((x - 0.8, y - 0.45), 1.6, 0.9, boxstyle="round,pad=0.05",
                                     facecolor=colour, edgecolor="none", alpha=0.9)
        ax.add_patch(boxes[name])
        ax.text(x, y, words[name], ha="center", va="center", fontsize=8, color="white")

    def arrow(a: str, b: str, ids: list[str], label: str, at: tuple[float, float], ha: str,
              va: str) -> None:
        (x0, y0), (x1, y1) = states[a], states[b]
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), patchA=boxes[a], patchB=boxes[b],
                                     arrowstyle="-|>", mutation_scale=14,
                                     color="black" if ids else GREY, linewidth=1.6 if ids else 0.8))
        runs_said = ", ".join(ids[:3]) + (f" +{len(ids) - 3}" if len(ids) > 3 else "")
        ax.text((x0 + x1) / 2 + at[0], (y0 + y1) / 2 + at[1],
                f"{label}: {len(ids)}" + (f"\n{runs_said}" if ids else ""),
                ha=ha, va=va, fontsize=7.5)

    arrow("run", "done", edges["done"], "no reserved write", (0.12, 0), "left", "center")
    arrow("run", "interrupted", edges["interrupted"], "proposes", (0, 0.5), "center", "bottom")
    arrow("interrupted", "approved", edges["approved"] + edges["edited"],
          f"approve ({len(edges['edited'])} edited)", (-0.15, 0.12), "right", "bottom")
    arrow("interrupted", "rejected", edges["rejected"], "reject", (-0.15, -0.12), "right", "top")
    arrow("approved", "resumed", [r for r in edges["resumed"] if r not in edges["rejected"]], "resume",
          (0.15, 0.12), "left", "bottom")
    arrow("rejected", "resumed", [r for r in edges["resumed"] if r in edges["rejected"]], "resume",
          (0.15, -0.12), "left", "top")
    if edges["pending"]:
        ax.text(3.6, 2.3, f"still waiting: {', '.join(edges['pending'])}", ha="center", fontsize=7.5,
                color=ORANGE)
    ax.set_xlim(-0.1, 10.1)
    ax.set_ylim(0.4, 4.8)
    _bare(ax)
    ax.set_title("A run, its proposal and its decision: the states, with this notebook's runs",
                 fontsize=10)
    fig.tight_layout()
    counts = {k: len(v) for k, v in edges.items()}
    return Picture(fig, "picture: " + ", ".join(f"{k} {n}" for k, n in counts.items()))


# --- 06: the pace of memory edits -----------------------------------------------------------------------


def draw_pace(grid: Mapping[tuple[float, str, str], Mapping[str, Sequence[Any]]],
              paces: Sequence[float], edits_every: int = 4) -> Picture:
    """Read ratio (left) and cost (right) of each stack against the time between two memory
    edits, on a log axis in words. A series both readings of the refresh rule agree on is one
    line; where they differ, one line each. One legend for both panels."""
    seconds = [edits_every * p for p in paces]
    series: list[tuple[str, str, str, str, Any, str]] = []  # label, stack, ttl, reading, style
    for stack, ttl, colour in (("default", "1h", BLUE), ("default", "5m", ORANGE),
                               ("memory-before-cache", "1h", RED), ("baseline", "1h", GREY)):
        both = [[grid[p, r, ttl][stack][:2] for p in paces] for r in ("all", "longest")]
        name = {"default": "memory after the breakpoint (default)",
                "memory-before-cache": "memory before the breakpoint",
                "baseline": "baseline: no memory, no skills"}[stack]
        prefix = {"1h": "1-hour prefix", "5m": "5-minute prefix"}[ttl]
        if both[0] == both[1]:
            series.append((f"{name}, {prefix}", stack, ttl, "longest", colour, "-"))
        else:
            series.append((f"{name}, {prefix}, refresh=all", stack, ttl, "all", colour, "--"))
            series.append((f"{name}, {prefix}, refresh=longest", stack, ttl, "longest", colour, ":"))
    fig, (left, right) = _figure(12, 4.6, ncols=2)
    for label, stack, ttl, reading, colour, line in series:
        values = [grid[p, reading, ttl][stack] for p in paces]
        for ax, k in ((left, 0), (right, 1)):
            ax.plot(seconds, [v[k] for v in values], line, color=colour, marker="o", markersize=4,
                    linewidth=2, label=label)
    ticks = {40: "40 s", 120: "2 min", 360: "6 min", 1600: "27 min"}
    for ax, title in ((left, "share of the prompt read from the cache"),
                      (right, "cost of the ten calls ($)")):
        ax.set_xscale("log")
        ax.set_xticks(seconds, [ticks.get(int(s), f"{s:g} s") for s in seconds])
        ax.minorticks_off()
        ax.axvline(300, color="black", linewidth=0.8, linestyle="--")
        ax.set_xlabel(f"time between two memory edits (log scale; they are {edits_every} turns apart)")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    left.text(300, 0.03, " 5 min", fontsize=8)
    left.set_ylim(0, 1.05)
    right.set_ylim(0, None)
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8.5, frameon=False)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    said = "; ".join(label for label, *_ in series)
    return Picture(fig, f"picture: {len(series)} lines, one legend: {said}")
