"""Agent-written memory under approval, through HTTP on real PostgreSQL.

The server runs each agent with one offline model whose policy reads the prompt: ``do [calls]``
makes it call those tools in one turn, then answer with the tool results it got. So a test
says in the prompt what the agent does, and asserts what an owner sees and decides over HTTP.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from psycopg.errors import DeadlockDetected

from hango.agent import proposals
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database, DatabaseError
from hango.fs.backend import FileNotFound, PostgresBackend
from hango.models.base import Request
from hango.models.simulated import Reply, SimulatedModel, tool_call
from hango.settings import load_settings

MEMORY = "/memories/AGENTS.md"
# Long enough to reach the simulator's minimum cacheable prefix (1024 tokens).
PROMPT = "You are a careful assistant who keeps notes. " * 120


def policy(request: Request) -> Reply:
    last = request.messages[-1]
    if last.tool_results:
        return Reply("done: " + " | ".join(r.content for r in last.tool_results))
    if last.text.startswith("do "):
        return Reply("", tuple(tool_call(c["tool"], c["args"]) for c in json.loads(last.text[3:])))
    return Reply("(hango-sim) " + last.text[:40])


def do(*calls: tuple[str, dict[str, Any]]) -> str:
    return "do " + json.dumps([{"tool": t, "args": a} for t, a in calls])


def write(path: str, content: str) -> tuple[str, dict[str, Any]]:
    return ("write_file", {"path": path, "content": content})


@pytest.fixture(scope="module")
def server(db: Database) -> Iterator[tuple[str, Any]]:
    # A server of its own: its runs use a scripted model (``app.state.hango_model``).
    app = create_app(db)
    app.state.hango_model = SimulatedModel(policy=policy)
    url, stop = serve_in_thread(app)
    yield url, app
    stop()


@pytest.fixture
def base_url(server: tuple[str, Any]) -> str:
    return str(server[0])


@pytest.fixture
def model(server: tuple[str, Any]) -> SimulatedModel:
    m: SimulatedModel = server[1].state.hango_model
    return m


@dataclass
class T:
    id: str
    owner: httpx.Client
    admin: httpx.Client
    member: httpx.Client


def _tenant(db: Database, base_url: str, mode: str | None = "ask") -> T:
    tid = create_tenant(db, "p-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig(system_prompt=PROMPT, reserved_writes=mode))  # type: ignore[arg-type]
    clients = [httpx.Client(base_url=base_url + "/v1/agents/a1", timeout=60,
                            headers={"Authorization": f"Bearer {create_token(db, tid, r)}"})
               for r in ("owner", "admin", "member")]
    return T(tid, *clients)


@pytest.fixture
def t(db: Database, base_url: str) -> T:
    return _tenant(db, base_url)


@pytest.fixture
def other(db: Database, base_url: str) -> T:
    return _tenant(db, base_url)


def file(db: Database, tenant: str, path: str = MEMORY) -> tuple[str, int] | None:
    try:
        data = PostgresBackend(db, tenant, "a1").read(path)
    except FileNotFound:
        return None
    return data.content, data.version


def url(client: httpx.Client) -> str:
    """The agent's own URL (httpx would add a slash to an empty relative one)."""
    return str(client.base_url).rstrip("/")


def run(client: httpx.Client, prompt: str, status: int = 201) -> dict[str, Any]:
    r = client.post("/runs", json={"prompt": prompt})
    assert r.status_code == status, r.text
    return dict(r.json())


def propose(t: T, content: str = "- The user prefers tea.\n", path: str = MEMORY) -> dict[str, Any]:
    out = run(t.member, do(write(path, content)))  # a member may run
    assert out["status"] == "interrupted", out
    return out


# --- 1, the seed's rule still holds in refuse mode (the default) -----------------------------


def test_refuse_mode_is_the_default_and_writes_nothing(db: Database, base_url: str) -> None:
    t = _tenant(db, base_url, mode=None)
    out = run(t.owner, do(write(MEMORY, "poison")))
    assert out["status"] == "done" and out["proposal"] is None
    assert "reserved prefix /memories/" in out["text"] and "only an owner or admin" in out["text"]
    assert file(db, t.id) is None
    assert t.owner.get("/proposals").json()["proposals"] == []


def test_reserved_writes_is_validated_like_the_rest_of_the_config(t: T) -> None:
    r = t.owner.put(url(t.owner), json={"reserved_writes": "sometimes"})
    assert r.status_code == 422 and "reserved_writes" in r.json()["detail"]
    assert t.owner.put(url(t.owner), json={"reserved_writes": "refuse"}).status_code == 200


