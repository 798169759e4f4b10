"""A project's Webhooks tab (dashboard.pages.webhooks), through Django's test client: adding an endpoint, a private
address refused as a form error, and the delivery history with every attempt, for the project's admins only."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client

from sessions_app import worker
from sessions_app.models import AuditEntry, Project, Role, WebhookEndpoint
from sessions_app.services import notify
from tests.access import member
from tests.sessions_app.services.notify.crashes import crashed, stalled_clock
from tests.webhook_receiver import receiver  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(django_user_model):
    user = django_user_model.objects.create_user("alice")
    member(user, Role.ADMIN)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def local_receivers(settings):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    settings.TURNLOG_WEBHOOK_RETRY_SECONDS = 0.01


def test_an_admin_adds_a_webhook_and_sees_its_secret(admin, receiver):
    answer = admin.post("/projects/default/webhooks", {"url": receiver.url, "agent_patterns": "bot-*", "kinds": ["stalled", "held"], "enabled": "on"})
    hook = WebhookEndpoint.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/projects/default/webhooks/{hook.pk}"
    assert (hook.agent_patterns, hook.kinds, hook.enabled, hook.slack) == ("bot-*", ["stalled", "held"], True, False)
    page = admin.get(answer["Location"]).content.decode()
    assert hook.secret in page and "Delivery history" in page
    assert AuditEntry.objects.get(action=AuditEntry.WEBHOOK_CHANGED).actor_name == "alice"
    assert receiver.url in admin.get("/projects/default/webhooks").content.decode()


def test_a_private_address_is_a_form_error_and_nothing_is_stored(admin, settings):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    audited = AuditEntry.objects.count()
    answer = admin.post("/projects/default/webhooks", {"url": "http://127.0.0.1:9000/hook", "agent_patterns": "*", "kinds": ["stalled"]})
    assert answer.status_code == 422
    assert "127.0.0.1 is a loopback address (allowed only with TURNLOG_WEBHOOK_ALLOW_PRIVATE)" in answer.content.decode()
    assert not WebhookEndpoint.objects.exists() and AuditEntry.objects.count() == audited


def test_three_attempts_of_a_delivery_are_shown_to_the_admin(admin, receiver):
    receiver.statuses = [500, 502]
    hook = notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url)
    session = crashed("crash-page")
    at = stalled_clock(session)
    worker.run_round(now=at)
    for n in range(3):
        worker.deliver_webhooks(now=at + timedelta(hours=n))

    page = admin.get(f"/projects/default/webhooks/{hook.pk}").content.decode()

    [row] = re.findall(r'<tr id="delivery-\d+" class="delivery-delivered">.*?</tr>', page, re.S)
    assert receiver.received[0].headers["webhook-id"] in row and "crash-page" in row
    attempts = re.findall(r'<li class="attempt (ok|failed)">.*?· (HTTP \d+) ·', row, re.S)
    assert attempts == [("failed", "HTTP 500"), ("failed", "HTTP 502"), ("ok", "HTTP 200")]


def test_an_admin_changes_rotates_and_deletes_a_webhook(admin, receiver):
    hook = notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url)
    url = f"/projects/default/webhooks/{hook.pk}"
    assert admin.post(url, {"action": "save", "url": receiver.url, "agent_patterns": "*", "kinds": ["recovered"], "slack": "on"}).status_code == 302
    hook.refresh_from_db()
    assert (hook.kinds, hook.slack, hook.enabled) == (["recovered"], True, False)  # an unticked box turns it off
    secret = hook.secret
    admin.post(url, {"action": "rotate"})
    hook.refresh_from_db()
    assert hook.secret != secret
    assert admin.post(url, {"action": "bogus"}).status_code == 400
    assert admin.post(url, {"action": "delete"})["Location"] == "/projects/default/webhooks"
    assert not WebhookEndpoint.objects.exists()


def test_another_projects_webhook_is_not_found(admin, receiver):
    other = Project.objects.create(slug="other")
    hook = notify.create_endpoint(project=other, actor=None, url=receiver.url)
    assert admin.get(f"/projects/default/webhooks/{hook.pk}").status_code == 404


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://[::127.0.0.1]/", "::127.0.0.1 embeds 127.0.0.1 (IPv4-compatible), a loopback address"),
        ("http://[::7f00:1]/", "::7f00:1 embeds 127.0.0.1 (IPv4-compatible), a loopback address"),
        ("http://[64:ff9b::127.0.0.1]/", "64:ff9b::127.0.0.1 embeds 127.0.0.1 (NAT64), a loopback address"),
        ("http://[64:ff9b::169.254.169.254]/", "64:ff9b::169.254.169.254 embeds 169.254.169.254 (NAT64), a link-local address"),
        ("http://[2002:7f00:1::1]/", "2002:7f00:1::1 embeds 127.0.0.1 (6to4), a loopback address"),
        ("http://[2002:a9fe:a9fe::1]/", "2002:a9fe:a9fe::1 embeds 169.254.169.254 (6to4), a link-local address"),
        ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
    ],
)
def test_an_address_embedding_a_private_one_is_a_form_error_saying_which_and_why(admin, settings, url, why):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    answer = admin.post("/projects/default/webhooks", {"url": url, "agent_patterns": "*", "kinds": ["stalled"]})
    assert answer.status_code == 422
    assert f"{why} (allowed only with TURNLOG_WEBHOOK_ALLOW_PRIVATE)" in answer.content.decode()
    assert not WebhookEndpoint.objects.exists()
