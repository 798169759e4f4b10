"""The pages as a person uses them, in a real Chromium against a real Daphne."""

import re
from datetime import datetime
from urllib.parse import unquote

import pytest
from playwright.sync_api import expect

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import Event, RecoveryRecord
from tests.e2e.conftest import api_post, open_page
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms: a live frame or a reconnect must arrive well within this


def append(session_id, *contents):
    services.append_events(
        session_id=session_id,
        events=validate_batch([{"type": "user_message", "data": {"content": c}} for c in contents]),
    )


def test_an_event_appended_through_the_api_appears_without_reload(browser, server, plain_user):
    store([("user_message", {"content": "first"})], session_id="live")
    page = open_page(browser, server, plain_user, "/sessions/live/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    status, body = api_post(server, plain_user, "/api/v1/sessions/live/events", {"events": [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "working on it", "tool_calls": [{"id": "c1", "name": "send_email", "arguments": {"to": "a@b.test"}}]}},
    ]})  # fmt: skip
    assert (status, body["first_seq"]) == (201, 1)
    expect(page.locator("#turn-1")).to_contain_text("working on it", timeout=LIVE)
    expect(page.locator('#turn-1 [data-call-id="c1"]')).to_contain_text("requested")
    expect(page.locator("#session-state")).to_contain_text("Running: turn 1 (opened at seq 1) is open")
    api_post(server, plain_user, "/api/v1/sessions/live/events", {"events": [{"type": "tool_result", "data": {"tool_call_id": "c1", "content": "sent"}}]})
    expect(page.locator('#turn-1 [data-call-id="c1"]')).to_contain_text("completed", timeout=LIVE)
    expect(page.locator("#session-summary")).to_contain_text("4 events")


def test_the_raw_log_follows_new_events_and_marks_what_a_summary_shadows(browser, server, plain_user):
    store([("user_message", {"content": "first"})], session_id="raw")
    page = open_page(browser, server, plain_user, "/sessions/raw/?view=raw")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    sockets = []
    page.on("websocket", lambda socket: sockets.append(socket.url))
    page.reload()
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    api_post(server, plain_user, "/api/v1/sessions/raw/events", {"events": [
        {"type": "user_message", "data": {"content": "second"}},
        {"type": "user_message", "data": {"content": "summary", "surface_op": ["replace", 0, 1]}},
    ]})  # fmt: skip
    expect(page.locator("#seq-2")).to_contain_text("user_message", timeout=LIVE)
    expect(page.locator("#seq-0")).to_contain_text("shadowed by 2")
    expect(page.locator("#seq-1")).to_contain_text("shadowed by 2")
    assert page.locator("#raw-rows .raw-row").count() == 3
    # One per page, told the header's state as the page shows it and the instant the page was read.
    assert len(sockets) == 1
    url, _, seen_at = sockets[0].partition("&seen_at=")
    assert url == f"{server.url.replace('http', 'ws')}/ws/sessions/raw/live?view=raw&first=0&after=0&state=clean+0+-"
    assert datetime.fromisoformat(unquote(seen_at)).tzinfo is not None
    expect(page.locator("#session-summary")).to_contain_text("3 events")


def test_after_the_server_closes_the_socket_every_event_arrives_once_in_order(browser, server, plain_user):
    store([("user_message", {"content": "before"})], session_id="flaky")
    page = open_page(browser, server, plain_user, "/sessions/flaky/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    append("flaky", "m1")
    expect(page.locator("#blocks")).to_contain_text("m1", timeout=LIVE)
    server.stop(kill=True)
    expect(page.locator("#live-state")).to_have_attribute("data-state", "closed", timeout=LIVE)
    append("flaky", "m2", "m3")  # written while the page is disconnected
    server.start()
    append("flaky", "m4")
    expect(page.locator("#blocks")).to_contain_text("m4", timeout=LIVE)
    append("flaky", "m5")
    expect(page.locator("#blocks")).to_contain_text("m5", timeout=LIVE)
    texts = page.locator("#blocks .row .text").all_inner_texts()
    assert texts == ["before", "m1", "m2", "m3", "m4", "m5"]


def test_hostile_content_shows_as_text_and_runs_nothing(browser, server, plain_user):
    hostile = '<script>window.__pwned = "script"</script><img src=x onerror="window.__pwned = \'img\'">'
    store([("user_message", {"content": hostile})], session_id="xss")
    page = open_page(browser, server, plain_user, "/sessions/xss/")
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    services.append_events(session_id="xss", events=validate_batch([
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "t1", "name": hostile, "arguments": {"html": hostile}}]}},
        {"type": "tool_result", "data": {"tool_call_id": "t1", "name": "x", "content": hostile}},
    ]))  # fmt: skip
    expect(page.locator('[data-call-id="t1"]')).to_contain_text("completed", timeout=LIVE)
    expect(page.locator("#seq-0 .text")).to_have_text(hostile)
    assert page.locator("#blocks img").count() == 0 and page.locator("#blocks script").count() == 0
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None
    page.goto(f"{server.url}/sessions/xss/?view=raw")
    assert page.evaluate("window.__pwned") is None


