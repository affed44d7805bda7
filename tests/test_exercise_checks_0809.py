"""The checks of notebooks 08 and 09 read the real run: a wrong reading is NOT YET, a right one PASS.

Each case makes a real run (the simulator, PostgreSQL, the API over loopback, the in-memory
OpenTelemetry SDK) and gives the check first a wrong answer, then the right one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hango.agents import AgentConfig
from hango.api.client import ApiError
from hango.exercises import check
from hango.models.acting import acting_policy
from hango.models.simulated import SimulatedModel, tool_call
from hango.notebook import Course, start

MEMORY = "/memories/AGENTS.md"


@pytest.fixture
def course() -> Iterator[Course]:
    course = start("t-exercises-0809", config=AgentConfig(reserved_writes="ask"),
                   model=SimulatedModel(policy=acting_policy))  # notebook 09's model
    yield course
    course.close()


def _out(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]


def test_08_checks_compare_with_the_spans(course: Course,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    course.owner.put_agent(AgentConfig(tools=["ls"], memory=[MEMORY, "/memories/style.md"]))
    course.owner.write(MEMORY, "Be brief.")
    missing = course.agent(SimulatedModel()).run("hi")
    course.owner.write("/memories/style.md", "Short sentences.")
    fixed = course.agent(SimulatedModel()).run("hi")
    check("08.1", course, missing=missing, fixed=fixed, predicted=fixed.memory_bytes)
    check("08.1", course, missing=missing, fixed=fixed, predicted=missing.memory_bytes)

    short = course.agent(SimulatedModel(policy=[[tool_call("ls", {"path": "/"})], "ok"])).run("hi")
    tokens = short.responses[0].usage.input_tokens
    check("08.2", course, result=short, reason="system_changed", input_tokens=tokens)
    check("08.2", course, result=short, reason="below_minimum", input_tokens=tokens)

    for path in ("/skills/csv/SKILL.md", "/skills/team/csv/SKILL.md"):
        course.owner.write(path, "---\nname: csv\ndescription: d\n---\n")
    both = course.agent(SimulatedModel()).run("hi")
    check("08.3", course, result=both, winner="/skills/csv/SKILL.md", span_event=False)
    check("08.3", course, result=both, winner="/skills/team/csv/SKILL.md", span_event=True)
    check("08.3", course, result=both, winner="/skills/team/csv/SKILL.md", span_event=False)
    assert [line.split(":")[0] for line in _out(capsys)] == [
        "PASS 08.1", "NOT YET 08.1", "NOT YET 08.2", "PASS 08.2",
        "NOT YET 08.3", "NOT YET 08.3", "PASS 08.3"]


def test_a_run_cleared_from_telemetry_is_not_yet(course: Course,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = course.agent(SimulatedModel(policy=[[tool_call("ls", {"path": "/"})], "ok"])).run("hi")
    course.telemetry.clear()
    check("08.2", course, result=run, reason="below_minimum",
          input_tokens=run.responses[0].usage.input_tokens)
    assert "NOT YET 08.2: course.telemetry has no span of run-1" in capsys.readouterr().out


def test_09_checks_read_the_runs_and_proposals(course: Course,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    asked = course.member.run("Remember: tea.")  # ask mode: a proposal, not a refusal
    check("09.1", course, run=asked)
    config = course.owner.get_agent()
    course.owner.put_agent(config.model_copy(update={"reserved_writes": "refuse"}))
    check("09.1", course, run=course.member.run("Remember: jazz."))
    course.owner.put_agent(config)

    course.owner.approve(asked["proposal"]["proposal_id"])
    first, second = course.member.run("Remember: cello."), course.member.run("Remember: bed.")
    course.owner.approve(first["proposal"]["proposal_id"])
    with pytest.raises(ApiError) as conflict:
        course.owner.approve(second["proposal"]["proposal_id"])
    text, version = course.owner.read_versioned(MEMORY)
    course.owner.approve(second["proposal"]["proposal_id"], content=text + "- elsewhere\n",
                         base_version=version)  # a merge that drops the second's line
    check("09.2", course, first=first, second=second, conflict=conflict.value)
    third, fourth = course.member.run("Remember: cards."), course.member.run("Remember: chess.")
    course.owner.approve(third["proposal"]["proposal_id"])
    with pytest.raises(ApiError) as conflict:
        course.owner.approve(fourth["proposal"]["proposal_id"])
    text, version = course.owner.read_versioned(MEMORY)
    course.owner.approve(fourth["proposal"]["proposal_id"], content=text + "- chess.\n",
                         base_version=version)  # the merge keeps both lines
    check("09.2", course, first=third, second=fourth, conflict=conflict.value)

    course.member.resume(asked["run_id"])
    check("09.3", course, run=asked, second_resume=None)
    with pytest.raises(ApiError) as again:
        course.member.resume(asked["run_id"])
    check("09.3", course, run=asked, second_resume=again.value)
    course.owner.put_agent(config.model_copy(update={"reserved_writes": "refuse"}))
    check("09.1", course, run=course.member.run("Remember: jazz."))  # the file exists: edit_file
    out = _out(capsys)
    assert [line.split(":")[0] for line in out] == [
        "NOT YET 09.1", "PASS 09.1", "NOT YET 09.2", "PASS 09.2", "NOT YET 09.3", "PASS 09.3",
        "PASS 09.1"]
    assert "lacks ['- bed.']" in out[2]
