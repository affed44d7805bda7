"""What runs did, over real HTTP on PostgreSQL (hango/api/run_views.py, hango/prompts.py): an
agent's runs listed newest first with a status filter and a cursor, and the prompt of each model
call of a run, as JSON and as text, bounded, counted, kept as long as its run; owners and
admins see every run's, a member its own; another tenant sees nothing of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from hango import prompts, retention
from hango.agent.base_prompt import BASE_PROMPT
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_tenant, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.base import Block, Message, Request, Response
from hango.models.simulated import SimulatedModel
from hango.models.view import MISS_REASONS, render, request_view
from hango.settings import load_settings

HANGO = str(Path(sys.executable).with_name("hango"))
MEMORY = "/memories/AGENTS.md"
REMEMBER = "Remember that I prefer tea, no sugar."


@dataclass
class T:
    id: str
    owner: httpx.Client
    admin: httpx.Client
    member: httpx.Client
    member2: httpx.Client


def _clients(db: Database, url: str, *, prompt: str = BASE_PROMPT) -> Iterator[T]:
    tid = create_tenant(db, "views-" + uuid.uuid4().hex[:10])
    save_agent(db, tid, "a1", AgentConfig(system_prompt=prompt, reserved_writes="ask"))
    clients = [httpx.Client(base_url=f"{url}/v1/agents/a1", timeout=60,
                            headers={"Authorization": f"Bearer {create_token(db, tid, role)}"})
               for role in ("owner", "admin", "member", "member")]
    yield T(tid, *clients)
    for c in clients:
        c.close()


@pytest.fixture(scope="module")
def served(db: Database) -> Iterator[str]:
    """The server's own model (HANGO_MODEL's default: the simulator acting on the conventions)."""
    url, stop = serve_in_thread(create_app(db))
    yield url
    stop()


@pytest.fixture
def t(db: Database, served: str) -> Iterator[T]:
    yield from _clients(db, served)


def _run(c: httpx.Client, prompt: str) -> dict[str, object]:
    got = c.post("/runs", json={"prompt": prompt})
    assert got.status_code == 201, got.text
    out: dict[str, object] = got.json()
    return out


# --- runs listed ---------------------------------------------------------------------------------


def test_runs_are_listed_newest_first_with_a_status_filter_and_a_cursor(t: T) -> None:
    made = [_run(t.owner, p) for p in ("hello", REMEMBER, "hi", "What is in /x.md?")]
    ids = [str(m["run_id"]) for m in made]
    listed = t.owner.get("/runs").json()
    assert [r["run_id"] for r in listed["runs"]] == ids[::-1]
    assert [r["status"] for r in listed["runs"]] == ["done", "done", "interrupted", "done"]
    waiting = t.owner.get("/runs", params={"status": "interrupted"}).json()["runs"]
    assert [(r["run_id"], r["proposal_id"]) for r in waiting] == [
        (ids[1], made[1]["proposal"]["proposal_id"])]  # type: ignore[index]
    pages, cursor = [], None
    while True:
        page = t.owner.get("/runs", params={"limit": 3, **({"cursor": cursor} if cursor else {})})
        pages.append([r["run_id"] for r in page.json()["runs"]])
        if (cursor := page.json()["next_cursor"]) is None:
            break
    assert pages == [ids[::-1][:3], ids[:1]]
    bad = t.owner.get("/runs", params={"cursor": "bm90LWEtY3Vyc29y"})
    assert bad.status_code == 422 and "invalid cursor" in bad.json()["detail"]
    assert t.owner.get("/runs", params={"status": "lost"}).status_code == 422


def test_a_member_lists_its_own_runs_and_an_owner_or_admin_every_run(t: T) -> None:
    mine, theirs = _run(t.member, "hello")["run_id"], _run(t.member2, "hi")["run_id"]
    owners = _run(t.owner, "hey")["run_id"]
    assert [r["run_id"] for r in t.member.get("/runs").json()["runs"]] == [mine]
    assert [r["run_id"] for r in t.member2.get("/runs").json()["runs"]] == [theirs]
    for c in (t.owner, t.admin):
        assert [r["run_id"] for r in c.get("/runs").json()["runs"]] == [owners, theirs, mine]
    by = t.admin.get("/runs").json()["runs"][2]["started_by"]
    assert by.startswith("member:") and by != t.admin.get("/runs").json()["runs"][1]["started_by"]


def test_another_tenants_runs_are_not_there(db: Database, served: str, t: T) -> None:
    run_id = _run(t.owner, "hello")["run_id"]
    other = next(_clients(db, served))
    assert other.owner.get("/runs").json()["runs"] == []
    gone = other.owner.get(f"/runs/{run_id}/prompt")
    assert gone.status_code == 404 and "hello" not in gone.text
    nobody = str(t.owner.base_url).rstrip("/").rsplit("/", 1)[0] + "/nobody"
    assert t.owner.get(f"{nobody}/runs").json() == {"detail": "no agent 'nobody' in this tenant"}


# --- the prompt of a run ---------------------------------------------------------------------------


def test_the_prompt_of_each_call_with_sources_breakpoints_usage_and_why(t: T) -> None:
    assert t.owner.put(f"/files{MEMORY}", content=b"- Answer in plain words.\n").is_success
    run = _run(t.owner, "Read /notes/todo.md")  # two calls: the read, then the answer
    calls = t.owner.get(f"/runs/{run['run_id']}/prompt").json()["calls"]
    assert len(calls) == 2
    first = calls[0]
    sources = [b["source"] for b in first["system"]]
    assert sources == ["tenant_cache_scope", "system_prompt", MEMORY]
    cut = first["system_breakpoint"]
    assert sources.index("system_prompt") == cut < sources.index(MEMORY)  # memory after it
    memory = first["system"][2]
    assert "- Answer in plain words." in memory["text"]
    assert memory["bytes"] == len(memory["text"].encode()) and memory["tokens"] > 0
    assert {"tier": "system", "index": cut, "ttl": "1h"} in first["breakpoints"]
    assert [t["name"] for t in first["tools"]] == ["edit_file", "glob", "ls", "read_file",
                                                    "write_file"]
    assert first["messages"][0]["text"] == "Read /notes/todo.md"
    assert first["response"]["tool_calls"][0]["name"] == "read_file"
    assert first["usage"]["cache_read_input_tokens"] == 0
    assert first["miss_reason"] == "previous_message_not_found"
    assert first["miss"] == MISS_REASONS["previous_message_not_found"]
    second = calls[1]
    assert second["usage"]["cache_read_input_tokens"] > 1024 and not second["clipped"]
    assert second["messages"][2]["tool_results"][0]["content"].startswith("error: no such file")
    # The text: the notebooks' show_request, call after call (one renderer).
    text = t.owner.get(f"/runs/{run['run_id']}/prompt", params={"format": "text"})
    assert text.headers["content-type"].startswith("text/plain")
    assert text.text.splitlines()[2:] == ["--- call 1 ---", *render(first).splitlines(), "",
                                          "--- call 2 ---", *render(second).splitlines()]
    assert "  <- cache breakpoint" in text.text
    asked = t.owner.get(f"/runs/{run['run_id']}/prompt", headers={"Accept": "text/plain"})
    assert asked.text == text.text
    full = t.owner.get(f"/runs/{run['run_id']}/prompt", params={"format": "text", "width": 0})
    assert "      You are an agent running in hango." in full.text  # every block in full


def test_a_short_prompt_says_why_it_reads_nothing(db: Database, served: str) -> None:
    short = next(_clients(db, served, prompt="Be brief."))
    for _ in range(2):
        run = _run(short.owner, "hello")
    (call,) = short.owner.get(f"/runs/{run['run_id']}/prompt").json()["calls"]
    assert (call["usage"]["cache_read_input_tokens"], call["miss_reason"]) == (0, "below_minimum")
    text = short.owner.get(f"/runs/{run['run_id']}/prompt?format=text").text
    assert f"cache: below_minimum: {MISS_REASONS['below_minimum']}" in text


def test_a_resumed_run_numbers_its_calls_after_the_interrupted_ones(t: T) -> None:
    run = _run(t.owner, REMEMBER)
    proposal = run["proposal"]["proposal_id"]  # type: ignore[index]
    assert t.owner.post(f"/proposals/{proposal}/approve", json={}).is_success
    assert t.owner.post(f"/runs/{run['run_id']}/resume").json()["status"] == "done"
    calls = t.owner.get(f"/runs/{run['run_id']}/prompt").json()["calls"]
    assert [[call["name"] for call in c["response"]["tool_calls"]] for c in calls] == [
        ["write_file"], []]
    assert calls[1]["messages"][-1]["tool_results"][0]["content"].startswith("approved:")
    assert calls[1]["system"] == calls[0]["system"]  # a resumed run keeps its blocks


def test_a_member_sees_the_prompts_of_its_own_runs_only(t: T) -> None:
    mine = _run(t.member, "hello")["run_id"]
    assert t.member.get(f"/runs/{mine}/prompt").status_code == 200
    refused = t.member2.get(f"/runs/{mine}/prompt")
    assert refused.status_code == 403 and "hello" not in refused.text
    assert refused.json()["detail"].startswith("a member sees the prompts of the runs its own "
                                               "token started only")
    owners = _run(t.owner, "hi")["run_id"]
    assert t.member.get(f"/runs/{owners}/prompt").status_code == 403
    for c in (t.owner, t.admin):
        assert c.get(f"/runs/{mine}/prompt").json()["calls"][0]["messages"][0]["text"] == "hello"


def test_the_prompts_kept_are_bounded_counted_and_go_with_their_run(db: Database) -> None:
    settings = load_settings(run_prompt_max_bytes=12_000)
    url, stop = serve_in_thread(create_app(db, settings))
    try:
        t = next(_clients(db, url))
        PostgresBackend(db, t.id, "a1").write("/notes/big.md", "lorem ipsum " * 2_000)
        run = _run(t.owner, "Read /notes/big.md and list /notes/")
        kept = t.owner.get(f"/runs/{run['run_id']}/prompt").json()
        assert kept["max_bytes"] == 12_000 and len(kept["calls"]) == 3
        sizes = [len(json.dumps(c, ensure_ascii=False, separators=(",", ":")).encode())
                 for c in kept["calls"]]
        assert [c["clipped"] for c in kept["calls"]] == [False, True, True]
        assert sum(sizes[:2]) <= 12_000  # the third: its headings only, past the bound
        assert "… [cut: " in kept["calls"][1]["messages"][2]["tool_results"][0]["content"]
        assert all(b["text"].startswith("… [cut: ") for b in kept["calls"][2]["system"][1:])
        headings = kept["calls"][2]  # what is left past the bound: sources, sizes, usage, why
        assert [b["source"] for b in headings["system"]] == ["tenant_cache_scope",
                                                             "system_prompt"]
        assert headings["system"][1]["bytes"] == len(BASE_PROMPT.encode())
        assert headings["usage"]["cache_read_input_tokens"] > 0 and "miss_reason" in headings
        retention.sweep_tenant(db, t.id, settings)
        with db.tenant(t.id) as conn:
            (stored,) = conn.execute("SELECT sum(bytes) FROM run_prompts WHERE tenant_id = %s",
                                     [t.id]).fetchone()
            (counted,) = conn.execute("SELECT run_bytes FROM tenant_usage WHERE tenant_id = %s",
                                      [t.id]).fetchone()
        assert stored == sum(sizes) and counted >= stored
        _run(t.owner, "hello")  # a newer ended run: the first one goes, its prompts with it
        retention.sweep_tenant(db, t.id, load_settings(runs_keep_max=1))
        assert t.owner.get(f"/runs/{run['run_id']}/prompt").status_code == 404
        with db.tenant(t.id) as conn:
            assert conn.execute("SELECT count(*) FROM run_prompts WHERE tenant_id = %s AND "
                                "run_id = %s", [t.id, run["run_id"]]).fetchone() == (0,)
    finally:
        stop()


def test_a_kept_view_fits_its_budget_with_its_clipped_flag_counted() -> None:
    """A view whose texts fit the budget only without the ``"clipped":false`` it is kept with is
    cut, so that a run's prompts never pass HANGO_RUN_PROMPT_MAX_BYTES."""
    request = Request("hango-sim-1", (), (Block("x" * 2_000, "system_prompt"),),
                      (Message("user", "hello"),))
    view = request_view(request, Response("hi"))
    bare = len(json.dumps(view, ensure_ascii=False, separators=(",", ":")).encode())
    for budget in range(bare - 2, bare + 20):
        kept = prompts.bounded(view, budget)
        assert len(kept.encode()) <= budget, budget
        assert json.loads(kept)["clipped"] == (budget < bare + len(',"clipped":false'))


