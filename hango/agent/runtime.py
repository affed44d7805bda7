"""``Agent.run()``: before_run hooks, then the loop of model calls and tool calls.

One run: ``before_run`` hooks in chain order; then, until a final answer, ``max_steps`` or the
run's Budget: assemble the request, call the model through the wrappers, run each tool call
(allowlist first). A tool error is the model's to read; only the database being down ends a
run, and a model that fails ends it ``failed``. A tool may raise
:class:`~hango.agent.hooks.Interrupt`: the run is saved and returns ``interrupted``, and
:meth:`Agent.resume` continues it in any process, each saved call once
(:mod:`hango.agent.resuming`), with the system blocks it started with. The runtime names no
feature: what a feature measured is in ``ctx.attributes``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from opentelemetry import trace

from hango.agent import resuming, runs
from hango.agent.hooks import AttributeValue, Budget, Event, Interrupt, RunContext, Tool
from hango.agent.stack import Stack, default_stack
from hango.agents import AgentConfig, load_run_config
from hango.db import Database, DatabaseError
from hango.fs.backend import PostgresBackend
from hango.models.base import (
    Block,
    Breakpoint,
    InvalidRequest,
    Message,
    Model,
    ModelError,
    Request,
    Response,
    ToolCall,
    ToolResult,
    Usage,
)
from hango.settings import Settings, get_settings
from hango.telemetry import EVENT_RUN_INTERRUPTED, EVENT_RUN_RESUMED, SPAN_BEFORE_RUN, Telemetry, published

__all__ = ["Agent", "RunResult", "default_stack"]
STATUS = {"final": "done", "interrupted": "interrupted"}  # any other stop reason: "failed"


@dataclass
class RunResult:
    """What a run returns: the answer, and everything needed to see why.

    ``attributes`` is what the features published, keyed by telemetry attribute name; the
    short names of the catalogue (``hango.telemetry.RUN_ATTRIBUTES``) read as attributes too.
    """

    text: str  # the final answer (interrupted: what the model said with the call that waits)
    run_id: str
    stop_reason: str  # "final", "max_steps", "time_limit", "call_limit", "model_error", "interrupted"
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
            total += r.usage
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
        started_by: str | None = None,
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
        self.started_by = started_by  # who starts its runs ("member:<token fingerprint>")
        self.budget = budget  # a subagent spends the budget of the run that started it

    def load_config(self) -> AgentConfig:
        """The agent's config, what it leaves out taken from its tenant's defaults (one query;
        a config given to the agent is used as it is), then ``reserved_writes`` from settings."""
        config = self._config
        if config is None:
            config = load_run_config(self.db, self.tenant_id, self.agent_id)
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
        lease = resuming.claim(self.db, self.tenant_id, self.agent_id, run_id,
                             self.settings.run_lease_seconds)
        with lease:  # renewed while this resume runs
            try:
                config = self.load_config()
                messages = resuming.conversation(lease, runs.digest(config.model_dump_json(),
                                                                    self.model.name))
                return self._segment(config, run_id, messages, lease, True)
            except BaseException:  # resumable again, from after its last call marked done
                with contextlib.suppress(DatabaseError):  # else the claim expires by itself
                    resuming.release(self.db, self.tenant_id, run_id, lease.token)
                raise

    def _segment(self, config: AgentConfig, run_id: str, messages: list[Message],
                 lease: resuming.Lease | None, record: bool) -> RunResult:
        stack = self._stack_builder(self)
        saved = None if lease is None else lease.state
        ctx = RunContext(
            tenant_id=self.tenant_id, agent_id=self.agent_id, config=config,
            backend=PostgresBackend(self.db, self.tenant_id, self.agent_id),
            run_id=run_id, allowlist=frozenset(config.tools), telemetry=self.telemetry,
            started_by=self.started_by if saved is None else saved.get("started_by"),
            budget=self.budget or Budget(self.settings.run_max_seconds,
                                         self.settings.run_max_model_calls),
        )
        tel = self.telemetry
        ids = {"tenant_id": self.tenant_id, "agent_id": self.agent_id, "run_id": ctx.run_id}
        prompt = next((m.text for m in reversed(messages) if m.role == "user" and m.text), None)
        with tel.run_span(**ids, provider=self.model.provider, model=self.model.name,
                          prompt=prompt) as span:
            with tel.span(SPAN_BEFORE_RUN):
                stack.before_run(ctx)
            if saved is not None:
                ctx.event(EVENT_RUN_RESUMED, run_id=run_id)
            result = self._loop(ctx, stack, config, messages, lease)
            context = span.get_span_context()
            result.trace_id = trace.format_trace_id(context.trace_id) if context.is_valid else ""
            tel.finish_run(span, **ids, status=result.status, read_ratio=result.usage.read_ratio,
                           output=result.text, attributes=ctx.attributes)
        if result.status == "interrupted":
            with self.db.tenant(self.tenant_id) as conn:
                runs.set_result(conn, self.tenant_id, run_id, runs.summary(result, saved))
        elif record or lease is not None:
            with self.db.tenant(self.tenant_id) as conn:
                runs.save(conn, self.tenant_id, self.agent_id, run_id, result.status, None,
                          runs.summary(result, saved), lease=resuming.token(lease),
                          started_by=ctx.started_by)
        return result

    def _loop(self, ctx: RunContext, stack: Stack, config: AgentConfig,
              messages: list[Message], lease: resuming.Lease | None) -> RunResult:
        tools = {**stack.tools(ctx), **{t.spec.name: t for t in self.extra_tools}}
        tools = dict(sorted(tools.items()))
        result = RunResult("", ctx.run_id, "max_steps", messages, warnings=ctx.warnings,
                           events=ctx.events, attributes=ctx.attributes)
        steps = 0 if lease is None else int(lease.state["steps"])
        frozen: tuple[tuple[Block, ...], tuple[Breakpoint, ...]] | None = None

        def innermost(request: Request) -> Response:
            ctx.budget.model_calls += 1
            with self.telemetry.chat_span(request, self.model.provider) as span:
                try:
                    response = self.model.complete(request)
                except (ModelError, InvalidRequest):  # refused before the wire: as it is
                    raise
                except Exception as exc:  # any other failure of the call: its first line only
                    line = (str(exc).strip().splitlines() or [""])[0][:300]
                    raise ModelError(f"the model {self.model.name} failed: "
                                     f"{type(exc).__name__}: {line}") from exc
                self.telemetry.record_chat(span, response, model=request.model,
                                           attributes=ctx.attributes,
                                           provider=self.model.provider, request=request)
            result.requests.append(request)
            result.responses.append(response)
            return response

        try:
            if lease is not None:  # the saved turn: its decided call, then the calls not done
                frozen, done, rest = resuming.saved_turn(lease)
                resuming.replay(ctx, stack, messages, done)
                self._tools(ctx, stack, tools, messages, done, rest, frozen, steps, lease)
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
                try:
                    response = stack.call_model(ctx, request, innermost)
                except ModelError as exc:  # a resume re-raises it: it stays resumable
                    if lease is not None:
                        raise
                    result.stop_reason = "model_error"  # failed; the runs table keeps it
                    ctx.warn(str(exc))
                    break
                steps += 1
                messages.append(Message("assistant", response.text, tool_calls=response.tool_calls))
                if not response.tool_calls:
                    result.text, result.stop_reason = response.text, "final"
                    break
                calls = list(response.tool_calls)
                if lease is not None:  # a resumed run saves each turn before its calls run
                    lease.checkpoint(runs.snapshot(
                        messages, frozen, self._digest(ctx), steps,
                        lease.state["proposal_id"], ctx.started_by, [], None, calls))
                self._tools(ctx, stack, tools, messages, [], calls, frozen, steps, lease)
        except _Paused as paused:
            result.stop_reason = "interrupted"
            result.interrupt = paused.interrupt.payload
            # What the model said with the call that waits ("I propose adding ..."), if anything.
            result.text = next((m.text for m in reversed(messages) if m.role == "assistant"), "")
        return result

    def _digest(self, ctx: RunContext) -> str:
        return runs.digest(ctx.config.model_dump_json(), self.model.name)

    def _tools(self, ctx: RunContext, stack: Stack, tools: dict[str, Tool],
               messages: list[Message], done: list[ToolResult], calls: list[ToolCall],
               frozen: tuple[tuple[Block, ...], tuple[Breakpoint, ...]] | None,
               steps: int, lease: resuming.Lease | None) -> None:
        """Run a turn's calls in order (with a lease: the saved calls, each once); an interrupt
        saves the run and stops it (``_Paused``)."""
        results = list(done)
        for i, call in enumerate(calls):
            try:
                run = partial(self._run_tool, ctx, stack, tools, call)
                tool = tools.get(call.name)
                results.append(run() if lease is None else resuming.run_once(
                    ctx, lease, tool is not None and tool.writes_files, run))
            except Interrupt as interrupt:
                assert frozen is not None
                proposal_id = interrupt.payload.get("proposal_id")
                state = runs.snapshot(messages, frozen, self._digest(ctx), steps, proposal_id,
                                      ctx.started_by, results, call, calls[i + 1:])
                try:
                    runs.pause(self.db, self.tenant_id, self.agent_id, ctx.run_id, state,
                               proposal_id, interrupt.persist, resuming.token(lease))
                except ValueError as exc:  # e.g. too many pending proposals: the model's to read
                    results.append(ToolResult(call.id, f"error: {exc}", is_error=True))
                    continue
                ctx.event(EVENT_RUN_INTERRUPTED, kind=interrupt.kind)
                raise _Paused(interrupt) from None
        messages.append(Message("user", tool_results=tuple(results)))

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
            self.telemetry.record_tool(span, result)
        if interrupted is not None:
            raise interrupted
        return result

    def child(self, agent_id: str, lineage: tuple[str, ...] = (), budget: Budget | None = None) -> Agent:
        """A subagent: its own config, namespace and (empty) state; it spends the run's ``budget``."""
        return Agent(self.db, self.tenant_id, agent_id,
                     self.child_models.get(agent_id, self.model), stack=self._stack_builder,
                     telemetry=self.telemetry, settings=self.settings,
                     child_models=self.child_models, run_ids=self._run_ids, lineage=lineage,
                     started_by=self.started_by, budget=budget)


def _execute(ctx: RunContext, tool: Tool, call: ToolCall) -> ToolResult:
    try:
        return ToolResult(call.id, tool.fn(ctx, dict(call.arguments)))
    except DatabaseError:
        raise  # the database is down: end the run with a clear error, do not let the model guess
    except Exception as exc:  # a tool error is the model's to read and recover from
        return ToolResult(call.id, f"error: {exc}", is_error=True)
