"""``Agent.run()``: before_run hooks, then the loop of model calls and tool calls.

One run::

    before_run hooks, in chain order          (features publish what they measured in
                                               ctx.attributes; the runtime knows no names)
    repeat until a final answer, max_steps, or the run's Budget (time, model calls) is spent:
        assemble the request                  (system blocks in chain order, breakpoint recorded)
        call the model through the wrappers   (PromptCache adds the conversation breakpoint)
        run each tool call                    (allowlist first; a refusal is a tool error)

A tool that raises gives the model an error result and the run goes on; a tool the allowlist
lacks is refused and never executed. Only infrastructure failures (the database is down) end a
run, with a :class:`hango.db.DatabaseError` that says so.

A tool may also raise :class:`~hango.agent.hooks.Interrupt` (an ask-mode write under a reserved
prefix does): the call is not executed, the run's state is saved in PostgreSQL (``runs``), and
the run returns ``interrupted``. :meth:`Agent.resume` continues it in any process: the pending
call gets the decision as its result, and every request after that keeps the system blocks of
the interrupted one, so its prefix is byte-identical and the provider reads it from the cache.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry import trace

from hango.agent import proposals, runs
from hango.agent.hooks import AttributeValue, Budget, Event, Interrupt, RunContext, Tool
from hango.agent.stack import Stack, default_stack
from hango.agents import AgentConfig, load_agent
from hango.db import Database, DatabaseError
from hango.fs.backend import PostgresBackend
from hango.models.base import (
    Block,
    Breakpoint,
    Message,
    Model,
    Request,
    Response,
    ToolCall,
    ToolResult,
    Usage,
)
from hango.settings import Settings, get_settings
from hango.telemetry import (
    ATTR_RUN_STATUS,
    EVENT_RUN_INTERRUPTED,
    EVENT_RUN_RESUMED,
    SPAN_BEFORE_RUN,
    SPAN_RUN,
    Telemetry,
    published,
)

__all__ = ["Agent", "RunResult", "default_stack"]
STATUS = {"final": "done", "interrupted": "interrupted"}  # any other stop reason: "failed"


@dataclass
class RunResult:
    """What a run returns: the answer, and everything needed to see why.

    ``attributes`` is what the features published, keyed by telemetry attribute name; the
    short names of the catalogue (``hango.telemetry.RUN_ATTRIBUTES``) read as attributes too.
    """

    text: str
    run_id: str
    stop_reason: str  # "final", "max_steps", "time_limit", "call_limit" or "interrupted"
    messages: list[Message]
    requests: list[Request] = field(default_factory=list)  # exactly what the model received
    responses: list[Response] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    interrupt: dict[str, Any] | None = None  # what an interrupted run waits for (the proposal)
    trace_id: str = ""

    @property
    def status(self) -> str:
        """``done``, ``interrupted`` or ``failed`` (stopped by a step or time bound)."""
        return STATUS.get(self.stop_reason, "failed")

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

    def __getattr__(self, name: str) -> Any:
        return published(self.__dict__.get("attributes", {}), name)


StackBuilder = Callable[["Agent"], Stack]


class _Paused(Exception):
    def __init__(self, interrupt: Interrupt) -> None:
        self.interrupt = interrupt


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
        budget: Budget | None = None,
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
        self.budget = budget  # a subagent spends the budget of the run that started it

    def load_config(self) -> AgentConfig:
        """The agent's config with the tenant defaults resolved (``reserved_writes``)."""
        config = self._config
        if config is None:
            config = load_agent(self.db, self.tenant_id, self.agent_id)
        if config is None:
            raise LookupError(f"no agent {self.agent_id!r} in tenant {self.tenant_id!r}")
        if config.reserved_writes is None:
            config = config.model_copy(update={"reserved_writes": self.settings.reserved_writes})
        return config

    def run(self, prompt: str, history: Sequence[Message] = (), *,
            record: bool = False) -> RunResult:
        """Run to a final answer, a bound, or an interrupt. ``record`` keeps the outcome in the
        ``runs`` table (runs over HTTP do; an interrupted run is always kept)."""
        config = self.load_config()
        return self._segment(config, self._run_ids(), [*history, Message("user", prompt)],
                             None, record)

    def resume(self, run_id: str) -> RunResult:
        """Continue an interrupted run once its proposal is decided; one resume wins.

        Raises :class:`~hango.agent.runs.RunConflict` when the proposal is still pending, the run
        was already resumed or another resume holds it, and :class:`~hango.agent.runs.RunError`
        when the agent's config (or the model) changed since: nothing is run then.
        """
        state = runs.claim(self.db, self.tenant_id, self.agent_id, run_id)
        try:
            config = self.load_config()
            if state["digest"] != runs.digest(config.model_dump_json(), self.model.name):
                raise runs.RunError(
                    f"run {run_id}: the agent's config or model changed since the run was "
                    "interrupted, so its conversation no longer matches; nothing was run. "
                    "Restore the config, or start a new run")
            messages = [runs.message_from_json(m) for m in state["messages"]]
            return self._segment(config, run_id, messages, state, True)
        except BaseException:
            with contextlib.suppress(DatabaseError):  # else the claim expires by itself
                runs.release(self.db, self.tenant_id, run_id)
            raise

    def _segment(self, config: AgentConfig, run_id: str, messages: list[Message],
                 saved: dict[str, Any] | None, record: bool) -> RunResult:
        stack = self._stack_builder(self)
        ctx = RunContext(
            tenant_id=self.tenant_id, agent_id=self.agent_id, config=config,
            backend=PostgresBackend(self.db, self.tenant_id, self.agent_id),
            run_id=run_id, allowlist=frozenset(config.tools), telemetry=self.telemetry,
            budget=self.budget or Budget(self.settings.run_max_seconds,
                                         self.settings.run_max_model_calls),
        )
        tel = self.telemetry
        with tel.span(SPAN_RUN, **{"gen_ai.agent.name": self.agent_id,
                                   "hango.tenant.id": self.tenant_id,
                                   "hango.run.id": ctx.run_id}) as span:
            with tel.span(SPAN_BEFORE_RUN):
                stack.before_run(ctx)
            if saved is not None:
                ctx.event(EVENT_RUN_RESUMED, run_id=run_id)
            result = self._loop(ctx, stack, config, messages, saved)
            span.set_attribute(ATTR_RUN_STATUS, result.status)
            context = span.get_span_context()
            result.trace_id = trace.format_trace_id(context.trace_id) if context.is_valid else ""
            tel.log_run(agent_id=self.agent_id, run_id=ctx.run_id, attributes=ctx.attributes)
        if result.status == "interrupted":
            with self.db.tenant(self.tenant_id) as conn:
                runs.set_result(conn, self.tenant_id, run_id, runs.summary(result, saved))
        elif record or saved is not None:
            with self.db.tenant(self.tenant_id) as conn:
                runs.save(conn, self.tenant_id, self.agent_id, run_id, result.status, None,
                          runs.summary(result, saved))
        return result

    def _loop(self, ctx: RunContext, stack: Stack, config: AgentConfig,
              messages: list[Message], saved: dict[str, Any] | None) -> RunResult:
        tools = {**stack.tools(ctx), **{t.spec.name: t for t in self.extra_tools}}
        tools = dict(sorted(tools.items()))
        result = RunResult("", ctx.run_id, "max_steps", messages, warnings=ctx.warnings,
                           events=ctx.events, attributes=ctx.attributes)
        steps = 0 if saved is None else int(saved["steps"])
        frozen: tuple[tuple[Block, ...], tuple[Breakpoint, ...]] | None = None

        def innermost(request: Request) -> Response:
            ctx.budget.model_calls += 1
            with self.telemetry.chat_span(request, self.model.provider) as span:
                response = self.model.complete(request)
                self.telemetry.record_chat(span, response, model=request.model,
                                           attributes=ctx.attributes)
            result.requests.append(request)
            result.responses.append(response)
            return response

        try:
            if saved is not None:
                frozen = (runs.blocks_from_json(saved["system"]),
                          runs.breakpoints_from_json(saved["breakpoints"]))
                self._replay(ctx, stack, messages)
                turn = saved["turn"]
                text, is_error = proposals.result_for(self.db, self.tenant_id, self.agent_id,
                                                      saved["proposal_id"])
                done = [*map(runs.result_from_json, turn["done"]),
                        ToolResult(turn["pending"]["id"], text, is_error)]
                self._tools(ctx, stack, tools, messages, done,
                            [runs.call_from_json(c) for c in turn["rest"]], frozen, steps)
            while True:
                if steps >= config.max_steps:
                    break
                if (spent := ctx.budget.spent()) is not None:  # the subagents' spending too
                    result.stop_reason, why = spent
                    ctx.warn(why)
                    break
                request = stack.build_request(ctx, messages, tools, self.model.name)
                if frozen is None:
                    frozen = (request.system, request.breakpoints)
                else:  # a resumed run keeps the system blocks it started with (byte-identical)
                    request = replace(request, system=frozen[0], breakpoints=frozen[1])
                response = stack.call_model(ctx, request, innermost)
                steps += 1
                messages.append(Message("assistant", response.text,
                                        tool_calls=response.tool_calls))
                if not response.tool_calls:
                    result.text, result.stop_reason = response.text, "final"
                    break
                self._tools(ctx, stack, tools, messages, [], list(response.tool_calls),
                            frozen, steps)
        except _Paused as paused:
            result.stop_reason = "interrupted"
            result.interrupt = paused.interrupt.payload
        return result

    def _tools(self, ctx: RunContext, stack: Stack, tools: dict[str, Tool],
               messages: list[Message], done: list[ToolResult], calls: list[ToolCall],
               frozen: tuple[tuple[Block, ...], tuple[Breakpoint, ...]] | None,
               steps: int) -> None:
        """Run a turn's calls in order; an interrupt saves the run and stops it (``_Paused``)."""
        results = list(done)
        for i, call in enumerate(calls):
            try:
                results.append(self._run_tool(ctx, stack, tools, call))
            except Interrupt as interrupt:
                assert frozen is not None
                state = runs.snapshot(
                    messages, frozen, runs.digest(ctx.config.model_dump_json(), self.model.name),
                    steps, interrupt.payload.get("proposal_id"), results, call, calls[i + 1:])
                try:
                    with self.db.tenant(self.tenant_id) as conn:
                        runs.save(conn, self.tenant_id, self.agent_id, ctx.run_id,
                                  "interrupted", state, {},  # the summary: set once stopped
                                  interrupt.payload.get("proposal_id"))
                        if interrupt.persist is not None:
                            interrupt.persist(conn, ctx.run_id)
                except ValueError as exc:  # e.g. too many pending proposals: the model's to read
                    results.append(ToolResult(call.id, f"error: {exc}", is_error=True))
                    continue
                ctx.event(EVENT_RUN_INTERRUPTED, kind=interrupt.kind)
                raise _Paused(interrupt) from None
        messages.append(Message("user", tool_results=tuple(results)))

    def _replay(self, ctx: RunContext, stack: Stack, messages: Sequence[Message]) -> None:
        """Pass the calls made before the interrupt through the tool wrappers again with their
        recorded results, so a wrapper's state (what it narrowed) is what it was. Nothing runs."""
        recorded = {r.call_id: r for m in messages for r in m.tool_results}
        for m in messages:
            for call in m.tool_calls:
                if call.id in recorded:
                    with contextlib.suppress(Interrupt):
                        stack.call_tool(ctx, call, lambda c: recorded[c.id])

    def _run_tool(self, ctx: RunContext, stack: Stack, tools: dict[str, Tool],
                  call: ToolCall) -> ToolResult:
        interrupted: Interrupt | None = None
        with self.telemetry.tool_span(call.name, call.id) as span:
            if call.name not in ctx.allowlist:
                result = ToolResult(call.id, f"refused: tool {call.name!r} is not in this agent's "
                                    "allowlist", is_error=True)
            elif call.name not in tools:
                result = ToolResult(call.id, f"error: no tool named {call.name!r}", is_error=True)
            else:
                try:
                    result = stack.call_tool(ctx, call, lambda c: _execute(ctx, tools[c.name], c))
                except Interrupt as exc:  # not an error: the call waits for a decision
                    interrupted, result = exc, ToolResult(call.id, "")
            span.set_attribute("hango.tool.error", result.is_error)
        if interrupted is not None:
            raise interrupted
        return result

    def child(self, agent_id: str, lineage: tuple[str, ...] = (), budget: Budget | None = None) -> Agent:
        """A subagent: its own config, namespace and (empty) state; it spends the run's ``budget``."""
        return Agent(self.db, self.tenant_id, agent_id,
                     self.child_models.get(agent_id, self.model), stack=self._stack_builder,
                     telemetry=self.telemetry, settings=self.settings,
                     child_models=self.child_models, run_ids=self._run_ids, lineage=lineage,
                     budget=budget)


def _execute(ctx: RunContext, tool: Tool, call: ToolCall) -> ToolResult:
    try:
        return ToolResult(call.id, tool.fn(ctx, dict(call.arguments)))
    except DatabaseError:
        raise  # the database is down: end the run with a clear error, do not let the model guess
    except Exception as exc:  # a tool error is the model's to read and recover from
        return ToolResult(call.id, f"error: {exc}", is_error=True)
