"""Tests written to kill mutants of the runtime's run, interrupt, resume and subagent paths
(issue 11 point 5; the paths are issue 13's). tests/mutation_verdicts.toml ``[runtime-resume]``
lists the mutants of these paths that no test can tell apart, with the reason.

Real parts only: PostgreSQL, loopback HTTP, the offline SimulatedModel. The model's policy reads
the prompt as in tests/test_proposals.py: ``do [calls]`` makes it call those tools in one turn,
then answer with the tool results it got.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from test_proposals import MEMORY, do, policy, write  # the same scripted model

from hango.agent import proposals, runs
from hango.agent.hooks import Event, RunContext
from hango.agent.runtime import Agent
from hango.agent.stack import Stack, default_stack
from hango.agents import AgentConfig, create_token, save_agent
from hango.api.app import create_app, serve_in_thread
from hango.db import Database
from hango.models.base import Block, Message, ModelError, Request
from hango.models.simulated import Reply, SimulatedModel, tool_call
from hango.settings import load_settings
from hango.telemetry import Telemetry


def ask_agent(db: Database, tenant: str, model: SimulatedModel | None = None,
              **kwargs: Any) -> Agent:
    """Agent ``a1`` in ``ask`` mode: its writes under /memories/ become proposals."""
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="ask"))
    return Agent(db, tenant, "a1", model or SimulatedModel(policy=policy), **kwargs)


def approve(db: Database, tenant: str, interrupt: dict[str, Any] | None) -> None:
    assert interrupt is not None
    proposals.approve(db, tenant, "a1", interrupt["proposal_id"], by="test", role="owner")


# --- Agent.run and the config it runs with --------------------------------------------------------


def test_the_prompt_reaches_the_model_as_a_user_message_after_the_history(
        db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig())
    model = SimulatedModel()
    history = [Message("user", "earlier"), Message("assistant", "noted")]
    Agent(db, tenant, "a1", model).run("now", history)
    assert list(model.calls[0][0].messages) == [*history, Message("user", "now")]


def test_only_a_recorded_run_is_kept(db: Database, tenant: str) -> None:
    """A run in a notebook leaves no row; a run over HTTP (``record=True``) can be read back."""
    save_agent(db, tenant, "a1", AgentConfig())
    agent = Agent(db, tenant, "a1", SimulatedModel())
    plain = agent.run("hi")
    with pytest.raises(runs.RunNotFound):
        runs.load(db, tenant, plain.run_id)
    kept = agent.run("hi", record=True)
    assert runs.load(db, tenant, kept.run_id)["status"] == "done"


def test_a_given_config_is_used_instead_of_the_stored_one(db: Database, tenant: str) -> None:
    save_agent(db, tenant, "a1", AgentConfig(system_prompt="the stored prompt"))
    model = SimulatedModel()
    Agent(db, tenant, "a1", model, config=AgentConfig(system_prompt="the given prompt")).run("hi")
    system = " ".join(b.text for b in model.calls[0][0].system)
    assert "the given prompt" in system and "the stored prompt" not in system


def test_a_missing_agent_is_named_with_its_tenant(db: Database, tenant: str) -> None:
    with pytest.raises(LookupError) as caught:
        Agent(db, tenant, "nope", SimulatedModel()).run("hi")
    assert str(caught.value) == f"no agent 'nope' in tenant {tenant!r}"


# --- the interrupted turn ------------------------------------------------------------------------


def test_the_interrupt_event_names_its_kind(db: Database, tenant: str,
                                            telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    result = ask_agent(db, tenant, telemetry=tel).run(do(write(MEMORY, "x")))
    assert result.events[-1] == Event("agent.run_interrupted", {"kind": "proposal"})
    (event,) = [e for s in exporter.get_finished_spans() for e in s.events
                if e.name == "agent.run_interrupted"]
    assert dict(event.attributes or {}) == {"kind": "proposal"}


def test_a_proposal_over_the_bound_is_that_calls_error_and_the_turn_goes_on(
        db: Database, tenant: str) -> None:
    model = SimulatedModel(policy=policy)
    agent = ask_agent(db, tenant, model, settings=load_settings(proposals_max_pending=1))
    assert agent.run(do(write("/memories/one.md", "x"))).status == "interrupted"
    result = agent.run(do(write("/memories/two.md", "y"), write("/notes/n.md", "n")))
    assert result.status == "done"
    request = model.calls[-1][0]
    calls, results = request.messages[-2].tool_calls, request.messages[-1].tool_results
    assert [(r.call_id, r.is_error) for r in results] == [(calls[0].id, True),
                                                           (calls[1].id, False)]
    assert results[0].content == (
        "error: this agent already has 1 proposals waiting for a decision "
        "(HANGO_PROPOSALS_MAX_PENDING); nothing was proposed")
    assert results[1].content == "wrote /notes/n.md (version 1)"


@pytest.fixture(scope="module")
def server(db: Database) -> Iterator[str]:
    url, stop = serve_in_thread(create_app(db))
    yield url
    stop()


def test_a_run_read_the_moment_it_is_interrupted_answers_interrupted(
        db: Database, tenant: str, server: str) -> None:
    """An owner who sees the new proposal and opens its run at once (before the run has
    recorded its summary) reads an interrupted run, not an error. The run's log line is
    written in exactly that moment, so a log handler stands in for the quick owner."""
    owner = httpx.Client(base_url=f"{server}/v1/agents/a1", timeout=30,
                         headers={"Authorization": f"Bearer {create_token(db, tenant, 'owner')}"})
    seen: list[httpx.Response] = []

    class QuickOwner(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(owner.get(f"/runs/{record.__dict__['run_id']}"))

    logger = logging.Logger("quick-owner", logging.INFO)  # this test's own, not a global one
    logger.addHandler(QuickOwner())
    result = ask_agent(db, tenant, telemetry=Telemetry(logger=logger)).run(do(write(MEMORY, "x")))
    assert result.status == "interrupted"
    (early,) = seen
    assert early.status_code == 200, early.text
    assert early.json()["status"] == "interrupted"
    assert owner.get(f"/runs/{result.run_id}").json()["proposal"]["path"] == MEMORY


# --- Agent.resume --------------------------------------------------------------------------------


def test_a_changed_config_stops_the_resume_with_the_whole_message(db: Database,
                                                                  tenant: str) -> None:
    agent = ask_agent(db, tenant)
    first = agent.run(do(write(MEMORY, "x")))
    approve(db, tenant, first.interrupt)
    save_agent(db, tenant, "a1", AgentConfig(reserved_writes="ask", max_steps=5))
    with pytest.raises(runs.RunError) as caught:
        agent.resume(first.run_id)
    assert str(caught.value) == (
        f"run {first.run_id}: the agent's config or model changed since the run was "
        "interrupted, so its conversation no longer matches; nothing was run. "
        "Restore the config, or start a new run")


def test_a_run_interrupted_twice_resumes_twice(db: Database, tenant: str) -> None:
    """The second resume passes the first (decided) write through the tool wrappers again; the
    proposal that wrapper would make again is not a new interrupt."""
    model = SimulatedModel(policy=[[tool_call("write_file", {"path": MEMORY, "content": "a"})],
                                   [tool_call("write_file", {"path": "/memories/b.md",
                                                             "content": "b"})],
                                   policy])
    agent = ask_agent(db, tenant, model)
    first = agent.run("remember two things")
    approve(db, tenant, first.interrupt)
    second = agent.resume(first.run_id)
    assert (second.status, second.run_id) == ("interrupted", first.run_id)
    approve(db, tenant, second.interrupt)
    third = agent.resume(first.run_id)
    assert third.status == "done"
    assert third.text.startswith("done: approved: /memories/b.md written as version 1")


def test_a_resume_failing_while_the_database_fails_too_reports_the_first_failure(
        db: Database, tenant: str) -> None:
    """The model fails during the resume, and giving the claim back fails as well (the database
    connection is cut): the caller reads the model's error; the claim expires by itself."""
    holder = psycopg.connect(db.admin_conninfo)
    run_id = ""

    def cut_the_release() -> None:  # terminate the session that waits behind the holder's lock
        with psycopg.connect(db.admin_conninfo, autocommit=True) as watcher:
            for _ in range(3000):
                row = watcher.execute(
                    "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    [holder.info.backend_pid]).fetchone()
                if row:
                    watcher.execute("SELECT pg_terminate_backend(%s)", [row[0]])
                    return
                threading.Event().wait(0.01)
        holder.close()  # never found: let the release through rather than hang

    watcher = threading.Thread(target=cut_the_release)

    def failing_model(request: Request) -> Reply:
        holder.execute("SELECT 1 FROM runs WHERE tenant_id = %s AND run_id = %s FOR UPDATE",
                       [tenant, run_id])
        watcher.start()
        raise RuntimeError("the model is down")

    agent = ask_agent(db, tenant, SimulatedModel(policy=[
        [tool_call("write_file", {"path": MEMORY, "content": "x"})], failing_model]))
    first = agent.run("remember")
    run_id = first.run_id
    approve(db, tenant, first.interrupt)
    try:
        with pytest.raises(ModelError, match=r"^the model hango-sim-1 failed: RuntimeError: "
                                             r"the model is down$"):
            agent.resume(run_id)
    finally:
        watcher.join(60)
        holder.close()
    assert runs.load(db, tenant, run_id)["status"] == "resuming"
    with pytest.raises(runs.RunConflict, match="already being resumed"):
        agent.resume(run_id)


# --- Agent.child ---------------------------------------------------------------------------------


class HouseRules:
    """A middleware of the caller's own stack: one system block."""

    name = "house_rules"

    def system_blocks(self, ctx: RunContext) -> tuple[Block, ...]:
        return (Block("House rules: be brief.", "house_rules"),)


def test_a_subagent_runs_with_its_parents_model_stack_telemetry_and_run_ids(
        db: Database, tenant: str, telemetry_pair: Any) -> None:
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "lead", AgentConfig(tools=["task"], subagents=["scribe"]))
    save_agent(db, tenant, "scribe", AgentConfig(reserved_writes="ask"))
    model = SimulatedModel(policy=policy)  # no child_models: the scribe uses it too
    ids = iter(["run-1", "run-2"])
    lead = Agent(db, tenant, "lead", model, telemetry=tel, run_ids=lambda: next(ids),
                 stack=lambda a: Stack([*default_stack(a).middlewares, HouseRules()]))
    task = do(write(MEMORY, "x"))
    result = lead.run(do(("task", {"agent": "scribe", "description": task})))
    assert (result.run_id, result.status) == ("run-1", "done")
    assert result.text.startswith("done: scribe proposed a write to its memory or skills; "
                                  "its run run-2 waits")
    scribe_request = next(r for r, _ in model.calls if r.messages[0].text == task)
    assert "House rules: be brief." in [b.text for b in scribe_request.system]
    run_spans = {s.attributes["gen_ai.agent.name"]: s for s in exporter.get_finished_spans()
                 if s.name == "agent.run" and s.attributes}
    assert run_spans["scribe"].attributes["hango.run.id"] == "run-2"
    assert run_spans["scribe"].context.trace_id == run_spans["lead"].context.trace_id
