"""Spans as the mapping reads them: decoded from OTLP, independent of protobuf and of the wire encoding."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# SpanKind values of the OTLP protocol (opentelemetry.proto.trace.v1.Span.SpanKind).
KIND_UNSPECIFIED, KIND_INTERNAL, KIND_SERVER, KIND_CLIENT, KIND_PRODUCER, KIND_CONSUMER = range(6)
# Status codes of the OTLP protocol (Status.StatusCode).
STATUS_UNSET, STATUS_OK, STATUS_ERROR = range(3)


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Span:
    """One ended span (or a Logfire pending span) of an export request.

    Ids are lowercase hex: `trace_id` 32 characters, `span_id` 16, and
    `parent_span_id` 16 or None for a root. Attribute values are plain
    Python: str, bool, int, float, bytes, lists and dicts of them (AnyValue's
    array and kvlist), None for an empty AnyValue.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int = KIND_UNSPECIFIED
    start_ns: int = 0
    end_ns: int = 0
    status_code: int = STATUS_UNSET
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""
