"""The course's pictures, drawn from what a notebook's run really did (matplotlib, on demand).

Each ``draw_*`` returns a :class:`Picture`: JupyterLab shows its PNG, and its text (what nbval
compares, since it skips images) says in words what the picture shows, with the figures it
was drawn from. The PNG is the same bytes on every run: the Agg renderer, the font matplotlib
ships (DejaVu Sans), a fixed resolution, and no metadata (no software version, no date).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hango.models.base import Request, _blank
from hango.models.simulated import positions

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


# --- 00, 02, 03: a request to scale ---------------------------------------------------------


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


# --- 01: the path rule ------------------------------------------------------------------------


def draw_path_rules(paths: Sequence[str], roles: Mapping[str, str | None]) -> Picture:
    """One row per path: what ``clean()`` says (ordinary, reserved or rejected, with the rule),
    then ``check_write(path, role)`` for each role: the path rule table, as colours."""
    from hango.fs.path import PathError, ReservedPathError, check_write, clean, is_reserved

    colours = {"ordinary": GREEN, "reserved": BLUE, "rejected": RED, "write": GREEN,
               "refused": ORANGE, "invalid": RED}
    rows: list[tuple[str, str, str, list[str]]] = []
    for path in paths:
        try:
            kind, why = ("reserved" if is_reserved(clean(path)) else "ordinary"), ""
        except PathError as exc:
            kind, why = "rejected", exc.rule
        cells = []
        for role in roles.values():
            try:
                check_write(path, role)
                cells.append("write")
            except ReservedPathError:
                cells.append("refused")
            except PathError:
                cells.append("invalid")
        shown = ascii(path)[1:-1] if len(path) < 34 else ascii(path[:12])[1:-1] + f"… ({len(path)} chars)"
        rows.append((shown, kind, why, cells))
    fig, ax = _figure(11, 0.34 * len(rows) + 1.1)
    for y, (shown, kind, why, cells) in enumerate(rows):
        ax.text(0, -y, shown, family="DejaVu Sans Mono", fontsize=8, va="center")
        ax.add_patch(_box(3.1, -y, 1.1, colours[kind]))
        ax.text(3.65, -y, kind, fontsize=8, ha="center", va="center", color="white")
        for x, cell in enumerate(cells):
            ax.add_patch(_box(4.4 + 0.95 * x, -y, 0.85, colours[cell]))
            ax.text(4.4 + 0.95 * x + 0.425, -y, cell, fontsize=7.5, ha="center", va="center",
                    color="white")
        ax.text(4.4 + 0.95 * len(roles) + 0.15, -y, why, fontsize=7.5, va="center", color="#444444")
    ax.text(3.65, 1, "clean()", fontsize=8.5, ha="center", weight="bold")
    for x, name in enumerate(roles):
        ax.text(4.4 + 0.95 * x + 0.425, 1, name, fontsize=8.5, ha="center", weight="bold")
    ax.text(4.4 + 0.95 * len(roles) + 0.15, 1, "the rule a rejection names", fontsize=8.5, weight="bold")
    ax.text(4.4 + 0.95 * len(roles) / 2 - 0.05, 1.7, "check_write(path, role)", fontsize=8.5, ha="center")
    ax.set_xlim(0, 12.5)
    ax.set_ylim(-len(rows) + 0.4, 2.2)
    _bare(ax)
    ax.set_title("The path rule: one function decides, for every door", fontsize=10)
    fig.tight_layout()
    counts = {k: sum(r[1] == k for r in rows) for k in ("ordinary", "reserved", "rejected")}
    return Picture(fig, f"picture: {len(rows)} paths: {counts['ordinary']} ordinary, "
                        f"{counts['reserved']} reserved, {counts['rejected']} rejected; "
                        f"check_write for {', '.join(roles)}")


def _box(x: float, y: float, width: float, colour: str) -> Any:
    from matplotlib.patches import FancyBboxPatch

    return FancyBboxPatch((x, y - 0.34), width, 0.68, boxstyle="round,pad=0.02,rounding_size=0.1",
                          color=colour, linewidth=0)


# --- 04: what the frontmatter reader accepts ----------------------------------------------------


def draw_frontmatter(files: Mapping[str, str], lines: int = 6) -> Picture:
    """Each file's first lines, numbered as the reader numbers them; a refused file has its
    line in red and the reason under it, an accepted one its name and tools in green."""
    from hango.agent.frontmatter import FrontmatterError, parse

    items = list(files.items())
    columns = 3
    rows = -(-len(items) // columns)
    fig, axes = _figure(12, 2.05 * rows, nrows=rows, ncols=columns, squeeze=False)
    accepted = 0
    for i, ax in enumerate(axes.flat):
        _bare(ax)
        if i >= len(items):
            ax.axis("off")
            continue
        path, text = items[i]
        try:
            fm = parse(text)
            tools = list(fm.allowed_tools or [])
            bad, verdict, colour = None, f"read: name {fm.name!r}, tools {tools}", GREEN
            accepted += 1
        except FrontmatterError as exc:
            bad, verdict, colour = exc.line, ("refused: " + exc.reason), RED
        head = text.lstrip("\ufeff").replace("\r\n", "\n").split("\n")
        shown = range(1, min(lines, len(head)) + 1)
        if bad is not None and bad > lines:
            shown = range(bad - lines + 1, bad + 1)
        for row, number in enumerate(shown):
            line = head[number - 1].replace("\t", "→")
            line = line if len(line) <= 38 else line[:37] + "…"
            ax.text(0.02, 0.86 - row * 0.12, f"{number:>2} | {line}", family="DejaVu Sans Mono",
                    fontsize=7, va="center", transform=ax.transAxes,
                    color=RED if number == bad else "black",
                    weight="bold" if number == bad else "normal")
        ax.set_title(path.removeprefix("/skills/").removesuffix("/SKILL.md"), fontsize=8.5,
                     color=colour, loc="left")
        words = verdict if len(verdict) <= 76 else verdict[:75] + "…"
        ax.text(0.02, 0.08, words, fontsize=7, transform=ax.transAxes, color=colour)
        for side in ax.spines.values():
            side.set_visible(True)
            side.set_color(colour)
    fig.suptitle("What the frontmatter reader reads, and what it refuses (the line it names in red)",
                 fontsize=10)
    fig.tight_layout()
    return Picture(fig, f"picture: {len(items)} files: {accepted} read, {len(items) - accepted} "
                        "refused, each with its line and reason")


# --- 05: allowed_tools only narrows -------------------------------------------------------------


def draw_narrowing(allowlist: Iterable[str], skills: Mapping[str, Iterable[str] | None],
                   result: Any = None) -> Picture:
    """Left: the agent's allowlist, what each skill asks for, and what it may use (the
    intersection). Right, for a run: each tool call in order, run or refused, and from which
    call on a skill was in use."""
    allowed = set(allowlist)
    asked = {name: (None if tools is None else set(tools)) for name, tools in skills.items()}
    names = sorted(allowed.union(*(t for t in asked.values() if t)))
    rows: list[tuple[str, set[str], str]] = [("the agent's allowlist", allowed, BLUE)]
    for skill, tools in asked.items():
        if tools is None:
            rows.append((f"{skill} asks for (no key: no narrowing)", allowed, GREY))
            continue
        rows.append((f"{skill} asks for", tools, GREY))
        rows.append((f"{skill} may use (∩)", tools & allowed, GREEN))
    calls = _calls(result) if result is not None else []
    fig, axes = _figure(12 if calls else 7, 0.45 * max(len(rows), len(calls)) + 1.3,
                        ncols=2 if calls else 1, squeeze=False)
    ax = axes[0][0]
    for y, (label, tools, colour) in enumerate(rows):
        ax.text(-0.2, -y, label, fontsize=8.5, ha="right", va="center")
        for x, name in enumerate(names):
            inside = name in tools
            ax.add_patch(_box(x, -y, 0.9, colour if inside else "#eeeeee"))
            ax.text(x + 0.45, -y, name, fontsize=7.5, ha="center", va="center",
                    color="white" if inside else "#bbbbbb")
    ax.set_xlim(-4.2, len(names))
    ax.set_ylim(-len(rows) + 0.4, 0.8)
    _bare(ax)
    ax.set_title("A skill's tools: allowed_tools ∩ the allowlist", fontsize=10)
    refused = 0
    if calls:
        ax = axes[0][1]
        for y, (name, ok, why, in_use) in enumerate(calls):
            refused += not ok
            ax.add_patch(_box(0, -y, 2.2, GREEN if ok else RED))
            ax.text(1.1, -y, name, fontsize=8, ha="center", va="center", color="white")
            ax.text(2.4, -y, "ran" if ok else why, fontsize=7.5, va="center")
            if in_use:
                ax.add_patch(_box(-0.55, -y, 0.35, TEAL))
        ax.text(-0.55, 0.75, "skill in use", fontsize=7.5, color=TEAL)
        ax.set_xlim(-0.7, 9)
        ax.set_ylim(-max(len(rows), len(calls)) + 0.4, 1.1)
        _bare(ax)
        ax.set_title("The run's tool calls, in order", fontsize=10)
        axes[0][0].set_ylim(-max(len(rows), len(calls)) + 0.4, 1.1)
    fig.tight_layout()
    sets = "; ".join(f"{label}: {sorted(tools)}" for label, tools, _ in rows)
    said = f"; {len(calls)} tool calls, {refused} refused" if calls else ""
    return Picture(fig, f"picture: {sets}{said}")


def _calls(result: Any) -> list[tuple[str, bool, str, bool]]:
    """(tool, ran, why refused, a skill was in use) for each tool call of a run, in order."""
    out, in_use = [], False
    by_id = {c.id: c for m in result.messages for c in m.tool_calls}
    for message in result.messages:
        for r in message.tool_results:
            call = by_id[r.call_id]
            refused = r.is_error and r.content.startswith("refused")
            why = ("not in the allowlist" if "allowlist" in r.content else
                   "outside the skill in use") if refused else ""
            out.append((call.name, not refused, why, in_use))
            path = str(call.arguments.get("path", ""))
            in_use = in_use or (call.name == "read_file" and not r.is_error and
                                path.startswith("/skills/") and path.endswith("/SKILL.md"))
    return out


# --- 07: tenants, agents, namespaces --------------------------------------------------------------


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
