"""Regenerate the docs' marked blocks from the code that makes them, or check that they are current.

    .venv/bin/python docs/generate.py            # rewrite every marked block in place
    .venv/bin/python docs/generate.py --check    # exit 1, with a diff, if any block is stale

In the manner of cog (simonw/llm builds its docs so): a mark is an HTML comment, which a Markdown
viewer does not show, and what follows it is the code's output, so a doc cannot drift from the
code without ``--check`` failing (``tests/test_docs.py`` runs it).

``<!-- script: NAME.py -->``
    The fenced block after it is a script a learner saves as ``NAME.py`` and runs from the
    repository root.
``<!-- output: NAME.py [ARGS]; from: RE; until: RE; keep: RE; needs: MODULE -->``
    The fenced block after it is what ``python NAME.py ARGS`` prints, run from the repository
    root. ``from`` starts at the first line matching RE, ``until`` stops before the next line
    matching RE; ``keep`` keeps only the lines matching RE (``...`` stands for lines left out
    between two of them).
    ``needs``: the script imports MODULE, an optional extra; without it the block is left as
    it is, and said so.
``<!-- generated: NAME -->`` ... ``<!-- end generated -->``
    The text between is what the builder ``NAME`` below returns.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "docs" / "learning" / "11-memory-and-skills.md", ROOT / "docs" / "system-architecture.md"]
MARK = re.compile(r"^<!-- (script|output|generated): (.+?) -->\n", re.MULTILINE)
FENCE = re.compile(r"([ ]*```[a-z]*\n)(.*?)(^[ ]*```\n)", re.DOTALL | re.MULTILINE)
END = "<!-- end generated -->\n"


def test_table() -> str:
    """The architecture doc's test table: each test file and the first paragraph of its
    docstring, the promise it keeps."""
    rows = ["| file | what it promises |", "|---|---|"]
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        promise = " ".join(doc.split("\n\n", 1)[0].split())
        if not promise:
            raise SystemExit(f"{path.relative_to(ROOT)} has no docstring: say what it promises")
        rows.append(f"| `tests/{path.name}` | {promise.replace('``', '`').replace('|', '/')} |")
    return "\n".join(rows) + "\n"


BUILDERS: dict[str, Callable[[], str]] = {"test-table": test_table}


class Runner:
    """Runs each script once per argument list, from the repository root."""

    def __init__(self, scripts: dict[str, str]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="hango-docs-"))
        for name, code in scripts.items():
            (self.folder / name).write_text(code, encoding="utf-8")
        self.outputs: dict[str, str] = {}
        self.skipped: list[str] = []

    def output(self, command: str) -> str:
        if command not in self.outputs:
            name, *args = command.split()
            done = subprocess.run([sys.executable, str(self.folder / name), *args], cwd=ROOT,
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"{command} failed (exit {done.returncode}):\n{done.stderr}")
            self.outputs[command] = done.stdout
        return self.outputs[command]


def select(text: str, options: dict[str, str]) -> str:
    lines = text.splitlines()
    if "from" in options:
        start = next(i for i, line in enumerate(lines) if re.search(options["from"], line))
        lines = lines[start:]
    if "until" in options:
        stop = next((i for i, line in enumerate(lines) if i and re.search(options["until"], line)),
                    len(lines))
        lines = lines[:stop]
    if "keep" in options:
        kept: list[str] = []
        for line in lines:
            if re.search(options["keep"], line):
                kept.append(line)
            elif not kept or kept[-1] != "...":
                kept.append("...")
        lines = kept[kept[0] == "...":len(kept) - (len(kept) > 1 and kept[-1] == "...")]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + "\n"


def scripts_of(text: str) -> dict[str, str]:
    found = {}
    for mark in MARK.finditer(text):
        if mark.group(1) == "script":
            fence = FENCE.match(text, mark.end())
            if fence is None:
                raise SystemExit(f"<!-- script: {mark.group(2)} --> is not followed by a code block")
            found[mark.group(2)] = fence.group(2)
    return found


def render(text: str, runner: Runner) -> str:
    out, pos = [], 0
    for mark in MARK.finditer(text):
        if mark.start() < pos:
            continue
        kind, spec = mark.groups()
        out.append(text[pos:mark.end()])
        pos = mark.end()
        if kind == "generated":
            end = text.index(END, pos)
            out.append(BUILDERS[spec.strip()]())
            pos = end
        elif kind == "output":
            command, *rest = [part.strip() for part in spec.split(";")]
            options = dict(part.split(": ", 1) for part in rest)
            fence = FENCE.match(text, pos)
            if fence is None:
                raise SystemExit(f"<!-- output: {spec} --> is not followed by a code block")
            needs = options.pop("needs", None)
            if needs and importlib.util.find_spec(needs) is None:
                runner.skipped.append(f"{command} (needs {needs})")
                continue
            indent = fence.group(1)[:fence.group(1).index("`")]
            body = select(runner.output(command), options)
            out.append(fence.group(1) + "".join(
                indent + line if line.strip() else line for line in body.splitlines(True))
                + indent + fence.group(3))
            pos = fence.end()
    out.append(text[pos:])
    return "".join(out)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = 0
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        runner = Runner(scripts_of(text))
        new = render(text, runner)
        for skipped in runner.skipped:
            print(f"{doc.relative_to(ROOT)}: left as it is: {skipped}")
        if new == text:
            continue
        if check:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(
                text.splitlines(True), new.splitlines(True), str(doc.relative_to(ROOT)),
                f"{doc.relative_to(ROOT)} (what the code gives now)"))
        else:
            doc.write_text(new, encoding="utf-8")
            print(f"{doc.relative_to(ROOT)}: regenerated")
    if stale:
        print(f"\n{stale} doc(s) out of date: run .venv/bin/python docs/generate.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
