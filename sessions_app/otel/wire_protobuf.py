"""OTLP protobuf bodies (`application/x-protobuf`) into Spans, with the official classes of opentelemetry-proto.

The whole request is parsed at once. Only when that fails is it taken apart
by hand along its wire format (request > resourceSpans > scopeSpans > spans)
and each span parsed alone: a span the parser refuses (invalid UTF-8, a field
of the wrong wire type, nesting past protobuf's limit) is then refused by
itself, and the others are read. A body whose structure above the spans is
broken (cut short, not protobuf) is a DecodeError.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf.message import Error as ProtobufError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanMessage
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from sessions_app.otel import wire
from sessions_app.otel.spans import KIND_CONSUMER, KIND_UNSPECIFIED, STATUS_ERROR, STATUS_UNSET, Span, SpanEvent
from sessions_app.otel.wire import DecodeError, Refusal, SpanProblem

# Field numbers of opentelemetry/proto (trace/v1/trace.proto, collector/trace/v1/trace_service.proto).
REQUEST_RESOURCE_SPANS = 1
RESOURCE_SPANS_RESOURCE, RESOURCE_SPANS_SCOPE_SPANS = 1, 2
SCOPE_SPANS_SCOPE, SCOPE_SPANS_SPANS = 1, 2
SPAN_TRACE_ID, SPAN_SPAN_ID, SPAN_ATTRIBUTES, SPAN_EVENTS = 1, 2, 9, 11
# A span's fields that the parser can refuse, for saying which one it did (OTLP/JSON's names):
# strings, and messages with their class.
SPAN_PARTS = {3: ("traceState", str), 5: ("name", str), 9: ("attributes", KeyValue), 11: ("events", SpanMessage.Event),
              13: ("links", SpanMessage.Link), 15: ("status", Status)}  # fmt: skip
REPEATED_PARTS = {9, 11, 13}
LEN = 2  # the wire type of bytes, strings and messages

# upb's reasons, in this endpoint's words.
PARSER_WORDS = {
    "bad UTF-8": "holds a string that is not valid UTF-8",
    "MaxDepth": "nests deeper than the protobuf parser reads",
    "corrupt": "is not valid protobuf (a field of the wrong type, or cut short)",
}


def read(body: bytes) -> tuple[list[Span], list[Refusal]]:
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except ProtobufError:
        return collect(piecewise(body))
    if body and not request.resource_spans:
        raise DecodeError("not an OTLP trace export: the body holds no resourceSpans")
    count = sum(len(scope_spans.spans) for resource_spans in request.resource_spans for scope_spans in resource_spans.scope_spans)
    too_many(count)
    return collect(whole(request))


def too_many(count: int) -> None:
    if count > wire.MAX_SPANS:
        raise wire.TooLarge(f"the request holds {count} spans; at most {wire.MAX_SPANS} are taken per request (export smaller batches)")


# A unit: where the span is, its resource's attributes (or what is wrong with them), its scope's
# name (or what is wrong with it), and the parsed span or the refusal of its bytes.
Unit = tuple[str, "dict | SpanProblem", "str | SpanProblem", "SpanMessage | Refusal"]


def whole(request: ExportTraceServiceRequest) -> Iterator[Unit]:
    for r, resource_spans in enumerate(request.resource_spans):
        at = f"resourceSpans[{r}]"
        resource = problem_or(lambda: attributes(resource_spans.resource.attributes, f"{at}.resource.attributes"))
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            here = f"{at}.scopeSpans[{s}]"
            scope = problem_or(lambda: scope_name(scope_spans.scope, f"{here}.scope"))
            for i, span in enumerate(scope_spans.spans):
                yield f"{here}.spans[{i}]", resource, scope, span


def piecewise(body: bytes) -> Iterator[Unit]:
    """The units of a request the parser refused as a whole (checked to the span level before any is yielded)."""
    units: list[tuple[str, object, object, bytes]] = []
    every_resource_spans = messages(fields(body, "the body"), REQUEST_RESOURCE_SPANS)
    if body and not every_resource_spans:
        raise DecodeError("not an OTLP trace export: the body holds no resourceSpans")
    for r, resource_spans in enumerate(every_resource_spans):
        at = f"resourceSpans[{r}]"
        parts = fields(resource_spans, at)
        resource = problem_or(lambda: attributes(parsed(Resource, joined(parts, RESOURCE_SPANS_RESOURCE), f"{at}.resource").attributes, f"{at}.resource.attributes"))  # fmt: skip
        for s, scope_spans in enumerate(messages(parts, RESOURCE_SPANS_SCOPE_SPANS)):
            here = f"{at}.scopeSpans[{s}]"
            inner = fields(scope_spans, here)
            scope = problem_or(lambda: scope_name(parsed(InstrumentationScope, joined(inner, SCOPE_SPANS_SCOPE), f"{here}.scope"), f"{here}.scope"))  # fmt: skip
            units += [(f"{here}.spans[{i}]", resource, scope, span) for i, span in enumerate(messages(inner, SCOPE_SPANS_SPANS))]
    too_many(len(units))
    for where, resource, scope, raw in units:
        try:
            yield where, resource, scope, SpanMessage.FromString(raw)
        except ProtobufError as error:
            yield where, resource, scope, refused_bytes(raw, where, error)


def collect(units: Iterator[Unit]) -> tuple[list[Span], list[Refusal]]:
    spans, refused = [], []
    for where, resource, scope, message in units:
        if isinstance(message, Refusal):
            refused.append(message)
            continue
        try:
            spans.append(span_of(message, where, resource, scope))
        except SpanProblem as problem:
            refused.append(wire.refusal(message.trace_id, message.span_id, str(problem)))
    return spans, refused


def span_of(message: SpanMessage, where: str, resource, scope) -> Span:
    trace_id, span_id, parent = wire.span_ids(message.trace_id, message.span_id, message.parent_span_id, where)
    for context in (resource, scope):
        if isinstance(context, SpanProblem):
            raise context
    wire.check_count(len(message.events), wire.MAX_EVENTS, "events", f"{where}.events")
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=wire.text(message.name, f"{where}.name"),
        kind=message.kind if KIND_UNSPECIFIED <= message.kind <= KIND_CONSUMER else KIND_UNSPECIFIED,
        start_ns=message.start_time_unix_nano,
        end_ns=message.end_time_unix_nano,
        status_code=message.status.code if STATUS_UNSET <= message.status.code <= STATUS_ERROR else STATUS_UNSET,
        status_message=wire.text(message.status.message, f"{where}.status.message"),
        attributes=attributes(message.attributes, f"{where}.attributes"),
        events=tuple(
            SpanEvent(
                name=wire.text(event.name, f"{where}.events[{e}].name"),
                time_ns=event.time_unix_nano,
                attributes=attributes(event.attributes, f"{where}.events[{e}].attributes"),
            )
            for e, event in enumerate(message.events)
        ),
        resource=resource,
        scope=scope,
    )


def attributes(pairs, where: str) -> dict:
    wire.check_count(len(pairs), wire.MAX_ATTRIBUTES, "attributes", where)
    found = {}
    for i, pair in enumerate(pairs):
        key = pair.key
        if not (key and key.isascii() and "\x00" not in key):  # the path is built only for a key to look at
            key = wire.key(key, f"{where}[{i}].key")
        value = pair.value
        try:
            if value.WhichOneof("value") == "string_value" and (text := value.string_value).isascii() and "\x00" not in text:
                found[key] = text  # most values: plain ASCII text, taken as it is
            else:
                found[key] = value_of(value, 1)
        except SpanProblem as problem:
            raise wire.within(wire.keyed(where, key), problem, attribute=True) from None
    return found


def value_of(value: AnyValue, depth: int):
    """A plain value; a SpanProblem says where relative to `value` (wire.within)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return wire.text(value.string_value, "")
    if kind in ("bool_value", "int_value", "bytes_value"):
        return getattr(value, kind)
    if kind == "double_value":
        return wire.double(value.double_value)
    if kind == "array_value":
        wire.check_depth(depth)
        items = []
        for i, item in enumerate(value.array_value.values):
            try:
                items.append(value_of(item, depth + 1))
            except SpanProblem as problem:
                raise wire.within(f".arrayValue.values[{i}]", problem) from None
        return items
    if kind == "kvlist_value":
        wire.check_depth(depth)
        found = {}
        for i, pair in enumerate(value.kvlist_value.values):
            key = wire.key(pair.key, f".kvlistValue.values[{i}].key", empty=True)
            try:
                found[key] = value_of(pair.value, depth + 1)
            except SpanProblem as problem:
                raise wire.within(wire.keyed(".kvlistValue", key), problem) from None
        return found
    return None  # an empty AnyValue


