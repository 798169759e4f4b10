"""The Timeline tab in a browser: parallel calls side by side, a click landing on the card, a crash drawn to its
recovery, and a running session's timeline growing live into what a reload shows. With TURNLOG_SCREENSHOTS set
(docs/images), the guide's screenshot of a timeline is taken here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.e2e.conftest import api_post, open_page, wait_until
from tests.e2e.test_live_equals_reload import live_servers

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms


def ev(type_, seconds, **data):
    minutes, seconds = divmod(seconds, 60)
    return {"type": type_, "time": f"2026-01-01T12:{minutes:02d}:{seconds:02d}Z", "data": data}


def two_calls(turn, step, at, a, b, *, answered=True):
    usage = {"prompt_tokens": 1200, "completion_tokens": 80, "prompt_tokens_details": {"cached_tokens": 1000}}
    events = [
        ev("step_start", at, turn=turn, step=step),
        ev("assistant_message", at + 2, content="", metadata={"model": "gpt-4o", "usage": usage},
           tool_calls=[{"id": a, "name": "search_orders", "arguments": {}}, {"id": b, "name": "fetch_invoice", "arguments": {}}]),
        ev("tool_call", at + 3, id=a, name="search_orders", arguments={}),
        ev("tool_call", at + 3, id=b, name="fetch_invoice", arguments={}),
    ]
    if answered:
        events += [ev("tool_result", at + 5, tool_call_id=b, content="ok"), ev("tool_result", at + 8, tool_call_id=a, content="ok"),
                   ev("step_end", at + 9, turn=turn, step=step, outcome="ok")]
    return events


def box(page, dom_id):
    return page.locator(f"#{dom_id} rect").bounding_box()


def test_parallel_tool_calls_are_side_by_side_and_a_click_lands_on_the_card(browser, server, plain_user):
    services.create_session(session_id="par")
    events = [ev("user_message", 0, content="Find the invoice"), ev("turn_start", 1, turn=1)]
    events += two_calls(1, 1, 2, "a", "b") + two_calls(1, 2, 12, "c", "d")
    events += [ev("turn_end", 40, turn=1, steps=2, reason="complete"), ev("user_message", 200, content="Thanks"), ev("turn_start", 201, turn=2)]
    events += two_calls(2, 1, 202, "e", "f") + [ev("turn_end", 215, turn=2, steps=1, reason="complete")]
    services.append_events(session_id="par", events=validate_batch(events))
    page = open_page(browser, server, plain_user, "/sessions/par/timeline")
    a, b = box(page, "tl-tool-4"), box(page, "tl-tool-5")  # search_orders and fetch_invoice, dispatched together
    assert a["y"] != b["y"], "parallel calls share a lane"
    assert a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"], "parallel calls do not overlap in time"
    assert page.locator(".timeline-gaps rect").count() == 1  # the pause between the two turns
    if os.environ.get("TURNLOG_SCREENSHOTS"):
        page.locator(".timeline-body").screenshot(path=str(Path(os.environ["TURNLOG_SCREENSHOTS"]) / "screenshot-timeline.png"))
    # Keyboard: the bar takes focus, and Enter follows it to its card.
    page.locator("#tl-tool-5").focus()
    assert page.evaluate("document.activeElement.id") == "tl-tool-5"
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/sessions/par/#seq-5$"))
    card = page.locator('.card[data-call-id="b"]')
    expect(card).to_be_visible()
    expect(card.locator("#seq-5")).to_be_in_viewport()
    page.go_back()
    page.locator("#tl-tool-4").click()
    page.wait_for_url(re.compile(r"/sessions/par/#seq-4$"))
    expect(page.locator('.card[data-call-id="a"] #seq-4')).to_be_in_viewport()
    page.close()


def test_a_crashed_sessions_open_turn_is_drawn_to_its_recovery(browser, server, staff_user):
    services.create_session(session_id="crash")
    events = [ev("user_message", 0, content="Charge order 42"), ev("turn_start", 1, turn=1)] + two_calls(1, 1, 2, "x", "y", answered=False)
    services.append_events(session_id="crash", events=validate_batch(events))
    page = open_page(browser, server, staff_user, "/sessions/crash/timeline")
    expect(page.locator("#tl-turn-1")).to_have_class(re.compile(r"state-(open|stalled)"))
    services.recover(session_id="crash", user=staff_user)
    page.reload()
    turn = page.locator("#tl-turn-1")
    expect(turn).to_have_class(re.compile("state-crashed"))
    # The turn runs to its recovery (the drawing's right end, now long after the agent's last event), where the
    # owed calls end too; the line where the agent was last heard from stands at their dispatch.
    end = float(turn.get_attribute("data-end"))
    assert end == pytest.approx(1000, abs=1)
    for call in ("tl-tool-4", "tl-tool-5"):
        expect(page.locator(f"#{call}")).to_have_class(re.compile("state-crashed"))
        assert float(page.locator(f"#{call}").get_attribute("data-end")) == pytest.approx(end, abs=1)
    heard = float(page.locator(".timeline-crashes line").get_attribute("x1"))
    assert heard == pytest.approx(float(page.locator("#tl-tool-5").get_attribute("data-start")), abs=1) and heard < end
    assert "interrupted (closed by recovery)" in turn.locator("title").text_content()
    page.close()


def test_a_running_sessions_timeline_grows_live_and_equals_a_reload(browser, tmp_path, transactional_db, staff_user):
    with live_servers(tmp_path) as (pages_server, writes_server):
        def append(*events):
            status, body = api_post(writes_server, staff_user, "/api/v1/sessions/grow/events", {"events": list(events)})
            assert status == 201, body

        status, body = api_post(writes_server, staff_user, "/api/v1/sessions", {"id": "grow"})
        assert status == 201, body
        append(ev("user_message", 0, content="go"), ev("turn_start", 1, turn=1))
        page = open_page(browser, pages_server, staff_user, "/sessions/grow/timeline")
        expect(page.locator("#tl-turn-1")).to_have_class(re.compile("state-open"))
        expect(page.locator("#live-state")).to_have_text("Live", timeout=LIVE)
        append(*two_calls(1, 1, 2, "g1", "g2", answered=False))
        expect(page.locator("#tl-tool-4")).to_be_attached(timeout=LIVE)
        expect(page.locator("#tl-tool-5")).to_be_attached(timeout=LIVE)
        append(ev("tool_result", 9, tool_call_id="g1", content="ok"), ev("tool_result", 10, tool_call_id="g2", content="ok"),
               ev("step_end", 11, turn=1, step=1, outcome="ok"), ev("turn_end", 12, turn=1, steps=1, reason="complete"))
        expect(page.locator("#tl-turn-1")).to_have_class(re.compile("state-done"), timeout=LIVE)
        wait_until(page, "document.querySelectorAll('#timeline .bar.state-open').length === 0", LIVE)
        live = drawing(page)
        fresh = browser.new_page()
        fresh.context.add_cookies(page.context.cookies())
        fresh.goto(f"{pages_server.url}/sessions/grow/timeline")
        assert live == drawing(fresh)
        assert page.locator("#timeline .bar").count() == 5  # the turn, its step, its model call and two tool calls
        fresh.close()
        page.close()


def drawing(page) -> str:
    html = page.evaluate("document.getElementById('timeline').outerHTML")
    html = re.sub(r' hx-swap-oob="true"', "", html)
    html = re.sub(r'\s?htmx-[a-z-]+', "", html)
    return re.sub(r">\s+<", "><", re.sub(r"\s+", " ", html)).strip()
