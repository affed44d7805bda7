"""Every span, event, attribute and metric name hango emits, in one place, and ``configure()``.

Library code (``Telemetry``) uses only ``opentelemetry-api``: without an SDK every call is a
no-op. The SDK and the exporters are imported only inside :func:`configure` and the helpers of
:class:`Configured`, which build providers for a notebook, a test or a process.

Conventions followed (see ``shared/notes/observability.md``):

* Chat spans follow the OTel GenAI inference-span convention (status *Development*):
  ``chat {model}``, kind ``CLIENT``, ``gen_ai.operation.name="chat"``,
  ``gen_ai.provider.name`` and ``gen_ai.request.*`` set when the span starts.
* **Token mapping.** The conventions define ``gen_ai.usage.input_tokens`` as *all* input tokens,
  cached ones included. Anthropic's ``usage.input_tokens`` (our :class:`~hango.models.base.Usage`)
  is only the uncached tail, so the span carries
  ``gen_ai.usage.input_tokens = input_tokens + cache_creation_input_tokens +
  cache_read_input_tokens`` (``Usage.total_input_tokens``), and the two cache counts under their
  own attributes. Langfuse subtracts the cache counts from ``input_tokens`` itself, so its
  "input" is Anthropic's uncached figure again.
* The cache-write attribute is ``gen_ai.usage.cache_creation.input_tokens`` (released semconv,
  and the only name Langfuse <= 4.16 maps). GenAI ``main`` renames it to
  ``gen_ai.usage.cache_write.input_tokens``; switch :data:`GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS`
  when backends catch up. Never emit both names.
* The ``hango.tokens`` counter uses *disjoint* kinds (``input`` is the uncached tail, as the
  provider reports it) so that ``cache_read / (input + cache_creation + cache_read)`` over any
  window is exactly the token-weighted read ratio.
* ``hango.cache.read_ratio`` is a **histogram** (buckets 0, 0.1 … 0.9, 0.95, 0.99, 1), not a
  gauge: a synchronous gauge keeps only the last value per export interval, so with many calls it
  shows whichever call came last (often a cold first call at 0). The histogram keeps every call:
  the per-call distribution, its median and mean, and the share of cold calls (``le="0"``). The
  exact token-weighted ratio comes from the ``hango.tokens`` counter.
* Prometheus names (what the OTLP receiver of otel-lgtm produces) are computed by
  :func:`prometheus_series` from :data:`INSTRUMENTS`, so the dashboard can be checked against
  what hango really emits.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, SpanKind, TracerProvider
from opentelemetry.util.types import AttributeValue

from hango.models.base import Request, Response

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SCOPE = "hango"
try:
    SCOPE_VERSION: str | None = version("hango")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    SCOPE_VERSION = None

# --- spans and events ----------------------------------------------------------------------------
SPAN_RUN = "agent.run"
SPAN_BEFORE_RUN = "agent.before_run"
SPAN_MEMORY_LOAD = "agent.memory_load"
SPAN_SKILLS_INDEX = "agent.skills_index"
EVENT_MEMORY_MISSING = "agent.memory_missing"
EVENT_SKILL_INVALID = "agent.skill_invalid"
EVENT_SKILL_TOOLS_NARROWED = "agent.skill_tools_narrowed"
SPAN_DECIDE = "agent.proposal_decide"  # an owner's or admin's approve or reject
EVENT_PROPOSAL_CREATED = "agent.proposal_created"  # an ask-mode write became a proposal
EVENT_PROPOSAL_DECIDED = "agent.proposal_decided"  # approved, approved with edits, rejected
EVENT_RUN_INTERRUPTED = "agent.run_interrupted"
EVENT_RUN_RESUMED = "agent.run_resumed"

# --- hango attributes ----------------------------------------------------------------------------
ATTR_MEMORY_SOURCES = "hango.memory.sources"  # span: the source paths that were loaded
ATTR_MEMORY_BYTES = "hango.memory.bytes"
ATTR_MEMORY_SOURCE_COUNT = "hango.memory.source_count"  # metric attribute: how many loaded
ATTR_SKILLS_COUNT = "hango.skills.count"
ATTR_SKILLS_INVALID = "hango.skills.invalid"
ATTR_RUN_STATUS = "hango.run.status"  # on agent.run: done, interrupted or failed
ATTR_PROPOSAL_ID = "hango.proposal.id"
ATTR_PROPOSAL_OUTCOME = "hango.proposal.outcome"  # metric attribute, see PROPOSAL_OUTCOMES
PROPOSAL_OUTCOMES = ("proposed", "approved", "approved_with_edits", "rejected", "conflict")
ATTR_CACHE_READ_RATIO = "hango.cache.read_ratio"
ATTR_CACHE_MISS_REASON = "hango.cache.miss_reason"
ATTR_CACHE_MISSED_INPUT_TOKENS = "hango.cache.missed_input_tokens"
ATTR_TOKEN_KIND = "hango.token.kind"
TOKEN_KINDS = ("input", "cache_creation", "cache_read", "output")

# --- GenAI semantic conventions (Development status) ---------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"  # inclusive of cached tokens
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
# Released name; GenAI ``main`` renamed it ``gen_ai.usage.cache_write.input_tokens`` (Langfuse
# <= 4.16 only maps this one). One constant, one name per span.
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
OPERATION_CHAT = "chat"
OPERATION_EXECUTE_TOOL = "execute_tool"
ERROR_TYPE = "error.type"

# --- Langfuse: ``langfuse.observation.metadata.<k>`` becomes filterable metadata ``<k>`` ---------
LANGFUSE_METADATA_PREFIX = "langfuse.observation.metadata."
LANGFUSE_METADATA_MEMORY_BYTES = LANGFUSE_METADATA_PREFIX + "memory_bytes"
LANGFUSE_METADATA_SKILLS_COUNT = LANGFUSE_METADATA_PREFIX + "skills_count"
LANGFUSE_METADATA_CACHE_MISS_REASON = LANGFUSE_METADATA_PREFIX + "cache_miss_reason"
LANGFUSE_OTEL_TRACES_PATH = "/api/public/otel/v1/traces"
# The local stack in compose.yaml (profile ``langfuse``) creates exactly these at first start.
LANGFUSE_LOCAL_HOST = "http://localhost:3001"
LANGFUSE_LOCAL_PUBLIC_KEY = "pk-lf-hango-local"
LANGFUSE_LOCAL_SECRET_KEY = "sk-lf-hango-local"

# --- metrics -------------------------------------------------------------------------------------
METRIC_MEMORY_LOAD_DURATION = "hango.memory.load.duration"
METRIC_MEMORY_BYTES = "hango.memory.bytes"
METRIC_SKILLS_INDEXED = "hango.skills.indexed"
METRIC_SKILLS_INVALID = "hango.skills.invalid"
METRIC_CACHE_READ_RATIO = "hango.cache.read_ratio"
METRIC_TOKENS = "hango.tokens"
METRIC_PROPOSALS = "hango.proposals"

MEMORY_LOAD_DURATION_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
MEMORY_BYTES_BUCKETS: tuple[float, ...] = (  # 0, then powers of 4 from 256 B to 16 MiB
    0, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)
CACHE_READ_RATIO_BUCKETS: tuple[float, ...] = (  # (-inf, 0] holds the cold calls
    0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)

InstrumentKind = Literal["counter", "histogram", "gauge"]


@dataclass(frozen=True)
class InstrumentSpec:
    """One metric instrument: the single source for its creation and its Prometheus name."""

    name: str
    kind: InstrumentKind
    unit: str
    description: str
    attributes: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None


INSTRUMENTS: tuple[InstrumentSpec, ...] = (
    InstrumentSpec(METRIC_MEMORY_LOAD_DURATION, "histogram", "s",
                   "Time to read, strip and cap the memory sources of one run",
                   (ATTR_MEMORY_SOURCE_COUNT,), MEMORY_LOAD_DURATION_BUCKETS_S),
    InstrumentSpec(METRIC_MEMORY_BYTES, "histogram", "By",
                   "Bytes of memory injected into the system prompt of one run",
                   (ATTR_MEMORY_SOURCE_COUNT,), MEMORY_BYTES_BUCKETS),
    InstrumentSpec(METRIC_SKILLS_INDEXED, "gauge", "{skill}",
                   "Skills in the index of the latest run"),
    InstrumentSpec(METRIC_SKILLS_INVALID, "counter", "{skill}",
                   "SKILL.md files rejected while indexing"),
    InstrumentSpec(METRIC_CACHE_READ_RATIO, "histogram", "1",
                   "Per model call: cache_read / all input tokens",
                   (GEN_AI_REQUEST_MODEL,), CACHE_READ_RATIO_BUCKETS),
    InstrumentSpec(METRIC_TOKENS, "counter", "{token}",
                   "Tokens by kind; kinds are disjoint (input is the uncached tail)",
                   (ATTR_TOKEN_KIND, GEN_AI_REQUEST_MODEL)),
    InstrumentSpec(METRIC_PROPOSALS, "counter", "{proposal}",
                   "Agent writes under a reserved prefix in ask mode, by outcome",
                   (ATTR_PROPOSAL_OUTCOME,)),
)
_SPECS = {spec.name: spec for spec in INSTRUMENTS}


@dataclass(frozen=True)
class RunAttribute:
    """Where a value a feature published in ``RunContext.attributes`` goes."""

    log: str  # its field in the run's log line
    chat: bool = True  # also on every chat span
    langfuse: str = ""  # mirrored as langfuse.observation.metadata.<this> (filterable there)


# The features' attributes, in log-line order. The runtime copies ctx.attributes without knowing
# these names; an attribute missing here still reaches the chat span and the log line as is.
RUN_ATTRIBUTES: dict[str, RunAttribute] = {
    ATTR_MEMORY_SOURCES: RunAttribute("memory_sources", chat=False),
    ATTR_MEMORY_BYTES: RunAttribute("memory_bytes", langfuse="memory_bytes"),
    ATTR_SKILLS_COUNT: RunAttribute("skills_indexed", langfuse="skills_count"),
    ATTR_SKILLS_INVALID: RunAttribute("skills_invalid", chat=False),
}
_ORDER = {name: i for i, name in enumerate(RUN_ATTRIBUTES)}


def published(attributes: Mapping[str, Any], short: str) -> Any:
    """A published value by its short name (``memory_bytes``, ``skills_count``), 0 if absent.

    Lets ``result.memory_bytes`` keep working while the runtime knows no feature's name."""
    for name, where in RUN_ATTRIBUTES.items():
        if short in (where.log, where.langfuse):
            return attributes.get(name, 0)
    raise AttributeError(short)