def test_a_store_that_waited_for_the_run_numbers_its_calls_after_what_was_kept(
        db: Database) -> None:
    """Two parts of one run kept at once (a resumed part while the interrupted one is still
    keeping its prompts): the second waits for the run's row, then counts what the first kept
    and numbers its calls after them. Nothing lost, nothing numbered twice."""
    import threading
    import time

    tid = create_tenant(db, "views-" + uuid.uuid4().hex[:10])
    save_agent(db, tid, "a1", AgentConfig())
    result = Agent(db, tid, "a1", SimulatedModel()).run("hello", record=True)
    errors: list[BaseException] = []

    def store() -> None:
        try:
            prompts.store(db, tid, result.run_id, result.requests, result.responses, 100_000)
        except BaseException as exc:  # the assertion below shows it
            errors.append(exc)

    with db.admin(tid) as first:  # the first part: it holds the run while it keeps a call
        first.execute("SELECT 1 FROM runs WHERE tenant_id = %s AND run_id = %s FOR NO KEY "
                      "UPDATE", [tid, result.run_id])
        second = threading.Thread(target=store)
        second.start()
        deadline = time.monotonic() + 30
        with db.admin() as watch:  # a session waits behind the first part's lock: the second
            while watch.execute("SELECT count(*) FROM pg_stat_activity "
                                "WHERE %s = ANY (pg_blocking_pids(pid))",
                                [first.info.backend_pid]).fetchone() != (1,):
                assert time.monotonic() < deadline, "the second store never waited"
                time.sleep(0.02)
        first.execute("INSERT INTO run_prompts (tenant_id, run_id, call, view, bytes) "
                      "VALUES (%s, %s, 1, '{}', 2)", [tid, result.run_id])
    second.join(timeout=30)
    assert errors == []
    with db.tenant(tid) as conn:
        calls = conn.execute("SELECT call FROM run_prompts WHERE tenant_id = %s AND run_id = %s "
                             "ORDER BY call", [tid, result.run_id]).fetchall()
    assert calls == [(n,) for n in range(1, 2 + len(result.requests))]
    assert prompts.load(db, tid, result.run_id)[0] == {}  # the first part's call, then ours


