"""SkillsMiddleware: progressive disclosure of ``SKILL.md`` files.

``before_run`` finds every ``SKILL.md`` under the configured sources (default ``/skills/``), at
any depth, in ONE indexed query that returns only the head of each file (never a body), parses
the frontmatter, and builds an index. ``system_blocks`` puts only ``name — description (path)``
lines in the prompt; the model reads a skill's instructions with ``read_file`` when it needs them.

The rules, each with a warning the caller can read in ``RunResult.warnings``:

- a later source overrides an earlier one's skill of the same name (last source wins);
- an invalid file is skipped (``agent.skill_invalid``); one bad skill never fails a run;
- at most ``HANGO_SKILLS_MAX`` skills, by name; the ones left out are named;
- at most ``HANGO_SKILLS_INDEX_MAX_BYTES`` (default 16 KiB) of rendered index: the skills are
  taken in name order while their lines fit, and the rest are left out, all named in ONE warning.
  The count cap alone let 100 descriptions of 1,024 characters put ~100 KB into every request.
  The default follows Claude Code, whose skill listing gets "1% of the context window, with a
  fallback of 8,000 characters" (earlier 15,000, then 2% / 16,000 characters;
  code.claude.com/docs/en/skills, quoted in notes/skills-and-memory-conventions.md §2.5):
  16 KiB is about 4,000 tokens, 2% of a 200k-token window, room for ~50 skills with typical
  ~250-character descriptions. Claude Code shortens descriptions to fit; hango keeps each line
  whole and leaves out whole skills, so what the model reads of a skill is never half a sentence,
  and the index is a prefix of the name order (the same skills every run, whatever the sizes);
- a ``name`` that differs from its folder's name is a warning, and the skill is still indexed
  under its ``name``. The Agent Skills spec says the name "must match the parent directory name",
  but its client guide recommends lenient loading (a mismatch warns, the skill loads), as
  deepagents does; Claude Code needs no name at all. Of the 91 valid files in the vendored corpus
  (tests/data/skills-corpus) one mismatches: anthropics/skills ``template/`` names itself
  ``template-skill``. Skipping it would make a working, published skill vanish over a naming rule;
  the warning tells the author what to rename;
- ``allowed_tools`` only narrows: a skill's effective tools are ``allowed_tools ∩ allowlist``,
  and the rest are dropped (``agent.skill_tools_narrowed``). A skill file is content an agent
  or a user can write, so it must never be able to grant a tool. When nothing is left (every
  tool dropped, or an empty list declared), the warning says so: after reading that skill the
  agent can call no tool for the rest of the run.

While a skill is in use: once the agent has read a skill's ``SKILL.md`` in a run, and that skill
declares ``allowed_tools``, calls outside its effective set are refused until the run ends. Read
a second such skill and the two sets intersect: in a run, the callable set only ever shrinks.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from hango.agent import snapshot
from hango.agent.frontmatter import HEAD_BYTES, Frontmatter, FrontmatterError, parse
from hango.agent.hooks import RunContext, StateKey, ToolCallNext
from hango.models.base import Block, ToolCall, ToolResult
from hango.telemetry import (
    ATTR_SKILLS_COUNT,
    ATTR_SKILLS_INVALID,
    ATTR_SKILLS_PARSED,
    EVENT_SKILL_INVALID,
    EVENT_SKILL_TOOLS_NARROWED,
    SPAN_SKILLS_INDEX,
)

INDEX_HEADER = "## Skills"
INDEX_FOOTER = ("To use a skill, call read_file on its path for the full instructions "
                "before you follow it.")
_SPACE = re.compile(r"\s+")
# A line that is exactly ``---`` ends the frontmatter; the scan cuts each head right after it.
FENCES = (b"\n---\n", b"\n---\r\n")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: str
    allowed_tools: tuple[str, ...] | None  # as declared; None when the key is absent
    effective_tools: tuple[str, ...] | None  # allowed_tools ∩ the agent's allowlist


@dataclass
class SkillsState:
    skills: list[Skill] = field(default_factory=list)
    index: str | None = None  # the index text, built once per run (not per model call)
    active: frozenset[str] | None = None  # the callable set once a narrowing skill is in use
    in_use: list[str] = field(default_factory=list)


def parse_head(head: str) -> Frontmatter | FrontmatterError:
    """``parse``, with the error as a value. Memoised per agent (see ``before_run``), keyed on
    the head's exact text, so it can never be stale; no process-wide memo for 10,000 skills or
    many agents to thrash."""
    try:
        return parse(head)
    except FrontmatterError as exc:
        return exc


def memoised(memo: dict[str, object], path: str, head: str) -> Frontmatter | FrontmatterError | None:
    """The parse of ``head`` that ``memo`` (path -> (head, parse)) holds, if its head is ``head``."""
    hit = memo.get(path)
    return hit[1] if isinstance(hit, tuple) and hit[0] == head else None


def one_line(text: str) -> str:
    """Keep untrusted text on its index line: whitespace folded, markup characters escaped."""
    if not text.isprintable():  # the common case skips the per-character pass (1,000 skills)
        text = "".join(ch if ch.isprintable() else " " for ch in text)
    if "  " in text or not text.isprintable():
        text = _SPACE.sub(" ", text)
    text = text.strip()
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def index_line(skill: Skill) -> str:
    return f"- {one_line(skill.name)} — {one_line(skill.description)} ({one_line(skill.path)})"


def index_block(lines: Sequence[str]) -> str:
    """The index block around ``lines`` (each from :func:`index_line`)."""
    return "\n".join([INDEX_HEADER, *lines, INDEX_FOOTER])


def render_index(skills: Sequence[Skill]) -> str:
    return index_block([index_line(s) for s in skills])


def within_budget(lines: Sequence[str], max_bytes: int) -> int:
    """How many of ``lines``, taken in order, fit in an index block of ``max_bytes``."""
    used = len(INDEX_HEADER.encode()) + 1 + len(INDEX_FOOTER.encode())  # joined by newlines
    for i, line in enumerate(lines):
        used += len(line.encode("utf-8")) + 1
        if used > max_bytes:
            return i
    return len(lines)


def folder_of(path: str) -> str:
    """The folder a ``SKILL.md`` is in: ``pdf`` for ``/skills/team/pdf/SKILL.md``."""
    return path.rsplit("/", 2)[-2]


class SkillsMiddleware:
    """RunHook + PromptContributor + ToolWrapper (the narrowing guard)."""

    name = "skills"

    def __init__(self, sources: Sequence[str] | None = None, max_skills: int = 100,
                 default_sources: Sequence[str] = ("/skills/",),
                 index_max_bytes: int = 16384) -> None:
        """``sources`` overrides the agent's config; ``default_sources`` is the tenant default
        for an agent whose config names none (``default_stack`` passes the settings' values)."""
        self.sources = list(sources) if sources is not None else None
        self.max_skills = max_skills
        self.default_sources = list(default_sources)
        self.index_max_bytes = index_max_bytes
        self.key: StateKey[SkillsState] = StateKey("skills", SkillsState)

    def before_run(self, ctx: RunContext) -> None:
        sources = self.sources if self.sources is not None else (
            ctx.config.skills if ctx.config.skills is not None else self.default_sources)
        state = ctx.state(self.key)
        with ctx.telemetry.span(SPAN_SKILLS_INDEX) as span:
            # One query, bounded: at most max_skills + 1 files per source (the +1 tells us a
            # source has more than the cap), and only the head of each file; or, when no skill
            # file changed since the last run, that run's index, replayed (hango.agent.snapshot).
            found = snapshot.lookup(ctx, snapshot.Read(
                "heads", tuple(sources), HEAD_BYTES, name="SKILL.md",
                max_per_dir=self.max_skills + 1, cut_after=FENCES,
                salt=(self.max_skills, self.index_max_bytes, ctx.allowlist)))
            parsed_now = 0  # heads parsed in this run: the rest came from the agent's memo
            if found.built is not None:
                snapshot.replay(ctx, found.built)
                state.skills, state.index, invalid = found.built.value
            else:
                memo: dict[str, object] = {}  # path -> (head, its parse), for the next run
                heads = found.rows
                for source in sources:
                    under = [h.path for h in heads if h.path.startswith(source)]
                    if len(under) > self.max_skills:
                        ctx.warn(f"{source} holds more than HANGO_SKILLS_MAX={self.max_skills} "
                                 f"SKILL.md files; read the first {self.max_skills} by path, "
                                 f"from {under[0]} to {under[self.max_skills - 1]}")
                        heads = [h for h in heads if h.path != under[self.max_skills]]
                by_name: dict[str, Skill] = {}
                parsed: dict[str, Skill | None] = {}
                for source in sources:  # in order: a later source overrides an earlier one
                    for head in heads:
                        if not head.path.startswith(source):
                            continue
                        if head.path not in parsed:
                            fm = memoised(found.memo, head.path, head.content)
                            if fm is None:
                                fm, parsed_now = parse_head(head.content), parsed_now + 1
                            memo[head.path] = (head.content, fm)
                            parsed[head.path] = self._skill(ctx, head.path, fm)
                        skill = parsed[head.path]
                        if skill is None:
                            continue
                        earlier = by_name.get(skill.name)
                        if earlier is not None and earlier.path != skill.path:
                            ctx.warn(f"skill {skill.name!r}: {skill.path} overrides {earlier.path}")
                        by_name[skill.name] = skill
                ordered = sorted(by_name.values(), key=lambda s: s.name)
                if len(ordered) > self.max_skills:
                    dropped = [s.name for s in ordered[self.max_skills:]]
                    ctx.warn(f"{len(dropped)} skill(s) over HANGO_SKILLS_MAX={self.max_skills} "
                             f"left out: {', '.join(dropped)}")
                    ordered = ordered[: self.max_skills]
                lines = [index_line(s) for s in ordered]
                fit = within_budget(lines, self.index_max_bytes)
                if fit < len(ordered):
                    dropped = [s.name for s in ordered[fit:]]
                    ctx.warn(f"{len(dropped)} skill(s) over HANGO_SKILLS_INDEX_MAX_BYTES="
                             f"{self.index_max_bytes} left out (the index keeps the first skills "
                             f"by name that fit): {', '.join(dropped)}")
                    ordered, lines = ordered[:fit], lines[:fit]
                for skill in ordered:
                    self._narrow(ctx, skill)
                state.skills = ordered
                invalid = sum(1 for skill in parsed.values() if skill is None)
                state.index = index_block(lines) if ordered else None
                found.store((ordered, state.index, invalid), memo)
            ctx.attributes[ATTR_SKILLS_COUNT] = len(state.skills)  # published for the chat span
            ctx.attributes[ATTR_SKILLS_INVALID] = invalid
            span.set_attribute(ATTR_SKILLS_COUNT, len(state.skills))
            span.set_attribute(ATTR_SKILLS_INVALID, invalid)
            span.set_attribute(ATTR_SKILLS_PARSED, parsed_now)
        ctx.telemetry.record_skills(len(state.skills), invalid)

    def _skill(self, ctx: RunContext, path: str, fm: Frontmatter | FrontmatterError) -> Skill | None:
        """The skill of one parsed head, or None (with a warning) when it is invalid."""
        if isinstance(fm, FrontmatterError):
            ctx.warn(f"skill {path} skipped: {fm}", event=EVENT_SKILL_INVALID,
                     path=path, reason=str(fm))
            return None
        for warning in fm.warnings:
            ctx.warn(f"skill {path}: {warning}")
        folder = folder_of(path)
        if unicodedata.normalize("NFKC", fm.name) != unicodedata.normalize("NFKC", folder):
            ctx.warn(f"skill {path}: name '{fm.name}' differs from its folder '{folder}' (the "
                     "Agent Skills spec requires them to match); indexed as "
                     f"'{fm.name}', rename one of them")
        effective = None
        if fm.allowed_tools is not None:
            effective = tuple(t for t in fm.allowed_tools if t in ctx.allowlist)
        return Skill(fm.name, fm.description, path, fm.allowed_tools, effective)

    def _narrow(self, ctx: RunContext, skill: Skill) -> None:
        if skill.allowed_tools is None or skill.effective_tools is None:
            return
        dropped = [t for t in skill.allowed_tools if t not in skill.effective_tools]
        nothing = ("; after reading it the agent can call no tool for the rest of the run"
                   if not skill.effective_tools else "")
        if dropped:
            ctx.warn(f"skill {skill.name!r} ({skill.path}): allowed_tools {dropped} are not in "
                     f"the agent's allowlist and were dropped (a skill can only narrow){nothing}",
                     event=EVENT_SKILL_TOOLS_NARROWED, skill=skill.name, dropped=dropped,
                     remaining=list(skill.effective_tools))
        elif nothing:  # declared empty: nothing dropped, and still nothing left to call
            ctx.warn(f"skill {skill.name!r} ({skill.path}): allowed_tools is empty{nothing}",
                     event=EVENT_SKILL_TOOLS_NARROWED, skill=skill.name, dropped=[],
                     remaining=[])

    def system_blocks(self, ctx: RunContext) -> Sequence[Block]:
        index = ctx.state(self.key).index
        return [Block(index, "skills")] if index else []

    def wrap_tool_call(self, ctx: RunContext, call: ToolCall, call_next: ToolCallNext) -> ToolResult:
        state = ctx.state(self.key)
        if state.active is not None and call.name not in state.active:
            in_use = ", ".join(state.in_use)
            if not state.active:
                return ToolResult(call.id, f"refused: tool {call.name!r}: the skill(s) in use "
                                  f"({in_use}) allow no tool, so after reading them the agent "
                                  "can call no tool for the rest of the run", is_error=True)
            return ToolResult(call.id, f"refused: tool {call.name!r} is outside the tools of the "
                              f"skill(s) in use ({in_use}): {sorted(state.active)}",
                              is_error=True)
        result = call_next(call)
        if call.name == "read_file" and not result.is_error:
            path = call.arguments.get("path")
            for skill in state.skills:
                if skill.path == path and skill.effective_tools is not None:
                    allowed = frozenset(skill.effective_tools)
                    state.active = allowed if state.active is None else state.active & allowed
                    state.in_use.append(skill.name)
        return result
