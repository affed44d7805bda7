"""Subagent chains are bounded: an agent cannot name itself; a cycle or a chain
deeper than ``HANGO_SUBAGENT_MAX_DEPTH`` is a tool error naming the chain, and the run goes on.

Before this, two agents naming each other recursed about 49 levels deep and the run ended as
"database unavailable: couldn't get a connection" (Python's recursion limit, misreported).
"""

from __future__ import annotations

import threading
import time
from itertools import pairwise
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from test_proposals import MEMORY, do, policy, write  # the same scripted model

from hango.agent import proposals
from hango.agent.hooks import RunContext
from hango.agent.runtime import Agent
from hango.agent.stack import Stack, default_stack
from hango.agents import AgentConfig, create_token, load_agent, save_agent
from hango.db import Database
from hango.models.base import Block, Request, ToolResult
from hango.models.simulated import SimulatedModel, tool_call
from hango.settings import load_settings


def delegating(agent_id: str, to: str) -> SimulatedModel:
    """A model that always hands its task to ``to``, then reports what came back."""

    def policy(request: Request) -> object:
        last = request.messages[-1]
        if last.tool_results:
            return f"{agent_id} heard: {last.tool_results[0].content}"
        return [tool_call("task", {"agent": to, "description": "pass it on"})]

    return SimulatedModel(policy=policy)


def task_results(model: SimulatedModel) -> list[ToolResult]:
    """The tool results the model was shown in its last request."""
    return [r for m in model.calls[-1][0].messages for r in m.tool_results]


def chain_agents(db: Database, tenant: str, names: str) -> dict[str, SimulatedModel]:
    """Agents ``names[0] -> names[1] -> ...``, each naming the next as its only subagent."""
    models: dict[str, SimulatedModel] = {}
    for here, to in pairwise(names):
        save_agent(db, tenant, here, AgentConfig(tools=["task"], subagents=[to]))
        models[here] = delegating(here, to)
    last = names[-1]
    if last not in models:
        save_agent(db, tenant, last, AgentConfig(tools=[]))
        models[last] = SimulatedModel(policy=lambda req: f"{last} did it")
    return models


def test_a_config_naming_itself_is_refused_naming_the_field(db: Database, tenant: str) -> None:
    with pytest.raises(ValidationError, match=r"subagents\[1\] 'a' is this agent itself"):
        save_agent(db, tenant, "a", AgentConfig(subagents=["b", "a"]))
    assert load_agent(db, tenant, "a") is None  # nothing saved
    with pytest.raises(ValidationError, match=r"subagents\[0\] 'a' is this agent itself"):
        AgentConfig(subagents=["a"]).for_agent("a")
    assert AgentConfig(subagents=["b"]).for_agent("a").subagents == ["b"]


def test_the_api_refuses_a_config_naming_itself(db: Database, tenant: str, api_url: str) -> None:
    headers = {"Authorization": f"Bearer {create_token(db, tenant, 'owner')}"}
    with httpx.Client(base_url=api_url, headers=headers, timeout=30) as c:
        got = c.put("/v1/agents/a", json={"subagents": ["a"]})
        assert got.status_code == 422, got.text
        assert got.json()["detail"] == ("subagents (body): subagents[0] 'a' is this agent "
                                        "itself; an agent cannot be its own subagent")
        assert c.put("/v1/agents/a", json={"subagents": ["b"]}).status_code == 201
    assert load_agent(db, tenant, "a") == AgentConfig(subagents=["b"])


def run_chain(db: Database, tenant: str, models: dict[str, SimulatedModel], top: str,
              **settings: object) -> str:
    result = Agent(db, tenant, top, models[top], child_models=models,
                   settings=load_settings(**settings)).run("start")
    assert result.stop_reason == "final"
    return result.text


