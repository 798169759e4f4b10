"""A project's webhooks in a real Chromium: its admin adds one on the Webhooks tab, a session stalls, the receiver
fails twice, and the endpoint's page lists the three attempts of the one delivery (no axe-core violations).

Also takes the alerts guide's screenshot of the delivery history: `TURNLOG_SCREENSHOTS=docs/images pytest tests/e2e/test_webhooks.py`."""

import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from sessions_app import services, worker
from sessions_app.models import Role, Session, WebhookEndpoint
from tests.access import member
from tests.e2e.conftest import PASSWORD, open_page
from tests.e2e.test_accessibility import axe_report
from tests.servers import DaphneServer
from tests.sessions_app.services.notify.crashes import crashed
from tests.webhook_receiver import receiver  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def server(transactional_db, tmp_path):
    """Daphne allowing webhooks to this machine, where the test's receiver listens."""
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", TURNLOG_WEBHOOK_ALLOW_PRIVATE="1").start()
    yield daphne
    daphne.stop()


def test_an_admin_adds_a_webhook_and_sees_every_attempt_of_its_deliveries(browser, server, receiver, django_user_model, settings):  # noqa: F811
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True  # this process sends to the same receiver
    settings.TURNLOG_WEBHOOK_RETRY_SECONDS = 0.01
    admin = django_user_model.objects.create_user("alice", password=PASSWORD)
    member(admin, Role.ADMIN)
    page = open_page(browser, server, admin, "/projects/default/webhooks")

    page.fill("#id_url", receiver.url)
    page.fill("#id_agent_patterns", "support-*")
    page.get_by_role("button", name="Add webhook").click()
    expect(page.locator(".messages")).to_contain_text("Added the webhook")
    hook = WebhookEndpoint.objects.get()
    assert hook.agent_patterns == "support-*" and hook.kinds == ["stalled", "recovered", "held"]

    receiver.statuses = [500, 500]
    # The webhook was there an hour ago, and the session stalled ten minutes ago: the worker's round tells it.
    WebhookEndpoint.objects.update(created_at=timezone.now() - timedelta(hours=1))
    session = crashed("support-ticket-4711", agent="support-bot")
    Session.objects.filter(pk=session.id).update(last_activity_at=timezone.now() - timedelta(minutes=10))
    worker.run_round()
    for n in range(3):  # each retry when due (their backoff is 0.01 s here)
        time.sleep(0.05)
        worker.deliver_webhooks()
    services.recover(session_id=session.id, user=admin)
    worker.deliver_webhooks()
    assert len(receiver.verified(hook.secret)) == 4

    page.reload()
    rows = page.locator("table.deliveries tbody tr")
    expect(rows).to_have_count(2)
    stalled = page.locator("tr.delivery-delivered", has_text="Stalled")
    expect(stalled.locator("li.attempt")).to_have_count(3)
    expect(stalled.locator("li.attempt.failed")).to_have_count(2)
    expect(stalled).to_contain_text(receiver.received[0].headers["webhook-id"])
    expect(stalled.locator("li.attempt.ok")).to_contain_text("HTTP 200")
    assert not axe_report(Axe(), page, "webhook page")
    if screenshots := os.environ.get("TURNLOG_SCREENSHOTS"):
        page.locator("section[aria-labelledby=history-title]").screenshot(path=str(Path(screenshots) / "screenshot-webhooks.png"))

    page.get_by_role("link", name="All webhooks").click()
    expect(page.locator(f"#webhook-{hook.pk}")).to_contain_text("2 delivered, 0 pending, 0 failed")
    assert not axe_report(Axe(), page, "webhooks tab")
