"""The recovery preview notices that the agent came back, in a real Chromium against a real Daphne.

A person reviews the plan and types a note; the agent writes through the API meanwhile: the page
says so, keeps what they typed and offers the new plan in one click; a confirm of the old plan is
refused, and the refusal keeps their choices.
"""

import re

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.db import connection
from playwright.sync_api import expect

from sessions_app.models import Event, RecoveryRecord
from tests.e2e.conftest import api_post, open_page, wait_until
from tests.e2e.test_accessibility import axe_report
from tests.e2e.test_recovery_strategies import CRASH, SESSION, crashed_hours_ago
from tests.servers import DaphneServer
from tests.sessions_app.log.strategies import message
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms: a live frame must arrive well within this
NOTE = "Called the bank: the card was not charged."
# The agent comes back inside turn 1 (seqs 7-9): charge_card answers, step 1 closes, step 2 begins.
COMES_BACK = [
    {"type": "tool_result", "data": message("charged: ch_881", tool_call_id="call_charge_02", name="charge_card")},
    {"type": "step_end", "data": {"turn": 1, "step": 1, "outcome": "ok"}},
    {"type": "step_start", "data": {"turn": 1, "step": 2}},
]
WRITES_AGAIN = [{"type": "assistant_message", "data": message("", tool_calls=[{"id": "call_sms_03", "name": "send_sms", "arguments": {"to": "+44"}}])}]


def expect_choices_kept(page):
    expect(page.get_by_role("radio", name=re.compile("Abandon the turn"))).to_be_checked()
    expect(page.get_by_role("checkbox", name="Add a recovery note for the agent (system message)")).to_be_checked()
    expect(page.get_by_label("Note for the audit trail (what you checked, why now)")).to_have_value(NOTE)


@pytest.fixture(params=["same server", "another server"])
def agents_server(request, server, tmp_path):
    """Where the agent writes: the Daphne serving the page, or another one (then the page learns of the
    events through the channel layer on Redis, or the database poll)."""
    if request.param == "same server":
        yield server
        return
    other = DaphneServer(connection.settings_dict, tmp_path / "agents-daphne.log").start()
    yield other
    other.stop()


def test_the_preview_says_the_agent_came_back_and_keeps_what_the_person_chose(browser, server, agents_server, staff_user):
    store(crashed_hours_ago(CRASH), session_id=SESSION)
    page = open_page(browser, server, staff_user, f"/sessions/{SESSION}/recovery")
    sockets = []  # of the page as reloaded: Playwright does not report a socket closed by leaving its page
    page.on("websocket", lambda socket: sockets.append(socket))
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    sockets.clear()
    page.reload()
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)
    expect(page.locator(".appends")).to_contain_text("seq 7")  # the plan answers charge_card at seq 7
    page.get_by_role("radio", name=re.compile("Abandon the turn")).check()
    page.get_by_role("checkbox", name="Add a recovery note for the agent (system message)").check()
    page.get_by_label("Note for the audit trail (what you checked, why now)").fill(NOTE)

    status, _ = api_post(agents_server, staff_user, f"/api/v1/sessions/{SESSION}/events", {"events": COMES_BACK})
    assert status == 201
    plan_change = page.locator("#plan-change")
    expect(plan_change).to_contain_text("The plan changed: 3 events arrived since you opened the preview: seqs 7–9.", timeout=LIVE)
    expect(plan_change.get_by_role("alert")).to_be_visible()
    expect_choices_kept(page)  # nothing the person typed was touched
    assert axe_report(Axe(), page, "recovery preview with a plan change") == ""
    expect(page.locator('section[aria-labelledby="appends"]')).to_contain_text("appended after seq 6")  # the plan shown is still the old one

    plan_change.get_by_role("button", name="Show the new plan").click()
    expect(page.locator('section[aria-labelledby="appends"]')).to_contain_text("appended after seq 9")  # the new plan, swapped in
    expect(page.locator("#plan-change")).to_be_empty()
    expect_choices_kept(page)
    expect(page.locator("#live-state")).to_have_attribute("data-state", "open", timeout=LIVE)  # following the new plan
    wait_until(page, "true", 0)  # let the socket events reach Python
    assert [re.search(r"next_seq=(\d+)", socket.url).group(1) for socket in sockets] == ["7", "10"]
    assert sockets[0].is_closed() and not sockets[1].is_closed()  # the old plan's socket ended with its element
    assert page.url.endswith(f"/sessions/{SESSION}/recovery")

    # The agent writes again, and the person confirms the plan they see: refused, their choices kept.
    status, _ = api_post(agents_server, staff_user, f"/api/v1/sessions/{SESSION}/events", {"events": WRITES_AGAIN})
    assert status == 201
    expect(page.locator("#plan-change")).to_contain_text("1 event arrived since you opened the preview: seq 10.", timeout=LIVE)
    page.get_by_role("button", name="Confirm recovery").click()
    expect(page.locator("#plan-change")).to_contain_text("Nothing was appended: 1 event arrived since you opened the preview: seq 10.")
    expect(page.locator("#plan-change")).to_contain_text("with your choices kept")
    expect_choices_kept(page)
    assert axe_report(Axe(), page, "stale confirm") == ""
    assert Event.objects.filter(session_id=SESSION).count() == 11 and not RecoveryRecord.objects.exists()

    page.get_by_role("button", name="Confirm recovery").click()  # the fresh plan, with the same choices
    expect(page.locator(".messages")).to_contain_text("Recorded as abandoned.")
    record = RecoveryRecord.objects.get()
    assert record.abandoned and record.note == NOTE and record.context_seq is not None and record.first_seq == 11
