"""The fleet page (/calls/) in a real browser: a session that stalls while the page is open is listed without a reload.

Also takes the calls guide's screenshot of the page: `TURNLOG_SCREENSHOTS=docs/images pytest tests/e2e/test_fleet_page.py`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

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
    # A call already checked by someone: recovered, then the agent's late real result superseded the stand-in.
    crash = [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "r1", "name": "issue_refund", "arguments": {"order": "A-1042", "cents": 1999}}]}},
        {"type": "tool_call", "data": {"id": "r1", "name": "issue_refund"}},
    ]
    for path, body in [
        ("/api/v1/sessions", {"id": "refunds", "agent_name": "support-bot"}),
        ("/api/v1/sessions/refunds/events", {"events": crash}),
        ("/api/v1/sessions/refunds/recover", {}),
        ("/api/v1/sessions/refunds/events", {"events": [{"type": "tool_result", "data": {"tool_call_id": "r1", "content": "refunded"}}]}),
        ("/api/v1/sessions/refunds/notes", {"text": "Billing confirms one refund went out.", "tags": ["refund-confirmed"], "seq": 1}),
    ]:
        status, answer = api_post(server, staff_user, path, body)
        assert status in (200, 201), (path, answer)
    page = open_page(browser, server, staff_user, "/calls/")
    expect(page.locator("#call-refunds--r1")).to_contain_text("superseded")
    expect(page.locator("#call-refunds--r1")).to_contain_text("refund-confirmed")
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
    if screenshots := os.environ.get("TURNLOG_SCREENSHOTS"):
        page.screenshot(path=str(Path(screenshots) / "screenshot-fleet.png"), full_page=True)
    live_html = row.evaluate("el => el.outerHTML")
    page.reload()
    reloaded = page.locator("#call-stalls--p1").evaluate("el => el.outerHTML")
    normalise = lambda html: re.sub(r"\s+", " ", re.sub(r"<time[^>]*>.*?</time>", "<time>", html)).strip()  # noqa: E731
    assert normalise(live_html) == normalise(reloaded)
    page.locator("#call-stalls--p1 a.card-link").click()
    expect(page).to_have_url(re.compile(r"/sessions/stalls/#seq-1$"))