def scope_name(scope: InstrumentationScope, where: str) -> str:
    attributes(scope.attributes, f"{where}.attributes")  # checked: a scope's bad text is its spans' problem too
    wire.text(scope.version, f"{where}.version")
    return wire.text(scope.name, f"{where}.name")


def problem_or(read_it):
    try:
        return read_it()
    except SpanProblem as problem:
        return problem


def parsed(message_class, raw: bytes, where: str):
    try:
        return message_class.FromString(raw)
    except ProtobufError as error:
        raise SpanProblem(where, in_words(error)) from None


# The wire format, read by hand: only after the parser refused the whole request.


def fields(data: bytes, where: str) -> list[tuple[int, int, int | bytes | None]]:
    """(field number, wire type, value) of a message's top level; a DecodeError where it is not protobuf."""
    found, at, end = [], 0, len(data)
    while at < end:
        key, at = varint(data, at, where)
        number, wire_type = key >> 3, key & 7
        value = None
        if number == 0:
            raise DecodeError(f"{where}: not valid protobuf (field number 0)")
        if wire_type == 0:
            value, at = varint(data, at, where)
        elif wire_type == LEN:
            length, at = varint(data, at, where)
            if at + length > end:
                raise DecodeError(f"{where}: cut short (a field of {length} bytes with {end - at} left)")
            value, at = data[at : at + length], at + length
        elif wire_type in (1, 5):
            at += 8 if wire_type == 1 else 4
            if at > end:
                raise DecodeError(f"{where}: cut short")
        else:  # groups (3, 4) are not in OTLP's messages; 6 and 7 are not wire types
            raise DecodeError(f"{where}: not valid protobuf (wire type {wire_type})")
        found.append((number, wire_type, value))
    return found


