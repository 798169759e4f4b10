"""The fleet page (/calls/) in a real browser: a session that stalls while the page is open is listed without a reload."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from playwright.sync_api import expect

from tests.e2e.conftest import api_post, open_page
from tests.servers import DaphneServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms: the longest a frame that must come may take (a loaded machine)
ENV = {"TURNLOG_STALL_SECONDS": "3", "TURNLOG_PAGE_REFRESH_SECONDS": "0.5"}


@pytest.fixture
def quick_stall_server(transactional_db, tmp_path):
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", **ENV).start()
    yield daphne
    daphne.stop()


def test_a_session_that_stalls_while_the_page_is_open_is_listed_without_reload(browser, quick_stall_server, staff_user):
    server = quick_stall_server
    page = open_page(browser, server, staff_user, "/calls/")
    expect(page.locator("#no-calls")).to_be_visible()
    status, body = api_post(server, staff_user, "/api/v1/sessions", {"id": "stalls", "agent_name": "billing-bot"})
    assert status == 201, body
    events = [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "p1", "name": "charge_card", "arguments": {"cents": 500}}]}},
        {"type": "tool_call", "data": {"id": "p1", "name": "charge_card"}},
    ]
    status, body = api_post(server, staff_user, "/api/v1/sessions/stalls/events", {"events": events})
    assert status == 201, body
    row = page.locator("#call-stalls--p1")
    expect(row).to_have_count(0)  # running: the call is pending, sighted a moment ago
    # Three seconds later the session is stalled, and no event says so: the row arrives by itself.
    expect(row).to_contain_text("tool_outcome_unknown", timeout=LIVE)
    expect(row).to_contain_text("charge_card")
    expect(page.locator("#no-calls")).to_be_hidden()
    live_html = row.evaluate("el => el.outerHTML")
    page.reload()
    reloaded = page.locator("#call-stalls--p1").evaluate("el => el.outerHTML")
    normalise = lambda html: re.sub(r"\s+", " ", re.sub(r"<time[^>]*>.*?</time>", "<time>", html)).strip()  # noqa: E731
    assert normalise(live_html) == normalise(reloaded)
    page.locator("#call-stalls--p1 a.card-link").click()
    expect(page).to_have_url(re.compile(r"/sessions/stalls/#seq-1$"))
