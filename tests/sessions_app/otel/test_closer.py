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
