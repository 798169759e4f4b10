"""The Timeline tab: bars drawn as SVG from the log, hover titles with tokens and cost, zoom, and hostile names escaped."""

from __future__ import annotations

import re

import pytest

from sessions_app import services
from sessions_app.log.events import validate_batch

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert(1)</script>"onmouseover="x'


def ev(type_, time, **data):
    return {"type": type_, "time": f"2026-01-01T12:00:{time:02d}Z", "data": data}


def parallel_session(sid="tl", *, tool="search", model="gpt-4o", close=True):
    services.create_session(session_id=sid)
    events = [
        ev("user_message", 0, content="go"),
        ev("turn_start", 1, turn=1),
        ev("step_start", 2, turn=1, step=1),
        ev("assistant_message", 4, content="", metadata={"model": model, "usage": {"prompt_tokens": 1000, "completion_tokens": 50}},
           tool_calls=[{"id": "a", "name": tool, "arguments": {}}, {"id": "b", "name": "fetch", "arguments": {}}]),
        ev("tool_call", 5, id="a", name=tool, arguments={}),
        ev("tool_call", 5, id="b", name="fetch", arguments={}),
        ev("tool_result", 7, tool_call_id="b", content="ok"),
        ev("tool_result", 9, tool_call_id="a", content="ok"),
        ev("step_end", 10, turn=1, step=1, outcome="ok"),
    ]
    if close:
        events.append(ev("turn_end", 11, turn=1, steps=1, reason="complete"))
    services.append_events(session_id=sid, events=validate_batch(events))


def bars(html):
    return {m.group(1): m.group(0) for m in re.finditer(r'<a id="(tl-[a-z]+-\d+(?:-many)?)"[^>]*>', html)}


def test_the_tab_draws_every_turn_step_model_and_tool_call_linked_to_its_card(viewer):
    parallel_session()
    html = viewer.get("/sessions/tl/timeline").content.decode()
    assert 'aria-current="page">Timeline</a>' in html
    assert set(bars(html)) == {"tl-turn-1", "tl-step-2", "tl-model-3", "tl-tool-4", "tl-tool-5"}
    assert 'href="/sessions/tl/#seq-4"' in bars(html)["tl-tool-4"]
    # Parallel calls: different lanes, overlapping in time.
    a, b = bars(html)["tl-tool-4"], bars(html)["tl-tool-5"]
    assert re.search(r'data-lane="(\d)"', a).group(1) != re.search(r'data-lane="(\d)"', b).group(1)
    assert re.search(r'data-start="([\d.]+)"', a).group(1) == re.search(r'data-start="([\d.]+)"', b).group(1)


def test_a_bar_title_tells_name_model_duration_tokens_and_cost(viewer):
    parallel_session()
    html = viewer.get("/sessions/tl/timeline").content.decode()
    title = re.search(r'id="tl-model-3".*?<title>(.*?)</title>', html).group(1)
    assert "gpt-4o (model call, seq 3)" in title and "model gpt-4o" in title and "2 s" in title
    assert "1,000 in, 50 out tokens" in title and "$0.003" in title
    assert "Slowest tool calls" in html and "<li><a href=\"/sessions/tl/#seq-4\">search</a>" in html


def test_an_unknown_model_reads_partly_priced(viewer):
    parallel_session(model="no-such-model-xyz")
    html = viewer.get("/sessions/tl/timeline").content.decode()
    assert "partly priced: $0 without no-such-model-xyz" in re.search(r'id="tl-model-3".*?<title>(.*?)</title>', html).group(1)


def test_an_open_turn_runs_to_now_and_says_so(viewer):
    parallel_session(close=False)
    html = viewer.get("/sessions/tl/timeline").content.decode()
    assert "state-open" in bars(html)["tl-turn-1"] or "state-stalled" in bars(html)["tl-turn-1"]


def test_a_recovered_turn_is_drawn_crashed_with_where_it_was_last_heard_from(operator):
    services.create_session(session_id="crash")
    services.append_events(session_id="crash", events=validate_batch([
        ev("turn_start", 1, turn=1), ev("step_start", 2, turn=1, step=1),
        ev("assistant_message", 3, content="", tool_calls=[{"id": "c", "name": "charge_card", "arguments": {}}]),
        ev("tool_call", 4, id="c", name="charge_card", arguments={}),
    ]))  # fmt: skip
    services.recover(session_id="crash", user=None)
    html = operator.get("/sessions/crash/timeline").content.decode()
    assert "state-crashed" in bars(html)["tl-turn-0"] and "state-crashed" in bars(html)["tl-tool-3"]
    assert "last heard" in html


def test_hostile_tool_names_and_models_are_escaped(viewer):
    parallel_session(tool=HOSTILE, model=HOSTILE)
    html = viewer.get("/sessions/tl/timeline").content.decode()
    assert "<script>alert(1)" not in html and '"onmouseover="x' not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_zoom_into_a_turn_and_a_bad_turn_is_a_styled_400(viewer):
    parallel_session()
    zoomed = viewer.get("/sessions/tl/timeline?turn=1")
    assert zoomed.status_code == 200 and "tl-tool-4" in bars(zoomed.content.decode())
    for bad in ("2", "x", "-1"):
        response = viewer.get(f"/sessions/tl/timeline?turn={bad}")
        assert response.status_code == 400
        assert "must be the seq of a turn_start" in response.content.decode() and "<nav" in response.content.decode()


def test_too_many_bars_for_a_column_become_aggregates_and_the_page_says_so(viewer):
    services.create_session(session_id="many")
    events = [ev("turn_start", 0, turn=1), ev("step_start", 0, turn=1, step=1)]
    for i in range(60):
        events += [ev("tool_call", 1, id=f"c{i}", name="t", arguments={}), ev("tool_result", 1, tool_call_id=f"c{i}", content="ok")]
    events += [ev("step_end", 59, turn=1, step=1), ev("turn_end", 59, turn=1, steps=1, reason="complete")]
    services.append_events(session_id="many", events=validate_batch(events))
    html = viewer.get("/sessions/many/timeline").content.decode()
    assert "drawn as aggregate bars" in html
    assert any(key.endswith("-many") for key in bars(html))


def test_an_empty_session_says_bars_will_come(viewer):
    services.create_session(session_id="empty")
    assert "No turns, steps or calls yet" in viewer.get("/sessions/empty/timeline").content.decode()


def test_a_long_session_is_drawn_turn_by_turn_with_its_kept_usage_and_says_so(viewer, monkeypatch):
    from dashboard.pages import timeline as timeline_page

    parallel_session()
    monkeypatch.setattr(timeline_page, "DETAIL_EVENTS", 3)
    html = viewer.get("/sessions/tl/timeline").content.decode()
    assert "each turn is drawn whole" in html and set(bars(html)) == {"tl-turn-1"}
    title = re.search(r'id="tl-turn-1".*?<title>(.*?)</title>', html).group(1)
    assert "turn of 1 step, 2 tool calls, 9 events" in title and "1,000 in, 50 out tokens" in title and "$0.003" in title
    assert 'href="/sessions/tl/timeline?turn=1">turn at seq 1</a>' in html  # the slowest turns zoom in
    assert set(bars(viewer.get("/sessions/tl/timeline?turn=1").content.decode())) >= {"tl-tool-4", "tl-tool-5"}
