"""The package's seams (issue 11, point 4), held by reading its source: a regression that crosses
one fails here, not in a review."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hango"
MODULES = sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def test_settings_imports_nothing_from_hango() -> None:
    """Every layer reads settings, so settings reads no layer (not even lazily in a function)."""
    tree = ast.parse((PACKAGE / "settings.py").read_text(encoding="utf-8"))
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m == "hango" or m.startswith("hango.")}


SQL_ON_AGENTS = re.compile(r"\b(FROM|INTO|UPDATE|JOIN)\s+agents\b", re.IGNORECASE)


def test_only_the_agents_module_runs_sql_on_the_agents_table() -> None:
    outside = [_name(p) for p in MODULES
               if p != PACKAGE / "agents.py" and SQL_ON_AGENTS.search(p.read_text(encoding="utf-8"))]
    assert outside == []


def test_no_module_is_a_warehouse() -> None:
    """Issue 11: no module over about 350 lines, except the simulator (the caching rules)."""
    sizes = {_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in MODULES}
    over = {name: n for name, n in sizes.items()
            if n > 360 and name != "hango/models/simulated.py"}
    assert over == {}