# --- OTLP -> Prometheus names (Prometheus' default UnderscoreEscapingWithSuffixes) ---------------
_PROM_UNITS = {
    "d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
    "us": "microseconds", "ns": "nanoseconds", "By": "bytes", "KiBy": "kibibytes",
    "MiBy": "mebibytes", "GiBy": "gibibytes", "TiBy": "tibibytes", "KBy": "kilobytes",
    "MBy": "megabytes", "GBy": "gigabytes", "TBy": "terabytes", "m": "meters", "V": "volts",
    "A": "amperes", "J": "joules", "W": "watts", "g": "grams", "Cel": "celsius", "Hz": "hertz",
    "1": "", "%": "percent",
}
_PROM_PER_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week",
                   "mo": "month", "y": "year"}
_NOT_PROM = re.compile(r"[^a-zA-Z0-9:]+")


def _prom_unit(unit: str, table: Mapping[str, str]) -> str:
    unit = unit.strip()
    if not unit or "{" in unit or "}" in unit:  # annotations such as {token} are dropped
        return ""
    return _NOT_PROM.sub("_", table.get(unit, unit)).strip("_")


def prometheus_name(name: str, unit: str, kind: InstrumentKind) -> str:
    """The series name Prometheus' OTLP receiver gives an instrument (without ``_bucket`` etc.).

    A port of ``otlptranslator.normalizeName``: split on characters outside ``[a-zA-Z0-9:]``,
    append the unit (``s`` -> ``seconds``, ``By`` -> ``bytes``, ``{…}`` dropped) unless the name
    already has that token, ``_total`` for monotonic counters, ``_ratio`` for unit-``1`` gauges.
    """
    tokens = [t for t in _NOT_PROM.split(name) if t]
    main, _, per = unit.partition("/")
    main_suffix = _prom_unit(main, _PROM_UNITS)
    per_suffix = _prom_unit(per, _PROM_PER_UNITS) if per else ""
    if main_suffix and main_suffix not in tokens:
        tokens.append(main_suffix)
    if per_suffix and per_suffix not in tokens:
        tokens += ["per", per_suffix]
    if kind == "counter":
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and kind == "gauge":
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    out = "_".join(tokens)
    return "_" + out if out[:1].isdigit() else out


