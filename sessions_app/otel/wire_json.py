"""OTLP/JSON bodies (`application/json`) into Spans, as the OTLP specification encodes them.

Field names in lowerCamelCase (protobuf's own snake_case names are read too);
trace and span ids as hex (base64, protobuf's JSON form of bytes, is tolerated);
enums as numbers or names; 64-bit integers as strings or numbers; unknown
fields ignored, as the specification asks of receivers.

A document that is not UTF-8 throughout is read again with its invalid bytes
kept as lone surrogates, so that only the spans holding them are refused
(wire.text), not the batch. Structure above the spans that is not OTLP
(resourceSpans not a list, a scopeSpans entry not an object) is a DecodeError.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

import orjson

from sessions_app.otel import wire
from sessions_app.otel.spans import Span, SpanEvent
from sessions_app.otel.wire import DecodeError, Refusal, SpanProblem

KINDS = ["SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER"]
STATUS_CODES = ["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"]
HEX = re.compile("[0-9a-fA-F]*")
DECIMAL = re.compile("-?[0-9]+")
NON_FINITE = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}
# AnyValue's kinds, by the names OTLP/JSON gives them and protobuf's own.
VALUE_KEYS = {
    "stringValue": "string", "string_value": "string", "boolValue": "bool", "bool_value": "bool",
    "intValue": "int", "int_value": "int", "doubleValue": "double", "double_value": "double",
    "bytesValue": "bytes", "bytes_value": "bytes", "arrayValue": "array", "array_value": "array",
    "kvlistValue": "kvlist", "kvlist_value": "kvlist",
}  # fmt: skip


def read(body: bytes) -> tuple[list[Span], list[Refusal]]:
    document = load(body)
    if not isinstance(document, dict):
        raise DecodeError(f"not an OTLP trace export: the body is {type_name(document)} of JSON, not an object")
    resource_spans = get(document, "resourceSpans", "resource_spans")
    if resource_spans is None and document:
        keys = ", ".join(sorted(map(str, document))[:5])
        raise DecodeError(f"not an OTLP trace export: the object has no resourceSpans (it has {keys})")
    units = []
    for r, item in enumerate(listed(resource_spans, "resourceSpans")):
        at = f"resourceSpans[{r}]"
        resource_spans_object = an_object(item, at)
        resource = problem_or(lambda: resource_of(get(resource_spans_object, "resource"), f"{at}.resource"))
        for s, scope_item in enumerate(listed(get(resource_spans_object, "scopeSpans", "scope_spans"), f"{at}.scopeSpans")):
            here = f"{at}.scopeSpans[{s}]"
            scope_spans = an_object(scope_item, here)
            scope = problem_or(lambda: scope_name(get(scope_spans, "scope"), f"{here}.scope"))
            spans = listed(get(scope_spans, "spans"), f"{here}.spans")
            units += [(f"{here}.spans[{i}]", resource, scope, span) for i, span in enumerate(spans)]
    if len(units) > wire.MAX_SPANS:
        raise wire.TooLarge(f"the request holds {len(units)} spans; at most {wire.MAX_SPANS} are taken per request (export smaller batches)")
    spans, refused = [], []
    for where, resource, scope, item in units:
        try:
            spans.append(span_of(item, where, resource, scope))
        except SpanProblem as problem:
            refused.append(wire.refusal(*readable_ids(item), str(problem)))
    return spans, refused


def load(body: bytes):
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as error:
        said = str(error)
    try:
        # Invalid UTF-8 (orjson refuses the whole document) becomes lone surrogates, refused span by span.
        return json.loads(body.decode("utf-8", "surrogateescape"), parse_constant=no_constant)
    except (ValueError, RecursionError):
        raise DecodeError(f"not JSON: {said}") from None


def no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def span_of(item, where: str, resource, scope) -> Span:
    if not isinstance(item, dict):
        raise SpanProblem(where, f"is {type_name(item)}, not a span object")
    trace_id, span_id, parent = wire.span_ids(
        id_bytes(get(item, "traceId", "trace_id"), wire.TRACE_ID_BYTES, f"{where}.traceId"),
        id_bytes(get(item, "spanId", "span_id"), wire.SPAN_ID_BYTES, f"{where}.spanId"),
        id_bytes(get(item, "parentSpanId", "parent_span_id"), wire.SPAN_ID_BYTES, f"{where}.parentSpanId", optional=True),
        where,
    )
    for context in (resource, scope):
        if isinstance(context, SpanProblem):
            raise context
    status = an_object(get(item, "status"), f"{where}.status", problem=SpanProblem)
    events = listed(get(item, "events"), f"{where}.events", problem=SpanProblem)
    wire.check_count(len(events), wire.MAX_EVENTS, "events", f"{where}.events")
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=string(get(item, "name"), f"{where}.name"),
        kind=enum(get(item, "kind"), KINDS, f"{where}.kind"),
        start_ns=uint64(get(item, "startTimeUnixNano", "start_time_unix_nano"), f"{where}.startTimeUnixNano"),
        end_ns=uint64(get(item, "endTimeUnixNano", "end_time_unix_nano"), f"{where}.endTimeUnixNano"),
        status_code=enum(get(status, "code"), STATUS_CODES, f"{where}.status.code"),
        status_message=string(get(status, "message"), f"{where}.status.message"),
        attributes=attributes(get(item, "attributes"), f"{where}.attributes"),
        events=tuple(event_of(event, f"{where}.events[{e}]") for e, event in enumerate(events)),
        resource=resource,
        scope=scope,
    )


def event_of(item, where: str) -> SpanEvent:
    event = an_object(item, where, problem=SpanProblem)
    return SpanEvent(
        name=string(get(event, "name"), f"{where}.name"),
        time_ns=uint64(get(event, "timeUnixNano", "time_unix_nano"), f"{where}.timeUnixNano"),
        attributes=attributes(get(event, "attributes"), f"{where}.attributes"),
    )


def resource_of(item, where: str) -> dict:
    return attributes(get(an_object(item, where, problem=SpanProblem), "attributes"), f"{where}.attributes")


def scope_name(item, where: str) -> str:
    scope = an_object(item, where, problem=SpanProblem)
    attributes(get(scope, "attributes"), f"{where}.attributes")  # checked: a scope's bad text is its spans' problem too
    string(get(scope, "version"), f"{where}.version")
    return string(get(scope, "name"), f"{where}.name")


def attributes(items, where: str) -> dict:
    pairs = listed(items, where, problem=SpanProblem)
    wire.check_count(len(pairs), wire.MAX_ATTRIBUTES, "attributes", where)
    return keyed_values(pairs, where, 1, empty_keys=False)


def keyed_values(pairs: list, where: str, depth: int, *, empty_keys: bool) -> dict:
    """KeyValues (a span's attributes, a kvlist's values) as a dict; problems said relative to `where`."""
    found = {}
    for i, item in enumerate(pairs):
        pair = an_object(item, f"{where}[{i}]", problem=SpanProblem)
        key = get(pair, "key")
        if not isinstance(key, str | None):
            raise SpanProblem(f"{where}[{i}].key", f"is {type_name(key)}, not a string")
        key = wire.key(key or "", f"{where}[{i}].key", empty=empty_keys)  # absent: protobuf's default, ""
        try:
            found[key] = value_of(get(pair, "value"), depth)
        except SpanProblem as problem:
            raise wire.within(wire.keyed(where, key), problem, attribute=depth == 1) from None
    return found


def value_of(value, depth: int):
    """An AnyValue as a plain value; a SpanProblem says where relative to `value` (wire.within)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpanProblem(".value", f"is {type_name(value)}, not an AnyValue object")
    kinds = [(key, VALUE_KEYS[key]) for key in value if key in VALUE_KEYS and value[key] is not None]
    if len(kinds) > 1:
        raise SpanProblem(".value", f"holds {' and '.join(key for key, _ in kinds)}; an AnyValue holds one")
    if not kinds:
        return None  # empty, or only fields this reader does not know (ignored, as OTLP asks)
    key, kind = kinds[0]
    given, where = value[key], f".value.{key}"
    if kind == "string":
        return string(given, where)
    if kind == "bool":
        if not isinstance(given, bool):
            raise SpanProblem(where, f"is {type_name(given)}, not true or false")
        return given
    if kind == "int":
        return wire.int64(integer(given, where), where)
    if kind == "double":
        return double(given, where)
    if kind == "bytes":
        if not isinstance(given, str) or (raw := from_base64(given)) is None:
            raise SpanProblem(where, "is not base64 text")
        return raw
    wire.check_depth(depth)
    items = listed(get(an_object(given, where, problem=SpanProblem), "values"), f"{where}.values", problem=SpanProblem)
    if kind == "kvlist":
        return keyed_values(items, f"{where}.values", depth + 1, empty_keys=True)
    found = []
    for i, item in enumerate(items):
        try:
            found.append(value_of(item, depth + 1))
        except SpanProblem as problem:
            raise wire.within(f"{where}.values[{i}]", problem) from None
    return found


