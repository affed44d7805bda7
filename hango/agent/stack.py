"""The middleware stack: chain order decides where every system block lands.

System blocks are assembled at model-call time, in chain order, after the tenant's cache scope
and the agent's base prompt; ``PromptCache`` marks the breakpoint on the last block before it.
``DefaultStack`` pins the slots (a test asserts memory's *index* against the breakpoint's)::

    skills  filesystem  subagents  prompt_cache | memory   (after the breakpoint: its edits
                                                            never invalidate the cached prefix)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from hango.agent.hooks import (
    BreakpointMarker,
    ModelCall,
    ModelWrapper,
    PromptContributor,
    RunContext,
    RunHook,
    Tool,
    ToolCallNext,
    ToolProvider,
    ToolWrapper,
)
from hango.agent.memory import MemoryMiddleware
from hango.agent.promptcache import PromptCache, tenant_scope
from hango.agent.skills import SkillsMiddleware
from hango.agent.subagent import Parent, SubagentMiddleware
from hango.agent.tools import FilesystemMiddleware
from hango.agents import check_default_sources
from hango.fs.path import clean_dir
from hango.models.base import Block, Breakpoint, Message, Request, ToolCall, ToolResult
from hango.settings import Settings

SLOTS = ("skills", "filesystem", "subagents", "prompt_cache", "memory")


class Stack:
    """An ordered chain of middlewares. Any order is allowed here; ``DefaultStack`` pins one."""

    def __init__(self, middlewares: Sequence[Any]) -> None:
        self.middlewares = list(middlewares)

    @property
    def names(self) -> list[str]:
        return [getattr(m, "name", type(m).__name__) for m in self.middlewares]

    def implements(self, mw: Any, protocol: type) -> bool:
        """Whether ``mw`` has the members of ``protocol``, one of :mod:`hango.agent.hooks`."""
        return isinstance(mw, protocol)

    def before_run(self, ctx: RunContext) -> None:
        for mw in self.middlewares:
            if self.implements(mw, RunHook):
                mw.before_run(ctx)

    def tools(self, ctx: RunContext) -> dict[str, Tool]:
        """Every provided tool, by name, in a stable order (tool order is part of the cache key)."""
        found: dict[str, Tool] = {}
        for mw in self.middlewares:
            if self.implements(mw, ToolProvider):
                for tool in mw.tools(ctx):
                    found.setdefault(tool.spec.name, tool)
        return dict(sorted(found.items()))

    def build_request(self, ctx: RunContext, messages: Sequence[Message], tools: dict[str, Tool],
                      model: str) -> Request:
        """Assemble the system blocks in chain order and record the breakpoint's index. The
        tenant's cache scope comes first (see :mod:`hango.agent.promptcache`)."""
        blocks = [tenant_scope(ctx.tenant_id), Block(ctx.config.system_prompt, "system_prompt")]
        breakpoints: list[Breakpoint] = []
        for mw in self.middlewares:
            if self.implements(mw, BreakpointMarker) and mw.marks_breakpoint:
                breakpoints = [Breakpoint("system", len(blocks) - 1)]
            if self.implements(mw, PromptContributor):
                blocks.extend(b for b in mw.system_blocks(ctx) if b.text)
        specs = tuple(t.spec for name, t in tools.items() if name in ctx.allowlist)
        return Request(model=model, tools=specs, system=tuple(blocks),
                       messages=tuple(messages), breakpoints=tuple(breakpoints))

    def call_model(self, ctx: RunContext, request: Request, innermost: ModelCall) -> Any:
        """Call the model through every ``wrap_model_call``, first middleware outermost."""
        call = innermost
        for mw in reversed(self.middlewares):
            if self.implements(mw, ModelWrapper):
                call = _bind_model(mw, ctx, call)
        return call(request)

    def call_tool(self, ctx: RunContext, tool_call: ToolCall, innermost: ToolCallNext) -> ToolResult:
        """Run a tool call through every ``wrap_tool_call``, first middleware outermost."""
        call = innermost
        for mw in reversed(self.middlewares):
            if self.implements(mw, ToolWrapper):
                call = _bind_tool(mw, ctx, call)
        return call(tool_call)


def _bind_model(mw: ModelWrapper, ctx: RunContext, call_next: ModelCall) -> ModelCall:
    return lambda request: mw.wrap_model_call(ctx, request, call_next)


def _bind_tool(mw: ToolWrapper, ctx: RunContext, call_next: ToolCallNext) -> ToolCallNext:
    return lambda call: mw.wrap_tool_call(ctx, call, call_next)


class DefaultStack(Stack):
    """The pinned order of :data:`SLOTS`. Empty slots are skipped; order never changes."""

    def __init__(self, **slots: Any) -> None:
        unknown = set(slots) - set(SLOTS)
        if unknown:
            raise ValueError(f"unknown slot(s) {sorted(unknown)}; the slots are {list(SLOTS)}")
        self.slots = {name: slots.get(name) for name in SLOTS}
        super().__init__([mw for mw in self.slots.values() if mw is not None])

    def without(self, *names: str) -> Stack:
        """The same chain minus some slots (the phase-10 stack is ``without("skills", "memory")``)."""
        return Stack([mw for slot, mw in self.slots.items() if mw is not None and slot not in names])

    def reordered(self, order: Sequence[str]) -> Stack:
        """A deliberately different order, for showing what the pinned one protects."""
        return Stack([self.slots[s] for s in order if self.slots.get(s) is not None])



class AgentLike(Parent, Protocol):
    """What ``default_stack`` needs of an ``Agent`` (this module never imports the runtime)."""

    settings: Settings


def default_stack(agent: AgentLike) -> DefaultStack:
    """The pinned ``DefaultStack`` for an agent, with the agent's settings resolved once here:
    each middleware receives plain values, never a settings object to fall back on. Bad default
    sources are refused here, naming their variable, before a run reads anything."""
    s = check_default_sources(agent.settings)
    return DefaultStack(
        skills=SkillsMiddleware(max_skills=s.skills_max,
                                default_sources=[clean_dir(d) for d in s.skills_default_sources],
                                index_max_bytes=s.skills_index_max_bytes),
        filesystem=FilesystemMiddleware(
            max_pending=s.proposals_max_pending, max_bytes=s.max_file_bytes,
            max_pending_per_member=s.proposals_max_pending_per_member),
        subagents=SubagentMiddleware(agent, max_depth=s.subagent_max_depth,
                                     max_tasks_per_turn=s.subagent_max_tasks_per_turn),
        prompt_cache=PromptCache(prefix_ttl=s.cache_prefix_ttl),
        memory=MemoryMiddleware(max_bytes=s.memory_max_bytes,
                                default_sources=s.memory_default_sources),
    )
