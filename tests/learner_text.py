"""The learner-facing text of the course, as the tests read it: which files, their prose, links.

Learner-facing means what a learner reads: the notebooks and their solutions (markdown cells,
code comments and printed words), the chapter and the rest of ``docs/learning/``, the README and
``docs/workshop.md``. ``tests/test_learner_text.py`` checks their words, spelling and links; the
lab test in ``tests/test_course_setup.py`` opens every notebook link through JupyterLab.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def notebooks() -> list[Path]:
    return sorted(ROOT.glob("notebooks/[0-9]*.ipynb")) + sorted(ROOT.glob("notebooks/solutions/*.ipynb"))


def documents() -> list[Path]:
    return [*sorted(ROOT.glob("docs/learning/*.md")), ROOT / "README.md", ROOT / "docs" / "workshop.md"]


def files() -> list[Path]:
    return [*notebooks(), *documents()]


@dataclass(frozen=True)
class Text:
    """One piece of prose: where it is (file and cell or line) and its words."""

    path: Path
    where: str
    text: str
    markdown: bool  # links and headings are read only in Markdown


def texts(path: Path) -> list[Text]:
    """A document as one Markdown text; a notebook as its markdown cells, its code cells (the
    comments and strings a learner reads) and its outputs (what a learner reads when it runs)."""
    if path.suffix != ".ipynb":
        return [Text(path, "", path.read_text(encoding="utf-8"), True)]
    out = []
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        source = "".join(cell["source"])
        out.append(Text(path, f"cell {i}", source, cell["cell_type"] == "markdown"))
        for output in cell.get("outputs", []):
            printed = output.get("text") or output.get("data", {}).get("text/plain", "")
            out.append(Text(path, f"cell {i} output", "".join(printed), False))
    return out


LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)")


def links(path: Path) -> list[tuple[str, str]]:
    """``(where, target)`` of every Markdown link in ``path`` (inline code and fences left out)."""
    found = []
    for text in texts(path):
        if text.markdown:
            prose = re.sub(r"```.*?```|`[^`\n]*`", "", text.text, flags=re.DOTALL)
            found += [(text.where, target) for target in LINK.findall(prose)]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}