def prometheus_series(spec: InstrumentSpec) -> tuple[str, ...]:
    """Every series name an instrument produces in Prometheus (histograms give three)."""
    base = prometheus_name(spec.name, spec.unit, spec.kind)
    if spec.kind == "histogram":
        return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
    return (base,)


def prometheus_label(attribute: str) -> str:
    """A metric attribute's Prometheus label name (``hango.token.kind`` -> ``hango_token_kind``)."""
    label = re.sub(r"[^a-zA-Z0-9_]", "_", attribute)
    return "key_" + label if label[:1].isdigit() else label


# --- the library-side API ------------------------------------------------------------------------
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
        m, s = self.meter, _SPECS
        self._memory_load_duration = m.create_histogram(
            METRIC_MEMORY_LOAD_DURATION, s[METRIC_MEMORY_LOAD_DURATION].unit,
            s[METRIC_MEMORY_LOAD_DURATION].description,
            explicit_bucket_boundaries_advisory=MEMORY_LOAD_DURATION_BUCKETS_S)
        self._memory_bytes = m.create_histogram(
            METRIC_MEMORY_BYTES, s[METRIC_MEMORY_BYTES].unit, s[METRIC_MEMORY_BYTES].description,
            explicit_bucket_boundaries_advisory=MEMORY_BYTES_BUCKETS)
        self._skills_indexed = m.create_gauge(
            METRIC_SKILLS_INDEXED, s[METRIC_SKILLS_INDEXED].unit,
            s[METRIC_SKILLS_INDEXED].description)
        self._skills_invalid = m.create_counter(
            METRIC_SKILLS_INVALID, s[METRIC_SKILLS_INVALID].unit,
            s[METRIC_SKILLS_INVALID].description)
        self._cache_read_ratio = m.create_histogram(
            METRIC_CACHE_READ_RATIO, s[METRIC_CACHE_READ_RATIO].unit,
            s[METRIC_CACHE_READ_RATIO].description,
            explicit_bucket_boundaries_advisory=CACHE_READ_RATIO_BUCKETS)
        self._tokens = m.create_counter(
            METRIC_TOKENS, s[METRIC_TOKENS].unit, s[METRIC_TOKENS].description)
        self._proposals = m.create_counter(
            METRIC_PROPOSALS, s[METRIC_PROPOSALS].unit, s[METRIC_PROPOSALS].description)

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

        ``attributes`` is what the run's features published (``RunContext.attributes``); the
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
            self._tokens.add(count, {ATTR_TOKEN_KIND: kind, GEN_AI_REQUEST_MODEL: model})
        if usage.total_input_tokens:  # an empty prompt has no ratio worth plotting
            self._cache_read_ratio.record(usage.read_ratio, {GEN_AI_REQUEST_MODEL: model})

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

    def record_skills(self, indexed: int, invalid: int) -> None:
        """The size of the skills index (gauge) and how many SKILL.md were rejected (counter)."""
        self._skills_indexed.set(indexed)
        self._skills_invalid.add(invalid)

    def record_proposal(self, outcome: str) -> None:
        """One proposal event by outcome (:data:`PROPOSAL_OUTCOMES`)."""
        self._proposals.add(1, {ATTR_PROPOSAL_OUTCOME: outcome})

    # logs
    def log_run(self, *, agent_id: str, run_id: str, attributes: Mapping[str, Any]) -> None:
        """ONE info line per run: human-readable ``key=value``, the same fields as ``extra``.

        ``attributes`` is what the run's features published; each becomes a field named by the
        catalogue (:data:`RUN_ATTRIBUTES`), in catalogue order, then any others by their name."""
        fields: dict[str, Any] = {"agent_id": agent_id, "run_id": run_id}
        for name in sorted(attributes, key=_catalogue_order):
            where = RUN_ATTRIBUTES.get(name)
            fields[where.log if where else _field_name(name)] = attributes[name]
        text = " ".join(f"{k}={_logfmt(v)}" for k, v in fields.items())
        extra = dict(fields)
        context = trace.get_current_span().get_span_context()
        if context.is_valid:  # lets a log backend jump to the trace; not in the text (determinism)
            extra["trace_id"] = trace.format_trace_id(context.trace_id)
            extra["span_id"] = trace.format_span_id(context.span_id)
        self.logger.info("hango run %s", text, extra=extra)


