"""Verdicts in a real browser: a person records one on a call's card; the call leaves /calls/ (live) and is listed under
the Settled filter; another open tab of the session shows it on the card and in the ledger at once. A verdict recorded
while a recovery preview is open makes that preview's confirm stale; the fresh preview states it and its strategy follows it.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from playwright.sync_api import expect

from tests.e2e.conftest import api_post, open_page
from tests.servers import DaphneServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms: the longest a frame that must come may take (a loaded machine)
ENV = {"TURNLOG_STALL_SECONDS": "2", "TURNLOG_PAGE_REFRESH_SECONDS": "0.5"}
CRASH = [
    {"type": "turn_start", "data": {"turn": 1}},
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "w1", "name": "send_wire", "arguments": {"cents": 500}}]}},
    {"type": "tool_call", "data": {"id": "w1", "name": "send_wire"}},
]
CARD = "div.card[data-call-id='w1']"
WORDS = re.compile(r"tool_outcome_unknown,\s+verified not happened \(ops:\s+bank portal, no wire;\s+ref none-found\)")


@pytest.fixture
def quick_stall_server(transactional_db, tmp_path):
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", **ENV).start()
    yield daphne
    daphne.stop()


def test_a_verdict_recorded_on_a_card_settles_the_call_everywhere_at_once(browser, quick_stall_server, staff_user):
    server = quick_stall_server
    for path, body in [("/api/v1/sessions", {"id": "wires", "agent_name": "billing-bot"}), ("/api/v1/sessions/wires/events", {"events": CRASH})]:
        status, answer = api_post(server, staff_user, path, body)
        assert status in (200, 201), (path, answer)
    fleet = open_page(browser, server, staff_user, "/calls/")
    expect(fleet.locator("#call-wires--w1")).to_contain_text("tool_outcome_unknown", timeout=LIVE)  # stalled: to check
    other_tab = open_page(browser, server, staff_user, "/sessions/wires/")
    expect(other_tab.locator(CARD)).to_contain_text("tool_outcome_unknown", timeout=LIVE)
    expect(other_tab.locator("#live-state")).to_have_text("Live", timeout=LIVE)

    page = open_page(browser, server, staff_user, "/sessions/wires/")
    card = page.locator(CARD)
    expect(card).to_contain_text("tool_outcome_unknown", timeout=LIVE)
    card.locator("details.verdict-record > summary").click()
    # Bad input first: the reason shows beside the field, nothing is stored.
    card.locator("input[name=outcome][value=not_happened]").check()
    card.locator("textarea[name=evidence]").fill("   ")
    card.locator("form.verdict-form button[type=submit]").click()
    expect(page.locator(CARD + " p.error[data-field=evidence]")).to_contain_text("evidence is empty")
    card = page.locator(CARD)
    card.locator("textarea[name=evidence]").fill("bank portal, no wire")
    card.locator("input[name=external_ref]").fill("none-found")
    card.locator("details.verdict-record form button[type=submit]").click()
    expect(page.locator(CARD + " .card-head")).to_contain_text(WORDS)
    expect(page.locator(CARD)).to_have_class(re.compile(r"\bsettled\b"))

    # The other tab: the card and the ledger row at once, and the header's badge.
    expect(other_tab.locator(CARD + " .card-head")).to_contain_text(WORDS, timeout=LIVE)
    expect(other_tab.locator("tr.ledger-row[data-call='w1']")).to_contain_text(WORDS, timeout=LIVE)
    expect(other_tab.locator("#session-head")).to_contain_text("all unknown calls settled", timeout=LIVE)
    assert other_tab.locator(CARD + " form.verdict-form").count() == 2  # withdraw and replace, for an operator

    # The fleet page drops the call without a reload; the Settled filter lists it.
    expect(fleet.locator("#call-wires--w1")).to_have_count(0, timeout=LIVE)
    fleet.select_option("select[name=settled]", "true")
    expect(fleet.locator("#call-wires--w1")).to_contain_text(WORDS, timeout=LIVE)
    assert "settled=true" in fleet.url


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_settled_card_its_history_and_the_open_form_have_no_axe_violations(browser, server, staff_user, scheme):
    from axe_playwright_python.sync_playwright import Axe

    from sessions_app.selectors import access
    from sessions_app.services.verdicts import record_verdict, withdraw_verdict
    from tests.e2e.test_accessibility import AXE_OPTIONS, axe_report
    from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
    from tests.sessions_app.services.test_recovery import store

    store(WORKED_EXAMPLE, session_id="crashed")  # stalled: c3's outcome unknown, c2 not started
    actor = access.Actor(user=staff_user)
    record_verdict(actor=actor, session_id="crashed", call_id="c3", outcome="happened", evidence="the mail server logged it", external_ref="msg-1")
    withdraw_verdict(actor=actor, session_id="crashed", call_id="c3", reason="wrong message")
    record_verdict(actor=actor, session_id="crashed", call_id="c3", outcome="not_happened", evidence="no such message")
    context = browser.new_context(color_scheme=scheme, bypass_csp=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{server.url}/login/?next=/sessions/crashed/")
    page.fill("#id_username", staff_user.username)
    page.fill("#id_password", "correct horse battery staple")
    page.click("button[type=submit]")
    card = page.locator("div.card[data-call-id='c3']")
    expect(card).to_contain_text("verified not happened", timeout=LIVE)
    card.locator("details.verdict-history > summary").click()
    card.locator("details.verdict-withdraw > summary").click()
    other = page.locator("div.card[data-call-id='c2']")
    other.locator("details.verdict-record > summary").click()
    other.locator("form.verdict-form button[type=submit]").evaluate("b => b.form.noValidate = true")
    other.locator("form.verdict-form button[type=submit]").click()
    expect(page.locator("div.card[data-call-id='c2'] p.error[data-field=outcome]")).to_be_visible(timeout=LIVE)
    report = axe_report(Axe(), page, f"settled card and verdict forms ({scheme})")
    context.close()
    assert not report, report


def test_a_verdict_changes_the_recovery_preview_and_makes_an_earlier_preview_stale(browser, server, staff_user):
    from sessions_app.log import strategy
    from sessions_app.models import Event, RecoveryRecord, ToolPolicy
    from tests.e2e.test_recovery_strategies import CRASH as PREVIEWED, crashed_hours_ago
    from tests.sessions_app.services.test_recovery import store

    ToolPolicy.objects.create(pattern="send_email", side_effect="external_effect")
    ToolPolicy.objects.create(pattern="charge_card", side_effect="external_effect")
    store(crashed_hours_ago(PREVIEWED), session_id="charges")
    count = Event.objects.filter(session_id="charges").count()
    preview = open_page(browser, server, staff_user, "/sessions/charges/recovery")
    expect(preview.locator(".strategy .strategy-name")).to_have_text(strategy.MANUAL_CHECK)

    # Someone else finds the charge in the processor's dashboard and says so on the call's card.
    card_page = open_page(browser, server, staff_user, "/sessions/charges/")
    card = card_page.locator("div.card[data-call-id='call_charge_02']")
    card.locator("details.verdict-record > summary").click()
    card.locator("input[name=outcome][value=happened]").check()
    card.locator("textarea[name=evidence]").fill("processor dashboard shows the charge")
    card.locator("input[name=external_ref]").fill("ch_3Px")
    card.locator("details.verdict-record form button[type=submit]").click()
    expect(card_page.locator("div.card[data-call-id='call_charge_02'] .card-head")).to_contain_text("verified happened", timeout=LIVE)

    # The preview opened before the verdict: its confirm is refused as stale, nothing appended.
    preview.get_by_role("button", name="Confirm recovery").click()
    expect(preview.locator("#plan-change")).to_contain_text("a call's verdict was recorded or withdrawn since you opened the preview", timeout=LIVE)
    assert Event.objects.filter(session_id="charges").count() == count and not RecoveryRecord.objects.exists()

    # The fresh preview: the synthetic result states the verdict and the strategy follows it (a completed effect).
    preview.goto(f"{server.url}/sessions/charges/recovery")
    expect(preview.locator(".strategy .strategy-name")).to_have_text(strategy.RESUME_AFTER_EFFECTS)
    expect(preview.locator("body")).to_contain_text("It was verified as having happened by ops")
    preview.get_by_role("button", name="Confirm recovery").click()
    expect(preview.locator(".messages")).to_contain_text(f"Appended seqs {count}–{count + 1}", timeout=LIVE)
    result = Event.objects.get(session_id="charges", seq=count)
    assert result.data["metadata"]["risk"] == "tool_outcome_unknown"
    assert result.data["metadata"]["verdict"]["outcome"] == "happened" and result.data["metadata"]["verdict"]["external_ref"] == "ch_3Px"
