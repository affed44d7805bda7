"""Subagents: the ``task`` tool runs another agent and returns only its final answer.

The child is built from *its own* config (allowlist, memory and skills sources), in its own
namespace, with a new run context; nothing flows back but the answer text. Chains are bounded:
a child already in the chain (a cycle) or a chain deeper than ``HANGO_SUBAGENT_MAX_DEPTH`` is a
tool error naming the chain, and the run goes on. Fan-out too: a child spends the budget of the
run that started it, and one turn may ask for at most ``HANGO_SUBAGENT_MAX_TASKS_PER_TURN``
tasks. Why: docs/learning/11-memory-and-skills.md §2.4.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from hango.agent.hooks import (
    Budget,
    ModelCall,
    RunContext,
    StateKey,
    Tool,
    ToolCallNext,
)
from hango.models.base import Request, Response, ToolCall, ToolResult, ToolSpec


class _Answer(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def stop_reason(self) -> str: ...
    @property
    def warnings(self) -> list[str]: ...


class _Runnable(Protocol):
    def run(self, prompt: str) -> _Answer: ...


class Parent(Protocol):
    """What the task tool needs of the agent it serves (an ``Agent``), without importing it:
    the runtime imports the stack, which imports this module, never the other way round."""

    @property
    def lineage(self) -> tuple[str, ...]: ...
    def child(self, agent_id: str, lineage: tuple[str, ...] = (),
              budget: Budget | None = None) -> _Runnable: ...


TASK_SPEC = ToolSpec(
    "task",
    "Hand a self-contained task to one of your subagents; you get back only its final answer.",
    {"type": "object",
     "properties": {"agent": {"type": "string"}, "description": {"type": "string"}},
     "required": ["agent", "description"]},
)


_OVER_CAP: StateKey[set[str]] = StateKey("subagents.over_cap", set)  # task calls to refuse


class SubagentMiddleware:
    """Provides the ``task`` tool for the subagents named in the agent's config."""

    name = "subagents"

    def __init__(self, parent: Parent, max_depth: int = 3, max_tasks_per_turn: int = 4) -> None:
        self.parent = parent
        self.max_depth = max_depth
        self.max_tasks_per_turn = max_tasks_per_turn

    def tools(self, ctx: RunContext) -> Sequence[Tool]:
        return (Tool(TASK_SPEC, self._task),) if ctx.config.subagents else ()

    def wrap_model_call(self, ctx: RunContext, request: Request, call_next: ModelCall) -> Response:
        """Note the task calls of this turn beyond the cap (they are refused, not run)."""
        response = call_next(request)
        tasks = [c.id for c in response.tool_calls if c.name == TASK_SPEC.name]
        over = ctx.state(_OVER_CAP)
        over.clear()
        over.update(tasks[self.max_tasks_per_turn:])
        return response

    def wrap_tool_call(self, ctx: RunContext, call: ToolCall,
                       call_next: ToolCallNext) -> ToolResult:
        if call.id in ctx.state(_OVER_CAP):
            return ToolResult(call.id, f"refused: more than HANGO_SUBAGENT_MAX_TASKS_PER_TURN="
                              f"{self.max_tasks_per_turn} task calls in one turn; this one was "
                              "not started", is_error=True)
        return call_next(call)

    def _task(self, ctx: RunContext, args: dict[str, Any]) -> str:
        child_id, description = args.get("agent"), args.get("description")
        if not isinstance(child_id, str) or not isinstance(description, str):
            raise ValueError("task needs string arguments 'agent' and 'description'")
        if child_id not in ctx.config.subagents:
            raise ValueError(f"{child_id!r} is not one of this agent's subagents "
                             f"({', '.join(ctx.config.subagents)})")
        lineage = (*self.parent.lineage, ctx.agent_id)
        check_chain(lineage, child_id, self.max_depth)
        spent = ctx.budget.spent()
        if spent is not None:
            raise ValueError(f"{child_id} was not started: {spent[1]}")
        result = self.parent.child(child_id, lineage=lineage, budget=ctx.budget).run(description)
        if result.status == "interrupted":  # its own run waits for an owner's decision
            return (f"{child_id} proposed a write to its memory or skills; its run "
                    f"{result.run_id} waits for an owner or admin to decide, then resume it")
        if result.stop_reason in ("time_limit", "call_limit"):
            raise ValueError(f"{child_id} stopped before it answered: {result.warnings[-1]}")
        return result.text


def check_chain(lineage: tuple[str, ...], child_id: str, max_depth: int) -> None:
    """Refuse to run ``child_id`` below ``lineage`` when that closes a cycle or goes too deep.

    ``lineage`` ends with the agent calling ``task``; the child would run at depth
    ``len(lineage)`` (the agent a run was started on is depth 0).
    """
    chain = " -> ".join((*lineage, child_id))
    if child_id in lineage:
        raise ValueError(f"subagent chain {chain} is a cycle: {child_id!r} is already running "
                         "higher up the chain, so it was not started again")
    if len(lineage) > max_depth:
        raise ValueError(f"subagent depth {len(lineage)} exceeds HANGO_SUBAGENT_MAX_DEPTH="
                         f"{max_depth}: {chain}")
