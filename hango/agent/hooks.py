"""The hooks a middleware may implement, and the per-run context they share.

A middleware is any object with a ``name`` that implements some of: :class:`RunHook`
(``before_run``), :class:`Reader` (a RunHook that declares its ``reads`` and ``build``s from the
rows), :class:`PromptContributor` (``system_blocks``), :class:`BreakpointMarker`,
:class:`ModelWrapper`, :class:`ToolProvider` and :class:`ToolWrapper`. Private state is reached
only through the :class:`StateKey` its middleware holds, and a new :class:`RunContext` per run
(and per subagent) starts empty. No middleware names another.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from hango.models.base import Block, Request, Response, ToolCall, ToolResult, ToolSpec

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from hango.agents import AgentConfig
    from hango.fs.files import Backend, FileData, Read
    from hango.telemetry import Telemetry

T = TypeVar("T")
AttributeValue = str | bool | int | float | list[str]
log = logging.getLogger("hango")


class StateKey(Generic[T]):
    """An unforgeable handle to one middleware's private state in a run."""

    def __init__(self, name: str, factory: Callable[[], T]) -> None:
        self.name = name
        self.factory = factory

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


@dataclass(frozen=True)
class Event:
    """A span event that also reaches the caller in the run's result."""

    name: str
    attributes: dict[str, Any]


@dataclass
class Budget:
    """What a run may still spend, its subagents included: one deadline and one count of model
    calls, shared by every run of the chain (a subagent's calls count against the run above)."""

    max_seconds: float  # HANGO_RUN_MAX_SECONDS
    max_model_calls: int  # HANGO_RUN_MAX_MODEL_CALLS
    model_calls: int = 0
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.max_seconds

    def spent(self) -> tuple[str, str] | None:
        """``(stop_reason, why)`` once nothing more may start, else ``None``."""
        if self.model_calls >= self.max_model_calls:
            return "call_limit", (f"run stopped after HANGO_RUN_MAX_MODEL_CALLS="
                                  f"{self.max_model_calls} model calls (its subagents' included)")
        if time.monotonic() > self.deadline:
            return "time_limit", f"run stopped after HANGO_RUN_MAX_SECONDS={self.max_seconds:g} s"
        return None


@dataclass
class RunContext:
    """Everything one run knows. Created fresh for each run (and for each subagent run)."""

    tenant_id: str
    agent_id: str
    config: AgentConfig
    backend: Backend
    run_id: str
    allowlist: frozenset[str]
    telemetry: Telemetry
    started_by: str | None = None  # who started the run ("member:<token fingerprint>"), if known
    # The run's budget, or in a subagent the budget of the run that started it. A context made
    # by hand (a test) has no bound; ``Agent`` gives each run the one its settings say.
    budget: Budget = field(default_factory=lambda: Budget(math.inf, sys.maxsize))
    # What features measured, keyed by their telemetry attribute names (the catalogue in
    # hango.telemetry): the runtime copies it to every chat span, the log line and the result
    # without knowing a single name, so a new feature never edits the runtime.
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    _private: dict[StateKey[Any], Any] = field(default_factory=dict, repr=False)

    def state(self, key: StateKey[T]) -> T:
        """This run's value for ``key``, created empty on first use."""
        if key not in self._private:
            self._private[key] = key.factory()
        value: T = self._private[key]
        return value

    def event(self, name: str, **attributes: Any) -> None:
        """Record a span event on the current span and in the run's result."""
        self.events.append(Event(name, dict(attributes)))
        self.telemetry.add_event(name, attributes)

    def warn(self, message: str, event: str | None = None, **attributes: Any) -> None:
        """A warning the caller can read (``RunResult.warnings``), logged with the run's ids,
        optionally an event (which then carries the warning as its message)."""
        self.warnings.append(message)
        ids = {"tenant_id": self.tenant_id, "agent_id": self.agent_id, "run_id": self.run_id}
        log.warning("%s (tenant_id=%s agent_id=%s run_id=%s)", message, *ids.values(), extra=ids)
        if event is not None:
            self.events.append(Event(event, dict(attributes)))
            self.telemetry.add_event(event, attributes, message)


class Interrupt(Exception):
    """Raised by a tool to stop the run *without* executing: the run is saved and resumable.

    ``kind`` and ``payload`` describe what the run waits for (for ``ask`` mode: a proposal);
    ``persist(conn, run_id)`` stores it in the same transaction that saves the run's state, so
    there is never a proposal without its run, nor a run waiting for nothing.
    """

    def __init__(self, kind: str, payload: dict[str, Any],
                 persist: Callable[[Any, str], None] | None = None) -> None:
        super().__init__(f"{kind}: {payload}")
        self.kind = kind
        self.payload = payload
        self.persist = persist


@runtime_checkable
class RunHook(Protocol):
    def before_run(self, ctx: RunContext) -> None: ...


@runtime_checkable
class Reader(Protocol):
    """A RunHook whose ``before_run`` is: open ``span``, run ``reads(ctx)`` against the backend,
    ``build(ctx, rows)`` (one list of files per read), then ``report`` into the span and metrics.

    ``reads`` looks only at the config and the hook's own parameters; ``build`` turns the rows
    into this hook's state (under ``key``), warnings, events and ``ctx.attributes``, and touches
    nothing else, so whoever runs it may run it in another way and get the same run."""

    name: str
    span: str
    key: StateKey[Any]

    def before_run(self, ctx: RunContext) -> None: ...
    def reads(self, ctx: RunContext) -> Sequence[Read]: ...
    def build(self, ctx: RunContext, rows: Sequence[list[FileData]]) -> None: ...
    def report(self, ctx: RunContext, span: Span, seconds: float) -> None: ...


@runtime_checkable
class PromptContributor(Protocol):
    def system_blocks(self, ctx: RunContext) -> Sequence[Block]: ...


@runtime_checkable
class BreakpointMarker(Protocol):
    marks_breakpoint: bool


ModelCall = Callable[[Request], Response]


@runtime_checkable
class ModelWrapper(Protocol):
    def wrap_model_call(self, ctx: RunContext, request: Request, call_next: ModelCall) -> Response:
        ...


@dataclass(frozen=True)
class Tool:
    """A callable tool: its spec (what the model sees) and its function.

    ``writes_files``: its effect is a write of the agent's files through ``ctx.backend``. A
    resume then runs it inside the transaction that marks it done, so it happens exactly once.
    """

    spec: ToolSpec
    fn: Callable[[RunContext, dict[str, Any]], str]
    writes_files: bool = False


@runtime_checkable
class ToolProvider(Protocol):
    def tools(self, ctx: RunContext) -> Sequence[Tool]: ...


ToolCallNext = Callable[[ToolCall], ToolResult]


@runtime_checkable
class ToolWrapper(Protocol):
    def wrap_tool_call(self, ctx: RunContext, call: ToolCall, call_next: ToolCallNext) -> ToolResult:
        ...
