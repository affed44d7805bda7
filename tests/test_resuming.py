"""Resuming exactly once (hango/agent/resuming.py): the saved calls of a turn run once across a
resume that failed, a server killed mid-resume, a claim that was released under a running
resume; a claim is a lease that its resume renews, that expires when its resume died, and that
an owner or admin can release (over HTTP and with the CLI).

Real parts: PostgreSQL, loopback HTTP, a real ``hango serve`` subprocess killed with SIGKILL.
The model is the offline simulator with a policy that reads the request, so a resume that asks
the model again gets the same answer (a script would move on and hide a replayed call).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from hango.agent import proposals, resuming, runs
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.base import Request
from hango.models.simulated import Reply, SimulatedModel, tool_call
from hango.settings import load_settings

HANGO = str(Path(sys.executable).with_name("hango"))
MEMORY = "/memories/AGENTS.md"
DOUBLE_D = tool_call("edit_file", {"path": "/notes/d.txt", "old_string": "x",
                                   "new_string": "xx", "replace_all": True})
DOUBLE_E = tool_call("edit_file", {"path": "/notes/e.txt", "old_string": "y",
                                   "new_string": "yy", "replace_all": True})


class Policy:
    """The model: the prompt ``go`` makes one turn of ``calls`` (a proposal first, then two edits
    that double a file's text: run twice, x -> xx -> xxxx shows it); a request whose last
    message holds tool results is answered with them, except that the first ``failures`` of
    those answers raise, as a provider's 5xx would."""

    def __init__(self, calls: list[Any], failures: int = 0, later: list[Any] | None = None):
        self.calls, self.failures, self.later = calls, failures, later
        self.seen: list[Request] = []

    def __call__(self, request: Request) -> Reply:
        self.seen.append(request)
        last = request.messages[-1]
        if not last.tool_results:
            return Reply("", tuple(self.calls))
        if self.later is not None and last.tool_results[0].content.startswith("approved"):
            return Reply("", tuple(self.later))  # a second turn, after the resume
        if self.failures:
            self.failures -= 1
            raise RuntimeError("provider 529: overloaded\nrequest id: req_0123")
        return Reply("done: " + " | ".join(r.content for r in last.tool_results))


def _world(db: Database) -> tuple[str, PostgresBackend]:
    tid = create_tenant(db, "r-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig(reserved_writes="ask"))
    files = PostgresBackend(db, tid, "a1")
    files.write("/notes/d.txt", "x")
    files.write("/notes/e.txt", "y")
    return tid, files


def _text(files: PostgresBackend, path: str) -> str:
    return files.read(path).content


def _interrupted(db: Database, tid: str, policy: Policy) -> str:
    """A run of ``policy``'s turn, stopped at its proposal, the proposal approved: its id."""
    first = Agent(db, tid, "a1", SimulatedModel(policy=policy)).run("go")
    assert first.status == "interrupted" and first.interrupt is not None
    proposals.approve(db, tid, "a1", first.interrupt["proposal_id"], by="t", role="owner")
    return first.run_id


@pytest.fixture
def served(db: Database) -> Iterator[tuple[str, Any]]:
    app = create_app(db)
    url, stop = serve_in_thread(app)
    yield url, app
    stop()


def _clients(db: Database, url: str, tid: str) -> dict[str, httpx.Client]:
    return {role: httpx.Client(base_url=f"{url}/v1/agents/a1", timeout=60, headers={
        "Authorization": f"Bearer {create_token(db, tid, role)}"}) for role in ("owner", "member")}


def test_a_resume_whose_model_call_fails_runs_no_call_twice(db: Database,
                                                            served: tuple[str, Any]) -> None:
    """Approve, resume: the edit runs, then the model fails (a 502 naming it, nothing of the
    provider's message but its first line); resume again: the edit is not run again (before:
    x -> xx -> xxxx), and the model reads the result the first resume recorded."""
    url, app = served
    tid, files = _world(db)
    policy = Policy([tool_call("write_file", {"path": MEMORY, "content": "m"}), DOUBLE_D],
                    failures=1)
    app.state.hango_model = SimulatedModel(policy=policy)
    c = _clients(db, url, tid)
    out = c["member"].post("/runs", json={"prompt": "go"}).json()
    assert out["status"] == "interrupted"
    c["owner"].post(f"/proposals/{out['proposal']['proposal_id']}/approve", json={})
    failed = c["member"].post(f"/runs/{out['run_id']}/resume")
    assert failed.status_code == 502
    assert failed.json() == {"detail": "the model hango-sim-1 failed: RuntimeError: provider "
                                       "529: overloaded"}
    assert _text(files, "/notes/d.txt") == "xx"
    assert c["member"].get(f"/runs/{out['run_id']}").json()["status"] == "interrupted"
    done = c["member"].post(f"/runs/{out['run_id']}/resume")
    assert done.status_code == 200 and done.json()["status"] == "done"
    assert _text(files, "/notes/d.txt") == "xx"
    assert done.json()["text"].endswith(" | edited /notes/d.txt (version 2)")


def test_each_turn_of_a_resumed_run_is_saved_before_its_calls_run(db: Database) -> None:
    """After the resume the model makes a new turn (the edit); the model fails after it; the
    next resume starts from that turn, with the edit done: the model is not asked for the turn
    again, and the edit does not run again."""
    tid, files = _world(db)
    policy = Policy([tool_call("write_file", {"path": MEMORY, "content": "m"})], failures=1,
                    later=[DOUBLE_D])
    agent = Agent(db, tid, "a1", SimulatedModel(policy=policy))
    run_id = _interrupted(db, tid, policy)
    with pytest.raises(Exception, match="provider 529"):
        agent.resume(run_id)
    assert _text(files, "/notes/d.txt") == "xx"
    asked = len(policy.seen)
    result = agent.resume(run_id)
    assert result.status == "done" and result.text == "done: edited /notes/d.txt (version 2)"
    assert _text(files, "/notes/d.txt") == "xx"
    assert len(policy.seen) == asked + 1  # only the call after the saved turn


def _blocked_behind(holder: psycopg.Connection[Any], timeout: float = 60) -> int:
    """The backend pid of the session waiting for a lock ``holder`` holds."""
    with psycopg.connect(holder.info.dsn, autocommit=True) as watcher:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = watcher.execute("SELECT pid FROM pg_stat_activity WHERE %s = ANY("
                                  "pg_blocking_pids(pid))", [holder.info.backend_pid]).fetchone()
            if row:
                return int(row[0])
            time.sleep(0.02)
    raise AssertionError("no session waited for the lock")


def _gone(db: Database, pid: int, timeout: float = 60) -> None:
    with psycopg.connect(db.admin_conninfo, autocommit=True) as watcher:
        deadline = time.monotonic() + timeout
        while watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            assert time.monotonic() < deadline, f"backend {pid} is still there"
            time.sleep(0.05)


def _lock_file(db: Database, tid: str, path: str) -> psycopg.Connection[Any]:
    holder = psycopg.connect(db.admin_conninfo)
    holder.execute("SELECT set_config('hango.tenant_id', %s, true)", [tid])  # RLS may be forced
    locked = holder.execute("SELECT 1 FROM agent_files WHERE tenant_id = %s AND agent_id = 'a1' "
                            "AND path = %s FOR UPDATE", [tid, path]).fetchall()
    assert locked == [(1,)], f"{path} is not there to lock"
    return holder


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_resume_in_a_killed_server_runs_no_call_twice(db: Database) -> None:
    """``hango serve`` resumes a run; it has done the first edit and waits for the second when
    it is killed (SIGKILL). Its claim is still held: a resume is told until when, and the CLI
    releases it. The next resume runs only the second edit: each file is doubled once."""
    tid, files = _world(db)
    run_id = _interrupted(db, tid, Policy([tool_call("write_file", {"path": MEMORY,
                                                                     "content": "m"}),
                                           DOUBLE_D, DOUBLE_E]))
    token = create_token(db, tid, "member")
    port = _free_port()
    holder = _lock_file(db, tid, "/notes/e.txt")
    server = subprocess.Popen([HANGO, "serve", "--port", str(port), "--log-level", "warning"],
                              env={**os.environ, "HANGO_RUN_LEASE_SECONDS": "600"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    answers: list[Any] = []
    try:
        base = f"http://127.0.0.1:{port}/v1/agents/a1"
        auth = {"Authorization": f"Bearer {token}"}
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/runs/{run_id}", headers=auth)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)

        def resume() -> None:
            try:
                answers.append(httpx.post(f"{base}/runs/{run_id}/resume", headers=auth,
                                          timeout=120))
            except httpx.TransportError as exc:
                answers.append(exc)

        caller = threading.Thread(target=resume)
        caller.start()
        waiting = _blocked_behind(holder)  # the second edit, in the server's transaction
        assert _text(files, "/notes/d.txt") == "xx"  # the first one committed with its mark
        server.send_signal(signal.SIGKILL)
        server.wait(30)
        caller.join(60)
        holder.rollback()  # the orphaned session goes on, finds its client gone, rolls back
        _gone(db, waiting)
    finally:
        holder.close()
        if server.poll() is None:
            server.kill()
            server.wait(30)
    assert isinstance(answers[0], httpx.TransportError)
    assert _text(files, "/notes/e.txt") == "y"
    shown = runs.load(db, tid, run_id)
    assert shown["status"] == "resuming" and shown["claim_expires_at"] is not None
    agent = Agent(db, tid, "a1", SimulatedModel(policy=Policy([])))
    with pytest.raises(runs.RunConflict, match=r"its claim expires at \d{4}-\d\d-\d\dT"):
        agent.resume(run_id)
    released = subprocess.run([HANGO, "runs", "release", tid, "a1", run_id],
                              capture_output=True, text=True, timeout=120)
    assert released.returncode == 0, released.stderr
    again = subprocess.run([HANGO, "runs", "release", tid, "a1", run_id],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "no claim to release" in again.stderr
    result = agent.resume(run_id)
    assert result.status == "done"
    assert (_text(files, "/notes/d.txt"), _text(files, "/notes/e.txt")) == ("xx", "yy")
    assert result.text.endswith("edited /notes/d.txt (version 2) | "
                                "edited /notes/e.txt (version 2)")


def test_a_released_claim_stops_its_resume_at_its_next_call(db: Database) -> None:
    """An owner releases the claim of a resume that is still running (it waits for a lock):
    its next mark finds the claim gone, so its write rolls back with it and it answers a
    RunConflict. The next resume does that edit, once."""
    tid, files = _world(db)
    policy = Policy([tool_call("write_file", {"path": MEMORY, "content": "m"}), DOUBLE_D,
                     DOUBLE_E])
    run_id = _interrupted(db, tid, policy)
    agent = Agent(db, tid, "a1", SimulatedModel(policy=policy))
    holder = _lock_file(db, tid, "/notes/e.txt")
    caught: list[BaseException] = []

    def resume() -> None:
        try:
            agent.resume(run_id)
        except BaseException as exc:
            caught.append(exc)

    caller = threading.Thread(target=resume)
    caller.start()
    try:
        _blocked_behind(holder)
        assert resuming.release(db, tid, run_id)  # as POST .../release does
    finally:
        holder.rollback()
        holder.close()
        caller.join(60)
    assert isinstance(caught[0], runs.LeaseLost), caught
    assert (_text(files, "/notes/d.txt"), _text(files, "/notes/e.txt")) == ("xx", "y")
    assert agent.resume(run_id).status == "done"
    assert (_text(files, "/notes/d.txt"), _text(files, "/notes/e.txt")) == ("xx", "yy")


def test_a_dead_resumes_claim_expires(db: Database) -> None:
    """A claim taken and never renewed (its resume died at once) refuses other resumes, saying
    until when, and lets the next one in once it has expired."""
    tid, _ = _world(db)
    run_id = _interrupted(db, tid, Policy([tool_call("write_file", {"path": MEMORY,
                                                                     "content": "m"})]))
    resuming.claim(db, tid, "a1", run_id, seconds=1)  # no ``with``: nothing renews it
    agent = Agent(db, tid, "a1", SimulatedModel(policy=Policy([])))
    with pytest.raises(runs.RunConflict, match="already being resumed by another request; its "
                                               r"claim expires at \d{4}-"):
        agent.resume(run_id)
    deadline = time.monotonic() + 60
    while True:  # not a timed assertion: the claim's own expiry, waited for
        try:
            assert agent.resume(run_id).status == "done"
            break
        except runs.RunConflict:
            assert time.monotonic() < deadline, "the claim never expired"
            time.sleep(0.2)


def test_a_running_resume_renews_its_claim(db: Database) -> None:
    """A model call longer than the lease: the heartbeat renews the claim meanwhile (the test
    waits for two renewals, then lets the model answer), and the resume ends normally."""
    tid, _ = _world(db)
    release_model = threading.Event()
    base = Policy([tool_call("write_file", {"path": MEMORY, "content": "m"})])

    def slow(request: Request) -> Reply:
        if request.messages[-1].tool_results:
            assert release_model.wait(60)
        return base(request)

    run_id = _interrupted(db, tid, base)
    agent = Agent(db, tid, "a1", SimulatedModel(policy=slow),
                  settings=load_settings(run_lease_seconds=0.3))
    outcome: list[Any] = []
    caller = threading.Thread(target=lambda: outcome.append(agent.resume(run_id)))
    caller.start()
    try:
        seen: set[str] = set()
        deadline = time.monotonic() + 60
        with psycopg.connect(db.admin_conninfo, autocommit=True) as watcher:
            while len(seen) < 3:
                row = watcher.execute("SELECT claim_expires_at::text FROM runs WHERE tenant_id "
                                      "= %s AND run_id = %s", [tid, run_id]).fetchone()
                if row and row[0]:
                    seen.add(row[0])
                assert time.monotonic() < deadline, f"the claim was not renewed: {seen}"
                time.sleep(0.02)
    finally:
        release_model.set()
        caller.join(60)
    assert outcome and outcome[0].status == "done"


def test_release_over_http_is_for_owners_and_admins(db: Database,
                                                    served: tuple[str, Any]) -> None:
    url, app = served
    tid, _ = _world(db)
    run_id = _interrupted(db, tid, Policy([tool_call("write_file", {"path": MEMORY,
                                                                     "content": "m"})]))
    app.state.hango_model = SimulatedModel(policy=Policy([]))
    c = _clients(db, url, tid)
    nothing = c["owner"].post(f"/runs/{run_id}/release")
    assert nothing.status_code == 409 and "is interrupted, not being resumed" in \
        nothing.json()["detail"]
    resuming.claim(db, tid, "a1", run_id, seconds=600)  # a resume that died
    shown = c["member"].get(f"/runs/{run_id}").json()
    assert shown["status"] == "resuming" and shown["claim_expires_at"].endswith("Z")
    busy = c["member"].post(f"/runs/{run_id}/resume")
    assert busy.status_code == 409 and f"expires at {shown['claim_expires_at']}" in \
        busy.json()["detail"]
    refused = c["member"].post(f"/runs/{run_id}/release")
    assert refused.status_code == 403 and "release a run's claim" in refused.json()["detail"]
    released = c["owner"].post(f"/runs/{run_id}/release")
    assert released.status_code == 200 and released.json()["status"] == "interrupted"
    assert c["owner"].post("/runs/nope/release").status_code == 404
    assert c["member"].post(f"/runs/{run_id}/resume").json()["status"] == "done"


def test_an_ordinary_run_marks_nothing(db: Database) -> None:
    """A run that is never interrupted keeps its round trips: its calls are not saved or
    marked, only a resumed run's are."""
    tid, files = _world(db)
    result = Agent(db, tid, "a1", SimulatedModel(policy=Policy([DOUBLE_D]))).run("go",
                                                                               record=True)
    assert result.status == "done" and _text(files, "/notes/d.txt") == "xx"
    with psycopg.connect(db.admin_conninfo) as conn:
        assert conn.execute("SELECT count(*) FROM run_calls WHERE tenant_id = %s",
                            [tid]).fetchone() == (0,)
        state = conn.execute("SELECT state FROM runs WHERE tenant_id = %s AND run_id = %s",
                             [tid, result.run_id]).fetchone()
    assert state == (None,)
