"""What Langfuse keeps of a run that it would otherwise drop, and the run log line's text.

Langfuse ingests no custom span events (its OTLP ingestion reads events only for GenAI
messages), so each event is also written where an observation keeps it: the metadata key
``<event name without "agent.">`` lists the events of that span as ``key=value`` text, and an
event that came with a warning sets the observation's level to ``WARNING`` and its status
message to the warning sentences. Trace-level keys (name, session, user) go on every span of a
run, the way Langfuse's own SDK propagates them. Plain functions on the OpenTelemetry API only.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from hango.telemetry.names import (
    LANGFUSE_LEVEL,
    LANGFUSE_METADATA_PREFIX,
    LANGFUSE_STATUS_MESSAGE,
    LANGFUSE_TRACE_METADATA_PREFIX,
    RUN_ATTRIBUTES,
    catalogue_order,
    field_name,
)

STATUS_MESSAGE_MAX = 2000  # characters of warnings on one observation; the events hold the rest

# The trace-level attributes of the run in progress (set by Telemetry.run_span); a subagent's run
# inside it keeps its parent's: one trace, one name, one session.
RUN_SCOPE: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("hango_run_scope", default=())

_notes: weakref.WeakKeyDictionary[Span, tuple[dict[str, list[str]], list[str]]] = (
    weakref.WeakKeyDictionary())


def clean(attributes: Mapping[str, Any]) -> dict[str, AttributeValue]:
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


def event_text(attributes: Mapping[str, Any]) -> str:
    """An event's attributes as one ``key=value`` line, keys sorted."""
    return " ".join(f"{k}={logfmt(v)}" for k, v in sorted(attributes.items())) or "-"


def mirror_event(span: Span, name: str, attributes: Mapping[str, Any],
                 message: str | None) -> None:
    """Write a span event where Langfuse keeps it: metadata, and level/status for a warning."""
    if not span.is_recording():
        return
    events, warnings = _notes.setdefault(span, ({}, []))
    key = name.removeprefix("agent.")
    events.setdefault(key, []).append(event_text(attributes))
    span.set_attribute(LANGFUSE_METADATA_PREFIX + key, events[key])
    if message is not None:
        warnings.append(message)
        text = "; ".join(warnings)
        if len(text) > STATUS_MESSAGE_MAX:
            text = text[: STATUS_MESSAGE_MAX - 1] + "…"
        span.set_attributes({LANGFUSE_LEVEL: "WARNING", LANGFUSE_STATUS_MESSAGE: text})


def run_line(head: Mapping[str, Any], attributes: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The run log line's text and fields: ``head`` (who, how it ended; ``None`` left out), then
    what the features measured, named by the catalogue and in its order, then any others."""
    fields: dict[str, Any] = {k: v for k, v in head.items() if v is not None}
    for name in sorted(attributes, key=catalogue_order):
        fields[field_name(name)] = attributes[name]
    return " ".join(f"{k}={logfmt(v)}" for k, v in fields.items()), fields


def run_metadata(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The run's published values under their Langfuse metadata names."""
    return {(RUN_ATTRIBUTES[n].langfuse or RUN_ATTRIBUTES[n].log) if n in RUN_ATTRIBUTES
            else field_name(n): value for n, value in attributes.items()}


def annotate(span: Span, metadata: Mapping[str, Any]) -> None:
    """``metadata`` as ``langfuse.trace.metadata.<k>`` and ``langfuse.observation.metadata.<k>``:
    filterable trace and root-observation metadata in Langfuse; the ``hango.*`` attributes stay
    on the spans that measured them."""
    if span.is_recording():
        span.set_attributes(clean({prefix + key: value for key, value in metadata.items()
                                   for prefix in (LANGFUSE_TRACE_METADATA_PREFIX,
                                                  LANGFUSE_METADATA_PREFIX)}))


def logfmt(value: Any) -> str:
    """One log-line value: lists comma-joined (``-`` when empty), quoted when it has spaces."""
    if isinstance(value, list | tuple):
        return ",".join(logfmt(v) for v in value) if value else "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    return json.dumps(text) if (not text or re.search(r'[\s="]', text)) else text