def test_one_tenants_prompt_says_nothing_of_anothers(db: Database, served: str) -> None:
    """Two tenants, the same agent and prompt, one after the other on the server's one model:
    the second's first call is a first call of its own cache scope (nothing read, and why is
    its own), and nothing of the first tenant is in its prompt."""
    a, b = next(_clients(db, served)), next(_clients(db, served))
    assert a.owner.put(f"/files{MEMORY}", content=b"- a secret of tenant a\n").is_success
    _run(a.owner, "hello")
    first_of_a = _run(a.owner, "hello")
    first_of_b = _run(b.owner, "hello")
    view_a = a.owner.get(f"/runs/{first_of_a['run_id']}/prompt").json()["calls"][0]
    view_b = b.owner.get(f"/runs/{first_of_b['run_id']}/prompt").json()["calls"][0]
    assert view_a["usage"]["cache_read_input_tokens"] > 1024 and view_a["miss_reason"] is None
    assert (view_b["usage"]["cache_read_input_tokens"], view_b["miss_reason"]) == (
        0, "previous_message_not_found")
    text_b = json.dumps(view_b)
    assert "secret of tenant a" not in text_b
    assert view_a["system"][0]["text"] not in text_b  # a's cache scope


def test_a_run_holding_u0000_is_listed_and_its_prompt_kept_exactly(t: T) -> None:
    run_id = _run(t.owner, "hello\x00world")["run_id"]
    assert [r["run_id"] for r in t.owner.get("/runs").json()["runs"]] == [run_id]
    (call,) = t.owner.get(f"/runs/{run_id}/prompt").json()["calls"]
    assert call["messages"][0]["text"] == "hello\x00world"