def test_a_cycle_is_a_tool_error_naming_the_chain(db: Database, tenant: str) -> None:
    models = chain_agents(db, tenant, "ab")
    save_agent(db, tenant, "b", AgentConfig(tools=["task"], subagents=["a"]))
    models["b"] = delegating("b", "a")
    text = run_chain(db, tenant, models, "a")
    (refusal,) = task_results(models["b"])
    assert refusal.is_error
    assert refusal.content.startswith("error: subagent chain a -> b -> a is a cycle")
    assert text == f"a heard: b heard: {refusal.content}"
    assert len(models["a"].calls) == 2  # a ran once (two model calls), never nested


def test_a_self_naming_config_stored_earlier_is_a_cycle_at_run_time(db: Database,
                                                                    tenant: str) -> None:
    with db.tenant(tenant) as conn:  # as a config saved before the validation rule would be
        conn.execute("INSERT INTO agents (tenant_id, agent_id, config) VALUES (%s, 'a', %s)",
                     [tenant, AgentConfig(tools=["task"], subagents=["a"]).model_dump_json()])
    model = delegating("a", "a")
    text = run_chain(db, tenant, {"a": model}, "a")
    assert text.startswith("a heard: error: subagent chain a -> a is a cycle")


def test_depth_beyond_the_setting_is_a_tool_error_naming_the_chain(db: Database,
                                                                   tenant: str) -> None:
    models = chain_agents(db, tenant, "abcde")
    text = run_chain(db, tenant, models, "a", subagent_max_depth=3)
    (refusal,) = task_results(models["d"])  # d runs at depth 3, the deepest allowed
    assert refusal.is_error
    assert refusal.content == ("error: subagent depth 4 exceeds HANGO_SUBAGENT_MAX_DEPTH=3: "
                               "a -> b -> c -> d -> e")
    assert models["e"].calls == []  # never started
    assert text == f"a heard: b heard: c heard: d heard: {refusal.content}"


@pytest.mark.parametrize(("depth", "reaches_e"), [(4, True), (0, False)])
def test_the_depth_setting_decides(db: Database, tenant: str, depth: int,
                                   reaches_e: bool) -> None:
    models = chain_agents(db, tenant, "abcde")
    text = run_chain(db, tenant, models, "a", subagent_max_depth=depth)
    assert (text == "a heard: b heard: c heard: d heard: e did it") is reaches_e
    if not reaches_e:
        assert text == ("a heard: error: subagent depth 1 exceeds HANGO_SUBAGENT_MAX_DEPTH=0: "
                        "a -> b")


def test_the_default_depth_is_three() -> None:
    assert load_settings().subagent_max_depth == 3


# --- budgets: the run's deadline and model calls reach every child; tasks per turn ------------


def fan_out(db: Database, tenant: str, tasks: int, think: float = 0.0) -> SimulatedModel:
    """Agent ``a`` asks for ``tasks`` tasks of ``b`` in its first turn (after ``think``
    seconds), then answers."""
    save_agent(db, tenant, "a", AgentConfig(tools=["task"], subagents=["b"]))
    save_agent(db, tenant, "b", AgentConfig(tools=["ls"]))

    def policy(request: Request) -> object:
        if request.messages[-1].tool_results:
            return "a is done"
        time.sleep(think)
        return [tool_call("task", {"agent": "b", "description": f"part {i}"})
                for i in range(tasks)]

    return SimulatedModel(policy=policy)


def run_fan_out(db: Database, tenant: str, parent: SimulatedModel, child: SimulatedModel,
                **settings: object) -> tuple[str, list[ToolResult]]:
    result = Agent(db, tenant, "a", parent, child_models={"b": child},
                   settings=load_settings(**settings)).run("start")
    return result.stop_reason, [r for m in result.messages for r in m.tool_results]


def test_no_child_starts_once_the_runs_deadline_has_passed(db: Database, tenant: str) -> None:
    slow = threading.Event()

    def child_policy(request: Request) -> object:
        if not slow.is_set():  # the first child's model call outlasts the run's deadline
            slow.set()
            time.sleep(0.3)
        return "b did it"

    child = SimulatedModel(policy=child_policy)
    parent = fan_out(db, tenant, 6)
    stop, results = run_fan_out(db, tenant, parent, child, run_max_seconds=0.2,
                                subagent_max_tasks_per_turn=10)
    assert stop == "time_limit" and len(parent.calls) == 1  # a stopped, no second model call
    assert len(child.calls) == 1  # only the first child ran
    assert (results[0].content, results[0].is_error) == ("b did it", False)
    assert {(r.content, r.is_error) for r in results[1:]} == {
        ("error: b was not started: run stopped after HANGO_RUN_MAX_SECONDS=0.2 s", True)}


