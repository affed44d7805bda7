"""Every exercise a notebook asks for has a check, and a check never raises on unfinished work.

The solutions (``notebooks/solutions/``) run under nbval and must print ``PASS``; here, with
pytest alone, each check is run on nothing and on wrong work, and must say ``NOT YET``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hango.exercises import EXERCISES, check
from hango.notebook import Course, start

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _asked(pattern: str) -> set[str]:
    found = set()
    for path in NOTEBOOKS.glob(pattern):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            found |= set(re.findall(r'check\("(\d\d\.\d)"', "".join(cell["source"])))
    return found


def test_every_exercise_in_a_notebook_has_a_check_and_a_solution() -> None:
    asked = _asked("[0-9]*.ipynb")
    assert asked, "no exercise found in the notebooks"
    assert asked <= set(EXERCISES)
    assert asked <= _asked("solutions/*.ipynb"), "an exercise has no solution"


@pytest.fixture(scope="module")
def course() -> Course:
    course = start("t-exercises")
    yield course  # type: ignore[misc]
    course.close()


@pytest.mark.parametrize("exercise_id", sorted(EXERCISES))
def test_unfinished_work_is_not_yet_with_a_hint(course: Course, exercise_id: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    check(exercise_id, course)
    out = capsys.readouterr().out
    assert out.startswith(f"NOT YET {exercise_id}: ") and "\n  hint: " in out


def test_wrong_answers_are_not_yet(course: Course, capsys: pytest.CaptureFixture[str]) -> None:
    check("01.1", course, statuses=[422, 201, 201])
    check("01.2", course, path="/memories/AGENTS.md")
    check("04.2", course, predicted={"name of 65 characters": True,
                                     "description of 1,024 characters": True,
                                     "allowed-tools: with nothing after it": True})
    check("05.2", course, with_empty_list={"ls"}, without_key={"ls"})
    check("07.3", course, sql="SELECT count(*) FROM agent_files WHERE false")
    out = capsys.readouterr().out
    assert out.count("NOT YET") == 5 and "PASS" not in out


def test_a_right_answer_passes(course: Course, capsys: pytest.CaptureFixture[str]) -> None:
    check("01.2", course, path="/memories\uff0fAGENTS.md")
    check("05.2", course, with_empty_list=set(), without_key={"read_file", "ls"})
    out = capsys.readouterr().out
    assert out.startswith("PASS 01.2") and "\nPASS 05.2" in out and "NOT YET" not in out


def test_a_cache_check_compares_with_what_the_model_really_did(
        course: Course, capsys: pytest.CaptureFixture[str]) -> None:
    """06.3: the prediction is checked against the simulator's own verdict on each call."""
    from types import SimpleNamespace

    from hango.models.simulated import SimulatedModel

    clock = [0.0]
    model = SimulatedModel(policy=["a", "b", "c"], clock=lambda: clock[0], min_cacheable=1)
    agent = course.agent(model)
    results = [agent.run("one")]
    for wait in (300, 299):
        clock[0] += wait
        results.append(agent.run("next", history=results[-1].messages))
    conversation = SimpleNamespace(model=model,
                                   responses=[r for run in results for r in run.responses])
    check("06.3", course, conversation=conversation, predicted=[None, None])
    check("06.3", course, conversation=conversation, predicted=["expired", None])
    out = capsys.readouterr().out
    assert out.startswith("NOT YET 06.3: ") and "\nPASS 06.3: after 300 s: expired" in out
