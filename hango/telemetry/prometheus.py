"""Prometheus: the series names hango's instruments get, and a ``/metrics`` endpoint.

Two roads lead to the same names. Prometheus' OTLP receiver (inside grafana/otel-lgtm) translates
OTLP metrics with its default ``UnderscoreEscapingWithSuffixes``; the OpenTelemetry Prometheus
exporter (``opentelemetry-exporter-prometheus``, behind ``hango serve --metrics``) renders the
text format itself. :func:`prometheus_series` ports the receiver's rule, and a test checks that
the exporter's real output and the dashboard's queries agree with it.

``/metrics`` is off by default. When on, it answers loopback clients only (a Prometheus on the
same machine); any other client gets 403, whatever interface the API listens on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hango.telemetry.names import InstrumentKind, InstrumentSpec

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from prometheus_client import CollectorRegistry
    from starlette.applications import Starlette

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


# --- /metrics ----------------------------------------------------------------------------------
LOOPBACK = frozenset({"127.0.0.1", "::1", "::ffff:127.0.0.1", "localhost"})


def prometheus_meter_provider(
    service_name: str = "hango",
) -> tuple[SDKMeterProvider, CollectorRegistry]:
    """A meter provider whose metrics a ``/metrics`` scrape reads, on a registry of its own.

    Its own ``CollectorRegistry`` (not prometheus_client's global one) keeps two providers in one
    process, e.g. two tests, from mixing their series.
    """
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
    except ImportError as exc:  # pragma: no cover - the extra is part of hango[dev]
        raise RuntimeError("/metrics needs: pip install 'hango[observability]'") from exc
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=True)
    reader = PrometheusMetricReader(registry=registry)
    provider = SDKMeterProvider(resource=Resource.create({"service.name": service_name}),
                                metric_readers=[reader])
    return provider, registry


def add_metrics_route(app: Starlette, registry: CollectorRegistry, path: str = "/metrics") -> None:
    """``GET path``: the registry in Prometheus text format, for loopback clients only.

    The format follows the scraper's ``Accept`` header, as prometheus_client's own handler does:
    text 0.0.4 by default (every Prometheus parses it), OpenMetrics when asked for.
    """
    from prometheus_client.exposition import choose_encoder
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response

    async def metrics(request: Request) -> Response:
        client = request.client.host if request.client is not None else ""
        if client not in LOOPBACK:
            return PlainTextResponse(f"{path} answers loopback clients only; got {client}\n",
                                     status_code=403)
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(registry), headers={"Content-Type": content_type})

    app.add_route(path, metrics, methods=["GET"], include_in_schema=False)


def scrape_names(text: str) -> set[str]:
    """The series names in a Prometheus text exposition (comments and labels left out)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names
