"""``Agent.run()``: before_run hooks, then the loop of model calls and tool calls.

One run::

    before_run hooks, in chain order          (Skills indexes /skills/, Memory loads /memories/)
    repeat until a final answer or max_steps:
        assemble the request                  (system blocks in chain order, breakpoint recorded)
        call the model through the wrappers   (PromptCache adds the conversation breakpoint)
        run each tool call                    (allowlist first; a refusal is a tool error)

A tool that raises gives the model an error result and the run goes on; a tool the allowlist
lacks is refused and never executed. Only infrastructure failures (the database is down) end a
run, with a :class:`hango.db.DatabaseError` that says so.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hango.agent.hooks import Event, RunContext, Tool
from hango.agent.stack import Stack
from hango.agents import AgentConfig, load_agent
from hango.db import Database, DatabaseError
from hango.fs.backend import PostgresBackend
from hango.models.base import Message, Model, Request, Response, ToolCall, ToolResult, Usage
from hango.settings import Settings, get_settings
from hango.telemetry import SPAN_BEFORE_RUN, SPAN_RUN, Telemetry


@dataclass
class RunResult:
    """What a run returns: the answer, and everything needed to see why."""

    text: str
    run_id: str
    stop_reason: str  # "final" or "max_steps"
    messages: list[Message]
    requests: list[Request] = field(default_factory=list)  # exactly what the model received
    responses: list[Response] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    memory_bytes: int = 0
    skills_count: int = 0

    @property
    def usage(self) -> Usage:
        total = Usage()
        for r in self.responses:
            u = r.usage
            total = Usage(total.input_tokens + u.input_tokens,
                          total.cache_creation_input_tokens + u.cache_creation_input_tokens,
                          total.cache_read_input_tokens + u.cache_read_input_tokens,
                          total.output_tokens + u.output_tokens)
        return total


StackBuilder = Callable[["Agent"], Stack]


class Agent:
    """An agent of a tenant, built from its config in the ``agents`` table.

    The config is read again at every run, so a change made through the API applies to the
    next run. ``stack`` builds the middleware chain (default: :func:`default_stack`).
    """

    def __init__(
        self,
        db: Database,
        tenant_id: str,
        agent_id: str,
        model: Model,
        *,
        stack: StackBuilder | None = None,
        telemetry: Telemetry | None = None,
        settings: Settings | None = None,
        config: AgentConfig | None = None,
        child_models: Mapping[str, Model] | None = None,
        extra_tools: Sequence[Tool] = (),
        run_ids: Callable[[], str] | None = None,
        lineage: tuple[str, ...] = (),
    ) -> None:
        self.db = db
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.model = model
        self.settings = settings or get_settings()
        self.telemetry = telemetry or Telemetry()
        self.child_models = dict(child_models or {})
        self.extra_tools = tuple(extra_tools)
        self._config = config
        self._stack_builder = stack or default_stack
        self._run_ids = run_ids or (lambda: uuid.uuid4().hex[:16])
        self.lineage = lineage  # the agents whose task calls led here, outermost first

    def load_config(self) -> AgentConfig:
        if self._config is not None:
            return self._config
        config = load_agent(self.db, self.tenant_id, self.agent_id)
        if config is None:
            raise LookupError(f"no agent {self.agent_id!r} in tenant {self.tenant_id!r}")
        return config

    def run(self, prompt: str, history: Sequence[Message] = ()) -> RunResult:
        config = self.load_config()
        stack = self._stack_builder(self)
        ctx = RunContext(
            tenant_id=self.tenant_id, agent_id=self.agent_id, config=config,
            backend=PostgresBackend(self.db, self.tenant_id, self.agent_id),
            run_id=self._run_ids(), allowlist=frozenset(config.tools), telemetry=self.telemetry,
        )
        tel = self.telemetry
        with tel.span(SPAN_RUN, **{"gen_ai.agent.name": self.agent_id,
                                   "hango.tenant.id": self.tenant_id, "hango.run.id": ctx.run_id}):
            with tel.span(SPAN_BEFORE_RUN):
                stack.before_run(ctx)
            result = self._loop(ctx, stack, config, [*history, Message("user", prompt)])
            tel.log_run(agent_id=self.agent_id, run_id=ctx.run_id,
                        memory_sources=ctx.memory_sources, memory_bytes=ctx.memory_bytes,
                        skills_indexed=ctx.skills_count, skills_invalid=ctx.skills_invalid)
        return result

    def _loop(self, ctx: RunContext, stack: Stack, config: AgentConfig,
              messages: list[Message]) -> RunResult:
        tools = {**stack.tools(ctx), **{t.spec.name: t for t in self.extra_tools}}
        tools = dict(sorted(tools.items()))
        result = RunResult("", ctx.run_id, "max_steps", messages, warnings=ctx.warnings,
                           events=ctx.events)

        def innermost(request: Request) -> Response:
            with self.telemetry.chat_span(request, self.model.provider) as span:
                response = self.model.complete(request)
                self.telemetry.record_chat(span, response, model=request.model,
                                           memory_bytes=ctx.memory_bytes,
                                           skills_count=ctx.skills_count)
            result.requests.append(request)
            result.responses.append(response)
            return response

        for _ in range(config.max_steps):
            request = stack.build_request(ctx, messages, tools, self.model.name)
            response = stack.call_model(ctx, request, innermost)
            messages.append(Message("assistant", response.text, tool_calls=response.tool_calls))
            if not response.tool_calls:
                result.text, result.stop_reason = response.text, "final"
                break
            results = tuple(self._run_tool(ctx, stack, tools, call) for call in response.tool_calls)
            messages.append(Message("user", tool_results=results))
        result.memory_bytes, result.skills_count = ctx.memory_bytes, ctx.skills_count
        return result

    def _run_tool(self, ctx: RunContext, stack: Stack, tools: dict[str, Tool],
                  call: ToolCall) -> ToolResult:
        with self.telemetry.tool_span(call.name, call.id) as span:
            if call.name not in ctx.allowlist:
                result = ToolResult(call.id, f"refused: tool {call.name!r} is not in this agent's "
                                    "allowlist", is_error=True)
            elif call.name not in tools:
                result = ToolResult(call.id, f"error: no tool named {call.name!r}", is_error=True)
            else:
                result = stack.call_tool(ctx, call, lambda c: _execute(ctx, tools[c.name], c))
            span.set_attribute("hango.tool.error", result.is_error)
        return result

    def child(self, agent_id: str, lineage: tuple[str, ...] = ()) -> Agent:
        """A subagent: built from its own config, its own namespace, its own (empty) state."""
        return Agent(self.db, self.tenant_id, agent_id,
                     self.child_models.get(agent_id, self.model), stack=self._stack_builder,
                     telemetry=self.telemetry, settings=self.settings,
                     child_models=self.child_models, run_ids=self._run_ids, lineage=lineage)


def _execute(ctx: RunContext, tool: Tool, call: ToolCall) -> ToolResult:
    try:
        return ToolResult(call.id, tool.fn(ctx, dict(call.arguments)))
    except DatabaseError:
        raise  # the database is down: end the run with a clear error, do not let the model guess
    except Exception as exc:  # a tool error is the model's to read and recover from
        return ToolResult(call.id, f"error: {exc}", is_error=True)


def default_stack(agent: Agent) -> Stack:
    """The pinned ``DefaultStack`` for an agent (see :mod:`hango.agent.stack`)."""
    from hango.agent.memory import MemoryMiddleware
    from hango.agent.promptcache import PromptCache
    from hango.agent.skills import SkillsMiddleware
    from hango.agent.stack import DefaultStack
    from hango.agent.subagent import SubagentMiddleware
    from hango.agent.tools import FilesystemMiddleware

    return DefaultStack(
        skills=SkillsMiddleware(max_skills=agent.settings.skills_max, settings=agent.settings),
        filesystem=FilesystemMiddleware(),
        subagents=SubagentMiddleware(agent),
        prompt_cache=PromptCache(prefix_ttl=agent.settings.cache_prefix_ttl),
        memory=MemoryMiddleware(max_bytes=agent.settings.memory_max_bytes,
                                settings=agent.settings),
    )
