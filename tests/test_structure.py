"""The package's seams, held by reading its source: a regression that crosses
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


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the hango modules it imports when it is imported (top level, not under
    ``TYPE_CHECKING``, not inside a function: those run later and cannot form an import cycle)."""
    names = {_module_of(p) for p in MODULES}
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        me = _module_of(path)
        edges: set[str] = set()
        body = list(ast.parse(path.read_text(encoding="utf-8")).body)
        while body:
            node = body.pop()
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                body += node.orelse
            elif isinstance(node, (ast.If, ast.Try)):
                body += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:  # `from hango.fs import path` imports hango.fs.path
                    full = f"{node.module}.{alias.name}"
                    edges.add(full if full in names else node.module)
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
        graph[me] = {e for e in edges if e in names and e != me and e != "hango"}
    return graph


def test_no_import_cycle_in_the_package() -> None:
    """Issue 11: 0 import cycles. (The facade ``hango/__init__.py`` imports lazily, on first
    attribute access, so it is left out as a node.)"""
    graph = _import_graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(nxt):], nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert graph.get("hango.agent.runtime"), "graph not read"


WRITES_AGENT_FILES = re.compile(r"\b(INSERT\s+INTO|UPDATE)\s+(public\.)?agent_files\b",
                                re.IGNORECASE)


def test_only_the_write_path_inserts_or_updates_agent_files() -> None:
    """One write path for every door (PUT, PATCH, the tools, approve): no other module, and no
    function of the schema, inserts or updates a file, so no door can skip a rule of a write
    (the file cap, the quota, the file-or-directory and the text rules, the version)."""
    sources = [*MODULES, *sorted((PACKAGE / "schema").glob("*.sql"))]
    outside = [_name(p) for p in sources if p != PACKAGE / "fs" / "writes.py"
               and WRITES_AGENT_FILES.search(p.read_text(encoding="utf-8"))]
    assert outside == []