def _catalogue_order(name: str) -> tuple[int, str]:
    return (_ORDER.get(name, len(_ORDER)), name)


def _field_name(attribute: str) -> str:
    return attribute.removeprefix("hango.").replace(".", "_")


def _logfmt(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_logfmt(v) for v in value) if value else "-"
    text = str(value)
    return json.dumps(text) if (not text or re.search(r'[\s="]', text)) else text


# --- configure(): the SDK side -------------------------------------------------------------------
Mode = Literal["memory", "console", "otlp", "langfuse"]
MODES: tuple[str, ...] = ("memory", "console", "otlp", "langfuse")
DEFAULT_OTLP_ENDPOINT = "http://localhost:4318"  # grafana/otel-lgtm in compose.yaml
log = logging.getLogger("hango")

_PointKey = tuple[str, tuple[tuple[str, Any], ...]]


@dataclass
class Configured:
    """What :func:`configure` built: ``telemetry``, its SDK providers, and notebook helpers.

    ``span_exporter``/``metric_reader`` are the in-memory ones: present in mode ``memory``;
    mode ``langfuse`` keeps *metrics* in memory when no ``otlp_endpoint`` is given, because
    Langfuse accepts and then discards OTLP metrics. The in-memory reader uses delta temporality
    and :meth:`metrics` accumulates the deltas, which is what makes :meth:`clear` possible: read
    metrics through :meth:`metrics`, not through the reader.
    """

    mode: str
    telemetry: Telemetry
    tracer_provider: SDKTracerProvider
    meter_provider: SDKMeterProvider
    span_exporter: InMemorySpanExporter | None = None
    metric_reader: InMemoryMetricReader | None = None
    destinations: tuple[str, ...] = ()
    message: str = ""
    _points: dict[_PointKey, dict[str, Any]] = field(default_factory=dict, repr=False)
    _closed: bool = field(default=False, repr=False)

    def spans(self) -> tuple[ReadableSpan, ...]:
        """Finished spans in the order they ended (needs the in-memory exporter)."""
        if self.span_exporter is None:
            raise RuntimeError(f"spans() needs mode='memory' (this is mode={self.mode!r})")
        return tuple(self.span_exporter.get_finished_spans())

    def metrics(self) -> dict[str, list[dict[str, Any]]]:
        """Metric data points by instrument name, flattened to plain dicts, since the last clear.

        Every point has ``type`` (``sum``, ``gauge`` or ``histogram``), ``unit`` and
        ``attributes``; sums and gauges add ``value``; histograms add ``count``, ``sum``,
        ``min``, ``max``, ``bounds`` and ``bucket_counts`` (one more than ``bounds``: +Inf).
        """
        from opentelemetry.sdk.metrics.export import HistogramDataPoint, NumberDataPoint, Sum

        if self.metric_reader is None:
            raise RuntimeError(f"metrics() needs an in-memory reader (mode={self.mode!r})")
        data = self.metric_reader.get_metrics_data()
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for dp in metric.data.data_points:
                        attributes = dict(dp.attributes or {})
                        key = (metric.name, tuple(sorted(
                            (k, tuple(v) if isinstance(v, list | tuple) else v)
                            for k, v in attributes.items())))
                        base = {"unit": metric.unit, "attributes": attributes}
                        old = self._points.get(key)
                        if isinstance(dp, HistogramDataPoint):
                            self._points[key] = _merge_histogram(old, base, dp)
                        elif isinstance(dp, NumberDataPoint) and isinstance(metric.data, Sum):
                            total = dp.value + (old["value"] if old is not None else 0)
                            self._points[key] = {**base, "type": "sum", "value": total}
                        elif isinstance(dp, NumberDataPoint):  # a gauge: the last value wins
                            self._points[key] = {**base, "type": "gauge", "value": dp.value}
        out: dict[str, list[dict[str, Any]]] = {}
        for (name, _), point in sorted(self._points.items(), key=lambda kv: repr(kv[0])):
            out.setdefault(name, []).append(dict(point))
        return out

    def span_tree(self, durations: bool = False) -> str:
        """The finished spans as an indented tree, one trace after another.

        A line is: name, ``[KIND]`` unless INTERNAL, the duration in whole ms only when
        ``durations`` (off by default so notebook output is deterministic), ``!ERROR`` and its
        description, then the attributes sorted by name (the ``langfuse.*`` mirrors left out).
        Events follow their span as ``* name key=value`` lines.
        """
        from opentelemetry.trace import StatusCode

        spans = sorted(self.spans(), key=lambda s: s.start_time or 0)
        ids = {s.context.span_id for s in spans if s.context is not None}
        children: dict[int | None, list[ReadableSpan]] = {}
        for s in spans:
            parent = s.parent.span_id if s.parent is not None else None
            children.setdefault(parent if parent in ids else None, []).append(s)
        lines: list[str] = []

        def walk(span: ReadableSpan, depth: int) -> None:
            pad = "  " * depth
            head = [span.name]
            if span.kind is not SpanKind.INTERNAL:
                head.append(f"[{span.kind.name}]")
            if durations and span.end_time is not None and span.start_time is not None:
                head.append(f"({round((span.end_time - span.start_time) / 1e6)} ms)")
            if span.status.status_code is StatusCode.ERROR:
                head.append(f"!ERROR {span.status.description or ''}".rstrip())
            attrs = {k: v for k, v in (span.attributes or {}).items()
                     if not k.startswith("langfuse.")}
            head += [f"{k}={_show(v)}" for k, v in sorted(attrs.items())]
            lines.append(pad + " ".join(head))
            for event in span.events:
                detail = dict(event.attributes or {})
                if event.name == "exception":  # the message and stack trace are not stable
                    detail = {k: v for k, v in detail.items() if k == "exception.type"}
                lines.append(pad + "  * " + " ".join(
                    [event.name, *(f"{k}={_show(v)}" for k, v in sorted(detail.items()))]))
            for child in children.get(span.context.span_id if span.context else None, []):
                walk(child, depth + 1)

        for root in children.get(None, []):
            walk(root, 0)
        return "\n".join(lines)

    def clear(self) -> None:
        """Forget the captured spans and metric points (the in-memory ones)."""
        if self.span_exporter is not None:
            self.span_exporter.clear()
        if self.metric_reader is not None:
            self.metrics()  # drain the pending deltas
            self._points.clear()

    def flush(self, timeout_millis: int = 10_000) -> bool:
        """Push buffered spans and metrics now; False if something did not finish in time."""
        traces_ok = self.tracer_provider.force_flush(timeout_millis)
        metrics_ok = self.meter_provider.force_flush(timeout_millis)
        return bool(traces_ok and metrics_ok)

    def shutdown(self) -> None:
        """Flush and stop the exporters; safe to call twice. Export errors are logged only."""
        if self._closed:
            return
        self._closed = True
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def _merge_histogram(old: dict[str, Any] | None, base: dict[str, Any],
                     dp: HistogramDataPoint) -> dict[str, Any]:
    bounds, counts = tuple(dp.explicit_bounds), tuple(dp.bucket_counts)
    if old is None or old["bounds"] != bounds:
        return {**base, "type": "histogram", "count": dp.count, "sum": dp.sum, "min": dp.min,
                "max": dp.max, "bounds": bounds, "bucket_counts": counts}
    return {**old, "count": old["count"] + dp.count, "sum": old["sum"] + dp.sum,
            "min": min(old["min"], dp.min), "max": max(old["max"], dp.max),
            "bucket_counts": tuple(a + b for a, b in zip(old["bucket_counts"], counts,
                                                         strict=True))}


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_show(v) for v in value) + "]"
    return str(value)


