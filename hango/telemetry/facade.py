"""The facade: spans, metrics and the run log line, on providers you may pass in.

Library code uses only ``opentelemetry-api``: without an SDK every call is a no-op. Instruments
are built from :data:`~hango.telemetry.names.INSTRUMENTS`, so a name, unit or bucket list lives
in the catalogue only. The SDK is set up elsewhere (:mod:`hango.telemetry.setup`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, SpanKind, TracerProvider
from opentelemetry.util.types import AttributeValue

from hango.models.base import Request, Response
from hango.telemetry.names import (
    ATTR_CACHE_MISS_REASON,
    ATTR_CACHE_MISSED_INPUT_TOKENS,
    ATTR_CACHE_READ_RATIO,
    ATTR_MEMORY_SOURCE_COUNT,
    ATTR_PROPOSAL_OUTCOME,
    ATTR_TOKEN_KIND,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_TYPE,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    LANGFUSE_METADATA_CACHE_MISS_REASON,
    LANGFUSE_METADATA_PREFIX,
    LANGFUSE_TRACE_METADATA_PREFIX,
    METRIC_CACHE_READ_RATIO,
    METRIC_MEMORY_BYTES,
    METRIC_MEMORY_LOAD_DURATION,
    METRIC_PROPOSALS,
    METRIC_SKILLS_INDEXED,
    METRIC_SKILLS_INVALID,
    METRIC_TOKENS,
    OPERATION_CHAT,
    OPERATION_EXECUTE_TOOL,
    RUN_ATTRIBUTES,
    SCOPE,
    SCOPE_VERSION,
    SPECS,
    InstrumentSpec,
    catalogue_order,
    field_name,
)


def _clean(attributes: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """Drop ``None`` (OTel rejects it); lists and tuples of primitives stay sequences."""
    out: dict[str, AttributeValue] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            out[key] = [v if isinstance(v, (str, bool, int, float)) else str(v) for v in value]
        elif isinstance(value, (str, bool, int, float)):
            out[key] = value
        else:
            out[key] = str(value)
    return out


class Telemetry:
    """Spans, metrics and the run log line of hango, on providers you may pass in.

    ``None`` means the API's global providers: a no-op until an application configures the SDK.
    Tracer, meter and instruments belong to this instance, never to module globals, so tests can
    give each ``Telemetry`` its own providers.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.tracer: trace.Tracer = trace.get_tracer(
            SCOPE, SCOPE_VERSION, tracer_provider=tracer_provider)
        self.meter: metrics.Meter = metrics.get_meter(
            SCOPE, SCOPE_VERSION or "", meter_provider=meter_provider)
        self.logger = logger or logging.getLogger("hango")
        self._memory_load_duration = self._histogram(SPECS[METRIC_MEMORY_LOAD_DURATION])
        self._memory_bytes = self._histogram(SPECS[METRIC_MEMORY_BYTES])
        spec = SPECS[METRIC_SKILLS_INDEXED]
        self._skills_indexed = self.meter.create_gauge(spec.name, spec.unit, spec.description)
        spec = SPECS[METRIC_SKILLS_INVALID]
        self._skills_invalid = self.meter.create_counter(spec.name, spec.unit, spec.description)
        self._cache_read_ratio = self._histogram(SPECS[METRIC_CACHE_READ_RATIO])
        spec = SPECS[METRIC_TOKENS]
        self._tokens = self.meter.create_counter(spec.name, spec.unit, spec.description)
        spec = SPECS[METRIC_PROPOSALS]
        self._proposals = self.meter.create_counter(spec.name, spec.unit, spec.description)

    def _histogram(self, spec: InstrumentSpec) -> metrics.Histogram:
        return self.meter.create_histogram(
            spec.name, spec.unit, spec.description,
            explicit_bucket_boundaries_advisory=spec.buckets)

    # spans
    @contextmanager
    def _start(self, name: str, kind: SpanKind,
               attributes: Mapping[str, Any]) -> Iterator[Span]:
        with self.tracer.start_as_current_span(
            name, kind=kind, attributes=_clean(attributes),
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

    def chat_span(self, request: Request, provider: str) -> AbstractContextManager[Span]:
        """``chat {model}``, kind CLIENT, with the attributes the conventions want at start."""
        return self._start(f"{OPERATION_CHAT} {request.model}", SpanKind.CLIENT, {
            GEN_AI_OPERATION_NAME: OPERATION_CHAT,
            GEN_AI_PROVIDER_NAME: provider,
            GEN_AI_REQUEST_MODEL: request.model,
            GEN_AI_REQUEST_MAX_TOKENS: request.max_tokens,
        })

    def record_chat(self, span: Span, response: Response, *, model: str,
                    attributes: Mapping[str, Any]) -> None:
        """Usage, cache and prompt-growth attributes on the chat span, plus the token metrics.

        ``attributes`` is what the run's features measured (``RunContext.attributes``); the
        catalogue (:data:`RUN_ATTRIBUTES`) decides which go on the chat span and their Langfuse
        mirror. One not in the catalogue goes on the span under its own name."""
        usage = response.usage
        out: dict[str, Any] = {
            GEN_AI_RESPONSE_MODEL: response.model or model,
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
        span.set_attributes(_clean(out))

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

    def tool_span(self, name: str, call_id: str) -> AbstractContextManager[Span]:
        """``execute_tool {name}`` (GenAI execute-tool span, kind INTERNAL)."""
        return self._start(f"{OPERATION_EXECUTE_TOOL} {name}", SpanKind.INTERNAL, {
            GEN_AI_OPERATION_NAME: OPERATION_EXECUTE_TOOL,
            GEN_AI_TOOL_NAME: name,
            GEN_AI_TOOL_CALL_ID: call_id,
            GEN_AI_TOOL_TYPE: "function",
        })

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
        """The size of the skills index (gauge) and how many SKILL.md were rejected (counter)."""
        self._skills_indexed.set(indexed)
        self._skills_invalid.add(invalid)

    # logs
    def log_run(self, *, agent_id: str, run_id: str, attributes: Mapping[str, Any]) -> None:
        """ONE info line per run: human-readable ``key=value``, the same fields as ``extra``.

        ``attributes`` is what the run's features measured; each becomes a field named by the
        catalogue (:data:`RUN_ATTRIBUTES`), in catalogue order, then any others by their name.
        The same values go on the current (root) span as Langfuse trace metadata."""
        fields: dict[str, Any] = {"agent_id": agent_id, "run_id": run_id}
        for name in sorted(attributes, key=catalogue_order):
            fields[field_name(name)] = attributes[name]
        text = " ".join(f"{k}={_logfmt(v)}" for k, v in fields.items())
        extra = dict(fields)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:  # lets a log backend jump to the trace; not in the text (determinism)
            extra["trace_id"] = trace.format_trace_id(context.trace_id)
            extra["span_id"] = trace.format_span_id(context.span_id)
        self.logger.info("hango run %s", text, extra=extra)
        self.annotate_run(**{
            (RUN_ATTRIBUTES[n].langfuse or RUN_ATTRIBUTES[n].log) if n in RUN_ATTRIBUTES
            else field_name(n): value for n, value in attributes.items()})

    def annotate_run(self, **metadata: Any) -> None:
        """Put run-level metadata on the current span (``agent.run`` when called inside it).

        Only as Langfuse keys (``langfuse.trace.metadata.<k>`` and
        ``langfuse.observation.metadata.<k>``): Langfuse makes them filterable trace and root
        observation metadata; the ``hango.*`` attributes stay on the spans that measured them.
        """
        span = trace.get_current_span()
        if not span.is_recording():
            return
        attributes: dict[str, Any] = {}
        for key, value in metadata.items():
            attributes[LANGFUSE_TRACE_METADATA_PREFIX + key] = value
            attributes[LANGFUSE_METADATA_PREFIX + key] = value
        span.set_attributes(_clean(attributes))


def _logfmt(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_logfmt(v) for v in value) if value else "-"
    text = str(value)
    return json.dumps(text) if (not text or re.search(r'[\s="]', text)) else text

