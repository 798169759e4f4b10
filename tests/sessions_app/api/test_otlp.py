"""sessions_app/api/otlp.py: `POST /otlp/v1/traces` through the whole Django stack (CSRF enforced,
as a browser would have it), and through a live Daphne with the OpenTelemetry SDK's own exporters.

Every bad input of the issue answers a 4xx or a partial success, stores nothing it refused (the
database is asserted), and never a 5xx; a database outage answers 503 with Retry-After, which
exporters retry.
"""

from __future__ import annotations

import gzip
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import OperationalError, connection
from django.test import Client
from google.rpc import status_pb2
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
from opentelemetry.trace import SpanKind
from prometheus_client import REGISTRY

from sessions_app import services
from sessions_app.api import otlp_closer
from sessions_app.models import ApiToken, AuditEntry, Event, Project, Role, Session
from tests.access import member, token_for
from tests.sessions_app.otel.test_decode import nested_json, nested_protobuf, wrapped

pytestmark = pytest.mark.django_db
URL = "/otlp/v1/traces"
PROTOBUF, JSON = "application/x-protobuf", "application/json"
REFUSED_TRACE = "0af7651916cd43dd8448eb211c80319c"


def run_spans(conversation: str = "c-door", agent: str = "support"):
    """An agent run as the SDK ends it, in GenAI semantic conventions: invoke_agent around a chat."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": agent}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("door.tests")
    ids = {"gen_ai.conversation.id": conversation}
    with tracer.start_as_current_span(f"invoke_agent {agent}", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, **ids}):
        chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "test-model", "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 3,
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Hello."}]}])}  # fmt: skip
        with tracer.start_as_current_span("chat test-model", kind=SpanKind.CLIENT, attributes={**chat, **ids}):
            pass
    return exporter.get_finished_spans()


def as_protobuf(spans) -> bytes:
    return encode_protobuf(spans).SerializeToString()


def as_json(spans) -> bytes:
    return encode_json(spans).to_json().encode()


@pytest.fixture
def secret(agent_user):
    return token_for(agent_user)


@pytest.fixture
def scheduled(monkeypatch):
    calls = []
    monkeypatch.setattr(otlp_closer, "schedule", lambda session_id, after: calls.append((session_id, after)))
    return calls


def post(body: bytes, content_type: str | None = PROTOBUF, secret: str | None = None, client: Client | None = None, **headers):
    headers = {**({"Authorization": f"Bearer {secret}"} if secret else {}), **headers}
    client = client or Client(enforce_csrf_checks=True)  # CSRF checked as for a browser: it must not apply here
    extra = {"content_type": content_type} if content_type is not None else {"CONTENT_TYPE": ""}
    return client.generic("POST", URL, body, headers=headers, **extra)


def partial_success(response) -> tuple[int, str]:
    """(rejected spans, error message) of a 200, read with the official classes in the answer's encoding."""
    assert response.status_code == 200, response.content
    if response["Content-Type"] == PROTOBUF:
        answer = ExportTraceServiceResponse.FromString(response.content)
    else:
        from google.protobuf import json_format

        assert response["Content-Type"] == JSON
        answer = json_format.Parse(response.content, ExportTraceServiceResponse())
    return answer.partial_success.rejected_spans, answer.partial_success.error_message


