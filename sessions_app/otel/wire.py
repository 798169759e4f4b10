"""What the two OTLP wire readings (wire_protobuf, wire_json) share: the limits, the errors,
a refused span, and the checks that make every decoded value storable.

Two kinds of problem, two answers. A body that cannot be read as an OTLP trace
export at all raises `DecodeError` (the door answers 400; `TooLarge` 413;
`UnsupportedMediaType` 415). A problem inside one span (its ids, an attribute,
its text, its size) raises `SpanProblem` while that span is read: the span is
refused (a `Refusal` naming where) and the rest of the batch goes on, as OTLP's
partial success expects.

A decoded `Span` holds only what the log can store: every string is Unicode
text without U+0000 (PostgreSQL cannot store it in JSON) or a lone surrogate
(invalid UTF-8 in JSON ends up as one), every int fits OTLP's int64, and
non-finite doubles are the strings "NaN", "Infinity" and "-Infinity" (as in
protobuf's JSON mapping; the log's JSON holds no NaN).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

# Limits per span. OpenTelemetry SDKs keep 128 attributes and 128 events per span unless
# configured otherwise; OpenInference's flattened messages (llm.input_messages.N.message.*)
# take several attributes per message, so long conversations need far more than 128.
MAX_ATTRIBUTES = 4096  # per span, per span event, per resource and per scope
MAX_EVENTS = 4096  # span events per span
# Container levels (arrayValue, kvlistValue) in one attribute value. A decoded value may be
# kept in an event's data, which nests at most 64 levels (sessions_app/log/values.py) and
# starts a few levels down; real instrumentations nest two or three.
MAX_VALUE_DEPTH = 32
# Spans per request: the SDK's batch exporter sends at most 512 (OTEL_BSP_MAX_EXPORT_BATCH_SIZE).
# More are refused whole (413) rather than held in memory by the hundred thousand.
MAX_SPANS = 10_000

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1
TRACE_ID_BYTES, SPAN_ID_BYTES = 16, 8

# A surrogate left in a str is lone (readers join valid pairs); invalid UTF-8 read with
# errors="surrogateescape" is one too (U+DC80-U+DCFF).
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


class DecodeError(ValueError):
    """The body is not an OTLP trace export this endpoint can read (400); `reason` says why and where."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class TooLarge(DecodeError):
    """The body, inflated, is over the limit, or holds more than MAX_SPANS spans (413)."""


class UnsupportedMediaType(DecodeError):
    """A Content-Type or Content-Encoding this endpoint does not read (415)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A span left out of a batch: its ids as far as they could be read (lowercase hex, else "") and why."""

    trace_id: str
    span_id: str
    reason: str


class SpanProblem(Exception):
    """What is wrong inside one span, and where (a path in OTLP/JSON's field names)."""

    def __init__(self, where: str, problem: str, *, whole_value: bool = False):
        super().__init__(f"{where}: {problem}")
        self.where, self.problem = where, problem
        self.whole_value = whole_value  # about the attribute's whole value (its depth): named at the attribute


def text(value: str, where: str) -> str:
    if value.isascii() and "\x00" not in value:  # most text: two scans in C, no regex
        return value
    found = _BAD_CHAR.search(value)
    if found is None:
        return value
    if found.group() == "\x00":
        raise SpanProblem(where, "holds U+0000 (NUL), which cannot be stored")
    raise SpanProblem(where, "is not valid UTF-8 text (an invalid byte or a lone surrogate)")


def key(value: str, where: str, *, empty: bool = False) -> str:
    """An attribute's key (a kvlist's may be empty; a span's, an event's or a resource's may not: OTLP says so)."""
    if not value and not empty:
        raise SpanProblem(where, "is empty; an attribute needs a key")
    return text(value, where)


def keyed(where: str, key: str) -> str:
    """The path of a keyed value, `where["key"]` (a long key shortened)."""
    shown = key if len(key) <= 80 else key[:77] + "..."
    return f"{where}[{json.dumps(shown, ensure_ascii=False)}]"


def within(prefix: str, problem: SpanProblem, *, attribute: bool = False) -> SpanProblem:
    """`problem` placed under `prefix`: values report where they are relative to their attribute,
    so that no path is built for the values that have no problem. A problem of the whole
    value is placed at its attribute (not 32 levels down)."""
    if problem.whole_value and not attribute:
        return problem
    return SpanProblem(prefix + problem.where, problem.problem, whole_value=problem.whole_value)


def double(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def int64(value: int, where: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise SpanProblem(where, f"{value} does not fit a 64-bit integer")
    return value


def check_count(count: int, limit: int, what: str, where: str) -> None:
    if count > limit:
        raise SpanProblem(where, f"{count} {what}; at most {limit} are taken")


def check_depth(depth: int) -> None:
    if depth > MAX_VALUE_DEPTH:
        raise SpanProblem("", f"nests arrays and kvlists deeper than {MAX_VALUE_DEPTH} levels", whole_value=True)


def span_ids(trace_id: bytes, span_id: bytes, parent: bytes, where: str) -> tuple[str, str, str | None]:
    """The ids as the mapping reads them (lowercase hex; no parent for an empty or all-zero one)."""
    for raw, size, name in ((trace_id, TRACE_ID_BYTES, "traceId"), (span_id, SPAN_ID_BYTES, "spanId")):
        if len(raw) != size:
            raise SpanProblem(f"{where}.{name}", f"is {len(raw)} bytes long; it must be {size}")
        if not any(raw):
            raise SpanProblem(f"{where}.{name}", "is all zeros, which is not a valid id")
    if parent and len(parent) != SPAN_ID_BYTES:
        raise SpanProblem(f"{where}.parentSpanId", f"is {len(parent)} bytes long; it must be {SPAN_ID_BYTES} or empty")
    return trace_id.hex(), span_id.hex(), parent.hex() if any(parent) else None


def refusal(trace_id: bytes | None, span_id: bytes | None, reason: str) -> Refusal:
    """A refusal with the ids that were readable (of the right length), else ""."""
    trace = trace_id.hex() if trace_id is not None and len(trace_id) == TRACE_ID_BYTES else ""
    span = span_id.hex() if span_id is not None and len(span_id) == SPAN_ID_BYTES else ""
    return Refusal(trace, span, reason)
