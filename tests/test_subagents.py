"""Subagent chains are bounded (issue 10, point 4): an agent cannot name itself; a cycle or a chain
deeper than ``HANGO_SUBAGENT_MAX_DEPTH`` is a tool error naming the chain, and the run goes on.

Before this, two agents naming each other recursed about 49 levels deep and the run ended as
"database unavailable: couldn't get a connection" (Python's recursion limit, misreported).
"""

from __future__ import annotations

from itertools import pairwise

import httpx
import pytest
from pydantic import ValidationError

from hango.agent.runtime import Agent
from hango.agents import AgentConfig, create_token, load_agent, save_agent
from hango.db import Database
from hango.models.base import Request, ToolResult
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
