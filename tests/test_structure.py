"""The package's seams, held by reading its source: a regression that crosses one fails here, not
in a review."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import textwrap
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


# The lesson (docs: DESIGN, "Three layers, one direction"): what a learner opens beside the
# notebooks. It imports nothing from the speed layer or the server.
LESSON = [
    "fs/path.py", "fs/files.py", "fs/queries.py", "fs/backend.py", "fs/writes.py",
    "fs/listing.py", "agent/hooks.py", "agent/stack.py", "agent/memory.py", "agent/skills.py",
    "agent/frontmatter.py", "agent/yaml_slice.py", "agent/promptcache.py", "agent/subagent.py",
    "agent/tools.py", "agent/proposals.py", "agent/runtime.py", *sorted(
        str(p.relative_to(PACKAGE)) for p in (PACKAGE / "models").glob("*.py")),
]
ABOVE_THE_LESSON = ("hango.perf", "hango.api", "hango.cli", "hango.workshop", "hango.notebook",
                    "hango.exercises", "hango.retention", "hango.telemetry.setup",
                    "hango.telemetry.server", "hango.telemetry.configured")


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (a function, ``TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return found | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_no_lesson_module_imports_the_speed_layer_or_the_server() -> None:
    assert all((PACKAGE / name).exists() for name in LESSON)
    crossing = {name: sorted(m for m in _imports(PACKAGE / name)
                             if m.startswith(ABOVE_THE_LESSON))
                for name in LESSON}
    assert {name: found for name, found in crossing.items() if found} == {}


NOT_IN_THE_LESSON = re.compile(r"\b(snapshots?|memo(?!r)\w*|replay\w*|counters?|perf|gated|"
                               r"cache(?! breakpoint)d?)\b", re.IGNORECASE)


def test_memory_and_skills_say_nothing_of_the_speed_layer() -> None:
    """A learner who opens memory.py or skills.py meets no cache word (the prompt cache's
    breakpoint is the lesson's own)."""
    for name in ("agent/memory.py", "agent/skills.py"):
        text = (PACKAGE / name).read_text(encoding="utf-8").replace("PromptCache", "")
        assert NOT_IN_THE_LESSON.findall(text) == [], name


def test_the_before_run_of_memory_and_skills_is_read_then_build() -> None:
    """``before_run`` opens the hook's span, runs its declared reads against the backend, builds
    from the rows, reports: and nothing else, in a few lines."""
    from hango.agent.hooks import Reader
    from hango.agent.memory import MemoryMiddleware
    from hango.agent.skills import SkillsMiddleware

    for cls in (MemoryMiddleware, SkillsMiddleware):
        assert isinstance(cls(), Reader)
        source = inspect.getsource(cls.before_run)
        calls = [ast.unparse(n.func) for n in ast.walk(ast.parse(textwrap.dedent(source)))
                 if isinstance(n, ast.Call)]
        assert sorted(c for c in calls if c.startswith("self.")) == [
            "self.build", "self.reads", "self.report"], cls
        assert "read" in calls and "ctx.telemetry.span" in calls, cls
        assert len(source.splitlines()) <= 8, cls


def test_the_head_of_a_skill_is_defined_once() -> None:
    """16,384 bytes and the closing ``---``: frontmatter.py's HEAD_BYTES and FENCES, and no other
    module spells them (the schema's column is tied to them by tests/test_perf.py)."""
    spelled = {_name(p) for p in MODULES if p.name != "frontmatter.py"
               and re.search(r"\b(HEAD_BYTES|FENCES|SKILL_HEAD)\s*=|\bb[\"']\\n---",
                             p.read_text(encoding="utf-8"))}
    assert spelled == set()


def test_a_module_is_one_concept_not_a_warehouse() -> None:
    """Every module says in its docstring what it is for; a lesson module says it in a few
    lines (minbpe's five: the essays are in docs/learning). Size alone is no concept, so the
    line bound is a generous one that only a warehouse reaches: 800 lines, above the largest
    single concept, the simulator's caching rules (about 700)."""
    docs = {_name(p): ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) for p in MODULES}
    assert [name for name, doc in docs.items()
            if not doc and (PACKAGE.parent / name).read_text(encoding="utf-8").strip()] == []
    lines = {name: len((docs[f"hango/{name}"] or "").splitlines()) for name in LESSON}
    long_lesson = {name: n for name, n in lines.items() if n > 12}
    assert long_lesson == {}
    sizes = {_name(p): len(p.read_text(encoding="utf-8").splitlines()) for p in MODULES}
    assert {name: n for name, n in sizes.items() if n > 800} == {}


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the hango modules it imports at its top level, ``TYPE_CHECKING`` included (a
    circle a type checker sees is a circle of concepts, even when Python never runs it). Not
    inside a function: those run later, and a lazy facade is made of them."""
    names = {_module_of(p) for p in MODULES}
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        me = _module_of(path)
        edges: set[str] = set()
        body = list(ast.parse(path.read_text(encoding="utf-8")).body)
        while body:
            node = body.pop()
            if isinstance(node, (ast.If, ast.Try)):
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
    """0 import cycles, ``TYPE_CHECKING`` included. (The facade ``hango/__init__.py`` imports
    lazily, on first attribute access, so it is left out as a node.)"""
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


def _python(code: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_a_middleware_imports_no_opentelemetry_no_driver_and_no_server() -> None:
    """``import hango.agent.memory`` loads the lesson and the names of the telemetry catalogue:
    no OpenTelemetry (API or SDK), no database driver, no settings machinery, no web server."""
    heavy = ("opentelemetry", "psycopg", "pydantic", "pydantic_settings", "fastapi", "uvicorn")
    code = ("import sys, hango.agent.memory, hango.agent.skills\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))\n")
    assert _python(code) == ["[]"]


def test_import_hango_loads_the_facade_alone() -> None:
    """``import hango`` (``hango --help``, a notebook's first cell) loads no module of the
    package but the facade, and nothing outside the standard library: each name loads its
    module on first use."""
    code = ("import sys\nbefore = set(sys.modules)\nimport hango\n"
            "new = set(sys.modules) - before\n"
            "print(sorted(m for m in new if m.startswith('hango.')))\n"
            "print(sorted({m.split('.')[0] for m in new} - set(sys.stdlib_module_names)))\n")
    assert _python(code) == ["[]", "['hango']"]


# What a run uses is the lesson, the driver, pydantic (the agent's config), the OpenTelemetry
# API and the simulator; these it does not use, so it does not load them.
NOT_FOR_A_RUN = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.instrumentation",
                 "pydantic_settings", "dotenv", "fastapi", "starlette", "uvicorn", "httpx",
                 "anthropic", "openai", "prometheus_client", "matplotlib", "IPython",
                 "hango.perf", "hango.api", "hango.cli", "hango.workshop", "hango.notebook",
                 "hango.telemetry.setup", "hango.telemetry.server", "hango.telemetry.configured",
                 "hango.telemetry.prometheus")


def test_what_a_run_needs_loads_no_exporter_no_sdk_no_settings_library_and_no_server() -> None:
    code = ("import sys, hango.agent.runtime, hango.db, hango.models.simulated\n"
            "print(sorted({m for m in sys.modules if m.startswith("
            f"{NOT_FOR_A_RUN!r})}}))\n"
            "print('psycopg' in sys.modules, 'opentelemetry.trace' in sys.modules)\n")
    assert _python(code) == ["[]", "True True"]  # the driver and the API: what it does use


BLOCK_PERF = """
import importlib.abc, sys
class Deleted(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hango.perf" or name.startswith("hango.perf."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Deleted())
"""


def test_without_the_speed_layer_every_lesson_module_and_a_run_still_work(tenant: str) -> None:
    """hango/perf deleted (here: made unimportable): the lesson imports, and a plain run reads
    memory and skills and answers, only slower."""
    modules = [f"hango.{name[:-3].replace('/', '.')}" for name in LESSON]
    code = BLOCK_PERF + f"""
import importlib
for name in {modules!r}:
    importlib.import_module(name)
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel
from hango.settings import get_settings
db = Database(get_settings())
save_agent(db, {tenant!r}, "a1", AgentConfig())
fs = PostgresBackend(db, {tenant!r}, "a1")
fs.write("/memories/AGENTS.md", "Answer in French.")
fs.write("/skills/pdf/SKILL.md", "---\\nname: pdf\\ndescription: Read PDFs.\\n---\\nbody\\n")
result = Agent(db, {tenant!r}, "a1", SimulatedModel()).run("hi")
system = "".join(b.text for b in result.requests[0].system)
print(result.status, "Answer in French." in system, "- pdf — Read PDFs." in system)
print(any(m.startswith("hango.perf") for m in sys.modules))
try:
    import hango.perf
except ModuleNotFoundError:
    print("no hango.perf")
db.close()
"""
    assert _python(code) == ["done True True", "False", "no hango.perf"]


def test_every_memory_and_skills_test_that_runs_runs_on_both_stacks() -> None:
    """The parity fixture (tests/parity.py) is the only way these tests start a run: no bare
    ``Agent(...)`` and no ``before_run`` called on a middleware or a stack directly."""
    tests = PACKAGE.parent / "tests"
    for name in ("test_memory.py", "test_skills.py", "test_seed_criteria.py"):
        text = (tests / name).read_text(encoding="utf-8")
        assert "stacks = parity.both" in text, name
        assert re.findall(r"(?<![\w.])Agent\(|(?<!stacks)\.before_run\(", text) == [], name