def refusal(response, status: int, content_type: str = JSON) -> str:
    """An error answer: its status, and a google.rpc.Status in the expected encoding; its message."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == content_type
    if content_type == PROTOBUF:
        answer = status_pb2.Status.FromString(response.content)
        return answer.message
    body = json.loads(response.content)
    assert set(body) == {"code", "message"} and body["message"]
    return body["message"]


def stored(session_id: str) -> list[str]:
    return list(Event.objects.filter(session_id=session_id).order_by("seq").values_list("type", flat=True))


# Exports that are taken


@pytest.mark.parametrize("encode, content_type", [(as_protobuf, PROTOBUF), (as_json, JSON)], ids=["protobuf", "json"])
def test_an_export_is_stored_and_answered_in_its_encoding(secret, scheduled, settings, encode, content_type):
    response = post(encode(run_spans()), content_type, secret)
    assert partial_success(response) == (0, "") and response["Content-Type"] == content_type
    assert response.content == (b"" if content_type == PROTOBUF else b"{}")
    session = Session.objects.get(pk="c-door")
    assert session.project == Project.default() and session.agent_name == "support"
    assert stored("c-door")[:2] == ["turn_start", "step_start"] and "assistant_message" in stored("c-door")
    assert scheduled == [("c-door", settings.TURNLOG_OTLP_SETTLE_SECONDS)]  # its root arrived: the otlp_closer is told
    assert ApiToken.objects.get().last_used_at is not None


def test_a_gzip_body_the_same_batch_twice_and_a_content_type_with_parameters(secret, scheduled):
    body = gzip.compress(as_protobuf(run_spans()))
    assert partial_success(post(body, f"{PROTOBUF}; charset=binary", secret, **{"Content-Encoding": "gzip"})) == (0, "")
    count = Event.objects.count()
    assert count > 0
    assert partial_success(post(body, PROTOBUF, secret, **{"Content-Encoding": "gzip"})) == (0, "")
    assert Event.objects.count() == count  # an exporter's retry stores nothing new


def raw_span(trace_id: str, span_id: str, parent: str | None, name: str, attributes: dict, start: int = 1, end: int = 2) -> SpanMessage:
    span = SpanMessage(trace_id=bytes.fromhex(trace_id), span_id=bytes.fromhex(span_id), name=name,
                       start_time_unix_nano=start, end_time_unix_nano=end)
    if parent is not None:
        span.parent_span_id = bytes.fromhex(parent)
    for key, value in attributes.items():
        span.attributes.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    return span


def request_of(*spans: SpanMessage) -> bytes:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


TOOL_SPAN = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund", "gen_ai.tool.call.id": "c1",
             "gen_ai.tool.call.result": "done"}
AGENT_SPAN = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}
TRACE, ROOT_ID, TOOL_ID = "ab" * 16, "00000000000000a1", "00000000000000b1"


def test_a_span_repeating_its_ids_with_other_content_is_refused_in_the_partial_success(secret, scheduled):
    first = raw_span(TRACE, TOOL_ID, ROOT_ID, "execute_tool refund", {**TOOL_SPAN, "gen_ai.conversation.id": "c-door"})
    assert partial_success(post(request_of(first), PROTOBUF, secret)) == (0, "")
    assert partial_success(post(request_of(first), PROTOBUF, secret)) == (0, "")  # an exporter's retry
    other = raw_span(TRACE, TOOL_ID, ROOT_ID, "execute_tool refund", {**TOOL_SPAN, "gen_ai.conversation.id": "c-door", "gen_ai.tool.call.result": "not done"})
    rejected, message = partial_success(post(request_of(other), PROTOBUF, secret))
    assert rejected == 1 and f"span {TOOL_ID} of trace {TRACE}" in message and "other content" in message
    assert [e.data["content"] for e in Event.objects.filter(type="tool_result")] == ["done"]


def test_the_same_span_under_another_conversation_is_one_span_in_its_first_session(secret, scheduled):
    root = raw_span(TRACE, ROOT_ID, None, "invoke_agent support", {**AGENT_SPAN, "gen_ai.conversation.id": "c-first"})
    assert partial_success(post(request_of(root), PROTOBUF, secret)) == (0, "")
    again = raw_span(TRACE, ROOT_ID, None, "invoke_agent support", {**AGENT_SPAN, "gen_ai.conversation.id": "c-second"})
    rejected, message = partial_success(post(request_of(again), PROTOBUF, secret))
    assert rejected == 1 and "other content" in message
    assert list(Session.objects.values_list("pk", flat=True)) == ["c-first"]
    assert Event.objects.filter(type="turn_start").count() == 1


@pytest.mark.parametrize("loop", ["self", "cycle"])
def test_a_root_whose_parent_chain_loops_closes_its_run(secret, monkeypatch, loop):
    monkeypatch.setattr(otlp_closer, "schedule", lambda session_id, after: None)
    ids = {"gen_ai.conversation.id": "c-loop"}
    tool = raw_span(TRACE, TOOL_ID, ROOT_ID, "execute_tool refund", {**TOOL_SPAN, **ids}, 10, 20)
    if loop == "self":
        spans = [tool, raw_span(TRACE, ROOT_ID, ROOT_ID, "invoke_agent support", {**AGENT_SPAN, **ids}, 1, 30)]
    else:
        spans = [tool, raw_span(TRACE, ROOT_ID, "00000000000000c1", "invoke_agent support", {**AGENT_SPAN, **ids}, 1, 30),
                 raw_span(TRACE, "00000000000000c1", ROOT_ID, "wrapper", {}, 1, 31)]
    for span in spans:  # one request each: the loop closes across requests
        assert partial_success(post(request_of(span), PROTOBUF, secret)) == (0, "")
    from datetime import timedelta

    from django.utils import timezone

    services.close_settled_turns(session_ids=["c-loop"], now=timezone.now() + timedelta(hours=1))
    assert stored("c-loop")[-1] == "turn_end"


def test_spans_held_for_their_conversation_have_the_closer_write_them_when_none_comes(secret, scheduled, settings):
    tool = raw_span(TRACE, TOOL_ID, ROOT_ID, "execute_tool refund", TOOL_SPAN)
    assert partial_success(post(request_of(tool), PROTOBUF, secret)) == (0, "")
    assert not Session.objects.exists()
    assert scheduled == [(otlp_closer.HELD_SPANS, settings.TURNLOG_OTLP_SETTLE_SECONDS)]


def test_a_body_over_djangos_own_request_limit_is_read_under_the_endpoints(secret, scheduled, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100  # the API's JSON limit is not this endpoint's
    assert partial_success(post(as_json(run_spans()), JSON, secret)) == (0, "")
    assert stored("c-door")


# Every bad input of the issue: a 4xx or a partial success, nothing refused stored, never a 5xx


def refused_span(**fields) -> SpanMessage:
    """A chat span of conversation c-refused, in a trace of its own."""
    attributes = [KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")),
                  KeyValue(key="gen_ai.conversation.id", value=AnyValue(string_value="c-refused"))]  # fmt: skip
    return SpanMessage(**{"trace_id": bytes.fromhex(REFUSED_TRACE), "span_id": b"\x07" * 8, "name": "chat m", "attributes": attributes, **fields})


def with_protobuf_span(span: bytes) -> bytes:
    """A good run (conversation c-door) and, in a resourceSpans of its own, the span given as bytes."""
    return as_protobuf(run_spans()) + wrapped(1, wrapped(2, wrapped(2, span)))


def with_json_span(span: dict, *, marker: bytes = b"", replacement: bytes = b"") -> bytes:
    body = json.loads(as_json(run_spans()))
    body["resourceSpans"].append({"scopeSpans": [{"spans": [span]}]})
    return json.dumps(body).encode().replace(marker, replacement) if marker else json.dumps(body).encode()


def json_refused_span(*attributes: dict, **fields) -> dict:
    base = [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}, {"key": "gen_ai.conversation.id", "value": {"stringValue": "c-refused"}}]
    return {"traceId": REFUSED_TRACE, "spanId": "07" * 8, "name": "chat m", "attributes": base + list(attributes), **fields}


many = [KeyValue(key=f"k{n}", value=AnyValue(int_value=n)) for n in range(10_000)]
PARTIAL = {
    "protobuf, an attribute that is not an AnyValue": (PROTOBUF, with_protobuf_span(refused_span().SerializeToString() + wrapped(9, wrapped(1, b"bad") + wrapped(2, b"\x10\xff")))),
    "json, attributes of the wrong types": (JSON, with_json_span(json_refused_span({"key": "n", "value": {"intValue": "12a"}}))),
    "json, a boolean that is a string": (JSON, with_json_span(json_refused_span({"key": "b", "value": {"boolValue": "yes"}}))),
    "protobuf, a trace id of 15 bytes": (PROTOBUF, with_protobuf_span(refused_span(trace_id=b"\x0a" * 15).SerializeToString())),
    "protobuf, a span id of 9 bytes": (PROTOBUF, with_protobuf_span(refused_span(span_id=b"\x07" * 9).SerializeToString())),
    "json, a trace id of 30 hex digits": (JSON, with_json_span(json_refused_span(traceId=REFUSED_TRACE[:30]))),
    "json, no span id": (JSON, with_json_span(json_refused_span(spanId=""))),
    "protobuf, 10,000 attributes": (PROTOBUF, with_protobuf_span(refused_span(attributes=[*refused_span().attributes, *many]).SerializeToString())),
    "json, 10,000 attributes": (JSON, with_json_span(json_refused_span(*[{"key": f"k{n}", "value": {"intValue": n}} for n in range(10_000)]))),
    "protobuf, AnyValue nested 40 deep": (PROTOBUF, with_protobuf_span(refused_span().SerializeToString() + wrapped(9, wrapped(1, b"deep") + wrapped(2, nested_protobuf(40))))),
    "protobuf, AnyValue nested past protobuf's limit": (PROTOBUF, with_protobuf_span(refused_span().SerializeToString() + wrapped(9, wrapped(1, b"deep") + wrapped(2, nested_protobuf(500))))),
    "json, AnyValue nested 40 deep": (JSON, with_json_span(json_refused_span({"key": "deep", "value": nested_json(40)}))),
    "protobuf, invalid UTF-8 in a name": (PROTOBUF, with_protobuf_span(refused_span(name="chat \x01").SerializeToString().replace(b"chat \x01", b"chat \xff"))),
    "protobuf, invalid UTF-8 in an attribute": (PROTOBUF, with_protobuf_span(refused_span(attributes=[*refused_span().attributes, KeyValue(key="x", value=AnyValue(string_value="BAD"))]).SerializeToString().replace(b"BAD", b"\xc3\x28\xa0"))),
    "json, invalid UTF-8 in an attribute": (JSON, with_json_span(json_refused_span({"key": "x", "value": {"stringValue": "BAD"}}), marker=b"BAD", replacement=b"\xff\xfe")),
    "json, a lone surrogate": (JSON, with_json_span(json_refused_span({"key": "x", "value": {"stringValue": "BAD"}}), marker=b"BAD", replacement=b"\\ud800")),
    "json, NUL": (JSON, with_json_span(json_refused_span(name="chat \x00"))),
}  # fmt: skip


@pytest.mark.parametrize("content_type, body", PARTIAL.values(), ids=PARTIAL.keys())
def test_a_broken_span_is_refused_alone_the_rest_stored(secret, scheduled, content_type, body):
    rejected, message = partial_success(post(body, content_type, secret))
    assert rejected == 1 and message.startswith("1 of 3 spans refused: resourceSpans[1].scopeSpans[0].spans[0]")
    assert stored("c-door") and not Session.objects.filter(pk="c-refused").exists()
    assert not Event.objects.exclude(session_id="c-door").exists()


WHOLE = {
    "protobuf cut short": (PROTOBUF, None, as_protobuf(run_spans())[:-7], 400),
    "protobuf of something else": (PROTOBUF, None, b"\x0a\x02\x08", 400),
    "json that is not OTLP": (JSON, None, b'{"events": [{"type": "user_message"}]}', 400),
    "not json at all": (JSON, None, b"<html>", 400),
    "json deeper than any reader goes": (JSON, None, with_json_span(json_refused_span({"key": "deep", "value": "DEEP"}), marker=b'"DEEP"',
                                                                    replacement=b'{"arrayValue": {"values": [' * 3000 + b"{}" + b"]}}" * 3000), 400),  # fmt: skip
    "gzip that is not": (PROTOBUF, "gzip", as_protobuf(run_spans()), 400),
    "gzip cut short": (JSON, "gzip", gzip.compress(as_json(run_spans()))[:-9], 400),
    "a gzip bomb": (PROTOBUF, "gzip", gzip.compress(bytes(64 << 20), 9), 413),
    "brotli": (PROTOBUF, "br", b"\x00", 415),
    "text/plain": ("text/plain", None, as_json(run_spans()), 415),
    "form data": ("application/x-www-form-urlencoded", None, b"a=1", 415),
    "no content type": (None, None, as_protobuf(run_spans()), 415),
}  # fmt: skip


@pytest.mark.parametrize("content_type, coding, body, status", WHOLE.values(), ids=WHOLE.keys())
def test_a_body_that_cannot_be_read_is_refused_whole_and_nothing_is_stored(secret, scheduled, content_type, coding, body, status):
    headers = {"Content-Encoding": coding} if coding else {}
    message = refusal(post(body, content_type, secret, **headers), status, PROTOBUF if content_type == PROTOBUF else JSON)
    assert message
    assert not Session.objects.exists() and not Event.objects.exists() and scheduled == []


def test_over_the_size_limit_is_413_however_the_body_comes(secret, settings):
    settings.TURNLOG_OTLP_MAX_BODY_BYTES = 1000
    body = as_json(run_spans())
    assert len(body) > 1000 and len(gzip.compress(body)) < 1000
    assert "the limit is 1000" in refusal(post(body, JSON, secret), 413)
    assert "inflates past the limit of 1000 bytes" in refusal(post(gzip.compress(body), JSON, secret, **{"Content-Encoding": "gzip"}), 413)
    assert not Session.objects.exists()


def test_more_spans_than_a_request_may_hold_is_413(secret, monkeypatch):
    from sessions_app.otel import wire

    monkeypatch.setattr(wire, "MAX_SPANS", 1)
    assert "holds 2 spans; at most 1" in refusal(post(as_protobuf(run_spans()), PROTOBUF, secret), 413, PROTOBUF)
    assert not Session.objects.exists()


# Who may send


@pytest.mark.parametrize("authorization", [None, "Basic dXNlcjpwYXNz", "Bearer", "Bearer tl_not_a_token"])
def test_without_a_usable_bearer_token_401_in_the_requests_encoding(authorization, scheduled):
    headers = {"Authorization": authorization} if authorization else {}
    response = post(as_protobuf(run_spans()), PROTOBUF, **headers)
    message = refusal(response, 401, PROTOBUF)
    assert "send Authorization: Bearer <token>" in message
    assert message.startswith("unknown token: ") == (authorization == "Bearer tl_not_a_token")
    assert status_pb2.Status.FromString(response.content).code == 16  # UNAUTHENTICATED
    assert not Session.objects.exists() and scheduled == []


def test_a_revoked_token_is_told_so(agent_user, secret):
    services.revoke_token(token=ApiToken.objects.get(), by=agent_user)
    assert "was revoked" in refusal(post(as_json(run_spans()), JSON, secret), 401)
    assert not Session.objects.exists()


def test_a_login_session_is_not_enough(agent_user):
    member(agent_user)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(agent_user)
    refusal(post(as_json(run_spans()), JSON, client=browser), 401)
    assert not Session.objects.exists()


@pytest.mark.parametrize("role, scopes, said", [(Role.MEMBER, ["read"], "lacks the 'append' scope"), (Role.VIEWER, ["read"], "lacks the 'append' scope")])
def test_a_token_that_may_not_append_in_its_project_is_403_and_audited(agent_user, role, scopes, said):
    secret = token_for(agent_user, role, scopes=scopes)
    assert said in refusal(post(as_json(run_spans()), JSON, secret), 403)
    assert not Session.objects.exists()
    denied = AuditEntry.objects.get(action=AuditEntry.ACCESS_DENIED)
    assert denied.target == "project default" and denied.detail["capability"] == "append"


def test_a_member_demoted_to_viewer_keeps_no_append_through_an_old_token(agent_user):
    secret = token_for(agent_user)
    member(agent_user, Role.VIEWER)
    assert "your role in project default may not" in refusal(post(as_protobuf(run_spans()), PROTOBUF, secret), 403, PROTOBUF)
    assert not Session.objects.exists()


def test_a_site_token_has_no_project_to_send_to():
    admin = get_user_model().objects.create_superuser("root", password="x")
    _, secret = services.issue_token(user=admin, project=None, scopes=["metrics"])
    assert "belongs to no project" in refusal(post(as_json(run_spans()), JSON, secret), 403)
    assert not Session.objects.exists()


def test_the_token_decides_the_project_and_a_conversation_of_another_project_is_refused(agent_user, scheduled):
    other = Project.objects.create(slug="other", name="Other")
    mine, theirs = token_for(agent_user), token_for(agent_user, project=other)
    assert partial_success(post(as_protobuf(run_spans("c-mine")), PROTOBUF, mine)) == (0, "")
    assert partial_success(post(as_protobuf(run_spans("c-theirs")), PROTOBUF, theirs)) == (0, "")
    assert Session.objects.get(pk="c-mine").project == Project.default() and Session.objects.get(pk="c-theirs").project == other
    count = Event.objects.count()
    rejected, message = partial_success(post(as_protobuf(run_spans("c-mine")), PROTOBUF, theirs))
    assert rejected == 2 and "belongs to another project" in message and message.startswith("2 of 2 spans refused")
    assert Event.objects.count() == count


# Whatever valid OTLP says, through decoding, conventions, planning and storage: never a 5xx

GENAI_KEYS = ["gen_ai.operation.name", "gen_ai.conversation.id", "gen_ai.agent.name", "gen_ai.request.model", "gen_ai.usage.input_tokens",
              "gen_ai.usage.output_tokens", "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.tool.name",
              "gen_ai.tool.call.id", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "logfire.span_type", "logfire.pending_parent_id",
              "session.id", "openinference.span.kind", "llm.input_messages.0.message.role", "input.value", "output.value", "tool_arguments",
              "tool_response", "gen_ai.aggregated_usage.input_tokens"]  # fmt: skip
WORDS = ["chat", "invoke_agent", "execute_tool", "pending_span", "LLM", "TOOL", "AGENT", "CHAIN", "c-fuzz", "0" * 16, "00f067aa0ba902b7",
         '[{"role": "assistant", "parts": [{"type": "tool_call", "id": "x", "name": "t", "arguments": {}}]}]',
         '[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]', "{}", "[]", "null", "-1"]  # fmt: skip


def fuzz_values():
    from hypothesis import strategies as st

    from tests.sessions_app.otel.test_decode import values

    # Without bytes values for now: test_bytes_values_where_content_is_read_are_never_a_5xx says why.
    return st.one_of(st.sampled_from(WORDS), values.filter(lambda value: "b'" not in repr(value) and 'b"' not in repr(value)))


def fuzz_spans():
    from hypothesis import strategies as st

    span = st.fixed_dictionaries({
        "name": st.sampled_from(["chat m", "invoke_agent a", "execute_tool t", "agent run", "running tool", "x"]),
        "parent": st.sampled_from([None, 1, 2, 3]),
        "attributes": st.dictionaries(st.sampled_from(GENAI_KEYS), fuzz_values(), max_size=8),
        "status": st.sampled_from([0, 1, 2]),
        "trace": st.sampled_from([REFUSED_TRACE, "4bf92f3577b34da6a3ce929d0e0e4736"]),
    })  # fmt: skip
    return st.lists(span, min_size=1, max_size=5)


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_any_valid_export_through_the_whole_pipeline_is_never_a_5xx(secret, scheduled, encoding):
    from google.protobuf import json_format
    from hypothesis import HealthCheck, given, settings

    from tests.sessions_app.otel.test_decode import any_value

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(spans=fuzz_spans())
    def one_export(spans):
        request = ExportTraceServiceRequest()
        scope = request.resource_spans.add().scope_spans.add()
        for number, span in enumerate(spans, start=1):
            scope.spans.append(SpanMessage(
                trace_id=bytes.fromhex(span["trace"]), span_id=number.to_bytes(8, "big"), name=span["name"],
                parent_span_id=span["parent"].to_bytes(8, "big") if span["parent"] not in (None, number) else b"",
                start_time_unix_nano=number * 1000, end_time_unix_nano=number * 1000 + 500, status={"code": span["status"]},
                attributes=[KeyValue(key=key, value=any_value(value)) for key, value in span["attributes"].items()],
            ))  # fmt: skip
        if encoding == "json":
            response = post(json.dumps(json_format.MessageToDict(request)).encode(), JSON, secret)
        else:
            response = post(request.SerializeToString(), PROTOBUF, secret)
        assert response.status_code == 200, response.content

    one_export()


@pytest.mark.parametrize(
    "key, value",
    [("gen_ai.tool.call.result", b"\x00\xff"), ("gen_ai.tool.call.result", [b"x"]), ("gen_ai.tool.call.result", {"a": b"x"}),
     ("gen_ai.tool.call.arguments", [b"x"]), ("gen_ai.tool.call.arguments", {"a": b"x"})],
    ids=["result", "result list", "result kvlist", "arguments list", "arguments kvlist"],
)  # fmt: skip
def test_bytes_values_where_content_is_read_are_never_a_5xx(secret, scheduled, key, value):
    from tests.sessions_app.otel.test_decode import any_value

    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t", "gen_ai.conversation.id": "c-bytes", key: value}
    span = SpanMessage(trace_id=bytes.fromhex(REFUSED_TRACE), span_id=b"\x01" * 8, name="execute_tool t",
                       attributes=[KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()])  # fmt: skip
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    assert post(request.SerializeToString(), PROTOBUF, secret).status_code < 500


# The rest of the HTTP surface


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "OPTIONS"])
def test_other_methods_are_405_with_allow(method, secret):
    response = Client().generic(method, URL, headers={"Authorization": f"Bearer {secret}"})
    assert "export traces with POST" in refusal(response, 405) and response["Allow"] == "POST"


@pytest.mark.parametrize("path", ["/otlp/v1/metrics", "/otlp/v1/logs", "/otlp/v1/traces/", "/otlp/"])
def test_other_otlp_paths_are_404_in_otlps_form(path, secret):
    response = Client(enforce_csrf_checks=True).generic("POST", path, as_protobuf(run_spans()), content_type=PROTOBUF, headers={"Authorization": f"Bearer {secret}"})
    assert "Turnlog receives traces only, at /otlp/v1/traces" in refusal(response, 404, PROTOBUF)


@pytest.mark.parametrize("failing", ["token", "ingest"])
def test_a_database_outage_is_503_with_retry_after(secret, monkeypatch, failing):
    def unreachable(*args, **kwargs):
        raise OperationalError("connection refused")

    if failing == "token":
        monkeypatch.setattr(ApiToken, "usable_for", unreachable)
    else:
        monkeypatch.setattr(services, "ingest_spans", unreachable)
    response = post(as_protobuf(run_spans()), PROTOBUF, secret)
    assert response.status_code == 503 and response["Retry-After"] == "5"


# A live Daphne and the SDK's own exporters


@pytest.fixture
def daphne(transactional_db, tmp_path):
    from tests.servers import DaphneServer

    server = DaphneServer(connection.settings_dict, tmp_path / "daphne.log").start()
    try:
        yield server
    finally:
        server.stop()
    assert "Traceback" not in (tmp_path / "daphne.log").read_text()


def sdk_exporter(encoding: str):
    if encoding == "json":
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()  # everything from the OTEL_EXPORTER_OTLP_ variables, as an agent's deployment has it


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_the_sdks_exporters_send_to_a_live_server_configured_by_environment_alone(daphne, monkeypatch, encoding, compression):
    from opentelemetry.sdk.trace.export import SpanExportResult

    secret = token_for(get_user_model().objects.create_user("exporter"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{daphne.url}/otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{secret}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
    conversation = f"c-live-{encoding}-{compression}"
    exporter = sdk_exporter(encoding)
    try:
        assert exporter.export(run_spans(conversation)) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    session = Session.objects.get(pk=conversation)
    assert session.agent_name == "support" and stored(conversation)[0] == "turn_start"


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_a_live_exporter_with_a_bad_token_fails_at_once(daphne, monkeypatch, encoding):
    from opentelemetry.sdk.trace.export import SpanExportResult

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{daphne.url}/otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20tl_wrong")
    exporter = sdk_exporter(encoding)
    try:
        assert exporter.export(run_spans("c-never")) == SpanExportResult.FAILURE  # a 401 is not retried
    finally:
        exporter.shutdown()
    assert not Session.objects.exists()


def test_the_otlp_guide_states_the_endpoints_limits_and_answers():
    from django.conf import settings

    from sessions_app.api import otlp as endpoint
    from sessions_app.otel import wire

    doc = (settings.BASE_DIR / "docs" / "guide" / "otlp.md").read_text()
    section = doc.split("## Endpoint\n", 1)[1].split("\n## ", 1)[0]
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT/otlp " in section and "Authorization=Bearer%20TOKEN" in section
    assert settings.TURNLOG_OTLP_MAX_BODY_BYTES == 16 << 20 and "| 16 MiB |" in section
    for limit in (wire.MAX_SPANS, wire.MAX_ATTRIBUTES, wire.MAX_EVENTS):
        assert f"| {limit:,} " in section, limit
    assert f"| {wire.MAX_VALUE_DEPTH} levels |" in section
    for status, code in endpoint.GRPC_CODES.items():
        assert re.search(rf"^\| {status} \|.*\| {code} \|$", section, re.M), status



def test_spans_are_counted_for_the_metrics_accepted_and_rejected(secret, scheduled):
    """turnlog_otlp_spans_total (docs/guide/metrics.md): the decoder's refusals count as rejected, as the answer says."""

    def counted(outcome: str) -> float:
        return REGISTRY.get_sample_value("turnlog_otlp_spans_total", {"outcome": outcome}) or 0

    before = counted("accepted"), counted("rejected")
    content_type, body = PARTIAL["json, no span id"]
    assert partial_success(post(body, content_type, secret))[0] == 1
    assert (counted("accepted") - before[0], counted("rejected") - before[1]) == (2, 1)


