"""The session list in a real browser: sorted by cost from its header, and at 390 px wide with Status in view;
with TURNLOG_SCREENSHOTS set (docs/images), the screenshot of its cost columns is taken here."""

import os
from pathlib import Path

from playwright.sync_api import expect

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.e2e.conftest import open_page
from tests.sessions_app import factories as f


def spend(session_id: str, input_tokens: int, output_tokens: int, model: str, agent: str) -> None:
    services.create_session(session_id=session_id, agent_name=agent)
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    events = [f.user(), f.event("turn_start", turn=1), f.assistant("done", metadata={"usage": usage, "model": model}),
              f.event("turn_end", turn=1, steps=0, reason="complete")]  # fmt: skip
    services.append_events(session_id=session_id, events=validate_batch(events))


def shown_ids(page) -> list[str]:
    return page.locator("#session-rows tr[id^=session-] td.col-session code").all_inner_texts()


def test_the_list_sorts_by_cost_from_its_header_and_keeps_status_in_view_at_390_px(browser, server, plain_user):
    spend("refund-run-7", 42_000, 3_100, "gpt-4o", "billing-bot")
    spend("triage-17", 1_200, 240, "gpt-4o-mini", "support-bot")
    spend("research-3", 180_000, 12_000, "claude-sonnet-4-5", "research-bot")
    spend("house-exp-2", 8_000, 900, "house-model-9", "lab-bot")
    page = open_page(browser, server, plain_user)
    page.get_by_role("link", name="Cost").click()
    page.wait_for_url("**sort=-cost*")
    assert shown_ids(page) == ["research-3", "refund-run-7", "triage-17", "house-exp-2"]
    expect(page.locator("th.col-cost")).to_have_attribute("aria-sort", "descending")
    expect(page.locator("#session-house-exp-2 .partly-priced.badge")).to_have_attribute("title", "No price for house-model-9: the cost counts only the other models")
    if os.environ.get("TURNLOG_SCREENSHOTS"):
        page.locator(".table-scroll").first.screenshot(path=str(Path(os.environ["TURNLOG_SCREENSHOTS"]) / "screenshot-session-costs.png"))
    page.get_by_role("link", name="Cost ↓").click()
    page.wait_for_url("**sort=cost*")
    assert shown_ids(page) == ["house-exp-2", "triage-17", "refund-run-7", "research-3"]

    page.set_viewport_size({"width": 390, "height": 800})
    status = page.locator("#session-research-3 td.col-status")
    expect(status).to_be_in_viewport()
    expect(page.locator("#session-research-3 td.col-cost")).to_be_in_viewport()
    expect(page.locator("#session-research-3 td.col-parent")).to_be_hidden()
    # Nothing scrolls sideways: the row fits the screen.
    assert page.evaluate("document.querySelector('.table-scroll').scrollWidth <= document.querySelector('.table-scroll').clientWidth + 1")
