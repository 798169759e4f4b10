"""sessions_app/otel/decode.py (and wire, wire_protobuf, wire_json): OTLP bodies into Spans, directly.

Bodies are made the ways exporters make them (the SDK's own protobuf and JSON
encoders, protobuf's JSON mapping) and broken the ways the issue lists. A body
that cannot be read raises DecodeError (or its TooLarge / UnsupportedMediaType);
a broken span is refused alone, naming where; nothing else ever escapes.
"""

from __future__ import annotations

import gzip
import json
import re
import tracemalloc
import zlib

import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.json.common._internal.trace_encoder import encode_spans as encode_json
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_protobuf
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanMessage
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from sessions_app.otel import decode, wire
from sessions_app.otel.decode import JSON, PROTOBUF, DecodeError, TooLarge, UnsupportedMediaType
from sessions_app.otel.spans import KIND_CLIENT, KIND_INTERNAL, KIND_SERVER, KIND_UNSPECIFIED, STATUS_ERROR

MEDIA = {PROTOBUF: "application/x-protobuf", JSON: "application/json"}
LIMIT = 1 << 20
TRACE = "5b8efff798038103d269b633813fc60c"


def read(body: bytes, encoding: str = PROTOBUF, coding: str | None = None, limit: int = LIMIT) -> decode.Decoded:
    return decode.decode(body, content_type=MEDIA[encoding], content_encoding=coding, max_bytes=limit)


def sdk_spans():
    """Spans as the SDK ends them: a root, a child with an error status and an event, every attribute type."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agent", "deployment": "test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("door.tests", "1.2")
    attributes = {"s": "text é", "i": -(2**63), "f": 1.5, "b": True, "ss": ["a", "b"], "ii": [1, 2], "ff": [0.5], "bb": [True]}
    with tracer.start_as_current_span("invoke_agent", kind=SpanKind.SERVER, attributes=attributes):
        with tracer.start_as_current_span("chat", kind=SpanKind.CLIENT) as child:
            child.add_event("gen_ai.user.message", {"content": "hi"})
            child.set_status(Status(StatusCode.ERROR, "boom"))
    return exporter.get_finished_spans()


def pb_span(number: int = 1, **fields) -> SpanMessage:
    return SpanMessage(**{"trace_id": bytes.fromhex(TRACE), "span_id": number.to_bytes(8, "big"), "name": f"span {number}", **fields})


def pb_request(*spans: SpanMessage) -> bytes:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


def json_span(number: int = 1, **fields) -> dict:
    return {"traceId": TRACE, "spanId": f"{number:016x}", "name": f"span {number}"} | fields


def json_request(*spans: dict, resource: dict | None = None) -> bytes:
    return json.dumps({"resourceSpans": [{"resource": resource or {}, "scopeSpans": [{"spans": list(spans)}]}]}).encode()


def attribute(key: str, value: dict) -> dict:
    return {"key": key, "value": value}


def wrapped(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, by hand (for what the classes refuse to build)."""
    return decode.varint(number << 3 | 2) + decode.varint(len(payload)) + payload


def names(decoded: decode.Decoded) -> list[str]:
    return [span.name for span in decoded.spans]


# Bodies as the exporters send them


def test_the_sdk_encoders_protobuf_and_json_decode_to_the_same_spans():
    spans = sdk_spans()
    from_protobuf = read(encode_protobuf(spans).SerializeToString())
    from_json = read(encode_json(spans).to_json().encode(), JSON)
    assert from_protobuf == from_json and not from_protobuf.refused
    child, root = from_protobuf.spans
    assert root.parent_span_id is None and child.parent_span_id == root.span_id and child.trace_id == root.trace_id
    assert re.fullmatch("[0-9a-f]{32}", root.trace_id) and re.fullmatch("[0-9a-f]{16}", root.span_id)
    assert (root.name, root.kind, child.kind) == ("invoke_agent", KIND_SERVER, KIND_CLIENT)
    assert root.attributes == {"s": "text é", "i": -(2**63), "f": 1.5, "b": True, "ss": ["a", "b"], "ii": [1, 2], "ff": [0.5], "bb": [True]}
    assert (child.status_code, child.status_message) == (STATUS_ERROR, "boom")
    assert [(event.name, event.attributes) for event in child.events] == [("gen_ai.user.message", {"content": "hi"})]
    assert child.events[0].time_ns >= child.start_ns > 0 and child.end_ns >= child.start_ns
    assert root.resource["service.name"] == "agent" and root.scope == "door.tests"


