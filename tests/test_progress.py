"""``progress()``: a learner's passes outlive the notebooks' fresh starts, and are the learner's own.

Run in a subprocess, as a notebook kernel runs, with ``HANGO_LEARNER`` set the way a workshop
laptop or CI sets it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from hango.exercises import EXERCISES

SCRIPT = """
from hango import SimulatedModel, check, progress, start, tool_call

course = start(TENANT)
check("00.1", course, result=None)  # NOT YET: nothing is recorded
course.owner.write("/notes/todo.md", "- buy milk\\n")
run = course.agent(SimulatedModel(policy=[[tool_call("ls", {"path": "/notes/"})], "ok"])).run("hi")
check("00.1", course, result=run)
check("00.1", course, result=run)  # passing again changes nothing
course.close()

course = start(TENANT)  # the notebook again, from its first cell: its tenant is new and empty
print("files after the fresh start:", course.owner.glob("/**"))
progress(course)
course.learner = OTHER  # someone else's progress, on the same machine and database
progress(course)
course.close()
"""


def test_progress_survives_a_fresh_start_and_is_per_learner() -> None:
    learner, other = "t-" + uuid.uuid4().hex[:10], "t-" + uuid.uuid4().hex[:10]
    code = SCRIPT.replace("TENANT", repr("t-progress-" + learner)).replace("OTHER", repr(other))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "HANGO_LEARNER": learner})
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert "files after the fresh start: []" in out
    total = len(EXERCISES)
    mine = out.index(f"progress of learner {learner!r}: 1 of {total} exercises passed")
    assert out[mine + 1].split() == ["00", "setup", "and", "tour", "✓", "00.1", "·", "00.2"]
    assert f"next: 00.2 {EXERCISES['00.2'].title} (notebook 00, setup and tour)" in out
    theirs = out.index(f"progress of learner {other!r}: 0 of {total} exercises passed")
    assert out[theirs + 1].split()[-4:] == ["·", "00.1", "·", "00.2"]
    assert out[-1].startswith("next: 00.1 ")
    assert out.count("PASS 00.1: the ls tool result lists /notes/todo.md, read from PostgreSQL "
                     "by the agent's tool") == 2


def test_a_pass_that_cannot_be_recorded_is_still_a_pass_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    from hango.exercises import check
    from hango.notebook import start

    course = start("t-progress-unrecorded")
    try:
        course.learner = "not a learner id"  # the table refuses it: the check must not raise
        check("01.2", course, path="/memories\uff0fAGENTS.md")
    finally:
        course.close()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PASS 01.2: ") and out[1].startswith("  (not recorded in your progress: ")