def test_a_crashed_session_shows_its_owed_calls_as_recovery_classifies_them(browser, server, plain_user):
    store(WORKED_EXAMPLE, session_id="crashed")  # its events are from January: long quiet
    page = open_page(browser, server, plain_user, "/sessions/crashed/")
    expect(page.locator("#session-summary")).to_contain_text("stalled")
    expect(page.locator(".alert")).to_contain_text("The agent most likely crashed")
    c1, c2, c3 = (page.locator(f'[data-call-id="{c}"]') for c in ("c1", "c2", "c3"))
    expect(c1).to_contain_text("completed")
    # Not "in flight": the recovery page's words, word for word.
    expect(c2.locator(".badge.state")).to_have_text("tool_not_started")
    expect(c2).to_contain_text("Not started: it did not run")
    expect(c2).to_contain_text("Why (rule 2):")
    expect(c3.locator(".badge.state")).to_have_text("tool_outcome_unknown")
    expect(c3).to_contain_text("Outcome unknown: it may have run")
    expect(c3).to_contain_text("Why (rule 1):")
    expect(page.locator(".elapsed")).to_have_count(0)
    expect(c1).not_to_contain_text("Why (rule")


def test_staff_previews_and_confirms_a_recovery(browser, server, staff_user):
    store(WORKED_EXAMPLE, session_id="crashed")
    page = open_page(browser, server, staff_user, "/sessions/crashed/")
    page.get_by_role("link", name="Preview recovery").click()
    expect(page.locator("h1")).to_contain_text("Recovery of")
    expect(page.locator(".owed.risk-tool_outcome_unknown")).to_contain_text("c3")
    expect(page.locator(".owed.risk-tool_not_started")).to_contain_text("c2")
    expect(page.locator(".owed.risk-tool_outcome_unknown .evidence")).to_contain_text("seq 9")
    page.locator(".owed.risk-tool_outcome_unknown .evidence a", has_text="seq 9").click()
    expect(page).to_have_url(re.compile(r"/sessions/crashed/#seq-9$"))
    page.go_back()
    expect(page.locator(".appends li")).to_have_count(3)
    page.fill("#note", "checked the mail server: nothing was sent")
    page.get_by_role("button", name="Confirm recovery").click()
    expect(page).to_have_url(re.compile(r"/sessions/crashed/\?highlight=10-12#seq-10$"))
    expect(page.locator(".messages")).to_contain_text("Appended seqs 10–12")
    expect(page.locator('[data-call-id="c3"]')).to_contain_text("tool_outcome_unknown")
    expect(page.locator('[data-call-id="c2"]')).to_contain_text("tool_not_started")
    expect(page.locator(".highlight")).to_have_count(3)
    expect(page.locator("#turn-1 .turn-head")).to_contain_text("interrupted")
    assert RecoveryRecord.objects.get().note == "checked the mail server: nothing was sent"


def test_a_viewer_without_the_permission_gets_no_confirm_and_a_403(browser, server, plain_user):
    store(WORKED_EXAMPLE, session_id="crashed")
    page = open_page(browser, server, plain_user, "/sessions/crashed/recovery")
    expect(page.locator(".owed")).to_have_count(2)
    expect(page.get_by_role("button", name="Confirm recovery")).to_have_count(0)
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        f"{server.url}/sessions/crashed/recovery",
        form={"csrfmiddlewaretoken": csrf, "digest": "anything"},
        headers={"Referer": f"{server.url}/sessions/crashed/recovery"},
    )
    assert response.status == 403 and "security check (CSRF)" not in response.text()  # refused for the role, not the form
    assert Event.objects.filter(session_id="crashed").count() == 10

