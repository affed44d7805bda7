"""Check SKILL.md files on disk before they go to an agent (``hango skills check PATH...``).

Each file is read the way :class:`~hango.agent.skills.SkillsMiddleware` reads it (its first
:data:`~hango.agent.frontmatter.HEAD_BYTES` bytes, hango's own frontmatter parser), and then held
to the Agent Skills rules the reference validator (``skills-ref validate``) enforces and hango
only warns about at run time: the naming rule, and a name equal to its folder's name (both after
NFKC normalisation, as skills-ref compares them). Keys hango does not use are warnings; with
``strict`` they count as problems too (skills-ref rejects them).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hango.agent.frontmatter import HEAD_BYTES, FrontmatterError, naming_rule_problem, parse

SKILL_FILE = "SKILL.md"


@dataclass(frozen=True)
class Verdict:
    """One file's outcome: ``problem`` is None when the file is fine."""

    path: str
    problem: str | None = None
    line: int | None = None
    warnings: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.problem is None:
            return f"ok: {self.path}" + (f" (warning: {'; '.join(self.warnings)})" if self.warnings else "")
        return f"{self.path}{'' if self.line is None else f':{self.line}'}: {self.problem}"


def skill_files(paths: Sequence[str]) -> Iterator[tuple[str, Path | None, str | None]]:
    """(shown path, file, problem) per SKILL.md: a directory is searched at any depth."""
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.rglob(SKILL_FILE) if p.is_file())
            if not found:
                yield given, None, f"no {SKILL_FILE} file under this directory"
            yield from ((str(p), p, None) for p in found)
        elif path.exists():
            yield given, path, None if path.name == SKILL_FILE else f"hango reads only {SKILL_FILE} files"
        else:
            yield given, None, "no such file or directory"


def check_file(shown: str, path: Path, strict: bool = False) -> Verdict:
    """Parse one file and apply the Agent Skills name rules to it."""
    try:
        with path.open("rb") as file:
            head = file.read(HEAD_BYTES)
    except OSError as exc:
        return Verdict(shown, f"cannot read: {exc.strerror or exc}")
    try:
        fm = parse(head)
    except FrontmatterError as exc:
        return Verdict(shown, exc.reason, exc.line)
    lines = head.decode("utf-8", "replace").splitlines()
    name_line = next((i for i, text in enumerate(lines, 1) if text.startswith("name:")), None)
    folder = path.resolve().parent.name
    if unicodedata.normalize("NFKC", folder) != unicodedata.normalize("NFKC", fm.name):
        return Verdict(shown, f"name '{fm.name}' does not match its folder '{folder}' (the Agent "
                       "Skills spec requires them to be equal)", name_line)
    if problem := naming_rule_problem(fm.name):
        return Verdict(shown, problem + " (hango loads it with a warning; the spec requires it)",
                       name_line)
    if strict and fm.warnings:
        return Verdict(shown, "; ".join(fm.warnings) + " (--strict)")
    return Verdict(shown, warnings=fm.warnings)


def check_paths(paths: Sequence[str], strict: bool = False) -> list[Verdict]:
    """A verdict per SKILL.md under ``paths`` (files, or directories searched at any depth)."""
    return [Verdict(shown, problem) if path is None or problem else check_file(shown, path, strict)
            for shown, path, problem in skill_files(paths)]