def varint(data: bytes, at: int, where: str) -> tuple[int, int]:
    value = shift = 0
    for index in range(at, min(at + 10, len(data))):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise DecodeError(f"{where}: cut short or not valid protobuf (a broken varint)")


def messages(found, number: int) -> list[bytes]:
    """The occurrences of a message field. One of another wire type is an unknown field to
    protobuf's parser (which keeps it aside), so it is passed over here too."""
    return [value for field, wire_type, value in found if field == number and wire_type == LEN]


def joined(found, number: int) -> bytes:
    """A singular message field: protobuf merges its occurrences, which is parsing them joined."""
    return b"".join(messages(found, number))


def refused_bytes(raw: bytes, where: str, error: ProtobufError) -> Refusal:
    """The refusal of a span the parser refused: its ids if readable, and the part of it at fault."""
    try:
        found = fields(raw, where)
    except DecodeError as broken:
        return Refusal("", "", broken.reason)
    ids = {number: value for number, wire_type, value in found if number in (SPAN_TRACE_ID, SPAN_SPAN_ID) and wire_type == LEN}
    reason, counts = f"{where}: {in_words(error)}", dict.fromkeys(SPAN_PARTS, -1)
    for number, wire_type, value in found:
        if number not in SPAN_PARTS:
            continue
        name, kind = SPAN_PARTS[number]
        counts[number] += 1
        part = f"{where}.{name}" + (f"[{counts[number]}]" if number in REPEATED_PARTS else "")
        if wire_type != LEN:
            reason = f"{part}: has the wrong wire type ({wire_type})"
            break
        if kind is KeyValue:
            part = wire.keyed(f"{where}.{name}", key_of(value)) if key_of(value) is not None else part
        problem = utf8_problem(value) if kind is str else parse_problem(kind, value)
        if problem:
            reason = f"{part}: {problem}"
            break
    return wire.refusal(ids.get(SPAN_TRACE_ID), ids.get(SPAN_SPAN_ID), reason)


def key_of(raw: bytes) -> str | None:
    """The key of a KeyValue's bytes, as far as it reads (for naming the attribute at fault)."""
    try:
        keys = [value for number, wire_type, value in fields(raw, "") if number == 1 and wire_type == LEN]
    except DecodeError:
        return None
    return keys[-1].decode(errors="replace") if keys else None


def utf8_problem(raw: bytes) -> str | None:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return "is not valid UTF-8 text"
    return None


def parse_problem(message_class, raw: bytes) -> str | None:
    try:
        message_class.FromString(raw)
    except ProtobufError as error:
        return in_words(error)
    return None


def in_words(error: ProtobufError) -> str:
    said = str(error)
    return next((words for mark, words in PARSER_WORDS.items() if mark in said), f"is not valid protobuf ({said})")
