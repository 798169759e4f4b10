"""A recovered session in a real browser: its turn and the step the crash left open read as interrupted."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import open_page
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms


def test_a_recovered_session_shows_its_step_and_turn_as_interrupted(browser, server, staff_user):
    store(WORKED_EXAMPLE, session_id="crashed")  # seqs one second apart, in January: stalled
    page = open_page(browser, server, staff_user, "/sessions/crashed/recovery")
    page.get_by_role("button", name="Confirm recovery").click()
    page.wait_for_url(re.compile(r".*/sessions/crashed/\?highlight=10-12.*"))

    turn_head = page.locator("#turn-1 .turn-head")
    expect(turn_head).to_contain_text("interrupted (closed by recovery)", timeout=LIVE)
    # The agent was alive in the turn for 8 s (seq 1 to seq 9); the months after are not its duration.
    expect(turn_head).to_contain_text(re.compile(r"last heard from 8\.0 s into the turn; what ran after that is unknown · recovered \d+ d \d+ h later"))

    first_step, second_step = page.locator("#turn-1 .step").all()
    expect(first_step.locator(".step-head .badge").first).to_have_text("ok")
    expect(second_step.locator(".step-head .badge").first).to_have_text("interrupted")
    expect(page.locator("#turn-1 .step-head .badge", has_text=re.compile(r"^open$"))).to_have_count(0)

    # Its owed calls read as recovery answered them, as on the recovery page.
    expect(page.locator('[data-call-id="c3"] .badge.state')).to_have_text("tool_outcome_unknown")
    expect(page.locator('[data-call-id="c2"] .badge.state')).to_have_text("tool_not_started")
