"""``hango serve``'s telemetry: what the environment names, and nothing when it names nothing.

* **OTLP/HTTP** per signal (traces, metrics, logs) where a standard variable names an endpoint:
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/<signal>`` appended) or
  ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``; ``OTEL_<SIGNAL>_EXPORTER=none`` turns one off;
  headers, timeouts, compression, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, the batch
  and export intervals are the SDK's own variables. The default ``localhost:4318`` of
  ``configure("otlp")`` is *not* assumed here: a server sends nothing it was not told to.
* **Phoenix**: ``hango serve --phoenix [URL]`` or ``PHOENIX_COLLECTOR_ENDPOINT`` (traces only).
* **Langfuse**: when ``LANGFUSE_PUBLIC_KEY`` and ``LANGFUSE_SECRET_KEY`` are both set, through its
  SDK on the same tracer provider (``LANGFUSE_BASE_URL``, default its cloud).
* ``--metrics``: a Prometheus reader for ``/metrics``, beside any OTLP metrics.
* ``OTEL_SDK_DISABLED=true`` exports nothing (``/metrics`` still answers when asked for).

The run log line and the warnings go to stderr too (:func:`console_logging`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace

from hango.telemetry.facade import Telemetry
from hango.telemetry.names import (
    LANGFUSE_OTEL_TRACES_PATH,
    PHOENIX_PROJECT,
    PHOENIX_PROJECT_ATTRIBUTE,
)

SERVER_SIGNALS = ("traces", "metrics", "logs")
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


@dataclass
class Served:
    """What :func:`serve_telemetry` set up: the facade, where it sends, how to stop it."""

    telemetry: Telemetry
    destinations: tuple[str, ...] = ()
    registry: Any = None  # the Prometheus registry /metrics reads, with ``prometheus=True``
    stops: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def shutdown(self) -> None:
        """Flush and stop every exporter (safe twice); a backend that is down costs log lines."""
        stops, self.stops = self.stops, []
        for stop in stops:
            stop()


def server_endpoints() -> dict[str, str | None]:
    """Where each signal goes over OTLP: only where a variable names an endpoint."""
    from hango.telemetry.setup import otlp_endpoints

    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    urls = otlp_endpoints(None, SERVER_SIGNALS)  # refuses a protocol or exporter it cannot honour
    return {s: url if base or os.environ.get(f"OTEL_EXPORTER_OTLP_{s.upper()}_ENDPOINT") else None
            for s, url in urls.items()}


def langfuse_keys() -> tuple[str, str] | None:
    """``LANGFUSE_PUBLIC_KEY`` and ``LANGFUSE_SECRET_KEY``: both, or neither (``None``); one
    alone is refused, naming the other."""
    keys = (os.environ.get("LANGFUSE_PUBLIC_KEY", ""), os.environ.get("LANGFUSE_SECRET_KEY", ""))
    if any(keys) and not all(keys):
        missing = "LANGFUSE_SECRET_KEY" if keys[0] else "LANGFUSE_PUBLIC_KEY"
        raise ValueError(f"{missing} is not set: Langfuse needs both keys (or neither)")
    return keys if all(keys) else None


def serve_telemetry(*, phoenix: str | None = None, prometheus: bool = False,
                    service_name: str = "hango", timeout_s: float = 5.0) -> Served:
    """The server's telemetry from the environment (module docstring). Raises ``ValueError``
    naming a variable it cannot honour; with nothing configured, nothing is exported."""
    disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    urls: dict[str, str | None] = (dict.fromkeys(SERVER_SIGNALS) if disabled
                                   else server_endpoints())
    phoenix = None if disabled else (phoenix or os.environ.get("PHOENIX_COLLECTOR_ENDPOINT"))
    langfuse = langfuse_keys() is not None and not disabled
    if not (any(urls.values()) or phoenix or langfuse or prometheus):
        return Served(Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()))
    return _build(urls, phoenix, langfuse, prometheus, service_name, timeout_s)


def _build(urls: dict[str, str | None], phoenix: str | None, langfuse: bool, prometheus: bool,
           service_name: str, timeout_s: float) -> Served:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from hango.telemetry.configured import ExportLog, TrackedMetricExporter, TrackedSpanExporter
    from hango.telemetry.setup import _langfuse, _otlp_exporters

    attributes: dict[str, str] = {}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = service_name
    if phoenix and PHOENIX_PROJECT_ATTRIBUTE not in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes[PHOENIX_PROJECT_ATTRIBUTE] = PHOENIX_PROJECT
    resource = Resource.create(attributes)
    exports, destinations, stops = ExportLog(), [], []
    span_cls, metric_cls = _otlp_exporters()
    tracer_provider = TracerProvider(resource=resource)
    trace_urls = [urls["traces"]] if urls["traces"] else []
    if phoenix:
        base = phoenix.rstrip("/")
        trace_urls.append(base if base.endswith("/v1/traces") else base + "/v1/traces")
    for url in trace_urls:
        tracer_provider.add_span_processor(BatchSpanProcessor(TrackedSpanExporter(
            span_cls(endpoint=url, timeout=timeout_s), exports, url)))
        destinations.append(url)
    if langfuse:
        host = (os.environ.get("LANGFUSE_BASE_URL") or os.environ.get("LANGFUSE_HOST")
                or "https://cloud.langfuse.com").rstrip("/")
        public, secret = langfuse_keys() or ("", "")
        stops.append(_langfuse(tracer_provider, public, secret, host, timeout_s, exports))
        destinations.append(host + LANGFUSE_OTEL_TRACES_PATH)
    readers: list[MetricReader] = []
    if urls["metrics"]:
        readers.append(PeriodicExportingMetricReader(TrackedMetricExporter(
            metric_cls(endpoint=urls["metrics"], timeout=timeout_s), exports, urls["metrics"])))
        destinations.append(urls["metrics"])
    registry = None
    if prometheus:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=True)
        readers.append(PrometheusMetricReader(registry=registry))
        destinations.append("/metrics")
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if urls["logs"]:
        stops.append(_logs_to(urls["logs"], resource, timeout_s))
        destinations.append(urls["logs"])
    # The Langfuse client flushes through the tracer provider: stop it first, the providers last.
    stops += [tracer_provider.shutdown, meter_provider.shutdown]
    return Served(Telemetry(tracer_provider, meter_provider), tuple(destinations), registry,
                  stops)


def _logs_to(url: str, resource: Any, timeout_s: float) -> Callable[[], None]:
    """The ``hango`` logger's records (the run line, the warnings) as OTLP logs, with the ids
    of the span they were written in."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    provider = LoggerProvider(resource=resource)
    provider.add_log_record_processor(BatchLogRecordProcessor(
        OTLPLogExporter(endpoint=url, timeout=timeout_s)))
    handler = LoggingHandler(level=logging.INFO, logger_provider=provider)
    logger = logging.getLogger("hango")
    logger.addHandler(handler)

    def stop() -> None:
        logger.removeHandler(handler)
        provider.shutdown()

    return stop


def console_logging(level: str = "info") -> None:
    """The ``hango`` logger to stderr at ``level`` (the run line is INFO; warnings carry the
    tenant, agent and run ids). Once per process: a second call changes only the level."""
    logger = logging.getLogger("hango")
    logger.setLevel(level.upper())
    if not any(getattr(h, "_hango_console", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler._hango_console = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