# Scalars


def string(value, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpanProblem(where, f"is {type_name(value)}, not a string")
    return wire.text(value, where)


def integer(value, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and DECIMAL.fullmatch(value) and len(value) <= 21:
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise SpanProblem(where, f"{short(value)} is not an integer")


def uint64(value, where: str) -> int:
    if value is None:
        return 0
    number = integer(value, where)
    if not 0 <= number <= wire.UINT64_MAX:
        raise SpanProblem(where, f"{number} is not an unsigned 64-bit integer")
    return number


def double(value, where: str) -> float | str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return wire.double(float(value))
    if isinstance(value, str):
        if value in NON_FINITE:
            return NON_FINITE[value]
        try:
            return wire.double(float(value))
        except ValueError:
            pass
    raise SpanProblem(where, f"{short(value)} is not a number")


def enum(value, names: list[str], where: str) -> int:
    """A number (unknown ones read as 0, unspecified, as protobuf keeps them) or a name."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value < len(names) else 0
    if isinstance(value, str) and value in names:
        return names.index(value)
    raise SpanProblem(where, f"{short(value)} is none of {', '.join(names)} or their numbers")


def id_bytes(value, size: int, where: str, *, optional: bool = False) -> bytes:
    """An id's bytes: hex as OTLP/JSON has it, or base64 as protobuf's JSON mapping does."""
    if value is None or value == "":
        if optional:
            return b""
        raise SpanProblem(where, "is missing")
    if not isinstance(value, str):
        raise SpanProblem(where, f"is {type_name(value)}, not a string")
    if len(value) == 2 * size and HEX.fullmatch(value):
        return bytes.fromhex(value)
    raw = from_base64(value)
    if raw is not None and len(raw) == size:
        return raw
    if HEX.fullmatch(value):
        raise SpanProblem(where, f"is {len(value)} hex digits long; it must be {2 * size}")
    raise SpanProblem(where, f"is neither {2 * size} hex digits nor the base64 of {size} bytes")


def from_base64(value: str) -> bytes | None:
    padded = value + "=" * (-len(value) % 4)
    for altchars in (None, b"-_"):
        try:
            return base64.b64decode(padded, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):  # ValueError: text that is not ASCII
            continue
    return None


# Structure


def get(item, name: str, other: str | None = None):
    if item is None:
        return None
    found = item.get(name)
    return item.get(other) if found is None and other is not None else found


def listed(value, where: str, *, problem=None) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise (problem or structure)(where, f"is {type_name(value)}, not a list")
    return value


def an_object(value, where: str, *, problem=None) -> dict | None:
    if value is not None and not isinstance(value, dict):
        raise (problem or structure)(where, f"is {type_name(value)}, not an object")
    return value


def structure(where: str, said: str) -> DecodeError:
    return DecodeError(f"not an OTLP trace export: {where} {said}")


def problem_or(read_it):
    try:
        return read_it()
    except SpanProblem as problem:
        return problem


def readable_ids(item) -> tuple[bytes | None, bytes | None]:
    """A refused span's ids, those that read."""
    ids = []
    for names, size in ((("traceId", "trace_id"), wire.TRACE_ID_BYTES), (("spanId", "span_id"), wire.SPAN_ID_BYTES)):
        try:
            ids.append(id_bytes(get(item, *names), size, "") if isinstance(item, dict) else None)
        except SpanProblem:
            ids.append(None)
    return ids[0], ids[1]


def type_name(value) -> str:
    """What a JSON value is, with its article ("an object")."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), "null")


def short(value) -> str:
    shown = json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
