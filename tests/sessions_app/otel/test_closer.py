"""sessions_app.api.otlp_closer on a live Daphne: a finished run's turn_end, written when its settle time
is up, reaches a stream that is watching the session, as every append does, and reads back the same."""

from __future__ import annotations

import json
import urllib.request

from websockets.sync.client import connect

from tests.sessions_app.api.test_otlp import PROTOBUF, as_protobuf, run_spans
from tests.sessions_app.otel.conftest import SETTLE

WAIT = 10.0


def export(server, token: str, spans) -> None:
    request = urllib.request.Request(
        f"{server.url}/otlp/v1/traces", data=as_protobuf(spans), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": PROTOBUF},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200, response.read()


def events(server, token: str, session_id: str) -> list[dict]:
    request = urllib.request.Request(f"{server.url}/api/v1/sessions/{session_id}/events", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["events"]


def test_the_closers_turn_end_reaches_a_watching_stream_as_it_reads_back(server, token):
    root, chat = sorted(run_spans("c-closer"), key=lambda span: span.parent is not None)
    export(server, token, [chat])  # the session and its open turn; no root yet, so nothing to close
    before = events(server, token, "c-closer")
    assert [e["type"] for e in before][-1] != "turn_end"
    url = f"ws://127.0.0.1:{server.port}/ws/v1/sessions/c-closer/events?after={before[-1]['seq']}"
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=WAIT) as ws:
        export(server, token, [root])  # the root: the closer writes its turn_end SETTLE seconds later
        frames = []
        while not frames or frames[-1]["type"] != "turn_end":
            frames.append(json.loads(ws.recv(timeout=SETTLE + WAIT))["event"])
    after = events(server, token, "c-closer")
    assert frames == after[len(before) :]  # live frames and the read back tell the same story
    assert after[-1]["data"]["reason"] == "complete"


def _held_tool_span(conversation_on_later: str | None = None):
    """A tool span of a run whose conversation is named on none of its spans (the trace-id session's)."""
    from tests.sessions_app.api.test_otlp import ROOT_ID, TOOL_ID, TOOL_SPAN, TRACE, raw_span, request_of

    return TRACE, request_of(raw_span(TRACE, TOOL_ID, ROOT_ID, "execute_tool refund", TOOL_SPAN, 10, 20))


def _post(server, token: str, body: bytes) -> None:
    request = urllib.request.Request(
        f"{server.url}/otlp/v1/traces", data=body, method="POST", headers={"Authorization": f"Bearer {token}", "Content-Type": PROTOBUF},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200, response.read()


def _status(server, token: str, session_id: str) -> int:
    request = urllib.request.Request(f"{server.url}/api/v1/sessions/{session_id}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_held_spans_are_written_to_the_trace_session_once_the_settle_time_is_up(server, token):
    import time

    trace, body = _held_tool_span()
    _post(server, token, body)
    assert _status(server, token, trace) == 404  # held: a later span may still name the conversation
    deadline = time.monotonic() + SETTLE + WAIT
    while _status(server, token, trace) != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [e["type"] for e in events(server, token, trace)] == ["turn_start", "tool_call", "tool_result"]


def test_spans_held_when_the_server_stopped_are_written_by_the_worker(server, token, settings):
    import time
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app import worker
    from sessions_app.models import OtlpHeldSpan, Session

    trace, body = _held_tool_span()
    _post(server, token, body)
    server.stop(kill=True)  # killed before its settle time: its schedule is gone with it
    time.sleep(SETTLE)
    assert OtlpHeldSpan.objects.count() == 1 and not Session.objects.filter(pk=trace).exists()
    worker.close_finished_runs(now=timezone.now() + timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS + 1))
    assert not OtlpHeldSpan.objects.exists()
    assert list(Session.objects.get(pk=trace).events.order_by("seq").values_list("type", flat=True)) == ["turn_start", "tool_call", "tool_result"]
