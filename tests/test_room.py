"""The room view: a small workshop whose learners' notebooks name the shared server
(``HANGO_SERVER_URL``, ``HANGO_TOKEN``) pass and fail checks and runs, and the instructor's
``hango workshop room`` shows each seat's figures.

Each learner's notebook runs in a subprocess, as a kernel does, against a server this test
serves on loopback (its model acts like ``hango serve``'s, and fails on one prompt, as a
provider that is down would).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from hango.api.app import create_app, serve_in_thread
from hango.api.client import ApiError, FilesClient
from hango.cli import main
from hango.db import Database
from hango.exercises import EXERCISES
from hango.models.acting import acting_policy
from hango.models.base import ModelError, Request
from hango.models.simulated import Reply, SimulatedModel
from hango.room import record_check, render, room
from hango.workshop import provision, remove

BROKEN = "break the model"


def _policy(request: Request) -> Reply:
    if request.messages[-1].text == BROKEN:
        raise ModelError("the provider answered 529 overloaded")
    return acting_policy(request)


@pytest.fixture
def workshop(db: Database) -> Iterator[tuple[str, str, list[str]]]:
    """Three seats and the shared server: (prefix, its URL, the seats' owner tokens)."""
    prefix = "room-" + uuid.uuid4().hex[:8]
    seats = provision(db, 3, prefix=prefix).seats
    app = create_app(db)
    app.state.hango_model = SimulatedModel(policy=_policy)
    url, stop = serve_in_thread(app)
    yield prefix, url, [s.token for s in seats]
    stop()
    remove(db, prefix)


FIRST = """
from hango import AgentConfig, SimulatedModel, check, progress, start, tool_call

course = start("nb-09", config=AgentConfig(reserved_writes="ask"), http_only=True)
print("on the server:", course.on_server, course.tenant, course.agent_id)
check("09.1", course, run=None)  # NOT YET: the room's last error
run = course.member.run("Remember that I prefer tea.")
print("status:", run["status"], "| pending:", len(course.owner.proposals()))
course.close()

course = start(LOCAL)  # a notebook whose agent runs in the kernel: its check goes to the room
course.owner.write("/notes/todo.md", "- buy milk\\n")
run = course.agent(SimulatedModel(policy=[[tool_call("ls", {"path": "/notes/"})], "ok"])).run("hi")
check("00.1", course, result=run)
progress(course)
course.close()
"""

SECOND = """
from hango import check, start

course = start("nb-09", http_only=True)  # refuse mode: the tenant's default
print("the model failed:", course.member.run(BROKEN)["status"])
done = course.member.run("Remember that I like jazz.")
check("09.1", course, run=done)
course.close()
"""


def _kernel(code: str, url: str, token: str, learner: str) -> list[str]:
    env = {**os.environ, "HANGO_SERVER_URL": url, "HANGO_TOKEN": token, "HANGO_LEARNER": learner}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_the_room_sees_each_learners_checks_runs_and_proposals(
        db: Database, workshop: tuple[str, str, list[str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    prefix, url, tokens = workshop
    learner = "t-" + uuid.uuid4().hex[:10]
    first = _kernel(FIRST.replace("LOCAL", repr("t-room-" + learner)), url, tokens[0], learner)
    assert f"on the server: True {prefix}-01 nb-09" in first
    assert "status: interrupted | pending: 1" in first
    assert any(line.startswith("PASS 00.1: ") for line in first)
    assert not any("not recorded" in line for line in first), first
    total = len(EXERCISES)
    assert (f"progress of learner {learner!r}: 1 of {total} exercises passed (with seat "
            f"{prefix}-01 on {url}: 1 passed there)") in first
    second = _kernel(SECOND.replace("BROKEN", repr(BROKEN)), url, tokens[1], learner + "b")
    assert "the model failed: failed" in second
    assert any(line.startswith("PASS 09.1: ") for line in second), second

    one, two, three = room(db, prefix)
    assert (one.tenant, one.runs, one.pending, one.passed) == (f"{prefix}-01", {"interrupted": 1}, 1, 1)
    assert one.stuck_on == "09.1" and one.last_error is not None
    assert one.last_error.startswith("NOT YET 09.1: no run yet")
    assert (two.runs, two.pending, two.passed, two.stuck_on) == ({"failed": 1, "done": 1}, 0, 1, None)
    assert two.last_error is not None and two.last_error.startswith("run ")
    assert "failed (model_error)" in two.last_error and "529 overloaded" in two.last_error
    assert (three.runs, three.pending, three.passed, three.last_error) == ({}, 0, 0, None)
    assert one.last_activity is not None and three.last_activity is None

    # the command, once and redrawn (bounded by --for)
    assert main(["workshop", "room", "--prefix", prefix]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("3 seat(s) at ")
    rows = {line.split()[0]: line for line in lines[2:]}
    assert rows[f"{prefix}-01"].split()[4:7] == ["0/1/0/0", "1", f"1/{total}"]
    assert rows[f"{prefix}-02"].split()[4:7] == ["1/0/0/1", "0", f"1/{total}"]
    assert rows[f"{prefix}-03"].split()[1:] == ["never", "0/0/0/0", "0", f"0/{total}", "-"]
    assert main(["workshop", "room", "--prefix", prefix, "--watch", "1", "--for", "1.5"]) == 0
    assert capsys.readouterr().out.count("3 seat(s) at ") == 2


def test_a_learners_checks_stay_in_their_seat(db: Database,
                                              workshop: tuple[str, str, list[str]]) -> None:
    prefix, url, tokens = workshop
    with FilesClient(url, tokens[0], "assistant") as mine, \
            FilesClient(url, tokens[1], "assistant") as theirs:
        mine.record_check("02.1", False, "memory is before the breakpoint")
        mine.record_check("02.1", True, "memory after the breakpoint")
        mine.record_check("02.1", False, "a later wrong try")  # the first pass stays
        assert mine.progress() == {"tenant": f"{prefix}-01",
                                   "passed": {"02.1": "memory after the breakpoint"}}
        assert theirs.progress() == {"tenant": f"{prefix}-02", "passed": {}}
        for bad, status in (("2.1", 422), ("02.1x", 422)):
            with pytest.raises(ApiError) as refused:
                mine.record_check(bad, True, "x")
            assert refused.value.status == status
        with pytest.raises(ApiError) as too_long:
            mine._send("PUT", "/v1/progress/02.2", json_body={"passed": True, "message": "x" * 2001})
        assert too_long.value.status == 422
    seat = room(db, prefix)[0]
    assert (seat.passed, seat.stuck_on) == (1, "02.1")
    assert seat.last_error == "NOT YET 02.1: a later wrong try"
    with pytest.raises(ValueError, match=r"is not NN\.N"):
        record_check(db, f"{prefix}-01", "x", True, "")


def test_the_room_renders_the_same_rows_the_same_way(db: Database,
                                                     workshop: tuple[str, str, list[str]]) -> None:
    prefix, _, _ = workshop
    now = datetime(2030, 1, 1, tzinfo=UTC)
    table = render(room(db, prefix), 27, now)
    assert table == render(room(db, prefix), 27, now)
    assert table.splitlines()[0] == "3 seat(s) at 00:00:00 UTC"
    assert render([], 27, now).endswith("(no seat matches: provision them with "
                                        "`hango workshop provision`)")
    with pytest.raises(ValueError, match="tenant id"):
        room(db, "Bad Prefix")


def test_watch_and_for_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workshop", "room", "--watch", "0.1"]) == 1
    assert "--watch takes 1 to 3600 seconds" in capsys.readouterr().err
    assert main(["workshop", "room", "--watch", "5", "--for", "100000"]) == 1
    assert "--for takes up to 86400 seconds" in capsys.readouterr().err


def test_a_shared_server_that_refuses_the_token_is_one_clear_error(
        workshop: tuple[str, str, list[str]]) -> None:
    _, url, _ = workshop
    from hango.notebook import _shared

    with pytest.raises(ValueError, match="HANGO_TOKEN is unset"):
        _shared(url, None)
    with pytest.raises(ValueError, match=r"did not take HANGO_TOKEN: 401"):
        _shared(url, "hango_" + "x" * 32)
