"""SkillsMiddleware: progressive disclosure of ``SKILL.md`` files.

``before_run`` reads the head of every ``SKILL.md`` under the sources (default ``/skills/``), at
any depth, in one bounded query (never a body), parses each frontmatter and builds an index of
``name — description (path)`` lines; the model reads a skill with ``read_file`` when it needs it.
Later sources override earlier ones; a bad file is skipped with a warning; the index has a count
and a byte cap; ``allowed_tools`` only narrows, and while a skill is in use calls outside its set
are refused. Why each rule is as it is: docs/learning/11-memory-and-skills.md.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hango.agent.frontmatter import FENCES, HEAD_BYTES, Frontmatter, FrontmatterError, parse
from hango.agent.hooks import RunContext, StateKey, ToolCallNext
from hango.fs.files import FileData, ReadHeads, read
from hango.models.base import Block, ToolCall, ToolResult
from hango.telemetry import (
    ATTR_SKILLS_COUNT,
    ATTR_SKILLS_INVALID,
    EVENT_SKILL_INVALID,
    EVENT_SKILL_TOOLS_NARROWED,
    SPAN_SKILLS_INDEX,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span

INDEX_HEADER = "## Skills"
INDEX_FOOTER = ("To use a skill, call read_file on its path for the full instructions "
                "before you follow it.")
SKILL_FILE = "SKILL.md"
_SPACE = re.compile(r"\s+")


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
    invalid: int = 0  # SKILL.md files skipped as invalid


def parse_head(head: str) -> Frontmatter | FrontmatterError:
    """``parse``, with the error as a value: a function of the head's text alone."""
    try:
        return parse(head)
    except FrontmatterError as exc:
        return exc


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
    """Reader + PromptContributor + ToolWrapper (the narrowing guard)."""

    name = "skills"
    span = SPAN_SKILLS_INDEX

    def __init__(self, sources: Sequence[str] | None = None, max_skills: int = 100,
                 default_sources: Sequence[str] = ("/skills/",),
                 index_max_bytes: int = 16384,
                 parse: Callable[[str], Frontmatter | FrontmatterError] = parse_head) -> None:
        """``sources`` overrides the agent's config; ``default_sources`` is the tenant default
        for an agent whose config names none (``default_stack`` passes the settings' values).
        ``parse`` reads one head (a faster one may be passed in: it must give the same result)."""
        self.sources = list(sources) if sources is not None else None
        self.max_skills = max_skills
        self.default_sources = list(default_sources)
        self.index_max_bytes = index_max_bytes
        self.parse = parse
        self.key: StateKey[SkillsState] = StateKey("skills", SkillsState)

    def reads(self, ctx: RunContext) -> list[ReadHeads]:
        """One bounded scan: the head of at most ``max_skills + 1`` files a source (the +1
        tells a source over the cap), each cut after its frontmatter."""
        sources = self.sources if self.sources is not None else (
            ctx.config.skills if ctx.config.skills is not None else self.default_sources)
        return [ReadHeads(tuple(sources), SKILL_FILE, HEAD_BYTES, self.max_skills + 1, FENCES)]

    def before_run(self, ctx: RunContext) -> None:
        """Read, then build."""
        with ctx.telemetry.span(self.span) as span:
            self.build(ctx, [read(ctx.backend, r) for r in self.reads(ctx)])
            self.report(ctx, span, 0.0)  # the index has no duration metric (memory's load has)

    def build(self, ctx: RunContext, rows: Sequence[list[FileData]]) -> None:
        """The index: every valid skill by name, later sources first, within both caps."""
        ((scan,), (heads,)), state = (self.reads(ctx), rows), ctx.state(self.key)
        heads = self._within_scan(ctx, scan.directories, heads)
        by_name: dict[str, Skill] = {}
        parsed: dict[str, Skill | None] = {}
        for source in scan.directories:
            for head in (h for h in heads if h.path.startswith(source)):
                if head.path not in parsed:
                    parsed[head.path] = self._skill(ctx, head.path, self.parse(head.content))
                skill = parsed[head.path]
                if skill is None:
                    continue
                earlier = by_name.get(skill.name)
                if earlier is not None and earlier.path != skill.path:
                    ctx.warn(f"skill {skill.name!r}: {skill.path} overrides {earlier.path}")
                by_name[skill.name] = skill  # later sources override earlier ones
        state.skills, lines = self._within_caps(ctx, sorted(by_name.values(), key=lambda s: s.name))
        for skill in state.skills:
            self._narrow(ctx, skill)
        state.index = index_block(lines) if state.skills else None
        state.invalid = sum(1 for skill in parsed.values() if skill is None)
        ctx.attributes[ATTR_SKILLS_COUNT] = len(state.skills)  # published for the chat span
        ctx.attributes[ATTR_SKILLS_INVALID] = state.invalid

    def _within_scan(self, ctx: RunContext, sources: Sequence[str],
                     heads: list[FileData]) -> list[FileData]:
        """The heads without each source's extra one, which only said the source is over the cap."""
        for source in sources:
            under = [h.path for h in heads if h.path.startswith(source)]
            if len(under) > self.max_skills:
                ctx.warn(f"{source} holds more than HANGO_SKILLS_MAX={self.max_skills} "
                         f"SKILL.md files; read the first {self.max_skills} by path, "
                         f"from {under[0]} to {under[self.max_skills - 1]}")
                heads = [h for h in heads if h.path != under[self.max_skills]]
        return heads

    def _within_caps(self, ctx: RunContext,
                     ordered: list[Skill]) -> tuple[list[Skill], list[str]]:
        """The first skills by name within ``HANGO_SKILLS_MAX`` and the index's byte budget, and
        their index lines; one warning for each cap that left skills out."""
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
        return ordered, lines

    def report(self, ctx: RunContext, span: Span, seconds: float) -> None:
        """What the index holds, on its span and in the metrics."""
        state = ctx.state(self.key)
        span.set_attribute(ATTR_SKILLS_COUNT, len(state.skills))
        span.set_attribute(ATTR_SKILLS_INVALID, state.invalid)
        ctx.telemetry.record_skills(len(state.skills), state.invalid)

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
