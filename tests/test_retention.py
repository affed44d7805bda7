"""Retention of runs and proposals (hango/retention.py), on real PostgreSQL.

Ended runs go after HANGO_RUNS_KEEP_DAYS or beyond HANGO_RUNS_KEEP_MAX, with their proposals;
a run waiting for a decision stays; a decided run nobody resumed is ended, saying why; each
sweep writes the tenant's count and bytes of runs into its usage; a sweep is bounded; the server
and ``hango db sweep`` run it.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from hango import retention
from hango.agent import proposals, runs
from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.models.base import Request
from hango.models.simulated import Reply, SimulatedModel, tool_call
from hango.settings import load_settings


def policy(request: Request) -> Reply:
    """``remember`` proposes a memory write; anything else is answered at once."""
    last = request.messages[-1]
    if last.text == "remember":
        return Reply("", (tool_call("write_file", {"path": "/memories/x.md",
                                                   "content": "a fact"}),))
    return Reply("noted")


def agent(db: Database, tenant: str) -> Agent:
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="ask"))
    return Agent(db, tenant, "a1", SimulatedModel(policy=policy))


def age(db: Database, tenant: str, run_ids: list[str], days: float) -> None:
    """Make runs (and the decisions on their proposals) ``days`` old."""
    with db.admin() as conn:
        conn.execute("UPDATE runs SET updated_at = now() - make_interval(days => %s) "
                     "WHERE tenant_id = %s AND run_id = ANY(%s)", [days, tenant, run_ids])
        conn.execute("UPDATE proposals SET decided_at = now() - make_interval(days => %s) "
                     "WHERE tenant_id = %s AND run_id = ANY(%s) AND decided_at IS NOT NULL",
                     [days, tenant, run_ids])


def kept(db: Database, tenant: str) -> dict[str, str]:
    with db.admin() as conn:
        return dict(conn.execute("SELECT run_id, status FROM runs WHERE tenant_id = %s",
                                 [tenant]).fetchall())


def usage(db: Database, tenant: str) -> tuple[int, int, Any]:
    with db.admin() as conn:
        row = conn.execute("SELECT runs, run_bytes, runs_swept_at FROM tenant_usage "
                           "WHERE tenant_id = %s", [tenant]).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def sweep(db: Database, tenant: str, batch: int = 1000, **settings: Any) -> retention.Swept:
    """This tenant only: other tests' tenants share the database, and these settings are tight."""
    return retention.sweep_tenant(db, tenant, load_settings(**settings), batch=batch)


def test_old_ended_runs_go_with_their_proposals_and_waiting_runs_stay(db: Database,
                                                                        tenant: str) -> None:
    a = agent(db, tenant)
    old = [a.run(f"old {i}", record=True).run_id for i in range(3)]
    new = a.run("new", record=True).run_id
    waiting = a.run("remember")  # its proposal is pending
    assert waiting.status == "interrupted" and waiting.interrupt is not None
    decided = a.run("remember")  # approved, then resumed: done, with its proposal
    assert decided.interrupt is not None
    proposals.approve(db, tenant, "a1", decided.interrupt["proposal_id"], by="owner:t",
                      role="owner")
    assert a.resume(decided.run_id).status == "done"
    age(db, tenant, [*old, waiting.run_id, decided.run_id], days=40)

    sweep(db, tenant, runs_keep_days=30)
    assert kept(db, tenant) == {new: "done", waiting.run_id: "interrupted"}
    pending = proposals.list_proposals(db, tenant, "a1", None)
    assert [p.run_id for p in pending] == [waiting.run_id]  # the decided one went with its run
    count, nbytes, swept_at = usage(db, tenant)
    assert count == 2 and nbytes > len("a fact") and swept_at is not None


def test_beyond_the_keep_count_the_oldest_ended_runs_go(db: Database, tenant: str) -> None:
    a = agent(db, tenant)
    made = [a.run(f"run {i}", record=True).run_id for i in range(7)]
    for i, run_id in enumerate(made):  # distinct ages, oldest first
        age(db, tenant, [run_id], days=7 - i)
    swept = sweep(db, tenant, runs_keep_max=5)
    assert swept.by_count == 2
    assert set(kept(db, tenant)) == set(made[2:])
    assert usage(db, tenant)[0] == 5


def test_a_decided_run_nobody_resumed_is_ended_saying_why(db: Database, tenant: str) -> None:
    a = agent(db, tenant)
    run = a.run("remember")
    assert run.interrupt is not None
    proposals.reject(db, tenant, "a1", run.interrupt["proposal_id"], by="owner:t",
                     role="owner", reason="no")
    age(db, tenant, [run.run_id], days=40)
    assert sweep(db, tenant, runs_keep_days=30).expired == 1
    row = runs.load(db, tenant, run.run_id)
    assert (row["status"], row["result"]["stop_reason"]) == ("failed", "expired")
    assert row["result"]["warnings"][-1] == retention.EXPIRED.format(days=30)
    with db.admin() as conn:
        assert conn.execute("SELECT state FROM runs WHERE tenant_id = %s AND run_id = %s",
                            [tenant, run.run_id]).fetchone() == (None,)


def test_a_sweep_deletes_at_most_a_batch_per_statement(db: Database, tenant: str) -> None:
    a = agent(db, tenant)
    made = [a.run(f"run {i}", record=True).run_id for i in range(5)]
    age(db, tenant, made, days=40)
    assert sweep(db, tenant, runs_keep_days=30, batch=2).by_age == 2
    assert len(kept(db, tenant)) == 3  # the rest waits for the next sweep
    assert sweep(db, tenant, runs_keep_days=30, batch=2).by_age == 2
    assert len(kept(db, tenant)) == 1


def test_the_server_sweeps_and_the_cli_does_too(db: Database, tenant: str) -> None:
    a = agent(db, tenant)
    old = a.run("old", record=True).run_id
    age(db, tenant, [old], days=40)
    app = create_app(db, load_settings(runs_sweep_seconds=0.05), sweep=True)
    url, stop = serve_in_thread(app)
    try:
        headers = {"Authorization": f"Bearer {create_token(db, tenant, 'owner')}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            deadline = time.monotonic() + 60  # a bound on waiting, not a figure asserted
            while c.get(f"/v1/agents/a1/runs/{old}").status_code != 404:
                assert time.monotonic() < deadline, "the server never swept the old run"
                time.sleep(0.05)
    finally:
        stop()
    assert usage(db, tenant)[0] == 0


def test_the_defaults() -> None:
    s = load_settings()
    assert (s.runs_keep_days, s.runs_keep_max, s.runs_sweep_seconds) == (30.0, 10_000, 300.0)