def _otlp_exporters() -> tuple[Any, Any]:
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:  # pragma: no cover - the extra is part of hango[dev]
        raise RuntimeError("OTLP export needs: pip install 'hango[observability]'") from exc
    return OTLPSpanExporter, OTLPMetricExporter


def langfuse_headers(public_key: str, secret_key: str) -> dict[str, str]:
    """HTTP headers for Langfuse's OTLP endpoint: Basic auth and the real-time v4 ingestion path."""
    token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}", "x-langfuse-ingestion-version": "4"}


def configure(
    mode: str = "memory",
    *,
    otlp_endpoint: str | None = None,
    langfuse_public_key: str | None = None,
    langfuse_secret_key: str | None = None,
    langfuse_host: str | None = None,
    service_name: str = "hango",
    set_global: bool = False,
    logger: logging.Logger | None = None,
    timeout_s: float = 5.0,
    metric_interval_ms: int = 5_000,
) -> Configured:
    """Build SDK providers for one of four destinations and a :class:`Telemetry` on them.

    * ``memory``: spans to an ``InMemorySpanExporter`` (synchronously), metrics to an
      ``InMemoryMetricReader``; for notebooks and tests (``spans()``, ``metrics()``,
      ``span_tree()``).
    * ``console``: spans printed as they end; metrics printed on ``flush()``/``shutdown()``.
    * ``otlp``: OTLP/HTTP traces and metrics to a collector, ``otlp_endpoint`` being the base URL
      (default ``$OTEL_EXPORTER_OTLP_ENDPOINT`` or ``http://localhost:4318``: grafana/otel-lgtm).
      Metrics are pushed every ``metric_interval_ms`` and on ``flush()``.
    * ``langfuse``: every hango span (not only the GenAI ones) to
      ``{langfuse_host}/api/public/otel/v1/traces`` with a plain OTLP exporter and Basic auth.
      Keys and host default to ``$LANGFUSE_PUBLIC_KEY``, ``$LANGFUSE_SECRET_KEY`` and
      ``$LANGFUSE_BASE_URL`` (or ``$LANGFUSE_HOST``, else :data:`LANGFUSE_LOCAL_HOST`). The local
      compose stack's keys are :data:`LANGFUSE_LOCAL_PUBLIC_KEY`/:data:`LANGFUSE_LOCAL_SECRET_KEY`.
      Without both keys nothing is sent anywhere: a ``memory`` configuration comes back, with
      ``message`` saying why. With ``otlp_endpoint`` too, traces also go there and metrics go
      there (Langfuse drops metrics); otherwise metrics stay in memory.

    Exporters run in batch processors or periodic readers, with ``timeout_s`` per request: a
    backend that is down costs log lines, never an exception in a run. The providers are not
    made global unless ``set_global`` (the API allows that once per process).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    from opentelemetry.sdk.metrics import (
        Counter,
        Histogram,
        ObservableCounter,
        ObservableUpDownCounter,
        UpDownCounter,
        _Gauge,
    )
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        ConsoleMetricExporter,
        InMemoryMetricReader,
        MetricReader,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    message = ""
    if mode == "langfuse":
        public_key = langfuse_public_key or os.environ.get("LANGFUSE_PUBLIC_KEY") or ""
        secret_key = langfuse_secret_key or os.environ.get("LANGFUSE_SECRET_KEY") or ""
        host = (langfuse_host or os.environ.get("LANGFUSE_BASE_URL")
                or os.environ.get("LANGFUSE_HOST") or LANGFUSE_LOCAL_HOST).rstrip("/")
        if not (public_key and secret_key):
            message = ("Langfuse keys missing (LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY, or the "
                       "langfuse_public_key / langfuse_secret_key arguments): nothing is sent to "
                       "Langfuse; spans and metrics are kept in memory instead. The local stack "
                       "(docker compose --profile langfuse up -d) uses "
                       f"{LANGFUSE_LOCAL_PUBLIC_KEY} / {LANGFUSE_LOCAL_SECRET_KEY} on "
                       f"{LANGFUSE_LOCAL_HOST}.")
            log.warning("%s", message)
            mode = "memory"

    resource = Resource.create({"service.name": service_name})
    tracer_provider = SDKTracerProvider(resource=resource)
    readers: list[MetricReader] = []
    span_exporter: InMemorySpanExporter | None = None
    metric_reader: InMemoryMetricReader | None = None
    destinations: list[str] = []

    def memory_reader() -> InMemoryMetricReader:
        delta = AggregationTemporality.DELTA
        return InMemoryMetricReader(preferred_temporality={
            Counter: delta, UpDownCounter: delta, Histogram: delta, _Gauge: delta,
            ObservableCounter: delta, ObservableUpDownCounter: delta})

    def otlp_to(base: str) -> None:
        span_cls, metric_cls = _otlp_exporters()
        tracer_provider.add_span_processor(BatchSpanProcessor(
            span_cls(endpoint=f"{base}/v1/traces", timeout=timeout_s)))
        readers.append(PeriodicExportingMetricReader(
            metric_cls(endpoint=f"{base}/v1/metrics", timeout=timeout_s),
            export_interval_millis=metric_interval_ms,
            export_timeout_millis=timeout_s * 1000 * 2))
        destinations.extend([f"{base}/v1/traces", f"{base}/v1/metrics"])

    if mode == "memory":
        span_exporter = InMemorySpanExporter()
        tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        metric_reader = memory_reader()
        readers.append(metric_reader)
        destinations.append("memory")
    elif mode == "console":
        tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stdout)))
        readers.append(PeriodicExportingMetricReader(
            ConsoleMetricExporter(out=sys.stdout), export_interval_millis=math.inf))
        destinations.append("console")
    elif mode == "otlp":
        otlp_to((otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                 or DEFAULT_OTLP_ENDPOINT).rstrip("/"))
    else:  # langfuse, with keys
        span_cls, _ = _otlp_exporters()
        endpoint = host + LANGFUSE_OTEL_TRACES_PATH
        tracer_provider.add_span_processor(BatchSpanProcessor(span_cls(
            endpoint=endpoint, headers=langfuse_headers(public_key, secret_key),
            timeout=timeout_s)))
        destinations.append(endpoint)
        if otlp_endpoint:
            otlp_to(otlp_endpoint.rstrip("/"))
        else:
            metric_reader = memory_reader()
            readers.append(metric_reader)
            destinations.append("memory (metrics)")

    meter_provider = SDKMeterProvider(resource=resource, metric_readers=readers)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Configured(
        mode=mode,
        telemetry=Telemetry(tracer_provider, meter_provider, logger),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        span_exporter=span_exporter,
        metric_reader=metric_reader,
        destinations=tuple(destinations),
        message=message,
    )
