"""The recovery preview's recommended strategy (session-log.md section 8.1), in a real Chromium.

Set TURNLOG_SCREENSHOTS to a directory (e.g. docs/images) to also save the recovery guide's
screenshot of the recovery preview: `TURNLOG_SCREENSHOTS=docs/images pytest tests/e2e/test_recovery_strategies.py`.
"""

import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from sessions_app import selectors
from sessions_app.log import strategy
from sessions_app.log.events import Event as LogEvent
from sessions_app.models import Event, RecoveryRecord, Session, ToolPolicy
from tests.e2e.conftest import open_page
from tests.sessions_app.log.strategies import message
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SESSION = "billing-agent-7f3a2c91"
EMAIL = {"to": "amara.okafor@example.com", "subject": "Your refund is on its way", "body": "Hi Amara, we are refunding order 4417 today."}
CHARGE = {"customer": "cus_4417", "amount_cents": 4999, "currency": "EUR", "reason": "replacement order"}
# A crash inside turn 1: send_email ran and answered; charge_card was dispatched and never answered.
CRASH = [
    ("user_message", message("Refund order 4417, tell the customer, then bill the replacement.")),
    ("turn_start", {"turn": 1}),
    ("step_start", {"turn": 1, "step": 1}),
    ("assistant_message", message("", tool_calls=[
        {"id": "call_email_01", "name": "send_email", "arguments": EMAIL},
        {"id": "call_charge_02", "name": "charge_card", "arguments": CHARGE},
    ])),
    ("tool_call", {"id": "call_email_01", "name": "send_email"}),
    ("tool_result", message("queued: message id 8812", tool_call_id="call_email_01", name="send_email")),
    ("tool_call", {"id": "call_charge_02", "name": "charge_card"}),
]  # fmt: skip


def crashed_hours_ago(items, hours=3) -> list[LogEvent]:
    """The items as a log that went quiet a few hours ago (stalled, and reads naturally in the screenshot)."""
    start = timezone.now() - timedelta(hours=hours)
    return [LogEvent(seq, kind, start + timedelta(seconds=7 * seq), data) for seq, (kind, data) in enumerate(items)]


def test_the_preview_of_a_crash_with_external_effects_recommends_manual_check(browser, server, staff_user):
    ToolPolicy.objects.create(pattern="send_email", side_effect="external_effect")
    ToolPolicy.objects.create(pattern="charge_card", side_effect="external_effect")
    store(crashed_hours_ago(CRASH), session_id=SESSION)
    session = Session.objects.get(pk=SESSION)
    plan = selectors.recovery_plan(session)
    page = open_page(browser, server, staff_user, f"/sessions/{SESSION}/")
    expect(page.locator("#session-state .recommended")).to_contain_text(strategy.HEADLINES[strategy.MANUAL_CHECK])
    page.get_by_role("link", name="Preview recovery").click()

    block = page.locator(".strategy")
    expect(block).to_have_count(1)
    expect(block).to_have_class(re.compile(r"\bstrategy-manual_check\b"))
    expect(block.locator("h3")).to_contain_text(strategy.HEADLINES[strategy.MANUAL_CHECK])
    expect(block.locator(".strategy-name")).to_have_text("manual_check")
    verify = block.locator("li.unverified")
    expect(verify).to_have_count(1)
    expect(verify).to_contain_text("charge_card")
    expect(verify).to_contain_text("verify in the outside system before retrying")
    done = block.locator("li.effect")
    expect(done).to_have_count(1)
    expect(done).to_contain_text("send_email")
    expect(done).to_contain_text("already happened: done, never repeat")
    expect(done.get_by_role("link", name="seq 5")).to_be_visible()  # its result
    if os.environ.get("TURNLOG_SCREENSHOTS"):
        page.screenshot(path=str(Path(os.environ["TURNLOG_SCREENSHOTS"]) / "screenshot-recovery.png"), full_page=True)

    expect(page.get_by_role("radio", name=re.compile("Apply the recommended strategy"))).to_be_checked()
    page.get_by_role("checkbox", name="Add a recovery note for the agent (system message)").check()
    page.get_by_role("button", name="Confirm recovery").click()
    count = session.event_count
    last = count + len(plan.repairs)  # the plan, then the context message
    expect(page).to_have_url(re.compile(rf"/sessions/{SESSION}/\?highlight={count}-{last}#seq-{count}$"))
    expect(page.locator(".messages")).to_contain_text(f"The recovery note for the agent is seq {last}")

    appended = list(Event.objects.filter(session_id=SESSION, seq__gte=count).order_by("seq"))
    assert [(e.type, e.data) for e in appended[:-1]] == [(r.type, r.data) for r in plan.repairs]
    assert [e.type for e in appended[:-1]] == ["tool_result", "turn_end"]  # charge_card's answer, then the turn closed
    context = appended[-1]
    assert context.type == "system_message" and context.seq == last
    assert context.data["metadata"] == {"synthetic": True, "recovery_context": True}
    assert "Completed, never repeat: send_email" in context.data["content"]
    assert "Outcome unknown, verify before retrying: charge_card" in context.data["content"]
    record = RecoveryRecord.objects.get()
    assert record.context_seq == last and not record.abandoned and record.strategy_names == ["manual_check"]
