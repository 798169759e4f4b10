"""Hostile content that the log stores must still render: pages, partials and the recovery preview
answer 200 with it escaped, whatever JSON-looking text an agent sent."""

from __future__ import annotations

import pytest

from dashboard.pages import blocks
from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.sessions_app import factories as f

# JSON text nested far past the JSON reader's recursion limit: storable as a string, not as a value.
TOO_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("text", [TOO_DEEP, "{" + '"a":' * 50_000 + "1" + "}" * 50_000, "[NaN]", "[1e400]", "[" + "9" * 5000 + "]"])
def test_looks_like_json_answers_for_any_text(text):
    assert blocks.looks_like_json(text) is False  # not JSON this log could hold: shown as the text it is


def test_looks_like_json_still_reads_json():
    assert blocks.looks_like_json('  {"a": [1, 2.5, "x"]} ')


@pytest.mark.django_db
@pytest.mark.parametrize(
    "call",
    [
        {"id": "c1", "type": "function", "function": {"name": "charge_card", "arguments": TOO_DEEP}},
        {"id": "c1", "name": "charge_card", "arguments": TOO_DEEP},
    ],
    ids=["chat-shape", "own-shape"],
)
def test_pages_render_call_arguments_nested_past_the_reader(operator, call):
    services.create_session(session_id="deep", agent_name="deep-bot")
    services.append_events(session_id="deep", events=validate_batch([
        f.user("hi"),
        f.event("turn_start", turn=1),
        f.event("assistant_message", content="", tool_calls=[call]),
        f.event("tool_result", tool_call_id="c0", content=TOO_DEEP),
        f.event("assistant_message", content=[{"type": "tool_use", "id": "t1", "name": "x", "input": TOO_DEEP},
                                              {"type": "function_call", "call_id": "r1", "name": "y", "arguments": TOO_DEEP}]),
    ]))  # fmt: skip
    for path in ["/sessions/deep/", "/sessions/deep/?view=raw", "/sessions/deep/blocks", "/sessions/deep/recovery"]:
        response = operator.get(path)
        assert response.status_code == 200, path
        assert "[[[[" in response.content.decode()