@pytest.mark.parametrize("snake_case", [False, True])
def test_protobufs_own_json_mapping_reads_too_base64_ids_enum_names_and_either_field_names(snake_case):
    request = encode_protobuf(sdk_spans())
    as_json = json.dumps(json_format.MessageToDict(request, preserving_proto_field_name=snake_case)).encode()
    assert b"SPAN_KIND_SERVER" in as_json and b"==" in as_json  # names, and base64 ids
    assert read(as_json, JSON) == read(request.SerializeToString())


@pytest.mark.parametrize("coding, compress", [("gzip", gzip.compress), ("deflate", zlib.compress), ("GZIP", gzip.compress)])
def test_compressed_bodies_read_as_plain_ones(coding, compress):
    body = encode_protobuf(sdk_spans()).SerializeToString()
    assert read(compress(body), coding=coding) == read(body)


def test_gzip_members_one_after_another_are_one_body():
    body = json_request(json_span(1), json_span(2))
    assert read(gzip.compress(body[:10]) + gzip.compress(body[10:]), JSON, "gzip") == read(body, JSON)


def test_content_types_with_parameters_and_the_protobuf_alias_are_read():
    body = pb_request(pb_span())
    for media_type in ("application/x-protobuf; charset=binary", "Application/Protobuf"):
        assert names(decode.decode(body, content_type=media_type, content_encoding=None, max_bytes=LIMIT)) == ["span 1"]


@pytest.mark.parametrize("content_type", [None, "", "text/plain", "application/grpc", "multipart/form-data; boundary=x"])
def test_other_content_types_are_unsupported(content_type):
    with pytest.raises(UnsupportedMediaType, match="application/x-protobuf or application/json"):
        decode.decode(b"{}", content_type=content_type, content_encoding=None, max_bytes=LIMIT)


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip, br"])
def test_other_content_encodings_are_unsupported(coding):
    with pytest.raises(UnsupportedMediaType, match="Content-Encoding"):
        read(b"", coding=coding)


# Bodies refused whole


def test_a_gzip_bomb_stops_inflating_at_the_limit():
    squeezer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join(squeezer.compress(bytes(1 << 20)) for _ in range(512)) + squeezer.flush()  # 512 MiB of zeros
    assert len(bomb) < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(TooLarge, match="inflates past the limit of 1048576 bytes"):
            read(bomb, coding="gzip")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * LIMIT  # the inflated part held never grew much past the limit


def test_a_body_over_the_limit_is_too_large_plain_or_compressed():
    body = json_request(json_span(1, name="x" * 2000))
    with pytest.raises(TooLarge, match="the limit is 1000"):
        read(body, JSON, limit=1000)
    assert len(gzip.compress(body)) < 1000
    with pytest.raises(TooLarge, match="inflates past the limit"):
        read(gzip.compress(body), JSON, "gzip", limit=1000)
    assert names(read(body, JSON, limit=len(body))) == ["x" * 2000]


# mtime=0: gzip stamps the current time into its header, which is part of the test's id (pytest-xdist's workers must collect the same ids).
@pytest.mark.parametrize("coding, body", [("gzip", gzip.compress(b"{}", mtime=0)[:-5]), ("gzip", b"{}"), ("deflate", zlib.compress(b"{}")[:-2])])
def test_broken_or_cut_compression_is_a_decode_error(coding, body):
    with pytest.raises(DecodeError, match=coding):
        read(body, JSON, coding)


def test_more_spans_than_the_limit_are_too_large(monkeypatch):
    monkeypatch.setattr(wire, "MAX_SPANS", 3)
    spans = [pb_span(n) for n in range(1, 5)]
    with pytest.raises(TooLarge, match="holds 4 spans; at most 3"):
        read(pb_request(*spans))
    with pytest.raises(TooLarge, match="holds 4 spans; at most 3"):
        read(json_request(*[json_span(n) for n in range(1, 5)]), JSON)
    with pytest.raises(TooLarge):  # also when the request had to be read span by span
        read(pb_request(*spans, pb_span(5, name="x")).replace(b"x", b"\xff"))
    assert len(read(pb_request(*spans[:3])).spans) == 3