@pytest.mark.parametrize("value", [
    '{"doubleValue": "NaN"}', '{"doubleValue": "-Infinity"}', '{"stringValue": "a\\ud800b"}', '{"stringValue": "nul \\u0000"}',
    '{"intValue": "99999999999999999999"}', '{"bytesValue": "AP8="}', '{"arrayValue": {"values": [{"arrayValue": {"values": [{"kvlistValue": {"values": []}}]}}]}}',
], ids=["nan", "infinity", "lone-surrogate", "nul", "huge", "bytes", "nested"])
def test_hostile_values_in_a_held_span_are_refused_on_arrival_or_read_back_once_released(secret, scheduled, client, value):
    """A span no conversation names is held: what no database stores is refused in the answer, never at
    release (when no exporter is listening); what is taken reads back after release, on both backends."""
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.models import OtlpHeldSpan

    tool = json.dumps({"traceId": TRACE, "spanId": TOOL_ID, "parentSpanId": ROOT_ID, "name": "execute_tool refund",
                       "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                       "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in TOOL_SPAN.items() if k != "gen_ai.tool.call.result"]})
    tool = tool[:-2] + ', {"key": "gen_ai.tool.call.result", "value": %s}]}' % value
    rejected, _ = partial_success(post(('{"resourceSpans": [{"scopeSpans": [{"spans": [%s]}]}]}' % tool).encode(), JSON, secret))
    assert OtlpHeldSpan.objects.count() == 1 - rejected
    services.release_held_spans(now=timezone.now() + timedelta(hours=1))
    assert not OtlpHeldSpan.objects.exists()
    if rejected:
        assert not Session.objects.exists()
        return
    response = client.get(f"/api/v1/sessions/{TRACE}/events", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 200
    assert [e["type"] for e in response.json()["events"]] == ["turn_start", "tool_call", "tool_result"]
