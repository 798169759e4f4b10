"""A compaction summary arriving live, in a real browser: it shows once and collapses nothing the reader opened."""

import pytest
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.e2e.conftest import open_page
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms


def summarise(session_id: str, text: str, start: int, stop: int) -> None:
    services.append_events(
        session_id=session_id,
        events=validate_batch([{"type": "user_message", "data": {"content": text, "surface_op": ["replace", start, stop]}}]),
    )


def test_a_live_summary_keeps_open_what_the_reader_opened(browser, server, plain_user):
    store([
        ("user_message", {"content": "q1"}),
        ("turn_start", {"turn": 1}),
        ("assistant_message", {"content": "a1", "reasoning_content": "because", "tool_calls": []}),
        ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}),
    ], session_id="compacting")  # fmt: skip
    page = open_page(browser, server, plain_user, "/sessions/compacting/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    reasoning = page.locator("#seq-2 details.reasoning")
    reasoning.locator("summary").click()
    expect(reasoning).to_have_attribute("open", "")

    # The turn the reader is reading gets compacted: it stays readable, its reasoning open.
    summarise("compacting", "First summary", 1, 3)
    turn = page.locator("#turn-1")
    expect(turn.locator(":scope > details.compacted")).to_have_count(1, timeout=LIVE)
    expect(turn.locator(":scope > details.compacted")).to_have_attribute("open", "")
    expect(page.locator("#seq-2 details.reasoning").first).to_have_attribute("open", "")
    expect(page.get_by_text("because", exact=True)).to_be_visible()

    # A second summary re-renders the turn again: what the reader opened stays open.
    summarise("compacting", "Second summary", 0, 4)
    expect(page.locator("#blocks")).to_contain_text("Second summary", timeout=LIVE)
    expect(turn.locator(":scope > details.compacted")).to_have_attribute("open", "")
    expect(page.locator("#seq-2 details.reasoning").first).to_have_attribute("open", "")
    expect(page.get_by_text("because", exact=True)).to_be_visible()
    # Each summary's text is on the page once, labelled as a summary.
    expect(page.get_by_text("Second summary", exact=True)).to_have_count(1)
    expect(page.locator("#seq-5 .who")).to_have_text("summary")


def test_a_step_closing_keeps_open_what_the_reader_opened_in_it(browser, server, plain_user):
    """A step closing is re-rendered as its container, then its rows: a row's details the reader opened stay open."""
    store([
        ("user_message", {"content": "q1"}),
        ("turn_start", {"turn": 1}),
        ("step_start", {"turn": 1, "step": 1}),
        ("assistant_message", {"content": "a1", "reasoning_content": "because"}),
    ], session_id="stepping")  # fmt: skip
    page = open_page(browser, server, plain_user, "/sessions/stepping/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    reasoning = page.locator("#seq-3 details.reasoning")
    reasoning.locator("summary").click()
    expect(reasoning).to_have_attribute("open", "")

    services.append_events(session_id="stepping", events=validate_batch([{"type": "step_end", "data": {"turn": 1, "step": 1, "outcome": "ok"}}]))
    expect(page.locator("#seq-4")).to_be_attached(timeout=LIVE)  # the step's end, in the re-rendered step
    expect(page.locator("#seq-3 details.reasoning")).to_have_attribute("open", "")
    expect(page.get_by_text("because", exact=True)).to_be_visible()
