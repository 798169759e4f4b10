"""The Timeline tab's live frame: the drawing re-rendered with a reload's inputs, out of band, then the header."""

from __future__ import annotations

import re

import pytest

from dashboard.live.frames import FRAME_BYTES
from dashboard.live.timeline import render_timeline_frame
from sessions_app import services
from sessions_app.log.events import validate_batch

pytestmark = pytest.mark.django_db


def ev(type_, second, **data):
    return {"type": type_, "time": f"2026-01-01T12:00:{second:02d}Z", "data": data}


def test_a_frame_is_the_reloads_drawing_swapped_out_of_band_then_the_header_and_cursor(viewer):
    services.create_session(session_id="live-tl")
    services.append_events(session_id="live-tl", events=validate_batch([
        ev("turn_start", 0, turn=1), ev("step_start", 1, turn=1, step=1),
        ev("assistant_message", 2, content="", tool_calls=[{"id": "a", "name": "search", "arguments": {}}]),
        ev("tool_call", 3, id="a", name="search", arguments={}), ev("tool_result", 4, tool_call_id="a", content="ok"),
        ev("step_end", 5, turn=1, step=1), ev("turn_end", 6, turn=1, steps=1, reason="complete"),
    ]))  # fmt: skip
    [message] = render_timeline_frame("live-tl", [{"seq": 5}, {"seq": 6}], None, True)
    assert message.startswith('<div id="timeline" hx-swap-oob="true">')
    assert message.endswith('<span id="live-cursor" data-last-seq="6" hidden hx-swap-oob="true"></span>')
    frame_drawing = re.search(r'<div id="timeline".*?</aside>', message, re.S).group(0)
    page = viewer.get("/sessions/live-tl/timeline").content.decode()
    reload_drawing = re.search(r'<div id="timeline".*?</aside>', page, re.S).group(0)
    assert frame_drawing.replace(' hx-swap-oob="true"', "") == reload_drawing
    # A zoomed page's socket gets the zoomed drawing; a status change (no wires) ends with the header alone.
    [zoomed] = render_timeline_frame("live-tl", None, 0, True)
    assert "Turn at" in zoomed and 'id="session-head"' in zoomed and "live-cursor" not in zoomed


def test_a_long_sessions_frame_stays_bounded_by_the_aggregation(viewer, monkeypatch):
    from dashboard.pages import timeline as timeline_page

    services.create_session(session_id="long-tl")
    events = []
    for turn in range(400):
        events += [ev("turn_start", 0, turn=turn), ev("tool_call", 0, id=f"c{turn}", name="t", arguments={}),
                   ev("tool_result", 0, tool_call_id=f"c{turn}", content="ok"), ev("turn_end", 0, turn=turn, steps=0, reason="complete")]
    services.append_events(session_id="long-tl", events=validate_batch(events))
    monkeypatch.setattr(timeline_page, "DETAIL_EVENTS", 100)
    messages = render_timeline_frame("long-tl", [{"seq": 1599}], None, True)
    assert all(len(m.encode()) <= FRAME_BYTES for m in messages)
    assert "drawn as aggregate bars" in messages[0] and 'type="number" name="turn"' in messages[0]