def test_the_tenant_default_applies_when_the_config_names_none(db: Database) -> None:
    tid = create_tenant(db, "p-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig())
    agent = Agent(db, tid, "a1", SimulatedModel(policy=policy),
                  settings=load_settings(reserved_writes="ask"))
    assert agent.run(do(write(MEMORY, "x"))).status == "interrupted"


# --- 2, a proposal and an interrupted run --------------------------------------------------------


def test_an_ask_mode_write_becomes_a_proposal_and_the_run_stops(db: Database, t: T) -> None:
    out = propose(t)
    p = out["proposal"]
    assert (p["path"], p["operation"], p["base_version"], p["status"]) == (
        MEMORY, "write_file", None, "pending")
    assert p["run_id"] == out["run_id"] and p["content"] == "- The user prefers tea.\n"
    assert "--- /dev/null\n+++ b/memories/AGENTS.md\n" in p["diff"]
    assert "+- The user prefers tea.\n" in p["diff"]
    assert file(db, t.id) is None  # nothing written
    got = t.member.get(f"/runs/{out['run_id']}").json()
    assert got["status"] == "interrupted" and got["proposal"]["proposal_id"] == p["proposal_id"]


def test_ordinary_paths_never_become_proposals(db: Database, t: T) -> None:
    out = run(t.owner, do(write("/notes/todo.md", "hi"), write("/memorie/x.md", "near miss")))
    assert out["status"] == "done"
    assert file(db, t.id, "/notes/todo.md") == ("hi", 1)
    assert file(db, t.id, "/memorie/x.md") == ("near miss", 1)
    assert t.owner.get("/proposals", params={"status": "all"}).json()["proposals"] == []


def test_edit_file_proposes_the_whole_edited_file_against_its_version(db: Database, t: T) -> None:
    assert t.owner.put("/files/memories/AGENTS.md", content="coffee\n").status_code == 201
    out = run(t.owner, do(("edit_file", {"path": MEMORY, "old_string": "coffee",
                                         "new_string": "tea"})))
    p = out["proposal"]
    assert (p["operation"], p["base_version"], p["content"]) == ("edit_file", 1, "tea\n")
    assert "-coffee\n+tea\n" in p["diff"]
    assert file(db, t.id) == ("coffee\n", 1)


def test_a_bad_edit_or_path_is_a_tool_error_not_a_proposal(t: T) -> None:
    out = run(t.owner, do(("edit_file", {"path": MEMORY, "old_string": "x", "new_string": "y"}),
                          write("/memories/../x", "z")))
    assert out["status"] == "done"
    assert "no such file: /memories/AGENTS.md" in out["text"] and "'..' segment" in out["text"]
    assert t.owner.get("/proposals").json()["proposals"] == []


def test_a_proposal_over_the_file_cap_is_refused(db: Database) -> None:
    tid = create_tenant(db, "p-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig(reserved_writes="ask"))
    agent = Agent(db, tid, "a1", SimulatedModel(policy=policy),
                  settings=load_settings(max_file_bytes=100))
    result = agent.run(do(write(MEMORY, "x" * 101)))
    assert result.status == "done" and "over the file cap of 100 bytes" in result.text
    assert proposals.list_proposals(db, tid, "a1", None) == []


def test_pending_proposals_are_bounded_per_agent(db: Database) -> None:
    tid = create_tenant(db, "p-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig(reserved_writes="ask"))
    agent = Agent(db, tid, "a1", SimulatedModel(policy=policy),
                  settings=load_settings(proposals_max_pending=2))
    assert [agent.run(do(write(f"/memories/{i}.md", "x"))).status for i in range(2)] == [
        "interrupted", "interrupted"]
    third = agent.run(do(write("/memories/3.md", "x")))
    assert third.status == "done" and "already has 2 proposals waiting" in third.text
    assert len(proposals.list_proposals(db, tid, "a1")) == 2


# --- 3, deciding over HTTP -----------------------------------------------------------------------


def test_only_owners_and_admins_see_and_decide(t: T) -> None:
    pid = propose(t)["proposal"]["proposal_id"]
    for client in (t.owner, t.admin):
        listed = client.get("/proposals").json()["proposals"][0]
        assert listed["proposal_id"] == pid and listed["content"] is None  # show one to read it
        assert client.get(f"/proposals/{pid}").json()["diff"].startswith("--- /dev/null")
    for method, url, body in (("GET", "/proposals", None), ("GET", f"/proposals/{pid}", None),
                              ("POST", f"/proposals/{pid}/approve", {}),
                              ("POST", f"/proposals/{pid}/reject", {"reason": "no"})):
        r = t.member.request(method, url, json=body)
        assert r.status_code == 403 and "only an owner or admin" in r.json()["detail"], url


def test_another_tenant_sees_nothing(t: T, other: T) -> None:
    out = propose(t)
    pid, rid = out["proposal"]["proposal_id"], out["run_id"]
    assert other.owner.get("/proposals").json()["proposals"] == []  # its own a1 has none
    assert other.owner.get(f"/proposals/{pid}").status_code == 404
    assert other.owner.post(f"/proposals/{pid}/approve", json={}).status_code == 404
    assert other.owner.post(f"/proposals/{pid}/reject", json={"reason": "x"}).status_code == 404
    assert other.owner.get(f"/runs/{rid}").status_code == 404
    assert other.owner.post(f"/runs/{rid}/resume").status_code == 404
    nobody = httpx.Client(base_url=str(t.owner.base_url).replace("/a1", "/nope"),
                          headers=dict(t.owner.headers))
    assert nobody.get("/proposals").status_code == 404
    assert nobody.post("/runs", json={"prompt": "hi"}).status_code == 404


def test_approve_writes_and_keeps_who_when_why(db: Database, t: T) -> None:
    pid = propose(t)["proposal"]["proposal_id"]
    r = t.admin.post(f"/proposals/{pid}/approve", json={"reason": "true and harmless"})
    assert r.status_code == 200, r.text
    d = r.json()
    assert (d["status"], d["written_version"], d["edited"]) == ("approved", 1, False)
    assert d["decided_by"].startswith("admin:") and d["reason"] == "true and harmless"
    assert d["decided_at"].endswith("Z")
    assert file(db, t.id) == ("- The user prefers tea.\n", 1)


def test_approve_with_edits(db: Database, t: T) -> None:
    pid = propose(t)["proposal"]["proposal_id"]
    d = t.owner.post(f"/proposals/{pid}/approve", json={"content": "- Tea, no sugar.\n"}).json()
    assert d["edited"] is True and file(db, t.id) == ("- Tea, no sugar.\n", 1)


def test_reject_needs_a_reason_and_writes_nothing(db: Database, t: T) -> None:
    pid = propose(t)["proposal"]["proposal_id"]
    assert t.owner.post(f"/proposals/{pid}/reject", json={"reason": ""}).status_code == 422
    d = t.owner.post(f"/proposals/{pid}/reject", json={"reason": "not a preference"}).json()
    assert (d["status"], d["reason"]) == ("rejected", "not a preference")
    assert file(db, t.id) is None


def test_deciding_twice_is_safe(db: Database, t: T) -> None:
    pid = propose(t)["proposal"]["proposal_id"]
    first = t.owner.post(f"/proposals/{pid}/approve", json={}).json()
    again = t.owner.post(f"/proposals/{pid}/approve", json={})
    assert again.status_code == 200 and again.json() == first  # the same decision, not redone
    flip = t.owner.post(f"/proposals/{pid}/reject", json={"reason": "changed my mind"})
    assert flip.status_code == 409 and "already approved" in flip.json()["detail"]
    assert file(db, t.id) == ("- The user prefers tea.\n", 1)


def test_a_conflict_writes_nothing_and_shows_the_fresh_diff(db: Database, t: T) -> None:
    assert t.owner.put("/files/memories/AGENTS.md", content="v1\n").status_code == 201
    pid = propose(t, content="v1\nagent line\n")["proposal"]["proposal_id"]
    assert t.owner.put("/files/memories/AGENTS.md", content="owner line\n").status_code == 200
    r = t.owner.post(f"/proposals/{pid}/approve", json={})
    assert r.status_code == 409
    body = r.json()
    assert body["current_version"] == 2 and "nothing was written" in body["detail"]
    assert "-owner line\n+v1\n+agent line\n" in body["diff"]
    assert file(db, t.id) == ("owner line\n", 2)
    assert t.owner.get(f"/proposals/{pid}").json()["status"] == "pending"
    # Having read the fresh diff, the owner approves against version 2 with an edit.
    d = t.owner.post(f"/proposals/{pid}/approve",
                     json={"base_version": 2, "content": "owner line\nagent line\n"}).json()
    assert d["written_version"] == 3 and file(db, t.id) == ("owner line\nagent line\n", 3)


def test_a_proposed_skill_is_parsed_when_proposed(db: Database, t: T) -> None:
    bad = propose(t, "---\nname: x\n", "/skills/bad/SKILL.md")["proposal"]
    assert "error" in bad["skill"]
    r = t.owner.post(f"/proposals/{bad['proposal_id']}/approve", json={})
    assert r.status_code == 422 and "not a valid SKILL.md" in r.json()["detail"]
    assert file(db, t.id, "/skills/bad/SKILL.md") is None
    skill = ("---\nname: cleanup\ndescription: Tidy the disk.\n"
             "allowed_tools: [read_file, shell]\n---\nRun rm -rf.\n")
    good = propose(t, skill, "/skills/cleanup/SKILL.md")["proposal"]
    shown = t.owner.get(f"/proposals/{good['proposal_id']}").json()
    assert shown["skill"] == {"name": "cleanup", "allowed_tools": ["read_file", "shell"],
                              "dropped_tools": ["shell"]}


def test_bad_input_to_the_proposal_routes(t: T) -> None:
    pid = propose(t)["proposal"]["proposal_id"]
    assert t.owner.get("/proposals/no such").status_code == 422
    assert t.owner.get("/proposals/nope").status_code == 404
    assert t.owner.get("/proposals", params={"status": "maybe"}).status_code == 422
    r = t.owner.post(f"/proposals/{pid}/approve", json={"contents": "typo"})
    assert r.status_code == 422 and "contents" in r.json()["detail"]
    assert t.owner.post("/runs", json={"prompt": ""}).status_code == 422


# --- 4, resume -----------------------------------------------------------------------------------


def test_resume_hands_the_decision_to_the_model_from_the_cache(db: Database, t: T,
                                                               model: SimulatedModel) -> None:
    out = propose(t)
    rid, pid = out["run_id"], out["proposal"]["proposal_id"]
    before = model.calls[-1][0]
    r = t.member.post(f"/runs/{rid}/resume")
    assert r.status_code == 409 and "still pending" in r.json()["detail"]
    t.owner.post(f"/proposals/{pid}/approve", json={})
    resumed = t.member.post(f"/runs/{rid}/resume").json()
    assert resumed["status"] == "done" and resumed["resumed"] is True
    assert f"approved: {MEMORY} written as version 1" in resumed["text"]
    assert "the next run sees this change" in resumed["text"]
    after = model.calls[-1][0]
    assert (after.tools, after.system) == (before.tools, before.system)  # byte-identical prefix
    assert after.messages[: len(before.messages)] == before.messages
    assert resumed["usage"][0]["cache_read_input_tokens"] > 0 and resumed["cache_read_ratio"] > 0.5
    assert t.member.get(f"/runs/{rid}").json()["status"] == "done"
    # The next run loads the approved memory, after the cache breakpoint.
    run(t.member, "hello")
    nxt = model.calls[-1][0]
    index = next(i for i, b in enumerate(nxt.system) if b.source == MEMORY)
    assert nxt.system_breakpoint is not None and index > nxt.system_breakpoint
    assert "The user prefers tea." in nxt.system[index].text


def test_resume_after_a_rejection_tells_the_reason(t: T) -> None:
    out = propose(t)
    t.owner.post(f"/proposals/{out['proposal']['proposal_id']}/reject",
                 json={"reason": "store preferences in /memories/prefs.md"})
    text = t.owner.post(f"/runs/{out['run_id']}/resume").json()["text"]
    assert "rejected by an owner or admin: store preferences in /memories/prefs.md" in text


def test_resume_after_edits_says_so(t: T) -> None:
    out = propose(t)
    t.owner.post(f"/proposals/{out['proposal']['proposal_id']}/approve", json={"content": "x"})
    text = t.owner.post(f"/runs/{out['run_id']}/resume").json()["text"]
    assert "approved with the owner's edits" in text


def test_resume_twice_one_wins_the_other_is_told(t: T) -> None:
    out = propose(t)
    t.owner.post(f"/proposals/{out['proposal']['proposal_id']}/approve", json={})
    assert t.owner.post(f"/runs/{out['run_id']}/resume").status_code == 200
    r = t.owner.post(f"/runs/{out['run_id']}/resume")
    assert r.status_code == 409 and "already resumed" in r.json()["detail"]


def test_resuming_a_run_that_never_waited_says_what_it_is(db: Database, t: T) -> None:
    out = run(t.member, "hello")
    r = t.member.post(f"/runs/{out['run_id']}/resume")
    assert r.status_code == 409 and r.json()["detail"] == (
        f"run {out['run_id']} was never interrupted: it ended done without waiting for a "
        "decision, so there is nothing to resume; start a new run instead")
    short = create_tenant(db, "p-" + uuid.uuid4().hex[:12])  # and a short prompt says why it
    save_agent(db, short, "a1", AgentConfig(system_prompt="Be brief."))  # reads nothing
    client = httpx.Client(base_url=str(t.owner.base_url), timeout=60,  # the token's tenant
                          headers={"Authorization": f"Bearer {create_token(db, short, 'member')}"})
    assert [c["cache_miss_reason"] for c in run(client, "hello")["usage"]] == ["below_minimum"]
    assert t.owner.post("/runs/nope/resume").status_code == 404


def test_a_changed_config_stops_the_resume_with_a_clear_error(db: Database, t: T) -> None:
    out = propose(t)
    t.owner.post(f"/proposals/{out['proposal']['proposal_id']}/approve", json={})
    config = t.owner.get(url(t.owner)).json()
    t.owner.put(url(t.owner), json={**config, "tools": ["read_file"]})
    r = t.owner.post(f"/runs/{out['run_id']}/resume")
    assert r.status_code == 409 and "config or model changed" in r.json()["detail"]
    assert t.owner.get(f"/runs/{out['run_id']}").json()["status"] == "interrupted"
    t.owner.put(url(t.owner), json=config)  # restored: the run resumes
    assert t.owner.post(f"/runs/{out['run_id']}/resume").json()["status"] == "done"


def test_a_turn_with_several_calls_resumes_where_it_stopped(db: Database, t: T) -> None:
    out = run(t.owner, do(write("/notes/a.md", "a"), write(MEMORY, "m"), write("/notes/b.md", "b")))
    assert out["status"] == "interrupted"
    assert file(db, t.id, "/notes/a.md") == ("a", 1) and file(db, t.id, "/notes/b.md") is None
    t.owner.post(f"/proposals/{out['proposal']['proposal_id']}/approve", json={})
    text = t.owner.post(f"/runs/{out['run_id']}/resume").json()["text"]
    assert text.startswith("done: wrote /notes/a.md (version 1) | approved: ")
    assert text.endswith("wrote /notes/b.md (version 1)")


# --- 5, runs over HTTP: bounds -------------------------------------------------------------------


def test_runs_report_usage_and_trace_and_bounds(db: Database, t: T) -> None:
    out = run(t.member, "hello")
    assert out["status"] == "done" and out["text"] == "(hango-sim) hello"
    blank = run(t.member, "   ", 422)  # the provider would refuse it: said before the wire
    assert blank["detail"].startswith("prompt: messages[0] (user) is empty")
    assert len(out["usage"]) == 1 and set(out["usage"][0]) == {
        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens",
        "cache_miss_reason"}
    assert t.member.get(f"/runs/{out['run_id']}").json()["text"] == out["text"]
    t.owner.put(url(t.owner), json={**t.owner.get(url(t.owner)).json(), "max_steps": 1})
    failed = run(t.member, do(write("/notes/x.md", "x")))
    assert (failed["status"], failed["stop_reason"]) == ("failed", "max_steps")
    agent = Agent(db, t.id, "a1", SimulatedModel(policy=policy),
                  settings=load_settings(run_max_seconds=1e-9))
    timed = agent.run("hi")
    assert (timed.status, timed.stop_reason, timed.responses) == ("failed", "time_limit", [])
    assert "HANGO_RUN_MAX_SECONDS" in timed.warnings[-1]


def test_the_model_comes_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from hango.api.runs import model_from_settings
    from hango.settings import SettingsError

    assert isinstance(model_from_settings(load_settings()), SimulatedModel)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(SettingsError, match="set ANTHROPIC_API_KEY"):
        model_from_settings(load_settings(model="claude-sonnet-4-5"))
    with pytest.raises(SettingsError, match="HANGO_MODEL='gpt'"):
        model_from_settings(load_settings(model="gpt"))


def test_a_server_keeps_one_model_and_one_telemetry_that_do_not_grow(db: Database) -> None:
    """The server's own model (from HANGO_MODEL) keeps only its last call, and every run shares
    one Telemetry: a workshop server answers for hours, and neither may grow with each run
    (before, the simulator kept every request, about 9 KB a run). Each run still reads the
    memory written just before it, and the configured agent's absence is still 404."""
    tid = create_tenant(db, "p-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig())
    app = create_app(db)
    url, stop = serve_in_thread(app)
    try:
        client = httpx.Client(base_url=f"{url}/v1/agents", timeout=60, headers={
            "Authorization": f"Bearer {create_token(db, tid, 'owner')}"})
        prompts, telemetries = [], set()
        for i in range(3):
            assert client.put(f"/a1/files{MEMORY}", content=f"- fact {i:02d}\n").status_code \
                in (200, 201)
            assert client.post("/a1/runs", json={"prompt": "hi"}).status_code == 201
            model = app.state.hango_model
            prompts.append("".join(b.text for b in model.calls[-1][0].system))
            assert len(model.calls) == len(model.traces) == 1
            telemetries.add(id(app.state.hango_telemetry))
        assert len(telemetries) == 1
        assert all(f"- fact {i:02d}" in prompts[i] for i in range(3)), prompts
        missing = client.post("/nobody/runs", json={"prompt": "hi"})
        assert missing.status_code == 404 and "no agent 'nobody'" in missing.json()["detail"]
    finally:
        stop()


# --- faults and concurrency ----------------------------------------------------------------------


def _kill_when_waiting(db: Database, lock_sql: str, params: list[Any], action: Any) -> Any:
    """Hold a row lock, start ``action`` (it waits on the lock), terminate its session: an
    outage that lands inside its transaction, exactly."""
    caught: list[BaseException] = []
    with db.admin(params[0]) as holder:  # the owner, in the tenant (row-level security)
        holder.execute(lock_sql, params)
        # the server's own pid (behind a pooler, the client's backend_pid is the pooler's)
        held_by = holder.execute("SELECT pg_backend_pid()").fetchone()

        def go() -> None:
            try:
                action()
            except BaseException as exc:
                caught.append(exc)

        thread = threading.Thread(target=go)
        thread.start()
        with db.admin_connection(autocommit=True) as watcher:
            for _ in range(2000):
                row = watcher.execute(
                    "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    held_by).fetchone()
                if row:
                    watcher.execute("SELECT pg_terminate_backend(%s)", [row[0]])
                    break
                threading.Event().wait(0.01)
        thread.join(30)
        holder.rollback()
    return caught


def test_an_outage_during_approve_or_resume_leaves_everything_as_it_was(db: Database,
                                                                        t: T) -> None:
    assert t.owner.put("/files/memories/AGENTS.md", content="v1\n").status_code == 201
    out = propose(t, "v1\nmore\n")
    pid, rid = out["proposal"]["proposal_id"], out["run_id"]
    caught = _kill_when_waiting(
        db, "SELECT 1 FROM agent_files WHERE tenant_id = %s AND path = %s FOR UPDATE",
        [t.id, MEMORY], lambda: proposals.approve(db, t.id, "a1", pid, by="x", role="owner"))
    assert caught and isinstance(caught[0], DatabaseError)
    assert file(db, t.id) == ("v1\n", 1)
    assert proposals.get(db, t.id, "a1", pid)[0].status == "pending"
    proposals.approve(db, t.id, "a1", pid, by="x", role="owner")
    agent = Agent(db, t.id, "a1", SimulatedModel(policy=policy))
    caught = _kill_when_waiting(
        db, "SELECT 1 FROM runs WHERE tenant_id = %s AND run_id = %s FOR UPDATE", [t.id, rid],
        lambda: agent.resume(rid))
    assert caught and isinstance(caught[0], DatabaseError)
    assert t.owner.get(f"/runs/{rid}").json()["status"] == "interrupted"
    assert agent.resume(rid).status == "done"


def test_concurrent_decisions_and_resumes_lose_nothing(db: Database, t: T) -> None:
    assert t.owner.put("/files/memories/AGENTS.md", content="base\n").status_code == 201
    one, two = propose(t, "base\none\n"), propose(t, "base\ntwo\n")
    ids = [one["proposal"]["proposal_id"], two["proposal"]["proposal_id"]]
    codes: list[int] = []

    def approve(pid: str) -> None:
        codes.append(t.owner.post(f"/proposals/{pid}/approve", json={}).status_code)

    threads = [threading.Thread(target=approve, args=(pid,)) for pid in ids * 3]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # One proposal won (3 x 200: once written, then the same decision twice); the other lost
    # the race against its base version (3 x 409) and stays pending: nothing overwritten.
    assert sorted(codes) == [200, 200, 200, 409, 409, 409]
    content, version = file(db, t.id) or ("", 0)
    assert version == 2 and content in ("base\none\n", "base\ntwo\n")
    statuses = {p: t.owner.get(f"/proposals/{p}").json()["status"] for p in ids}
    assert sorted(statuses.values()) == ["approved", "pending"]
    winner = next(o for o in (one, two) if statuses[o["proposal"]["proposal_id"]] == "approved")
    results: list[int] = []

    def resume() -> None:
        results.append(t.member.post(f"/runs/{winner['run_id']}/resume").status_code)

    threads = [threading.Thread(target=resume) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(results) == [200, 409, 409, 409]
    assert t.member.get(f"/runs/{winner['run_id']}").json()["status"] == "done"


# --- 6, telemetry --------------------------------------------------------------------------------


def test_proposal_and_decision_telemetry(db: Database, telemetry_pair: Any) -> None:
    tel, exporter, reader = telemetry_pair
    tid = create_tenant(db, "p-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig(reserved_writes="ask"))
    agent = Agent(db, tid, "a1", SimulatedModel(policy=policy), telemetry=tel)
    result = agent.run(do(write(MEMORY, "x")))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["agent.run"].attributes["hango.run.status"] == "interrupted"
    events = [e.name for s in exporter.get_finished_spans() for e in s.events]
    assert "agent.proposal_created" in events and "agent.run_interrupted" in events
    assert [e.name for e in result.events][-2:] == ["agent.proposal_created",
                                                    "agent.run_interrupted"]
    pid = result.interrupt["proposal_id"] if result.interrupt else ""
    proposals.approve(db, tid, "a1", pid, by="me", role="owner", telemetry=tel)
    decided = [e for s in exporter.get_finished_spans() for e in s.events
               if e.name == "agent.proposal_decided"]
    assert decided[0].attributes["outcome"] == "approved"
    assert agent.resume(result.run_id).status == "done"
    assert {s.name: s for s in exporter.get_finished_spans()}["agent.run"].attributes[
        "hango.run.status"] == "done"
    data = reader.get_metrics_data()
    counts = {dp.attributes["hango.proposal.outcome"]: dp.value
              for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
              if m.name == "hango.proposals" for dp in m.data.data_points}
    assert counts == {"proposed": 1, "approved": 1}


# --- the CLI -------------------------------------------------------------------------------------


def test_cli_proposals(db: Database, t: T, capsys: pytest.CaptureFixture[str]) -> None:
    from hango.cli import main

    one, two = propose(t)["proposal"]["proposal_id"], propose(t, "b")["proposal"]["proposal_id"]
    assert main(["proposals", "list", t.id, "a1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{one}\tpending\twrite_file\t{MEMORY}", f"{two}\tpending\twrite_file\t{MEMORY}"]
    assert main(["proposals", "show", t.id, "a1", one]) == 0
    assert "+- The user prefers tea." in json.loads(capsys.readouterr().out)["diff"]
    assert main(["proposals", "approve", t.id, "a1", one, "--by", "ana"]) == 0
    assert "version 1" in capsys.readouterr().out
    assert main(["proposals", "approve", t.id, "a1", two]) == 1  # its base is gone: conflict
    assert "nothing was written" in capsys.readouterr().err
    assert main(["proposals", "reject", t.id, "a1", two, "--reason", "dup"]) == 0
    assert main(["proposals", "show", t.id, "a1", "nope"]) == 1
    shown = t.owner.get(f"/proposals/{one}").json()
    assert shown["decided_by"] == "cli:ana"


@pytest.mark.parametrize(("field", "value", "variable"), [
    ("reserved_writes", "maybe", "HANGO_RESERVED_WRITES"),
    ("proposals_max_pending", 0, "HANGO_PROPOSALS_MAX_PENDING"),
    ("run_max_seconds", 0, "HANGO_RUN_MAX_SECONDS"),
    ("model", "", "HANGO_MODEL"),
])
def test_bad_settings_name_their_variable(field: str, value: object, variable: str) -> None:
    from hango.settings import SettingsError

    with pytest.raises(SettingsError, match=variable):
        load_settings(**{field: value})


def test_a_model_failure_fails_the_run_and_a_subagent_proposal_is_reported(db: Database) -> None:
    tid = create_tenant(db, "p-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "lead", AgentConfig(tools=["task"], subagents=["scribe"]))
    save_agent(db, tid, "scribe", AgentConfig(reserved_writes="ask"))
    app = create_app(db)
    app.state.hango_model = SimulatedModel(policy=[])  # no reply left: the model raises
    url, stop = serve_in_thread(app)
    try:
        token = create_token(db, tid, "member")
        r = httpx.post(f"{url}/v1/agents/lead/runs", json={"prompt": "hi"},
                       headers={"Authorization": f"Bearer {token}"})
    finally:
        stop()
    # The run ends failed, kept, with the model's error (its first line) among its warnings.
    assert r.status_code == 201 and r.json()["status"] == "failed", r.text
    assert r.json()["stop_reason"] == "model_error"
    assert any("the model hango-sim-1 failed" in w for w in r.json()["warnings"])
    lead = Agent(db, tid, "lead", SimulatedModel(policy=[
        [tool_call("task", {"agent": "scribe", "description": do(write(MEMORY, "x"))})],
        lambda request: request.messages[-1].tool_results[0].content]),
        child_models={"scribe": SimulatedModel(policy=policy)})
    result = lead.run("go")
    assert result.status == "done" and "scribe proposed a write" in result.text
    assert [p.agent_id for p in proposals.list_proposals(db, tid, "scribe")] == ["scribe"]


# --- many proposers at once; the share of the queue; the listing's pages ------------------------


def _server(db: Database, **settings: Any) -> tuple[str, Any]:
    """A server of its own with ``settings`` (caps, quotas, bounds) and the scripted model."""
    app = create_app(db, load_settings(**settings))
    app.state.hango_model = SimulatedModel(policy=policy)
    return serve_in_thread(app)


def test_concurrent_proposers_lose_no_run(db: Database) -> None:
    """8 members run one ask agent at once, 100 runs in all, each proposing a memory write.
    Every run answers 201 interrupted and has its runs row and its proposal, which names its
    member. (Before: the agent's row lock FOR UPDATE waited on the KEY SHARE that another run's
    INSERT into runs holds: deadlocks, and the lost runs answered 503 with PostgreSQL's DETAIL.)"""
    tid = create_tenant(db, "p-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig(reserved_writes="ask"))
    url, stop = _server(db, proposals_max_pending=200, proposals_max_pending_per_member=200)
    answers: list[tuple[str, int, dict[str, Any]]] = []
    start = threading.Barrier(8)

    def member(n: int) -> None:
        token = create_token(db, tid, "member")
        with httpx.Client(base_url=f"{url}/v1/agents/a1", timeout=120,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            start.wait()
            for k in range(13 if n < 4 else 12):
                r = client.post("/runs", json={"prompt": do(write(f"/memories/m{n}-{k}.md",
                                                                  "x"))})
                answers.append((token, r.status_code, r.json()))

    threads = [threading.Thread(target=member, args=(n,)) for n in range(8)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        stop()
    assert len(answers) == 100
    assert [(code, out.get("status")) for _, code, out in answers if code != 201 or
            out["status"] != "interrupted"] == []
    with db.admin(tid) as conn:  # the owner, in the tenant (row-level security)
        rows = conn.execute(
            """SELECT r.run_id, r.status, p.proposal_id, p.proposed_by FROM runs r
                 LEFT JOIN proposals p ON p.tenant_id = r.tenant_id AND p.run_id = r.run_id
                WHERE r.tenant_id = %s""", [tid]).fetchall()
    kept = {run_id: (status, pid, by) for run_id, status, pid, by in rows}
    assert len(kept) == 100
    for token, _, out in answers:
        status, pid, by = kept[out["run_id"]]
        assert (status, pid) == ("interrupted", out["proposal"]["proposal_id"])
        assert by == "member:" + hashlib.sha256(token.encode()).hexdigest()[:12]


def test_a_members_runs_hold_only_their_share_of_the_queue(db: Database) -> None:
    """HANGO_PROPOSALS_MAX_PENDING_PER_MEMBER=2: a member's third proposal is refused (the run
    reads why and goes on); another member and the owner still propose; a decision frees a
    place."""
    url, stop = _server(db, proposals_max_pending=10, proposals_max_pending_per_member=2)
    try:
        t, other = _tenant(db, url), None
        other = httpx.Client(base_url=url + "/v1/agents/a1", timeout=60, headers={
            "Authorization": f"Bearer {create_token(db, t.id, 'member')}"})
        first = [run(t.member, do(write(f"/memories/{i}.md", "x"))) for i in range(2)]
        assert [o["status"] for o in first] == ["interrupted", "interrupted"]
        refused = run(t.member, do(write("/memories/2.md", "x")))
        assert refused["status"] == "done" and (
            "the member who started this run already has 2 of this agent's proposals waiting "
            "for a decision (HANGO_PROPOSALS_MAX_PENDING_PER_MEMBER)") in refused["text"]
        assert run(other, do(write("/memories/3.md", "x")))["status"] == "interrupted"
        assert run(t.owner, do(write("/memories/4.md", "x")))["status"] == "interrupted"
        assert len(t.owner.get("/proposals").json()["proposals"]) == 4
        listed = t.owner.get(f"/proposals/{first[0]['proposal']['proposal_id']}").json()
        assert listed["proposed_by"].startswith("member:")
        t.owner.post(f"/proposals/{first[0]['proposal']['proposal_id']}/reject",
                     json={"reason": "no"})
        assert run(t.member, do(write("/memories/5.md", "x")))["status"] == "interrupted"
    finally:
        stop()


def test_the_proposals_listing_pages_with_a_cursor(t: T) -> None:
    """Oldest first, ``limit`` at a time; ``next_cursor`` leads on, null on the last page; a
    proposal made while paging appears on a later page (before: the first 100, and no way on)."""
    made = [propose(t, f"v{i}\n", f"/memories/{i}.md")["proposal"]["proposal_id"]
            for i in range(4)]
    page = t.owner.get("/proposals", params={"limit": 3}).json()
    assert [p["proposal_id"] for p in page["proposals"]] == made[:3]
    made.append(run(t.owner, do(write("/memories/late.md", "x")))["proposal"]["proposal_id"])
    rest = t.owner.get("/proposals", params={"limit": 3, "cursor": page["next_cursor"]}).json()
    assert [p["proposal_id"] for p in rest["proposals"]] == made[3:]
    assert rest["next_cursor"] is None
    everything = t.owner.get("/proposals", params={"status": "all", "limit": 1000}).json()
    assert [p["proposal_id"] for p in everything["proposals"]] == made
    for bad in ("x", "eyJhIjoxfQ", page["next_cursor"] + "A"):
        r = t.owner.get("/proposals", params={"cursor": bad})
        assert r.status_code == 422 and "cursor" in r.json()["detail"], (bad, r.text)
    assert t.owner.get("/proposals", params={"limit": 1001}).status_code == 422


# --- approve writes through the one write path ----------------------------------------------


def test_approve_obeys_every_rule_of_a_write(db: Database) -> None:
    """The file cap (not the body cap), the tenant's quota, the file-or-directory rule and the
    text rule, as a PUT would: each refusal writes nothing and leaves the proposal pending.
    (Before: 100,000 bytes written under a 4,096-byte file cap, usage past the quota, a 500 onto
    a directory, U+0000 written.)"""
    url, stop = _server(db, max_file_bytes=4096, tenant_max_bytes=6000)
    try:
        t = _tenant(db, url)
        pid = propose(t, "short\n")["proposal"]["proposal_id"]
        over = t.owner.post(f"/proposals/{pid}/approve", json={"content": "x" * 5000})
        assert over.status_code == 413 and "HANGO_MAX_FILE_BYTES (4096 bytes)" in \
            over.json()["detail"]
        assert t.owner.put("/files/notes/big.txt", content="b" * 4000).status_code == 201
        quota = t.owner.post(f"/proposals/{pid}/approve", json={"content": "q" * 3000})
        assert quota.status_code == 413 and "HANGO_TENANT_MAX_BYTES" in quota.json()["detail"]
        nul = t.owner.post(f"/proposals/{pid}/approve", json={"content": "a\x00b"})
        assert nul.status_code == 422 and "U+0000 (NUL) at character 1" in nul.json()["detail"]
        assert t.owner.put("/files/memories/AGENTS.md/inside.md", content="d").status_code == 201
        onto_dir = t.owner.post(f"/proposals/{pid}/approve", json={})
        assert onto_dir.status_code == 409
        assert "is a directory" in onto_dir.json()["detail"], onto_dir.text
        assert file(db, t.id) is None
        assert t.owner.get(f"/proposals/{pid}").json()["status"] == "pending"
        assert t.owner.delete("/files/memories/AGENTS.md/inside.md").status_code == 204
        ok = t.owner.post(f"/proposals/{pid}/approve", json={})
        assert ok.status_code == 200 and file(db, t.id) == ("short\n", 1)
    finally:
        stop()


def test_a_proposal_over_the_body_cap_but_under_the_file_cap_can_be_approved(db: Database,
                                                                            t: T) -> None:
    """1.4 MB proposed under the 16 MiB file cap: approve writes it (before: refused against
    the 1 MiB request-body cap, so it could never be approved)."""
    big = "- a long note\n" * 100_000
    agent = Agent(db, t.id, "a1", SimulatedModel(policy=[[tool_call(
        "write_file", {"path": MEMORY, "content": big})]]))
    result = agent.run("remember a lot")
    assert result.status == "interrupted" and result.interrupt is not None
    ok = t.owner.post(f"/proposals/{result.interrupt['proposal_id']}/approve", json={})
    assert ok.status_code == 200, ok.text
    assert file(db, t.id) == (big, 1)


# --- text PostgreSQL cannot hold -------------------------------------------------------------


def _sql_file(db: Database, tenant: str, path: str, content: bytes) -> None:
    """A file written around the write path (a file from before the text rule, a bulk load)."""
    with db.admin(tenant) as conn:  # the owner, in the tenant (row-level security)
        conn.execute("INSERT INTO agent_files (tenant_id, agent_id, path, content, size) "
                     "VALUES (%s, 'a1', %s, %s, %s)", [tenant, path, content, len(content)])


def test_nul_in_what_a_run_reads_or_answers_is_kept_exactly(db: Database, t: T,
                                                            model: SimulatedModel) -> None:
    """U+0000 in a file a run reads, in a memory file every run loads, in the model's answer:
    the run is saved (its state is json, which keeps U+0000 escaped), resumes, and is recorded.
    (Before: 502 with PostgreSQL's CONTEXT, every later proposing run frozen, the run lost.)"""
    _sql_file(db, t.id, "/notes/nul.txt", b"before\x00after")
    _sql_file(db, t.id, MEMORY, b"- likes \x00 tea\n")
    out = run(t.member, do(("read_file", {"path": "/notes/nul.txt"}),
                           write("/memories/x.md", "x")))
    assert out["status"] == "interrupted", out
    t.owner.post(f"/proposals/{out['proposal']['proposal_id']}/approve", json={})
    done = t.member.post(f"/runs/{out['run_id']}/resume").json()
    assert done["status"] == "done" and done["text"].startswith("done: before\x00after | ")
    assert "- likes \x00 tea" in "".join(b.text for b in model.calls[-1][0].system)
    assert t.member.get(f"/runs/{out['run_id']}").json()["text"] == done["text"]
    answer = run(t.member, "say \x00")
    assert answer["text"] == "(hango-sim) say \x00"
    assert t.member.get(f"/runs/{answer['run_id']}").json()["text"] == "(hango-sim) say \x00"


def test_nul_in_a_reason_or_a_file_is_refused_naming_it(db: Database, t: T) -> None:
    pid = propose(t)["proposal"]["proposal_id"]
    for verb, body in (("reject", {"reason": "no\x00"}), ("approve", {"reason": "ok\x00"})):
        r = t.owner.post(f"/proposals/{pid}/{verb}", json=body)
        assert r.status_code == 422 and r.json()["detail"].startswith(
            "reason contains U+0000 (NUL), which cannot be stored"), r.text
    assert t.owner.get(f"/proposals/{pid}").json()["status"] == "pending"
    put = t.owner.put("/files/notes/n.txt", content="a\x00b")
    assert put.status_code == 422 and put.json()["detail"] == (
        "/notes/n.txt: file contents are text: U+0000 (NUL) at character 1 is not allowed; "
        "nothing was written")
    patch = t.owner.put("/files/notes/m.txt", content="m")
    assert patch.status_code == 201
    r = t.owner.patch("/files/notes/m.txt", json={"old": "m", "new": "\x00"})
    assert r.status_code == 422 and "U+0000" in r.json()["detail"]
    out = run(t.owner, do(write("/memories/n.md", "a\x00b"), write("/notes/o.txt", "\x00")))
    assert out["status"] == "done" and out["text"].count("U+0000 (NUL)") == 2


def test_a_deadlock_that_still_happens_is_409_with_retry_after(db: Database, t: T) -> None:
    """A write that PostgreSQL picks as a deadlock's victim is answered 409 with Retry-After,
    saying to send it again, and nothing of PostgreSQL's DETAIL (before: 503 "database
    unavailable", with the processes and transactions of the DETAIL)."""
    t.owner.put("/files/notes/a.txt", content="a")
    caught: list[httpx.Response] = []
    with db.admin(t.id) as holder:
        # The lock the file-or-directory trigger takes for /notes/..., held here first.
        holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                       [f"{t.id}/a1/notes"])
        # the server's own pid (behind a pooler, the client's backend_pid is the pooler's)
        held_by = holder.execute("SELECT pg_backend_pid()").fetchone()
        writer = threading.Thread(target=lambda: caught.append(
            t.owner.put("/files/notes/b.txt", content="b")))
        writer.start()
        with db.admin_connection(autocommit=True) as watcher:
            deadline = time.monotonic() + 60
            while not watcher.execute("SELECT 1 FROM pg_stat_activity WHERE %s = ANY("
                                      "pg_blocking_pids(pid))", held_by).fetchone():
                assert time.monotonic() < deadline
                time.sleep(0.02)
        with contextlib.suppress(DeadlockDetected):
            holder.execute("LOCK TABLE agent_files IN ACCESS EXCLUSIVE MODE")  # waits on it
        holder.rollback()
        writer.join(60)
    (answer,) = caught
    assert answer.status_code == 409, answer.text
    assert answer.headers["Retry-After"] == "1"
    assert answer.json() == {"detail": (
        "the database aborted this request's transaction to resolve a conflict with a "
        "concurrent one (a deadlock or a serialization failure); nothing was written: send "
        "it again")}
    assert t.owner.put("/files/notes/b.txt", content="b").status_code == 201