def test_a_child_stops_at_the_runs_deadline_not_its_own(db: Database, tenant: str) -> None:
    """a spends 0.4 s of its 0.5 s, then b's first call 0.2 s: b must stop there (a deadline of
    its own, 0.5 s from its start, would let it go on)."""
    def child_policy(request: Request) -> object:
        if request.messages[-1].tool_results:
            return "b did it"
        time.sleep(0.2)
        return [tool_call("ls", {"path": "/"})]

    child = SimulatedModel(policy=child_policy)
    parent = fan_out(db, tenant, 1, think=0.4)
    stop, results = run_fan_out(db, tenant, parent, child, run_max_seconds=0.5)
    assert stop == "time_limit" and len(child.calls) == 1
    assert results[-1].content == ("error: b stopped before it answered: run stopped after "
                                   "HANGO_RUN_MAX_SECONDS=0.5 s")


def test_children_spend_the_runs_model_calls(db: Database, tenant: str) -> None:
    child = SimulatedModel(policy=lambda request: "b did it")
    parent = fan_out(db, tenant, 6)
    stop, results = run_fan_out(db, tenant, parent, child, run_max_model_calls=4,
                                subagent_max_tasks_per_turn=10)
    assert stop == "call_limit"
    assert (len(parent.calls), len(child.calls)) == (1, 3)  # 4 model calls in all
    assert [r.is_error for r in results] == [False] * 3 + [True] * 3
    assert results[-1].content == ("error: b was not started: run stopped after "
                                   "HANGO_RUN_MAX_MODEL_CALLS=4 model calls (its subagents' "
                                   "included)")


def test_a_child_stopped_by_the_budget_is_a_tool_error_not_an_empty_answer(
        db: Database, tenant: str) -> None:
    child = SimulatedModel(policy=lambda request: [tool_call("ls", {"path": "/"})])  # never done
    parent = fan_out(db, tenant, 1)
    stop, results = run_fan_out(db, tenant, parent, child, run_max_model_calls=3)
    assert stop == "call_limit" and len(child.calls) == 2
    (answer,) = [r for r in results if r.content.startswith("error: b")]
    assert answer.is_error and answer.content == (
        "error: b stopped before it answered: run stopped after HANGO_RUN_MAX_MODEL_CALLS=3 "
        "model calls (its subagents' included)")


def test_task_calls_beyond_the_cap_of_a_turn_are_refused(db: Database, tenant: str) -> None:
    child = SimulatedModel(policy=lambda request: "b did it")
    parent = fan_out(db, tenant, 3)
    stop, results = run_fan_out(db, tenant, parent, child, subagent_max_tasks_per_turn=2)
    assert stop == "final" and len(child.calls) == 2
    assert [(r.content, r.is_error) for r in results] == [
        ("b did it", False), ("b did it", False),
        ("refused: more than HANGO_SUBAGENT_MAX_TASKS_PER_TURN=2 task calls in one turn; this "
         "one was not started", True)]


def test_the_budget_defaults() -> None:
    settings = load_settings()
    assert (settings.run_max_model_calls, settings.subagent_max_tasks_per_turn) == (100, 4)


# --- what a subagent inherits from its parent -------------------------------------------------


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
                 stack=lambda a: Stack([*default_stack(a).middlewares, HouseRules()]),
                 started_by="member:0123456789ab")
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
    # the scribe's proposal is the member's who started the lead's run (their share of the queue)
    (proposal,) = proposals.list_proposals(db, tenant, "scribe")
    assert proposal.proposed_by == "member:0123456789ab"
