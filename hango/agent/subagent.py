"""Subagents: the ``task`` tool runs another agent and returns only its final answer.

The child is built from *its own* config (its allowlist, its memory and skills sources), works
in its own namespace ``{tenant_id, child_id}``, and starts with a new run context, so its
private state (memory blocks, skills index) is empty. Nothing flows back but the answer text:
not its prompt, not its memory, not its skills metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from hango.agent.hooks import RunContext, Tool
from hango.models.base import ToolSpec


class _Answer(Protocol):
    @property
    def text(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> str: ...


class _Runnable(Protocol):
    def run(self, prompt: str) -> _Answer: ...


class Parent(Protocol):
    """What the task tool needs of the agent it serves (an ``Agent``), without importing it:
    the runtime imports the stack, which imports this module, never the other way round."""

    def child(self, agent_id: str) -> _Runnable: ...

TASK_SPEC = ToolSpec(
    "task",
    "Hand a self-contained task to one of your subagents; you get back only its final answer.",
    {"type": "object",
     "properties": {"agent": {"type": "string"}, "description": {"type": "string"}},
     "required": ["agent", "description"]},
)


class SubagentMiddleware:
    """Provides the ``task`` tool for the subagents named in the agent's config."""

    name = "subagents"

    def __init__(self, parent: Parent) -> None:
        self.parent = parent

    def tools(self, ctx: RunContext) -> Sequence[Tool]:
        return (Tool(TASK_SPEC, self._task),) if ctx.config.subagents else ()

    def _task(self, ctx: RunContext, args: dict[str, Any]) -> str:
        child_id, description = args.get("agent"), args.get("description")
        if not isinstance(child_id, str) or not isinstance(description, str):
            raise ValueError("task needs string arguments 'agent' and 'description'")
        if child_id not in ctx.config.subagents:
            raise ValueError(f"{child_id!r} is not one of this agent's subagents "
                             f"({', '.join(ctx.config.subagents)})")
        result = self.parent.child(child_id).run(description)
        if result.status == "interrupted":  # its own run waits for an owner's decision
            return (f"{child_id} proposed a write to its memory or skills; its run "
                    f"{result.run_id} waits for an owner or admin to decide, then resume it")
        return result.text
