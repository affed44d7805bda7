"""What :func:`~hango.telemetry.setup.configure` returns: providers, the facade, notebook views.

:class:`Configured` owns the SDK providers it was given: ``flush()`` pushes now and says whether
every export since the previous flush succeeded; ``spans()``, ``metrics()`` and ``span_tree()``
read the in-memory exporter and reader (mode ``memory``) as plain, deterministic values.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from hango.telemetry.facade import Telemetry

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, MetricsData
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

log = logging.getLogger("hango")
_PointKey = tuple[str, tuple[tuple[str, Any], ...]]


class ExportLog:
    """Counts failed exports (any signal, any thread) so ``flush()`` can report them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures = 0
        self.last_failure = ""

    def note(self, ok: bool, what: str) -> None:
        if not ok:
            with self._lock:
                self.failures += 1
                self.last_failure = what


class TrackedSpanExporter(SpanExporter):
    """Delegates to ``inner`` and notes every failed batch in ``log``."""

    def __init__(self, inner: SpanExporter, log: ExportLog, what: str) -> None:
        self.inner, self.log, self.what = inner, log, what

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:
            self.log.note(False, self.what)
            raise
        self.log.note(result is SpanExportResult.SUCCESS, self.what)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class TrackedMetricExporter(MetricExporter):
    """Delegates to ``inner`` (keeping its temporality and aggregation) and notes failures."""

    def __init__(self, inner: MetricExporter, log: ExportLog, what: str) -> None:
        super().__init__(preferred_temporality=inner._preferred_temporality,
                         preferred_aggregation=inner._preferred_aggregation)
        self.inner, self.log, self.what = inner, log, what

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        try:
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:
            self.log.note(False, self.what)
            raise
        self.log.note(result is MetricExportResult.SUCCESS, self.what)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


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
    exports: ExportLog = field(default_factory=ExportLog, repr=False)
    on_shutdown: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _failures_seen: int = field(default=0, repr=False)
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
        """Push buffered spans and metrics now.

        False if something did not finish in time, or if any export since the previous
        ``flush()`` failed (a backend down, a 4xx/5xx answer); the reason is logged.
        """
        traces_ok = self.tracer_provider.force_flush(timeout_millis)
        metrics_ok = self.meter_provider.force_flush(timeout_millis)
        failures, self._failures_seen = (self.exports.failures - self._failures_seen,
                                         self.exports.failures)
        if failures:
            log.warning("telemetry: %d export(s) failed since the last flush (last: %s)",
                        failures, self.exports.last_failure)
        return bool(traces_ok and metrics_ok) and not failures

    def shutdown(self) -> None:
        """Flush and stop the exporters; safe to call twice. Export errors are logged only."""
        if self._closed:
            return
        self._closed = True
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        for stop in self.on_shutdown:
            stop()


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
