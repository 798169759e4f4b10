"""Comparing a fork with its parent in a real Chromium against a real Daphne: reached from the fork's header,
the prefix collapsed to one line, the first difference marked, and a call made in both continuations flagged.
With TURNLOG_SCREENSHOTS set (docs/images), the guide's screenshot of the comparison is taken here."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from sessions_app import services
from tests.dashboard.pages.test_compare import CLEAN, append, charge
from tests.e2e.conftest import open_page
from tests.sessions_app.log.strategies import message
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms


def test_a_forks_comparison_shows_the_prefix_collapsed_the_first_difference_and_a_call_made_in_both(browser, server, plain_user):
    store(CLEAN, session_id="checkout")
    services.fork(session_id="checkout", boundary=5, new_session_id="checkout-retry")
    append("checkout", charge(2, "charged ch_1 for order 42"))
    append("checkout-retry", [{"type": "user_message", "data": message("Please try once more")}, *charge(2, "charged ch_2 for order 42")])

    page = open_page(browser, server, plain_user, "/sessions/checkout-retry/")
    page.locator("#session-head .compare-link").click()
    page.wait_for_url(f"{server.url}/sessions/checkout-retry/compare", timeout=LIVE)

    prefix = page.locator("#shared-prefix")
    expect(prefix).to_contain_text("Events 0–5 are the same in both.")
    assert page.locator("table.compare-events td.seq a", has_text="3").count() == 0  # no prefix event is listed

    page.get_by_role("link", name="First difference at seq 6").click()
    first = page.locator("#first-difference")
    expect(first).to_be_in_viewport()
    expect(first.locator(".first-mark")).to_have_text("first difference")
    expect(page.locator(".first-mark")).to_have_count(2)  # seq 6 of each side

    repeated = page.locator("table.compare-effects tr.repeated")
    expect(repeated).to_have_count(1)
    expect(repeated).to_contain_text("charge_card ran in the parent and again in the fork")
    if os.environ.get("TURNLOG_SCREENSHOTS"):
        page.set_viewport_size({"width": 1280, "height": 1100})
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(Path(os.environ["TURNLOG_SCREENSHOTS"]) / "screenshot-compare.png"), full_page=True)
