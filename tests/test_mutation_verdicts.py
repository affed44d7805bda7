"""The equivalent-mutant verdicts (tests/mutation_verdicts.toml) stay attached to real code.

mutmut is too slow for every `make test`, so this checks what it can without running it: each
verdict names a module mutmut mutates and a function that module defines, and gives a reason."""

from __future__ import annotations

import ast
import pathlib
import re
import tomllib

from mutation_report import verdicts  # tests/ is on sys.path (rootdir-relative, no __init__)

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAME = re.compile(r"^(hango(?:\.\w+)+)\.x(?:ǁ(\w+)ǁ|_)(\w+?)__mutmut_\d+$")


def _mutated_modules() -> dict[str, set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    out = {}
    for path in config["tool"]["mutmut"]["source_paths"]:
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        out[path.removesuffix(".py").replace("/", ".")] = {
            node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return out


def test_every_verdict_names_a_mutated_function_and_a_reason() -> None:
    modules = _mutated_modules()
    known = verdicts()
    assert known, "no verdicts read: the file or its tables moved"
    for name, reason in known.items():
        match = NAME.match(name)
        assert match, f"{name!r} is not a mutmut mutant name"
        mod, cls, func = match.groups()
        assert mod in modules, f"{name}: {mod} is not in [tool.mutmut] source_paths"
        for part in filter(None, (cls, func)):
            assert part in modules[mod], f"{name}: {mod} defines no {part!r} (renamed?)"
        assert len(reason.split()) >= 4, f"{name}: give the reason, not a label: {reason!r}"