@pytest.mark.parametrize(
    "body, said",
    [
        (b"", "not JSON"),
        (b"[1, 2]", "the body is a list of JSON, not an object"),
        (b'{"events": []}', "no resourceSpans (it has events)"),
        (b'{"resourceSpans": {}}', "resourceSpans is an object, not a list"),
        (b'{"resourceSpans": [[]]}', "resourceSpans[0] is a list, not an object"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": "x"}]}]}', "resourceSpans[0].scopeSpans[0].spans is a string"),
        (b'{"resourceSpans": [], "x": NaN}', "not JSON"),
        (b"\xef\xbb\xbf{}", "not JSON"),
        (b"[" * 100_000, "not JSON"),
    ],
)
def test_json_that_is_not_an_otlp_export_is_refused_whole(body, said):
    with pytest.raises(DecodeError, match=re.escape(said)):
        read(body, JSON)


@pytest.mark.parametrize("body", [b"hello, not protobuf at all", b'{"resourceSpans": []}', b"\x0a\xff\xff", b"\x08\x01", b"\xff" * 12])
def test_protobuf_that_is_not_an_otlp_export_is_refused_whole(body):
    with pytest.raises(DecodeError):
        read(body)


def test_empty_exports_are_empty():
    assert read(b"") == decode.Decoded() == read(b"{}", JSON) == read(b'{"resourceSpans": []}', JSON)


def test_a_cut_protobuf_body_is_refused_or_is_the_whole_resource_spans_before_the_cut():
    request = ExportTraceServiceRequest.FromString(pb_request(pb_span(1), pb_span(2)))
    request.resource_spans.add().scope_spans.add().spans.append(pb_span(3))
    body = request.SerializeToString()
    outcomes = set()
    for end in range(len(body)):
        try:
            outcomes.add(tuple(names(read(body[:end]))))
        except DecodeError as error:
            assert "cut short" in error.reason or "not" in error.reason
            outcomes.add("refused")
    assert outcomes == {(), ("span 1", "span 2"), "refused"}


# Spans refused alone


def test_ids_of_the_wrong_length_refuse_their_span_only():
    body = pb_request(pb_span(1), SpanMessage(trace_id=b"\x01" * 15, span_id=b"\x02" * 8), pb_span(3, parent_span_id=b"\x01" * 4),
                      SpanMessage(trace_id=b"\x01" * 16), SpanMessage(trace_id=bytes(16), span_id=b"\x02" * 8))  # fmt: skip
    decoded = read(body)
    assert names(decoded) == ["span 1"]
    reasons = [refusal.reason for refusal in decoded.refused]
    assert reasons == [
        "resourceSpans[0].scopeSpans[0].spans[1].traceId: is 15 bytes long; it must be 16",
        "resourceSpans[0].scopeSpans[0].spans[2].parentSpanId: is 4 bytes long; it must be 8 or empty",
        "resourceSpans[0].scopeSpans[0].spans[3].spanId: is 0 bytes long; it must be 8",
        "resourceSpans[0].scopeSpans[0].spans[4].traceId: is all zeros, which is not a valid id",
    ]
    assert [(r.trace_id, r.span_id) for r in decoded.refused][:2] == [("", "0202020202020202"), (TRACE, f"{3:016x}")]


@pytest.mark.parametrize(
    "fields, said",
    [
        ({"traceId": TRACE[:-2]}, "traceId: is 30 hex digits long; it must be 32"),
        ({"spanId": ""}, "spanId: is missing"),
        ({"spanId": "zz" * 8}, "spanId: is neither 16 hex digits nor the base64 of 8 bytes"),
        ({"spanId": 12}, "spanId: is a number, not a string"),
        ({"parentSpanId": "abc"}, "parentSpanId: is 3 hex digits long; it must be 16"),
        ({"parentSpanId": "not an id"}, "parentSpanId: is neither 16 hex digits nor the base64 of 8 bytes"),
        ({"kind": "SPAN_KIND_SIDEWAYS"}, "kind: \"SPAN_KIND_SIDEWAYS\" is none of"),
        ({"startTimeUnixNano": "-1"}, "startTimeUnixNano: -1 is not an unsigned 64-bit integer"),
        ({"endTimeUnixNano": "soon"}, "endTimeUnixNano: \"soon\" is not an integer"),
        ({"name": ["x"]}, "name: is a list, not a string"),
        ({"status": {"message": 3}}, "status.message: is a number, not a string"),
        ({"events": [{"name": "e", "attributes": [attribute("k", {"intValue": "1.5"})]}]}, 'events[0].attributes["k"].value.intValue: "1.5" is not an integer'),
        ({"events": {}}, "events: is an object, not a list"),
    ],
)
def test_a_json_span_with_a_bad_field_is_refused_alone_naming_it(fields, said):
    decoded = read(json_request(json_span(1), json_span(2, **fields)), JSON)
    assert names(decoded) == ["span 1"] and len(decoded.refused) == 1
    assert decoded.refused[0].reason.startswith(f"resourceSpans[0].scopeSpans[0].spans[1].{said}")


@pytest.mark.parametrize(
    "value, said",
    [
        ({"intValue": "12a"}, '["k"].value.intValue: "12a" is not an integer'),
        ({"intValue": str(2**63)}, f'["k"].value.intValue: {2**63} does not fit a 64-bit integer'),
        ({"intValue": True}, '["k"].value.intValue: True is not an integer'),
        ({"boolValue": "true"}, '["k"].value.boolValue: is a string, not true or false'),
        ({"stringValue": 5}, '["k"].value.stringValue: is a number, not a string'),
        ({"doubleValue": "fast"}, '["k"].value.doubleValue: "fast" is not a number'),
        ({"bytesValue": "not base64!"}, '["k"].value.bytesValue: is not base64 text'),
        ({"stringValue": "a", "intValue": 1}, '["k"].value: holds stringValue and intValue; an AnyValue holds one'),
        ({"arrayValue": {"values": [{"intValue": "x"}]}}, '["k"].value.arrayValue.values[0].value.intValue: "x" is not an integer'),
        ({"kvlistValue": {"values": [attribute("inner", {"boolValue": 1})]}}, '["k"].value.kvlistValue.values["inner"].value.boolValue'),
        ({"arrayValue": []}, '["k"].value.arrayValue: is a list, not an object'),
        ("text", '["k"].value: is a string, not an AnyValue object'),
    ],
)
def test_an_attribute_of_the_wrong_type_refuses_its_span_naming_the_attribute(value, said):
    decoded = read(json_request(json_span(1, attributes=[attribute("k", value)]), json_span(2)), JSON)
    assert names(decoded) == ["span 2"]
    assert decoded.refused[0].reason.startswith("resourceSpans[0].scopeSpans[0].spans[0].attributes" + said)
    assert (decoded.refused[0].trace_id, decoded.refused[0].span_id) == (TRACE, f"{1:016x}")


@pytest.mark.parametrize("attributes, said", [("x", "attributes: is a string, not a list"), ([{"value": {}}], "attributes[0].key: is empty"),
                                              ([attribute("", {"intValue": 1})], "attributes[0].key: is empty"), (["k"], "attributes[0]: is a string")])  # fmt: skip
def test_attributes_that_are_not_key_values_refuse_their_span(attributes, said):
    decoded = read(json_request(json_span(1, attributes=attributes)), JSON)
    assert decoded.spans == [] and decoded.refused[0].reason.startswith(f"resourceSpans[0].scopeSpans[0].spans[0].{said}")


def test_a_protobuf_attribute_that_is_not_an_any_value_refuses_its_span_naming_it():
    cut_bool = b"\x10\xff"  # AnyValue.bool_value (field 2, a varint) whose varint never ends
    span = pb_span(2).SerializeToString() + wrapped(9, wrapped(1, b"bad") + wrapped(2, cut_bool))  # field 9: attributes
    body = pb_request(pb_span(1)) + wrapped(1, wrapped(2, wrapped(2, span)))
    decoded = read(body)
    assert names(decoded) == ["span 1"]
    assert decoded.refused[0].reason.startswith('resourceSpans[1].scopeSpans[0].spans[0].attributes["bad"]: is not valid protobuf')
    assert (decoded.refused[0].trace_id, decoded.refused[0].span_id) == (TRACE, f"{2:016x}")


def test_a_protobuf_attribute_of_another_wire_type_is_an_unknown_field_as_protobuf_has_it():
    span = pb_span(1).SerializeToString() + wrapped(9, wrapped(1, b"k") + b"\x10\x05")  # the AnyValue (field 2) sent as a varint
    assert read(pb_request() + wrapped(1, wrapped(2, wrapped(2, span)))).spans[0].attributes == {"k": None}


def test_ten_thousand_attributes_refuse_their_span_and_the_limit_itself_is_taken():
    many = [KeyValue(key=f"k{n}", value=AnyValue(int_value=n)) for n in range(10_000)]
    decoded = read(pb_request(pb_span(1, attributes=many), pb_span(2, attributes=many[: wire.MAX_ATTRIBUTES])))
    assert names(decoded) == ["span 2"] and len(decoded.spans[0].attributes) == wire.MAX_ATTRIBUTES
    assert decoded.refused[0].reason == "resourceSpans[0].scopeSpans[0].spans[0].attributes: 10000 attributes; at most 4096 are taken"
    as_json = [attribute(f"k{n}", {"intValue": n}) for n in range(10_000)]
    assert read(json_request(json_span(1, attributes=as_json)), JSON).refused[0].reason.endswith("10000 attributes; at most 4096 are taken")


def test_too_many_events_refuse_their_span():
    events = [SpanMessage.Event(name="e")] * (wire.MAX_EVENTS + 1)
    assert read(pb_request(pb_span(1, events=events))).refused[0].reason.endswith(f"events: {wire.MAX_EVENTS + 1} events; at most {wire.MAX_EVENTS} are taken")


def nested_protobuf(depth: int) -> bytes:
    """An AnyValue `depth` arrays deep, by hand (the classes refuse to build past protobuf's own limit)."""
    value = AnyValue(string_value="bottom").SerializeToString()
    for _ in range(depth):
        value = wrapped(5, wrapped(1, value))  # AnyValue.array_value { values: value }
    return value


def nested_json(depth: int) -> dict:
    value = {"stringValue": "bottom"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


@pytest.mark.parametrize("depth", [wire.MAX_VALUE_DEPTH + 1, 99, 150, 5000])
def test_deep_any_value_nesting_refuses_its_span(depth):
    deep = pb_span(2).SerializeToString() + wrapped(9, wrapped(1, b"deep") + wrapped(2, nested_protobuf(depth)))
    decoded = read(pb_request(pb_span(1)) + wrapped(1, wrapped(2, wrapped(2, deep))))
    assert names(decoded) == ["span 1"] and len(decoded.refused) == 1
    assert decoded.refused[0].reason in (
        f'resourceSpans[1].scopeSpans[0].spans[0].attributes["deep"]: nests arrays and kvlists deeper than {wire.MAX_VALUE_DEPTH} levels',
        'resourceSpans[1].scopeSpans[0].spans[0].attributes["deep"]: nests deeper than the protobuf parser reads',
    )


def test_json_nesting_past_the_limit_refuses_its_span_and_past_the_reader_the_body():
    fine, deep = nested_json(wire.MAX_VALUE_DEPTH), nested_json(wire.MAX_VALUE_DEPTH + 1)
    decoded = read(json_request(json_span(1, attributes=[attribute("fine", fine)]), json_span(2, attributes=[attribute("deep", deep)])), JSON)
    assert names(decoded) == ["span 1"]
    said = f'attributes["deep"]: nests arrays and kvlists deeper than {wire.MAX_VALUE_DEPTH} levels'
    assert decoded.refused[0].reason == f"resourceSpans[0].scopeSpans[0].spans[1].{said}"
    in_a_kvlist = {"kvlistValue": {"values": [attribute("inner", deep)]}}
    assert read(json_request(json_span(1, attributes=[attribute("deep", in_a_kvlist)])), JSON).refused[0].reason.endswith(said)
    deepest = '{"arrayValue": {"values": [' * 5000 + '{"stringValue": "bottom"}' + "]}}" * 5000
    body = json_request(json_span(1, attributes=[attribute("deep", "DEEP")])).replace(b'"DEEP"', deepest.encode())
    with pytest.raises(DecodeError, match="not JSON"):  # thousands of levels: no JSON reader goes there
        read(body, JSON)


@pytest.mark.parametrize("where, span", [("name", pb_span(2, name="bad \x01")), ("status", pb_span(2, status={"message": "bad \x01"})),
                                         ('attributes["k"]', pb_span(2, attributes=[KeyValue(key="k", value=AnyValue(string_value="bad \x01"))])),
                                         ('attributes["bad', pb_span(2, attributes=[KeyValue(key="bad \x01", value=AnyValue(int_value=1))])),
                                         ("events[0]", pb_span(2, events=[SpanMessage.Event(name="bad \x01")]))])  # fmt: skip
def test_invalid_utf8_in_a_protobuf_string_refuses_its_span_naming_where(where, span):
    body = pb_request(pb_span(1), span).replace(b"bad \x01", b"bad \xff")
    decoded = read(body)
    assert names(decoded) == ["span 1"]
    reason = decoded.refused[0].reason
    assert reason.startswith(f"resourceSpans[0].scopeSpans[0].spans[1].{where}") and "UTF-8" in reason


@pytest.mark.parametrize("bad", [b"\xff", b"\xed\xa0\x80", b"\\ud800", b"\\u0000", b"\\udfff tail"])
def test_invalid_utf8_lone_surrogates_and_nul_in_json_refuse_their_span_only(bad):
    body = json_request(json_span(1), json_span(2, attributes=[attribute("k", {"stringValue": "BAD"})])).replace(b"BAD", bad)
    decoded = read(body, JSON)
    assert names(decoded) == ["span 1"]
    reason = decoded.refused[0].reason
    assert reason.startswith('resourceSpans[0].scopeSpans[0].spans[1].attributes["k"].value.stringValue: ')
    assert ("NUL" in reason) if bad == b"\\u0000" else ("not valid UTF-8" in reason)


def test_a_bad_resource_refuses_every_span_under_it_and_only_those():
    resource = {"attributes": [attribute("service.name", {"stringValue": "\x00"})]}
    good = json.loads(json_request(json_span(3)))["resourceSpans"][0]
    body = json.loads(json_request(json_span(1), json_span(2), resource=resource))
    body["resourceSpans"].append(good)
    decoded = read(json.dumps(body).encode(), JSON)
    assert names(decoded) == ["span 3"]
    assert [r.reason for r in decoded.refused] == ['resourceSpans[0].resource.attributes["service.name"].value.stringValue: holds U+0000 (NUL), which cannot be stored'] * 2
    assert [r.span_id for r in decoded.refused] == [f"{1:016x}", f"{2:016x}"]


def test_non_finite_doubles_read_as_their_names_and_unknown_enum_numbers_as_unspecified():
    values = [KeyValue(key=k, value=AnyValue(double_value=float(k))) for k in ("nan", "inf", "-inf")]
    span = read(pb_request(pb_span(1, attributes=values, kind=9))).spans[0]
    assert span.attributes == {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"} and span.kind == KIND_UNSPECIFIED
    as_json = [attribute(k, {"doubleValue": v}) for k, v in (("nan", "NaN"), ("inf", "Infinity"), ("n", "2.5"), ("i", 3))]
    span = read(json_request(json_span(1, attributes=as_json, kind="SPAN_KIND_INTERNAL")), JSON).spans[0]
    assert span.attributes == {"nan": "NaN", "inf": "Infinity", "n": 2.5, "i": 3.0} and span.kind == KIND_INTERNAL


def test_an_all_zero_parent_is_a_root_and_unknown_json_fields_are_ignored():
    span = read(json_request(json_span(1, parentSpanId="0" * 16, futureField={"x": 1}, attributes=[attribute("k", {"futureValue": 1})])), JSON).spans[0]
    assert span.parent_span_id is None and span.attributes == {"k": None}


# Answers


def test_the_answers_read_back_with_the_official_classes():
    partial = decode.response_body(PROTOBUF, rejected=2, message="2 of 5 spans refused: \udcff")
    response = ExportTraceServiceResponse.FromString(partial)
    assert (response.partial_success.rejected_spans, response.partial_success.error_message) == (2, "2 of 5 spans refused: \ufffd")
    assert not ExportTraceServiceResponse.FromString(decode.response_body(PROTOBUF, rejected=0, message="")).HasField("partial_success")
    parsed = json_format.Parse(decode.response_body(JSON, rejected=2, message="why"), ExportTraceServiceResponse())
    assert (parsed.partial_success.rejected_spans, parsed.partial_success.error_message) == (2, "why")
    assert decode.response_body(JSON, rejected=0, message="") == b"{}"
    status = status_pb2.Status.FromString(decode.status_body(PROTOBUF, code=16, message="é" * 200))
    assert (status.code, status.message) == (16, "é" * 200)
    assert json_format.Parse(decode.status_body(JSON, code=3, message="no"), status_pb2.Status()).message == "no"


def test_the_partial_success_message_names_the_first_reasons_and_counts_the_rest():
    refused = [wire.Refusal("", "", f"reason {n} " + "x" * 400) for n in range(8)]
    message = decode.refusals_message(refused, 10)
    assert message.startswith("8 of 10 spans refused: reason 0 ") and message.endswith("; and 3 more")
    assert "reason 4" in message and "reason 5" not in message and len(message) < 6 * decode.REASON_CHARS
    assert decode.refusals_message([], 3) == ""


# Properties: nothing but DecodeError escapes, and what is decoded is storable


def assert_storable(decoded: decode.Decoded) -> None:
    def check(value, depth=0):
        assert depth <= wire.MAX_VALUE_DEPTH + 1
        if isinstance(value, str):
            assert not re.search("[\x00\ud800-\udfff]", value)
        elif isinstance(value, float):
            assert value == value and abs(value) != float("inf")
        elif isinstance(value, bool) or value is None or isinstance(value, bytes):
            pass
        elif isinstance(value, int):
            assert wire.INT64_MIN <= value <= wire.UINT64_MAX
        elif isinstance(value, list):
            [check(item, depth + 1) for item in value]
        else:
            assert isinstance(value, dict) and len(value) <= wire.MAX_ATTRIBUTES
            [check(key) or check(item, depth + 1) for key, item in value.items()]

    for span in decoded.spans:
        assert re.fullmatch("[0-9a-f]{32}", span.trace_id) and re.fullmatch("[0-9a-f]{16}", span.span_id)
        assert span.parent_span_id is None or re.fullmatch("[0-9a-f]{16}", span.parent_span_id)
        check([span.name, span.status_message, span.scope, span.attributes, span.resource, span.start_ns, span.end_ns])
        check([[event.name, event.attributes, event.time_ns] for event in span.events])
    for refusal in decoded.refused:
        assert refusal.reason and (refusal.trace_id == "" or re.fullmatch("[0-9a-f]{32}", refusal.trace_id))


def decoded_or_refused(body: bytes, encoding: str, coding: str | None = None) -> None:
    try:
        assert_storable(read(body, encoding, coding))
    except DecodeError as error:
        assert error.reason


@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=400), encoding=st.sampled_from([PROTOBUF, JSON]), coding=st.sampled_from([None, "gzip", "deflate"]))
def test_arbitrary_bytes_raise_nothing_but_decode_errors(body, encoding, coding):
    decoded_or_refused(body, encoding, coding)


VALID = {PROTOBUF: encode_protobuf(sdk_spans()).SerializeToString(), JSON: encode_json(sdk_spans()).to_json().encode()}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(encoding=st.sampled_from([PROTOBUF, JSON]), edits=st.lists(st.tuples(st.integers(0, 10_000), st.binary(max_size=3), st.integers(0, 3)), min_size=1, max_size=4))
def test_valid_bodies_with_bytes_changed_raise_nothing_but_decode_errors(encoding, edits):
    body = bytearray(VALID[encoding])
    for at, new, cut in edits:
        at %= len(body) + 1
        body[at : at + cut] = new
    decoded_or_refused(bytes(body), encoding)


scalars = st.one_of(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))), st.booleans(),
                    st.integers(wire.INT64_MIN, wire.INT64_MAX), st.floats(allow_nan=False, allow_infinity=False), st.binary(max_size=8))  # fmt: skip
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5).filter(lambda k: "\x00" not in k), inner, max_size=3), max_leaves=12)


def any_value(value) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, list):
        found = AnyValue()
        found.array_value.values.extend(any_value(item) for item in value)
        return found
    found = AnyValue()
    found.kvlist_value.values.extend(KeyValue(key=k, value=any_value(v)) for k, v in value.items())
    return found


@settings(max_examples=200, deadline=None)
@given(attributes=st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: "\x00" not in k), values, max_size=5))
def test_any_attribute_value_reads_back_the_same_from_protobuf_and_from_json(attributes):
    request = pb_request(pb_span(1, attributes=[KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]))
    from_protobuf = read(request)
    from_json = read(json.dumps(json_format.MessageToDict(ExportTraceServiceRequest.FromString(request))).encode(), JSON)
    assert from_protobuf == from_json and not from_protobuf.refused
    assert from_protobuf.spans[0].attributes == attributes
