"""The runtime knows no feature by name, and what resume keeps of a run.

A feature publishes what it measured in ``ctx.attributes``; the runtime copies that to every chat
span, the run's log line and ``RunResult.attributes`` without knowing the names.
"""

from __future__ import annotations

import ast
import logging
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

import hango
from hango.agent import proposals
from hango.agent.hooks import RunContext
from hango.agent.runtime import Agent
from hango.agent.stack import default_stack
from hango.agents import AgentConfig, create_tenant, save_agent
from hango.db import Database
from hango.fs.backend import PostgresBackend
from hango.models.simulated import SimulatedModel, tool_call

PACKAGE = Path(hango.__file__).parent


def test_the_core_names_no_feature() -> None:
    for module in ("agent/runtime.py", "agent/hooks.py"):
        text = (PACKAGE / module).read_text()
        assert not re.search(r"memor|skill", text, re.IGNORECASE), module


def _imports(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / module).read_text())
    return {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}


def test_no_import_cycle_between_runtime_stack_and_subagent() -> None:
    assert "hango.agent.runtime" not in _imports("agent/subagent.py")
    assert "hango.agent.runtime" not in _imports("agent/stack.py")
    assert default_stack.__module__ == "hango.agent.stack"


class Counter:
    """A third feature: it only publishes, and the runtime carries the value everywhere."""

    name = "counter"

    def before_run(self, ctx: RunContext) -> None:
        ctx.attributes["hango.counter.seen"] = 3


def test_a_new_feature_reaches_span_log_and_result_without_runtime_edits(
        db: Database, tenant: str, telemetry_pair: Any, caplog: pytest.LogCaptureFixture) -> None:
    tel, exporter, _ = telemetry_pair
    save_agent(db, tenant, "a1", AgentConfig())
    caplog.set_level(logging.INFO, logger="hango")
    agent = Agent(db, tenant, "a1", SimulatedModel(), telemetry=tel,
                  stack=lambda a: _with(default_stack(a), Counter()))
    result = agent.run("hi")
    chat = next(s for s in exporter.get_finished_spans() if s.name.startswith("chat "))
    assert chat.attributes["hango.counter.seen"] == 3
    assert chat.attributes["hango.memory.bytes"] == 0  # the catalogue still names the others
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("hango run"))
    assert line.endswith("counter_seen=3")
    assert "memory_bytes=0 skills_indexed=0 skills_invalid=0" in line
    assert result.attributes["hango.counter.seen"] == 3
    assert (result.memory_bytes, result.skills_count) == (0, 0)  # short names still read
    with pytest.raises(AttributeError):
        _ = result.no_such_thing


def _with(stack: Any, extra: Any) -> Any:
    from hango.agent.stack import Stack

    return Stack([*stack.middlewares, extra])


def test_resume_keeps_what_a_skill_narrowed(db: Database) -> None:
    """A skill read before the interrupt still narrows the tools after the resume."""
    tid = create_tenant(db, "g-" + uuid.uuid4().hex[:12])
    save_agent(db, tid, "a1", AgentConfig(reserved_writes="ask"))
    fs = PostgresBackend(db, tid, "a1")
    fs.write("/skills/notes/SKILL.md", "---\nname: notes\ndescription: Keep notes.\n"
                                       "allowed_tools: [read_file, write_file]\n---\nbody\n")
    model = SimulatedModel(policy=[
        [tool_call("read_file", {"path": "/skills/notes/SKILL.md"})],
        [tool_call("write_file", {"path": "/memories/AGENTS.md", "content": "x"})],
        [tool_call("ls", {"path": "/"})],
        "end",
    ])
    agent = Agent(db, tid, "a1", model)
    first = agent.run("go")
    assert first.status == "interrupted"
    assert first.interrupt is not None
    proposals.approve(db, tid, "a1", first.interrupt["proposal_id"], by="t", role="owner")
    resumed = agent.resume(first.run_id)
    assert resumed.status == "done" and resumed.text == "end"
    ls_result = resumed.messages[-2].tool_results[0]
    assert ls_result.is_error and "outside the tools of the skill(s) in use (notes)" in (
        ls_result.content)
