"""OTLP/HTTP trace export bodies in, `Span`s and per-span refusals out; the answers' bodies back.

`decode(body, content_type=..., content_encoding=..., max_bytes=...)` reads a
request of `POST /v1/traces` as the OpenTelemetry exporters send it:
protobuf (`application/x-protobuf`, the Python exporter's default) or OTLP/JSON
(`application/json`), plain or compressed (`gzip`, `deflate`). It raises
`UnsupportedMediaType` (415), `TooLarge` (413) or `DecodeError` (400) for a
body it cannot take as a whole, and otherwise returns the spans it read and a
`Refusal` for each span it left out (OTLP's partial success: the batch is never
refused for one span). wire.py holds the limits and what a decoded span holds.

The answers: `response_body` (ExportTraceServiceResponse, with its
partial_success) and `status_body` (a google.rpc.Status, which OTLP/HTTP
requires as the body of every 4xx and 5xx), each in the request's encoding.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from sessions_app.otel import wire_json, wire_protobuf
from sessions_app.otel.spans import Span
from sessions_app.otel.wire import DecodeError, Refusal, TooLarge, UnsupportedMediaType

PROTOBUF, JSON = "protobuf", "json"
MEDIA_TYPES = {"application/x-protobuf": PROTOBUF, "application/protobuf": PROTOBUF, "application/json": JSON}
CONTENT_TYPES = {PROTOBUF: "application/x-protobuf", JSON: "application/json"}
# zlib's window bits per Content-Encoding: gzip's header, zlib's (HTTP's "deflate").
CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# A refusal's reason is cut to this in the answer's error_message, which names at most MESSAGE_REASONS of them.
REASON_CHARS, MESSAGE_REASONS = 300, 5
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Decoded:
    spans: list[Span] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


def encoding_of(content_type: str | None) -> str:
    """PROTOBUF or JSON for a Content-Type header (parameters such as charset ignored); else UnsupportedMediaType."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type not in MEDIA_TYPES:
        shown = f"Content-Type {media_type!r}" if media_type else "no Content-Type"
        raise UnsupportedMediaType(f"{shown}: send application/x-protobuf or application/json")
    return MEDIA_TYPES[media_type]


def decode(body: bytes, *, content_type: str | None, content_encoding: str | None, max_bytes: int) -> Decoded:
    encoding = encoding_of(content_type)
    plain = inflate(body, content_encoding, max_bytes=max_bytes)
    spans, refused = (wire_protobuf.read if encoding == PROTOBUF else wire_json.read)(plain)
    return Decoded(spans, refused)


def inflate(body: bytes, content_encoding: str | None, *, max_bytes: int) -> bytes:
    """The body uncompressed, never more than `max_bytes` of it: a gzip bomb stops at the limit (TooLarge)."""
    coding = (content_encoding or "").strip().lower()
    if len(body) > max_bytes:
        raise TooLarge(f"the body is {len(body)} bytes; the limit is {max_bytes}")
    if coding in ("", "identity"):
        return body
    if coding not in CODINGS:
        raise UnsupportedMediaType(f"Content-Encoding {coding!r}: send gzip, deflate or none")
    inflated, data = bytearray(), body
    while True:
        inflater = zlib.decompressobj(CODINGS[coding])
        try:
            while True:
                # At most one byte past the limit each time (max_length 0 would mean no limit: it is never 0 here).
                inflated += inflater.decompress(data, max_bytes + 1 - len(inflated))
                if len(inflated) > max_bytes:
                    raise TooLarge(f"the body inflates past the limit of {max_bytes} bytes")
                data = inflater.unconsumed_tail
                if inflater.eof or not data:
                    break
        except zlib.error as error:
            raise DecodeError(f"the body is not valid {coding} ({error})") from None
        if not inflater.eof:
            raise DecodeError(f"the {coding} body is cut short")
        data = inflater.unused_data
        if not data or coding == "deflate" or not data.strip(b"\0"):  # gzip members may follow; zero padding ends them
            return bytes(inflated)


def response_body(encoding: str, *, rejected: int, message: str) -> bytes:
    """ExportTraceServiceResponse: empty when everything was taken, else its partial_success."""
    message = printable(message)
    if encoding == PROTOBUF:
        response = ExportTraceServiceResponse()
        if rejected or message:
            response.partial_success.CopyFrom(ExportTracePartialSuccess(rejected_spans=rejected, error_message=message))
        return response.SerializeToString()
    if not (rejected or message):
        return b"{}"
    # int64 as a decimal string, as OTLP/JSON encodes it.
    return orjson.dumps({"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}})


def status_body(encoding: str, *, code: int, message: str) -> bytes:
    """A google.rpc.Status (gRPC `code`, `message`): OTLP/HTTP's body of an error answer.

    Written by hand, two fields, so that the server needs no googleapis-common-protos."""
    message = printable(message)
    if encoding == JSON:
        return orjson.dumps({"code": code, "message": message})
    text = message.encode()
    return b"\x08" + varint(code) + b"\x12" + varint(len(text)) + text


def refusals_message(refused: list, total: int) -> str:
    """error_message of a partial success: how many spans were left out, and why (the first few)."""
    if not refused:
        return ""
    reasons = [shorten(refusal.reason) for refusal in refused[:MESSAGE_REASONS]]
    more = f"; and {len(refused) - MESSAGE_REASONS} more" if len(refused) > MESSAGE_REASONS else ""
    return f"{len(refused)} of {total} spans refused: " + "; ".join(reasons) + more


def shorten(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def printable(text: str) -> str:
    """Text the answer can carry: a reason may quote invalid UTF-8 that came in (read as lone surrogates)."""
    return LONE_SURROGATE.sub("\ufffd", text)


def varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)
