"""The facade: spans, metrics and the run log line, on providers you may pass in.

Library code uses only ``opentelemetry-api``: without an SDK every call is a no-op. Instruments
are built from :data:`~hango.telemetry.names.INSTRUMENTS`, so a name, unit or bucket list lives
in the catalogue only. The SDK is set up elsewhere (:mod:`hango.telemetry.setup`); the opt-in
prompt content is :mod:`hango.telemetry.content`, Langfuse's mirrors :mod:`hango.telemetry.mirror`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from hango.models.base import Request, Response, ToolResult
from hango.models.view import miss_reason
from hango.telemetry import content, mirror
from hango.telemetry.mirror import annotate, clean, mirror_event, run_line, run_metadata
from hango.telemetry.names import (
    ATTR_CACHE_MISS_REASON,
    ATTR_CACHE_MISSED_INPUT_TOKENS,
    ATTR_CACHE_READ_RATIO,
    ATTR_MEMORY_SOURCE_COUNT,
    ATTR_PROPOSAL_OUTCOME,
    ATTR_RUN_ID,
    ATTR_RUN_STATUS,
    ATTR_TENANT_ID,
    ATTR_TOKEN_KIND,
    ATTR_TOOL_ERROR,
    CONTENT_MAX_BYTES,
    ERROR_TYPE,
    GEN_AI_AGENT_ID,
    GEN_AI_AGENT_NAME,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_RESPONSE_ID,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOKEN_TYPE,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_TYPE,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    LANGFUSE_METADATA_CACHE_MISS_REASON,
    LANGFUSE_METADATA_PREFIX,
    LANGFUSE_SESSION_ID,
    LANGFUSE_TRACE_NAME,
    LANGFUSE_USER_ID,
    METRIC_CACHE_MISSES,
    METRIC_CACHE_READ_RATIO,
    METRIC_GEN_AI_DURATION,
    METRIC_GEN_AI_TOKEN_USAGE,
    METRIC_MEMORY_BYTES,
    METRIC_MEMORY_LOAD_DURATION,
    METRIC_PROPOSALS,
    METRIC_SKILLS_INDEXED,
    METRIC_SKILLS_INVALID,
    METRIC_TOKENS,
    OPERATION_CHAT,
    OPERATION_EXECUTE_TOOL,
    OPERATION_INVOKE_AGENT,
    RUN_ATTRIBUTES,
    SCOPE,
    SESSION_ID,
    SPAN_RUN,
    SPECS,
    USER_ID,
    InstrumentSpec,
)

try:
    SCOPE_VERSION: str | None = version("hango")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    SCOPE_VERSION = None


class Telemetry:
    """Spans, metrics and the run log line of hango, on providers you may pass in.

    ``None`` means the API's global providers: a no-op until an application configures the SDK.
    Tracer, meter and instruments belong to this instance, never to module globals, so tests can
    give each ``Telemetry`` its own providers. ``capture_content`` puts the prompt on the chat
    spans (:mod:`hango.telemetry.content`); ``None`` reads the GenAI instrumentations' switch,
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (off unless set).
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        logger: logging.Logger | None = None,
        *,
        capture_content: bool | None = None,
        content_max_bytes: int = CONTENT_MAX_BYTES,
    ) -> None:
        self.tracer: trace.Tracer = trace.get_tracer(
            SCOPE, SCOPE_VERSION, tracer_provider=tracer_provider)
        self.meter: metrics.Meter = metrics.get_meter(
            SCOPE, SCOPE_VERSION or "", meter_provider=meter_provider)
        self.logger = logger or logging.getLogger("hango")
        self.capture_content = (content.capture_from_env() if capture_content is None
                                else capture_content)
        self.content_max_bytes = content_max_bytes
        self._memory_load_duration = self._histogram(SPECS[METRIC_MEMORY_LOAD_DURATION])
        self._memory_bytes = self._histogram(SPECS[METRIC_MEMORY_BYTES])
        self._skills_indexed = self._gauge(SPECS[METRIC_SKILLS_INDEXED])
        self._skills_invalid = self._gauge(SPECS[METRIC_SKILLS_INVALID])
        self._cache_read_ratio = self._histogram(SPECS[METRIC_CACHE_READ_RATIO])
        self._tokens = self._counter(SPECS[METRIC_TOKENS])
        self._proposals = self._counter(SPECS[METRIC_PROPOSALS])
        self._cache_misses = self._counter(SPECS[METRIC_CACHE_MISSES])
        self._token_usage = self._histogram(SPECS[METRIC_GEN_AI_TOKEN_USAGE])
        self._duration = self._histogram(SPECS[METRIC_GEN_AI_DURATION])

    def _histogram(self, spec: InstrumentSpec) -> metrics.Histogram:
        return self.meter.create_histogram(
            spec.name, spec.unit, spec.description,
            explicit_bucket_boundaries_advisory=spec.buckets)

    def _gauge(self, spec: InstrumentSpec) -> metrics._Gauge:
        return self.meter.create_gauge(spec.name, spec.unit, spec.description)

    def _counter(self, spec: InstrumentSpec) -> metrics.Counter:
        return self.meter.create_counter(spec.name, spec.unit, spec.description)

    # spans
    @contextmanager
    def _start(self, name: str, kind: SpanKind,
               attributes: Mapping[str, Any]) -> Iterator[Span]:
        with self.tracer.start_as_current_span(
            name, kind=kind, attributes=clean({**attributes, **dict(mirror.RUN_SCOPE.get())}),
            record_exception=True, set_status_on_exception=True,
        ) as span:
            try:
                yield span
            except Exception as exc:  # the SDK records it and sets ERROR status on the way out
                span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
                raise

    def span(self, name: str, **attributes: Any) -> AbstractContextManager[Span]:
        """An INTERNAL span made current; an exception is recorded, sets ERROR, and re-raises.

        Dotted attribute names go through a dict: ``span(SPAN_RUN, **{GEN_AI_AGENT_NAME: "a1"})``.
        """
        return self._start(name, SpanKind.INTERNAL, attributes)

    @contextmanager
    def run_span(self, *, tenant_id: str, agent_id: str, run_id: str, provider: str,
                 model: str, prompt: str | None = None) -> Iterator[Span]:
        """``agent.run``: the GenAI agent conventions' ``invoke_agent`` span of one run.

        The conversation id is the run id, so a resumed run's trace joins its run (Langfuse's
        and Phoenix's sessions too); the Langfuse trace is named after the agent, its user is the
        tenant. With content capture, ``prompt`` is the span's input."""
        outer = mirror.RUN_SCOPE.get()
        scope = outer or ((LANGFUSE_TRACE_NAME, agent_id), (LANGFUSE_SESSION_ID, run_id),
                          (LANGFUSE_USER_ID, tenant_id))
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: OPERATION_INVOKE_AGENT, GEN_AI_PROVIDER_NAME: provider,
            GEN_AI_AGENT_NAME: agent_id, GEN_AI_AGENT_ID: f"{tenant_id}/{agent_id}",
            GEN_AI_CONVERSATION_ID: run_id, GEN_AI_REQUEST_MODEL: model,
            ATTR_TENANT_ID: tenant_id, ATTR_RUN_ID: run_id}
        if not outer:  # the trace's root: where Phoenix and Langfuse look for session and user
            attributes |= {SESSION_ID: run_id, USER_ID: tenant_id}
        if self.capture_content:
            attributes |= content.run_content(prompt, None, self.content_max_bytes)
        token = mirror.RUN_SCOPE.set(scope)
        try:
            with self._start(SPAN_RUN, SpanKind.INTERNAL, attributes) as span:
                yield span
        finally:
            mirror.RUN_SCOPE.reset(token)

    def finish_run(self, span: Span, *, tenant_id: str, agent_id: str, run_id: str,
                   status: str, read_ratio: float | None, output: str,
                   attributes: Mapping[str, Any]) -> None:
        """End-of-run: the status (and, with capture, the answer) on the run span, the log line
        (``read_ratio`` ``None``: the provider did not say what it read)."""
        span.set_attribute(ATTR_RUN_STATUS, status)
        if self.capture_content:
            span.set_attributes(content.run_content(None, output, self.content_max_bytes))
        self.log_run(agent_id=agent_id, run_id=run_id, attributes=attributes,
                     tenant_id=tenant_id, status=status,
                     read_ratio="unknown" if read_ratio is None else read_ratio)

    @contextmanager
    def chat_span(self, request: Request, provider: str) -> Iterator[Span]:
        """``chat {model}``, kind CLIENT, with the attributes the conventions want at start.

        Its duration is ``gen_ai.client.operation.duration`` (with ``error.type`` on failure)."""
        started = time.perf_counter()
        error: str | None = None
        try:
            with self._start(f"{OPERATION_CHAT} {request.model}", SpanKind.CLIENT, {
                GEN_AI_OPERATION_NAME: OPERATION_CHAT,
                GEN_AI_PROVIDER_NAME: provider,
                GEN_AI_REQUEST_MODEL: request.model,
                GEN_AI_REQUEST_MAX_TOKENS: request.max_tokens,
            }) as span:
                yield span
        except Exception as exc:
            error = type(exc).__qualname__
            raise
        finally:
            self._duration.record(time.perf_counter() - started, clean({
                GEN_AI_OPERATION_NAME: OPERATION_CHAT, GEN_AI_PROVIDER_NAME: provider,
                GEN_AI_REQUEST_MODEL: request.model, ERROR_TYPE: error}))

    def record_chat(self, span: Span, response: Response, *, model: str,
                    attributes: Mapping[str, Any], provider: str = "",
                    request: Request | None = None) -> None:
        """Usage, cache and prompt-growth attributes on the chat span, plus the token metrics.

        ``attributes`` is what the run's features measured (``RunContext.attributes``); the
        catalogue (:data:`RUN_ATTRIBUTES`) decides which go on the chat span and their Langfuse
        mirror. One not in the catalogue goes on the span under its own name. With ``request``:
        why the cache read nothing (``hango.cache.misses``) and, with capture on, the prompt."""
        usage = response.usage
        out: dict[str, Any] = {
            GEN_AI_RESPONSE_MODEL: response.model or model,
            GEN_AI_RESPONSE_ID: response.id or None,
            GEN_AI_RESPONSE_FINISH_REASONS: [response.stop_reason],
            GEN_AI_USAGE_INPUT_TOKENS: usage.total_input_tokens,
            GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
            GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read_input_tokens,
            GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: usage.cache_creation_input_tokens,
            ATTR_CACHE_READ_RATIO: usage.read_ratio,
        }
        for name, value in attributes.items():
            where = RUN_ATTRIBUTES.get(name)
            if where is None or where.chat:
                out[name] = value
            if where is not None and where.langfuse:
                out[LANGFUSE_METADATA_PREFIX + where.langfuse] = value
        diagnostics = response.diagnostics
        if diagnostics is not None and diagnostics.miss_reason is not None:
            out[ATTR_CACHE_MISS_REASON] = diagnostics.miss_reason
            out[ATTR_CACHE_MISSED_INPUT_TOKENS] = diagnostics.missed_input_tokens
            out[LANGFUSE_METADATA_CACHE_MISS_REASON] = diagnostics.miss_reason
        if request is not None and self.capture_content:
            out |= content.chat_content(request, response, self.content_max_bytes)
        span.set_attributes(clean(out))

        by_kind = {"input": usage.input_tokens,
                   "cache_creation": usage.cache_creation_input_tokens,
                   "cache_read": usage.cache_read_input_tokens,
                   "output": usage.output_tokens}
        for kind, count in by_kind.items():  # zeros too: every series exists from the first call
            if count is not None:  # a read the provider did not report is not counted as 0
                self._tokens.add(count, {ATTR_TOKEN_KIND: kind, GEN_AI_REQUEST_MODEL: model})
        ratio = usage.read_ratio
        if usage.total_input_tokens and ratio is not None:  # nothing worth plotting otherwise
            self._cache_read_ratio.record(ratio, {GEN_AI_REQUEST_MODEL: model})
        read = usage.cache_read_input_tokens  # a read the provider did not report is no miss
        if request is not None and read is not None and not read and usage.total_input_tokens:
            self._cache_misses.add(1, {ATTR_CACHE_MISS_REASON: miss_reason(request, response)
                                       or "unknown", GEN_AI_REQUEST_MODEL: model})
        common = {GEN_AI_OPERATION_NAME: OPERATION_CHAT, GEN_AI_PROVIDER_NAME: provider,
                  GEN_AI_REQUEST_MODEL: model, GEN_AI_RESPONSE_MODEL: response.model or model}
        for kind, count in (("input", usage.total_input_tokens), ("output", usage.output_tokens)):
            self._token_usage.record(count, {**common, GEN_AI_TOKEN_TYPE: kind})

    def tool_span(self, name: str, call_id: str) -> AbstractContextManager[Span]:
        """``execute_tool {name}`` (GenAI execute-tool span, kind INTERNAL)."""
        return self._start(f"{OPERATION_EXECUTE_TOOL} {name}", SpanKind.INTERNAL, {
            GEN_AI_OPERATION_NAME: OPERATION_EXECUTE_TOOL,
            GEN_AI_TOOL_NAME: name,
            GEN_AI_TOOL_CALL_ID: call_id,
            GEN_AI_TOOL_TYPE: "function",
        })

    def record_tool(self, span: Span, result: ToolResult) -> None:
        """Whether the call failed; a failed or refused call's span is ERROR, with the reason.

        ``error.type`` is ``refused`` (an allowlist or a skill in use said no) or ``tool_error``."""
        span.set_attribute(ATTR_TOOL_ERROR, result.is_error)
        if result.is_error:
            first = result.content.strip().splitlines()[0] if result.content.strip() else ""
            kind = "refused" if first.startswith("refused:") else "tool_error"
            span.set_attribute(ERROR_TYPE, kind)
            span.set_status(Status(StatusCode.ERROR, first[:300]))

    # events
    def add_event(self, name: str, attributes: Mapping[str, Any],
                  message: str | None = None) -> None:
        """A span event on the current span, mirrored where Langfuse keeps it; ``message`` is the
        warning the event came with (it becomes the observation's status message)."""
        span = trace.get_current_span()
        span.add_event(name, clean(attributes))
        mirror_event(span, name, attributes, message)

    # metrics
    def record_memory_load(self, duration_s: float, nbytes: int, sources: int) -> None:
        """One memory load: its duration and the bytes it injected (``sources`` = files loaded)."""
        attributes = {ATTR_MEMORY_SOURCE_COUNT: sources}
        self._memory_load_duration.record(duration_s, attributes)
        self._memory_bytes.record(nbytes, attributes)

    def record_proposal(self, outcome: str) -> None:
        """One proposal event by outcome (:data:`PROPOSAL_OUTCOMES`)."""
        self._proposals.add(1, {ATTR_PROPOSAL_OUTCOME: outcome})

    def record_skills(self, indexed: int, invalid: int) -> None:
        """The latest run's skills index: how many skills it holds, how many SKILL.md it skipped
        as invalid (two gauges: a file that stays broken counts once, not once per run)."""
        self._skills_indexed.set(indexed)
        self._skills_invalid.set(invalid)

    # logs
    def log_run(self, *, agent_id: str, run_id: str, attributes: Mapping[str, Any],
                tenant_id: str | None = None, status: str | None = None,
                read_ratio: float | str | None = None) -> None:
        """ONE info line per run: human-readable ``key=value``, the same fields as ``extra``.

        Who and how it ended first (tenant, agent, run, status, cache read ratio), then what the
        run's features measured, each a field named by the catalogue (:data:`RUN_ATTRIBUTES`),
        in catalogue order, then any others by their name. The same values go on the current
        (root) span as Langfuse trace metadata."""
        text, fields = run_line({"tenant_id": tenant_id, "agent_id": agent_id, "run_id": run_id,
                                 "status": status, "cache_read_ratio": read_ratio}, attributes)
        extra = dict(fields)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:  # lets a log backend jump to the trace; not in the text (determinism)
            extra["trace_id"] = trace.format_trace_id(context.trace_id)
            extra["span_id"] = trace.format_span_id(context.span_id)
        self.logger.info("hango run %s", text, extra=extra)
        self.annotate_run(**run_metadata(attributes))

    def annotate_run(self, **metadata: Any) -> None:
        """Run-level metadata on the current span (``agent.run`` when called inside it), as
        Langfuse trace and observation metadata only (:func:`~hango.telemetry.mirror.annotate`)."""
        annotate(trace.get_current_span(), metadata)
