"""SDK set-up: :func:`configure` builds providers for one destination and a facade on them.

Modes: ``memory`` (notebooks, tests), ``console``, ``otlp`` (any OTLP/HTTP collector, per
signal, from the standard ``OTEL_*`` variables), ``phoenix`` (Arize Phoenix from ``make traces``,
traces only) and ``langfuse`` (through the ``langfuse`` SDK, every hango span exported).
Exporters run in batch processors or periodic readers with a bounded timeout: a backend that is
down costs log lines and a ``False`` from ``flush()``, never an exception in a run.

Environment variables honoured (OpenTelemetry's "OTLP Exporter Configuration" and "General SDK
Configuration" specifications): ``OTEL_EXPORTER_OTLP_ENDPOINT`` (base URL, ``/v1/<signal>``
appended), ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``..._METRICS_ENDPOINT`` (used as they are),
``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (``none`` turns a signal off),
``OTEL_EXPORTER_OTLP_HEADERS`` (read by the exporters), ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES``; ``PHOENIX_COLLECTOR_ENDPOINT``; ``LANGFUSE_PUBLIC_KEY``,
``LANGFUSE_SECRET_KEY``, ``LANGFUSE_BASE_URL`` (or ``LANGFUSE_HOST``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, Literal

from opentelemetry import metrics, trace
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
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hango.telemetry.configured import (
    Configured,
    ExportLog,
    TrackedMetricExporter,
    TrackedSpanExporter,
)
from hango.telemetry.facade import Telemetry
from hango.telemetry.names import (
    LANGFUSE_LOCAL_HOST,
    LANGFUSE_LOCAL_PUBLIC_KEY,
    LANGFUSE_LOCAL_SECRET_KEY,
    PHOENIX_LOCAL_ENDPOINT,
    PHOENIX_PROJECT,
    PHOENIX_PROJECT_ATTRIBUTE,
    SCOPE,
)

Mode = Literal["memory", "console", "otlp", "phoenix", "langfuse"]
MODES: tuple[str, ...] = ("memory", "console", "otlp", "phoenix", "langfuse")
SIGNALS: tuple[str, ...] = ("traces", "metrics")
DEFAULT_OTLP_ENDPOINT = "http://localhost:4318"  # grafana/otel-lgtm in compose.yaml
log = logging.getLogger("hango")


def _otlp_exporters() -> tuple[Any, Any]:
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:  # pragma: no cover - the extra is part of hango[dev]
        raise RuntimeError("OTLP export needs: pip install 'hango[observability]'") from exc
    return OTLPSpanExporter, OTLPMetricExporter


def langfuse_headers(public_key: str, secret_key: str) -> dict[str, str]:
    """HTTP headers for Langfuse's OTLP endpoint: Basic auth and the real-time v4 ingestion path.

    What the ``langfuse`` SDK sends too; kept for a plain collector (``OTEL_EXPORTER_OTLP_HEADERS``
    wants them URL-encoded: ``Authorization=Basic%20...``).
    """
    import base64

    token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}", "x-langfuse-ingestion-version": "4"}


def otlp_endpoints(base: str | None = None,
                   signals: Sequence[str] = SIGNALS) -> dict[str, str | None]:
    """Where ``otlp`` mode sends each signal (``None``: that signal is off).

    Per signal: ``OTEL_<SIGNAL>_EXPORTER=none`` turns it off; else
    ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`` is used as it is; else the base URL (``base``, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, else :data:`DEFAULT_OTLP_ENDPOINT`) plus ``/v1/<signal>``.
    An exporter other than ``otlp`` or ``none``, or a protocol other than ``http/protobuf``
    (``OTEL_EXPORTER_OTLP[_<SIGNAL>]_PROTOCOL``), is refused by name.
    """
    out: dict[str, str | None] = {}
    root = (base or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_OTLP_ENDPOINT)
    for signal in signals:
        for var in ("OTEL_EXPORTER_OTLP_PROTOCOL", f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"):
            if os.environ.get(var, "http/protobuf") != "http/protobuf":
                raise ValueError(f"{var}={os.environ[var]!r}: hango exports OTLP over "
                                 "http/protobuf only")
        var = f"OTEL_{signal.upper()}_EXPORTER"
        exporters = {e.strip() for e in os.environ.get(var, "otlp").split(",") if e.strip()}
        if exporters - {"otlp", "none"}:
            raise ValueError(f"{var}={os.environ[var]!r}: hango exports with 'otlp' or "
                             "'none'")
        if "none" in exporters or not exporters:
            out[signal] = None
            continue
        specific = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
        out[signal] = specific if specific and not base else f"{root.rstrip('/')}/v1/{signal}"
    return out


def export_every_hango_span(span: ReadableSpan) -> bool:
    """The Langfuse SDK's span filter for hango: every hango span, plus the SDK's defaults.

    The SDK's default (``is_default_export_span``) keeps only Langfuse spans, spans with a
    ``gen_ai.*`` attribute and known LLM instrumentation scopes: it would drop
    ``agent.run``, ``agent.before_run``, ``agent.memory_load`` and ``agent.skills_index``.
    """
    from langfuse import is_default_export_span

    scope = span.instrumentation_scope
    return (scope is not None and scope.name == SCOPE) or is_default_export_span(span)


def _memory_reader() -> InMemoryMetricReader:
    delta = AggregationTemporality.DELTA
    return InMemoryMetricReader(preferred_temporality={
        Counter: delta, UpDownCounter: delta, Histogram: delta, _Gauge: delta,
        ObservableCounter: delta, ObservableUpDownCounter: delta})


def configure(
    mode: str = "memory",
    *,
    otlp_endpoint: str | None = None,
    signals: Sequence[str] | None = None,
    langfuse_public_key: str | None = None,
    langfuse_secret_key: str | None = None,
    langfuse_host: str | None = None,
    phoenix_endpoint: str | None = None,
    project: str | None = None,
    service_name: str | None = None,
    set_global: bool = False,
    logger: logging.Logger | None = None,
    timeout_s: float = 5.0,
    metric_interval_ms: int = 5_000,
    capture_content: bool | None = None,
) -> Configured:
    """Build SDK providers for one destination and a :class:`Telemetry` on them.

    * ``memory``: spans to an ``InMemorySpanExporter`` (synchronously), metrics to an
      ``InMemoryMetricReader``; for notebooks and tests (``spans()``, ``metrics()``,
      ``span_tree()``).
    * ``console``: spans printed as they end; metrics printed on ``flush()``/``shutdown()``.
    * ``otlp``: OTLP/HTTP to a collector, per signal (see :func:`otlp_endpoints`);
      ``otlp_endpoint`` is a base URL that overrides the variables; ``signals=("traces",)`` or
      ``("metrics",)`` sends one signal only (the other stays in memory). Metrics are pushed every
      ``metric_interval_ms`` and on ``flush()``.
    * ``phoenix``: traces to Arize Phoenix (``make traces``): ``phoenix_endpoint``, else
      ``$PHOENIX_COLLECTOR_ENDPOINT``, else :data:`PHOENIX_LOCAL_ENDPOINT`, plus ``/v1/traces``,
      in project ``project`` (default ``hango``; the resource attribute
      ``openinference.project.name``). Phoenix rejects OTLP metrics, so they stay in memory.
    * ``langfuse``: every hango span through the ``langfuse`` SDK
      (``Langfuse(tracer_provider=..., should_export_span=export_every_hango_span)``). Keys and
      host default to ``$LANGFUSE_PUBLIC_KEY``, ``$LANGFUSE_SECRET_KEY`` and
      ``$LANGFUSE_BASE_URL`` (or ``$LANGFUSE_HOST``, else :data:`LANGFUSE_LOCAL_HOST`). Without
      both keys nothing is sent anywhere: a ``memory`` configuration comes back, with ``message``
      saying why. With ``otlp_endpoint`` too, traces and metrics also go there (Langfuse discards
      metrics); otherwise metrics stay in memory.

    The providers are not made global unless ``set_global`` (the API allows that once per process).
    ``capture_content`` puts the prompt on the chat spans (:class:`Telemetry`; ``None``: the
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` switch, off unless set).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    wanted = tuple(signals) if signals is not None else SIGNALS
    if not wanted or set(wanted) - set(SIGNALS):
        raise ValueError(f"signals must be a non-empty subset of {SIGNALS}; got {signals!r}")
    message = ""
    public_key = secret_key = host = ""
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

    attributes: dict[str, str] = {}
    if service_name or not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = service_name or "hango"
    if mode == "phoenix" and (project or PHOENIX_PROJECT_ATTRIBUTE
                              not in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")):
        attributes[PHOENIX_PROJECT_ATTRIBUTE] = project or PHOENIX_PROJECT
    resource = Resource.create(attributes)  # merged over OTEL_RESOURCE_ATTRIBUTES
    tracer_provider = SDKTracerProvider(resource=resource)
    exports = ExportLog()
    readers: list[MetricReader] = []
    destinations: list[str] = []
    span_exporter: InMemorySpanExporter | None = None
    metric_reader: InMemoryMetricReader | None = None
    on_shutdown: list[Any] = []

    def traces_to(url: str) -> None:
        span_cls, _ = _otlp_exporters()
        tracer_provider.add_span_processor(BatchSpanProcessor(TrackedSpanExporter(
            span_cls(endpoint=url, timeout=timeout_s), exports, url)))
        destinations.append(url)

    def metrics_to(url: str) -> None:
        _, metric_cls = _otlp_exporters()
        readers.append(PeriodicExportingMetricReader(
            TrackedMetricExporter(metric_cls(endpoint=url, timeout=timeout_s), exports, url),
            export_interval_millis=metric_interval_ms,
            export_timeout_millis=timeout_s * 1000 * 2))
        destinations.append(url)

    def spans_in_memory() -> None:
        nonlocal span_exporter
        span_exporter = InMemorySpanExporter()
        tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        destinations.append("memory (traces)")

    def metrics_in_memory() -> None:
        nonlocal metric_reader
        metric_reader = _memory_reader()
        readers.append(metric_reader)
        destinations.append("memory (metrics)")

    if mode == "memory":
        spans_in_memory()
        metrics_in_memory()
        destinations[:] = ["memory"]
    elif mode == "console":
        tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stdout)))
        readers.append(PeriodicExportingMetricReader(
            ConsoleMetricExporter(out=sys.stdout), export_interval_millis=math.inf))
        destinations.append("console")
    elif mode == "otlp":
        urls = otlp_endpoints(otlp_endpoint)
        traces_url = urls["traces"] if "traces" in wanted else None
        metrics_url = urls["metrics"] if "metrics" in wanted else None
        if traces_url is None and metrics_url is None:
            raise ValueError("configure('otlp'): every signal is off (signals= or "
                             "OTEL_TRACES_EXPORTER/OTEL_METRICS_EXPORTER=none)")
        traces_to(traces_url) if traces_url else spans_in_memory()
        metrics_to(metrics_url) if metrics_url else metrics_in_memory()
    elif mode == "phoenix":
        base = (phoenix_endpoint or os.environ.get("PHOENIX_COLLECTOR_ENDPOINT")
                or PHOENIX_LOCAL_ENDPOINT).rstrip("/")
        traces_to(base if base.endswith("/v1/traces") else base + "/v1/traces")
        metrics_in_memory()
    else:  # langfuse, with keys
        on_shutdown.append(_langfuse(tracer_provider, public_key, secret_key, host, timeout_s,
                                     exports))
        destinations.append(host + "/api/public/otel/v1/traces")
        if otlp_endpoint:
            traces_to(otlp_endpoint.rstrip("/") + "/v1/traces")
            metrics_to(otlp_endpoint.rstrip("/") + "/v1/metrics")
        else:
            metrics_in_memory()

    meter_provider = SDKMeterProvider(resource=resource, metric_readers=readers)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Configured(
        mode=mode, telemetry=Telemetry(tracer_provider, meter_provider, logger,
                                       capture_content=capture_content),
        tracer_provider=tracer_provider, meter_provider=meter_provider,
        span_exporter=span_exporter, metric_reader=metric_reader,
        destinations=tuple(destinations), message=message, exports=exports,
        on_shutdown=on_shutdown)


def _langfuse(tracer_provider: SDKTracerProvider, public_key: str, secret_key: str, host: str,
              timeout_s: float, exports: ExportLog) -> Any:
    """Attach the Langfuse SDK's span processor to ``tracer_provider``; return its shutdown.

    The SDK keeps one client per public key per process and silently reuses the first one's
    provider and filter; re-running a notebook cell would then export nothing. So an earlier
    client for the same key is shut down and forgotten first (``LangfuseResourceManager`` is the
    SDK's private registry). The processor's exporter is wrapped, when the SDK's private layout
    allows, so that ``flush()`` sees failed exports to Langfuse too.
    """
    try:
        from langfuse import Langfuse
        from langfuse._client.resource_manager import LangfuseResourceManager
    except ImportError as exc:  # pragma: no cover - the extra is part of hango[dev]
        raise RuntimeError("configure('langfuse') needs: pip install 'hango[observability]'"
                           ) from exc
    old = LangfuseResourceManager._instances.pop(public_key, None)
    if old is not None:
        old.shutdown()
    client = Langfuse(public_key=public_key, secret_key=secret_key, base_url=host,
                      timeout=max(1, math.ceil(timeout_s)), tracer_provider=tracer_provider,
                      should_export_span=export_every_hango_span)
    active = getattr(tracer_provider, "_active_span_processor", None)
    for processor in getattr(active, "_span_processors", ()):
        batch = getattr(processor, "_batch_processor", None)  # wrap its exporter to see failures
        if type(processor).__name__ == "LangfuseSpanProcessor" and batch is not None:
            batch._exporter = TrackedSpanExporter(batch._exporter, exports, "langfuse")

    def stop() -> None:
        LangfuseResourceManager._instances.pop(public_key, None)
        client.shutdown()

    return stop
