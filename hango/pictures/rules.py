"""The rules a learner looks at: the path rule (01), what the frontmatter reader reads (04),
and how a skill's tools only narrow (05)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hango.pictures.base import BLUE, GREEN, GREY, ORANGE, RED, TEAL, Picture, _bare, _box, _figure


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