def test_a_prompt_with_quotes_backslashes_and_any_script_is_kept_exactly(t: T) -> None:
    """A run's views go to PostgreSQL as a binary text array, each view's JSON as it is: every
    character that JSON or an array literal escapes comes back as it was sent."""
    prompt = 'say "hi" \\ back\\slash \\"q\\" {a,b} NULL naïve 日本 🎉\ttab\nline'
    run_id = _run(t.owner, prompt)["run_id"]
    (call,) = t.owner.get(f"/runs/{run_id}/prompt").json()["calls"]
    assert call["messages"][0]["text"] == prompt


def test_the_cli_lists_runs_newest_first(t: T) -> None:
    first, waits = _run(t.owner, "hello")["run_id"], _run(t.member, REMEMBER)
    second = waits["run_id"]
    listed = subprocess.run([HANGO, "runs", "list", t.id, "a1"], capture_output=True,
                            text=True, timeout=120, env=dict(os.environ))
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [(r[0], r[1]) for r in rows] == [(second, "interrupted"), (first, "done")]
    assert rows[0][3].startswith("member:")
    assert rows[0][4] == waits["proposal"]["proposal_id"]  # type: ignore[index]
    waiting = subprocess.run([HANGO, "runs", "list", t.id, "a1", "--status", "failed"],
                             capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert (waiting.stdout, waiting.stderr.strip()) == ("", f"no failed runs for {t.id}/a1")
