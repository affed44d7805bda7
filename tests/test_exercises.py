"""Every exercise's check: its solution passes, and wrong answers are NOT YET (no false PASS).

Each solution notebook (``notebooks/solutions/``) is run here, cell by cell, with ``check``
watched: where the solution calls a check, the check is given the solution's own work (it must
print ``PASS``) and then, on the very same state, each wrong answer of :data:`WRONG` (each must
print ``NOT YET``, with what to pass and a hint). Notebooks 08 and 09 have theirs in
``tests/test_exercise_checks_0809.py``. nbval runs the same solutions as notebooks.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import hango.exercises
from hango.exercises import EXERCISES, NOTEBOOKS, check
from hango.notebook import Course, start

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
Work = dict[str, Any]


def _asked(pattern: str) -> set[str]:
    found = set()
    for path in NOTEBOOKS_DIR.glob(pattern):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            found |= set(re.findall(r'check\("(\d\d\.\d)"', "".join(cell["source"])))
    return found


def test_every_exercise_in_a_notebook_has_a_check_and_a_solution() -> None:
    asked = _asked("[0-9]*.ipynb")
    assert asked == set(EXERCISES), "a check no notebook asks for, or an exercise with no check"
    assert asked <= _asked("solutions/*.ipynb"), "an exercise has no solution"
    for number, title in NOTEBOOKS.items():  # progress() names the notebooks as their files do
        (path,) = NOTEBOOKS_DIR.glob(f"{number}-*.ipynb")
        assert path.stem[3:].replace("-", " ") == title.lower().replace("-", " ")


@pytest.fixture(scope="module")
def course() -> Iterator[Course]:
    course = start("t-exercises")
    yield course
    course.close()


@pytest.mark.parametrize("exercise_id", sorted(EXERCISES))
def test_unfinished_work_is_not_yet_with_what_to_pass_and_a_hint(
        course: Course, exercise_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    check(exercise_id, course)
    out = capsys.readouterr().out
    assert out.startswith(f"NOT YET {exercise_id}: ") and "\n  answer: " in out and "\n  hint: " in out


def test_a_prediction_cell_run_as_it_is_gives_no_answer_away(
        course: Course, capsys: pytest.CaptureFixture[str]) -> None:
    cases = ["name of 65 characters", "description of 1,024 characters",
             "allowed-tools: with nothing after it"]
    check("04.2", course, predicted=dict.fromkeys(cases))  # the notebook's cell, untouched
    check("04.2", course, predicted=dict.fromkeys(cases, True))  # a guess: how many, not which
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("NOT YET")]
    assert len(said) == 2 and not any("': False" in line or "': True" in line for line in said), said


# --- wrong answers, given to each check on the state its solution made --------------------------


def _run(course: Course, policy: list[Any], **kwargs: Any) -> Any:
    from hango.models.simulated import SimulatedModel

    return course.agent(SimulatedModel(policy=policy), **kwargs).run("go")


def _memory_before_cache(course: Course) -> Any:
    from hango.agent.runtime import default_stack
    from hango.models.simulated import SimulatedModel

    def wrong(agent: Any) -> Any:
        return default_stack(agent).reordered(
            ["skills", "filesystem", "subagents", "memory", "prompt_cache"])
    return course.agent(SimulatedModel(), stack=wrong).run("Hello")


def _no_skills(agent: Any) -> Any:
    from hango.agent.runtime import default_stack

    return default_stack(agent).without("skills")


def _first_plus_one(values: dict[str, int]) -> dict[str, int]:
    first = next(iter(values))
    return {**values, first: values[first] + 1}


def _ls(path: str) -> list[Any]:
    from hango.models.simulated import tool_call

    return [[tool_call("ls", {"path": path})], "done"]


# exercise id -> [(what is wrong, (course, the solution's work) -> the wrong work)]
WRONG: dict[str, list[tuple[str, Callable[[Course, Work], Work]]]] = {
    "00.1": [("ls on / only", lambda c, w: {"result": _run(c, _ls("/"))}),
             ("no tool call", lambda c, w: {"result": _run(c, ["done"])})],
    "00.2": [("one rule too many", lambda c, w: {"rules": w["rules"] + 1}),
             ("one rule too few", lambda c, w: {"rules": w["rules"] - 1})],
    "01.1": [("a wrong status", lambda c, w: {"statuses": [422, 201, 201]}),
             ("a string", lambda c, w: {"statuses": "422"}),
             ("floats", lambda c, w: {"statuses": [422.0, 422.0, 201.0]})],
    "01.2": [("the path itself", lambda c, w: {"path": "/memories/AGENTS.md"}),
             ("another path", lambda c, w: {"path": "/memories/agents.md"})],
    "02.1": [("memory before the breakpoint", lambda c, w: {"result": _memory_before_cache(c)})],
    "02.2": [("one prediction off by one", lambda c, w: {**w, "predicted": [
                 w["predicted"][0] + 1, *w["predicted"][1:]]}),
             ("a prediction missing", lambda c, w: {**w, "predicted": w["predicted"][:-1]})],
    "02.3": [("no cap", lambda c, w: {"result": _run(c, ["done"])})],
    "03.1": [("no skills index", lambda c, w: {"result": _run(c, ["done"], stack=_no_skills)})],
    "03.2": [("the other skill", lambda c, w: {**w, "kept": "pdf"}),
             ("a list, not a name", lambda c, w: {**w, "kept": [w["kept"]]})],
    "04.1": [("two runs", lambda c, w: {"results": w["results"][:2]}),
             ("runs that skipped nothing", lambda c, w: {"results": [_run(c, ["done"])] * 3})],
    "04.2": [("one flipped", lambda c, w: {"predicted": {
                 **w["predicted"], "description of 1,024 characters": False}}),
             ("no prediction", lambda c, w: {"predicted": dict.fromkeys(w["predicted"])}),
             ("strings", lambda c, w: {"predicted": {k: str(v) for k, v in w["predicted"].items()}})],
    "05.1": [("the skill never read", lambda c, w: {"result": _run(c, _ls("/"))})],
    "05.2": [("an empty string for the empty set", lambda c, w: {**w, "with_empty_list": ""}),
             ("a string of names", lambda c, w: {**w, "without_key": "read_file ls"}),
             ("a tool too many", lambda c, w: {**w, "with_empty_list": {"read_file"}})],
    "06.1": [("the stacks swapped", lambda c, w: {"default": w["wrong"], "wrong": w["default"]})],
    "06.2": [("a first read off by one", lambda c, w: {**w, "first_read": _first_plus_one(
                 w["first_read"])}),
             ("no prediction", lambda c, w: {**w, "first_read": {}})],
    "06.3": [("two full reads", lambda c, w: {**w, "predicted": [None, None]}),
             ("a string", lambda c, w: {**w, "predicted": "expired"})],
    "06.4": [("turn 13 reads the prefix", lambda c, w: {**w, "predicted": [
                 *w["predicted"][:2], 2427]}),
             ("two numbers", lambda c, w: {**w, "predicted": w["predicted"][:2]})],
    "07.1": [("no delegation", lambda c, w: {"result": _run(c, ["done"])})],
    "07.2": [("no call on stranger", lambda c, w: {"result": _run(c, ["done"])})],
    "07.3": [("a tenant that does not exist", lambda c, w: {**w, "tenant_b": "nb-07-nobody"}),
             ("tenant A as B", lambda c, w: {**w, "tenant_b": c.tenant}),
             ("a query that counts nothing", lambda c, w: {
                 **w, "sql": "SELECT count(*) FROM agent_files WHERE false"})],
    "10.1": [("one prediction off by one", lambda c, w: {**w, "predicted": _first_plus_one(
                 w["predicted"])}),
             ("the two conversations swapped", lambda c, w: {**w, "runs": {
                 "block16": w["runs"]["openai"], "openai": w["runs"]["block16"]}}),
             ("no prediction", lambda c, w: {**w, "predicted": None})],
}
TESTED_ELSEWHERE = {"08.1", "08.2", "08.3", "09.1", "09.2", "09.3"}  # test_exercise_checks_0809.py


def test_every_exercise_has_wrong_answers_tested() -> None:
    assert set(WRONG) | TESTED_ELSEWHERE == set(EXERCISES)
    assert not set(WRONG) & TESTED_ELSEWHERE


@dataclass
class Verdicts:
    right: str
    wrong: list[tuple[str, str]]


def _printed(exercise_id: str, course: Course, work: Work) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        check(exercise_id, course, **work)
    return out.getvalue()


def _solve(number: str) -> dict[str, Verdicts]:
    """Run ``solutions/{number}-solutions.ipynb`` as a kernel would, its checks watched."""
    (path,) = NOTEBOOKS_DIR.glob(f"solutions/{number}-*.ipynb")
    verdicts: dict[str, Verdicts] = {}

    def watched(exercise_id: str, course: Course, **work: Any) -> None:
        right = _printed(exercise_id, course, work)
        wrong = [(label, _printed(exercise_id, course, make(course, dict(work))))
                 for label, make in WRONG[exercise_id]]
        verdicts[exercise_id] = Verdicts(right, wrong)

    module = ModuleType(f"solutions_{number}")  # a module of its own, as a kernel's __main__ is
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    saved, hango.exercises.check = hango.exercises.check, watched  # type: ignore[assignment]
    here = Path.cwd()
    os.chdir(path.parent)  # where nbval runs it
    try:
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code":
                with redirect_stdout(io.StringIO()):
                    exec(compile("".join(cell["source"]), f"{path.name} cell {i}", "exec"), namespace)
    finally:
        hango.exercises.check = saved
        os.chdir(here)
        del sys.modules[module.__name__]
        if isinstance(namespace.get("course"), Course) and "course.close()" not in path.read_text():
            namespace["course"].close()
    return verdicts


_SOLVED: dict[str, dict[str, Verdicts]] = {}


@pytest.mark.parametrize("exercise_id", sorted(WRONG))
def test_the_solution_passes_and_every_wrong_answer_is_not_yet(exercise_id: str) -> None:
    number = exercise_id[:2]
    if number not in _SOLVED:
        _SOLVED[number] = _solve(number)
    verdicts = _SOLVED[number][exercise_id]
    assert verdicts.right.startswith(f"PASS {exercise_id}: "), verdicts.right
    for label, printed in verdicts.wrong:
        assert printed.startswith(f"NOT YET {exercise_id}: "), f"{label}: {printed}"
        assert "\n  answer: " in printed and "\n  hint: " in printed, f"{label}: {printed}"
