"""The catalogue: every span, event, attribute and metric name hango emits, in one place.

Nothing here imports OpenTelemetry: the runtime, the middlewares, the tests, the dashboard checks
and the Langfuse/Phoenix set-up all read their names from this module.

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
* ``hango.skills.invalid`` is a gauge, like ``hango.skills.indexed``: the files the latest run
  skipped. (As a counter, one bad file read by every run grew with the runs, and a dashboard
  summing its rate showed 9.36 for a single file.) ``hango.cache.misses`` counts the calls that
  read nothing, by why (:data:`hango.models.view.MISS_REASONS`), beside the GenAI conventions'
  own ``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``.
* Each instrument is an :class:`InstrumentSpec` in :data:`INSTRUMENTS`: the facade creates the
  instruments from it, and :mod:`hango.telemetry.prometheus` derives the Prometheus series names
  from it, so the dashboard can be checked against what hango really emits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

SCOPE = "hango"

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
ATTR_SKILLS_PARSED = "hango.skills.parsed"  # span, cached stack: heads its parse memo lacked
ATTR_RUN_STATUS = "hango.run.status"  # on agent.run: done, interrupted or failed
ATTR_RUN_ID = "hango.run.id"
ATTR_TENANT_ID = "hango.tenant.id"
ATTR_TOOL_ERROR = "hango.tool.error"  # on execute_tool: the call failed or was refused
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
GEN_AI_AGENT_ID = "gen_ai.agent.id"  # {tenant}/{agent}: an agent id is unique in its tenant only
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"  # the run id: a resumed run joins its run
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"  # metric attribute: input or output
# Opt-in content (the conventions' JSON schemas; recorded as JSON strings, as the spec allows)
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
OPERATION_CHAT = "chat"
OPERATION_EXECUTE_TOOL = "execute_tool"
OPERATION_INVOKE_AGENT = "invoke_agent"
ERROR_TYPE = "error.type"
# The GenAI instrumentations' content-capture switch: unset, NO_CONTENT or false is off (the
# default); SPAN_ONLY, SPAN_AND_EVENT or true puts the prompt on the chat spans. hango records
# content on spans only, so EVENT_ONLY captures nothing here.
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CAPTURE_ON = ("SPAN_ONLY", "SPAN_AND_EVENT", "TRUE")
CAPTURE_OFF = ("", "NO_CONTENT", "EVENT_ONLY", "FALSE")
CONTENT_MAX_BYTES = 32 * 1024  # the captured text of one span, all its content attributes together
ATTR_CONTENT_OMITTED_MESSAGES = "hango.content.omitted_messages"  # left out to stay under the cap

# --- what the viewers read for a span's input and output, and a trace's session and user ------
# OpenInference's names: Phoenix shows them as the span's input and output; Langfuse reads them
# too when no langfuse.observation.input is set. session.id and user.id group traces in both.
INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
SESSION_ID = "session.id"
USER_ID = "user.id"

# --- Langfuse: ``langfuse.observation.metadata.<k>`` becomes filterable metadata ``<k>`` ---------
LANGFUSE_METADATA_PREFIX = "langfuse.observation.metadata."
LANGFUSE_METADATA_MEMORY_BYTES = LANGFUSE_METADATA_PREFIX + "memory_bytes"
LANGFUSE_METADATA_SKILLS_COUNT = LANGFUSE_METADATA_PREFIX + "skills_count"
LANGFUSE_METADATA_CACHE_MISS_REASON = LANGFUSE_METADATA_PREFIX + "cache_miss_reason"
LANGFUSE_OTEL_TRACES_PATH = "/api/public/otel/v1/traces"
# Trace-level keys, set on every span of a run (Langfuse aggregates per observation); and the
# two places an observation keeps what a span event said (Langfuse drops custom span events).
LANGFUSE_TRACE_NAME = "langfuse.trace.name"
LANGFUSE_SESSION_ID = "langfuse.session.id"
LANGFUSE_USER_ID = "langfuse.user.id"
LANGFUSE_LEVEL = "langfuse.observation.level"
LANGFUSE_STATUS_MESSAGE = "langfuse.observation.status_message"
# The local stack in compose.yaml (profile ``langfuse``) creates exactly these at first start.
LANGFUSE_LOCAL_HOST = "http://localhost:3001"
LANGFUSE_LOCAL_PUBLIC_KEY = "pk-lf-hango-local"
LANGFUSE_LOCAL_SECRET_KEY = "sk-lf-hango-local"
# Langfuse turns ``langfuse.trace.metadata.<k>`` into trace-level metadata: set on the root span
# (``agent.run``) so a trace can be filtered by what its run loaded.
LANGFUSE_TRACE_METADATA_PREFIX = "langfuse.trace.metadata."

# --- Arize Phoenix (``make traces``): its OTLP/HTTP receiver shares the UI port --------------
PHOENIX_LOCAL_ENDPOINT = "http://127.0.0.1:6006"
PHOENIX_PROJECT_ATTRIBUTE = "openinference.project.name"  # a resource attribute
PHOENIX_PROJECT = "hango"

# --- metrics -------------------------------------------------------------------------------------
METRIC_MEMORY_LOAD_DURATION = "hango.memory.load.duration"
METRIC_MEMORY_BYTES = "hango.memory.bytes"
METRIC_SKILLS_INDEXED = "hango.skills.indexed"
METRIC_SKILLS_INVALID = "hango.skills.invalid"
METRIC_CACHE_READ_RATIO = "hango.cache.read_ratio"
METRIC_TOKENS = "hango.tokens"
METRIC_PROPOSALS = "hango.proposals"
METRIC_CACHE_MISSES = "hango.cache.misses"
METRIC_GEN_AI_TOKEN_USAGE = "gen_ai.client.token.usage"
METRIC_GEN_AI_DURATION = "gen_ai.client.operation.duration"

MEMORY_LOAD_DURATION_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# 0, then powers of 2 from 16 B to the default cap (HANGO_MEMORY_MAX_BYTES, 64 KiB: a run cut at
# the cap lands exactly on a bound), then 256 KiB, 1 MiB and 16 MiB (the largest cap allowed).
# An estimated quantile is at most 2x off below the cap; the exact mean is sum / count.
MEMORY_BYTES_BUCKETS: tuple[float, ...] = (
    0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
    262144, 1048576, 16777216)
# The GenAI conventions' recommended bounds (gen-ai-metrics.md).
GEN_AI_TOKEN_BUCKETS: tuple[float, ...] = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
GEN_AI_DURATION_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
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
    InstrumentSpec(METRIC_SKILLS_INVALID, "gauge", "{skill}",
                   "SKILL.md files the latest run skipped as invalid"),
    InstrumentSpec(METRIC_CACHE_READ_RATIO, "histogram", "1",
                   "Per model call: cache_read / all input tokens",
                   (GEN_AI_REQUEST_MODEL,), CACHE_READ_RATIO_BUCKETS),
    InstrumentSpec(METRIC_TOKENS, "counter", "{token}",
                   "Tokens by kind; kinds are disjoint (input is the uncached tail)",
                   (ATTR_TOKEN_KIND, GEN_AI_REQUEST_MODEL)),
    InstrumentSpec(METRIC_PROPOSALS, "counter", "{proposal}",
                   "Agent writes under a reserved prefix in ask mode, by outcome",
                   (ATTR_PROPOSAL_OUTCOME,)),
    InstrumentSpec(METRIC_CACHE_MISSES, "counter", "{call}",
                   "Model calls that read nothing from the cache, by why",
                   (ATTR_CACHE_MISS_REASON, GEN_AI_REQUEST_MODEL)),
    InstrumentSpec(METRIC_GEN_AI_TOKEN_USAGE, "histogram", "{token}",
                   "Input (cached included) and output tokens per model call",
                   (GEN_AI_OPERATION_NAME, GEN_AI_PROVIDER_NAME, GEN_AI_TOKEN_TYPE,
                    GEN_AI_REQUEST_MODEL, GEN_AI_RESPONSE_MODEL), GEN_AI_TOKEN_BUCKETS),
    InstrumentSpec(METRIC_GEN_AI_DURATION, "histogram", "s",
                   "Duration of a model call, failed ones with error.type",
                   (GEN_AI_OPERATION_NAME, GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL,
                    ERROR_TYPE), GEN_AI_DURATION_BUCKETS_S),
)
SPECS = {spec.name: spec for spec in INSTRUMENTS}


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


def catalogue_order(name: str) -> tuple[int, str]:
    """Sort key: the catalogue's attributes first, in its order, then any other by name."""
    return (_ORDER.get(name, len(_ORDER)), name)


def field_name(attribute: str) -> str:
    """The log field of an attribute the catalogue does not know: ``hango.a.b`` -> ``a_b``."""
    where = RUN_ATTRIBUTES.get(attribute)
    return where.log if where else attribute.removeprefix("hango.").replace(".", "_")
