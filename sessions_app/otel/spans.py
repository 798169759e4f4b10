"""Spans as the mapping reads them: decoded from OTLP, independent of protobuf and of the wire encoding."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

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


def digest(span: Span) -> str:
    """What the span says, as a short digest: an exporter's retry repeats it exactly, so the same ids with
    another digest are another span claiming them. The resource and scope are the process's, not the span's."""
    events = [[e.name, e.time_ns, e.attributes] for e in span.events]
    content = [span.parent_span_id, span.name, span.kind, span.start_ns, span.end_ns, span.status_code,
               span.status_message, span.attributes, events]
    try:
        encoded = orjson.dumps(content, default=_plain, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except TypeError:  # an integer past 64 bits (orjson refuses it before asking `default`): Python's own form
        encoded = repr(content).encode("utf-8", "surrogatepass")
    return hashlib.sha256(encoded).hexdigest()[:32]  # sha256: the fastest here (CPU instructions for it)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return repr(value)
