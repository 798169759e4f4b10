"""Where webhooks may go (sessions_app.services.notify.addresses): loopback, link-local and private addresses are refused
unless TURNLOG_WEBHOOK_ALLOW_PRIVATE, when an endpoint is saved and again at each connection; no redirect is followed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sessions_app import worker
from sessions_app.models import DeliveryAttempt, Project, WebhookEndpoint
from sessions_app.services import notify
from sessions_app.services.notify.addresses import url_refusal

from .crashes import crashed, stalled_clock

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:8000/hook", "127.0.0.1 is a loopback address"),
        ("http://localhost/hook", "localhost resolves to 127.0.0.1 is a loopback address"),
        ("http://[::1]/hook", "::1 is a loopback address"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://10.1.2.3/hook", "private or reserved"),
        ("http://192.168.0.10/hook", "private or reserved"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("ftp://example.org/hook", "http:// or https://"),
    ],
)
def test_private_addresses_are_refused_unless_allowed(settings, url, words):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    assert words in url_refusal(url)
    with pytest.raises(notify.EndpointRefused) as refused:
        notify.create_endpoint(project=Project.default(), actor=None, url=url)
    assert refused.value.field == "url" and not WebhookEndpoint.objects.exists()


def test_a_public_address_passes_and_private_ones_pass_when_allowed(settings):
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False
    assert url_refusal("https://93.184.215.14/hook") is None
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True
    assert url_refusal("http://127.0.0.1:8000/hook") is None


def test_the_address_is_checked_again_at_each_connection(receiver, settings):
    """Saved while allowed, sent after the site stopped allowing it (or the name moved to a private address): refused."""
    hook = notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url)
    session = crashed("crash-ssrf")
    worker.run_round(now=stalled_clock(session))
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = False

    [sent] = worker.deliver_webhooks(now=stalled_clock(session))

    assert sent.outcome == "retry" and receiver.received == []
    attempt = DeliveryAttempt.objects.get(delivery__endpoint=hook)
    assert attempt.status_code is None and "refused: 127.0.0.1 is a loopback address (allowed only with TURNLOG_WEBHOOK_ALLOW_PRIVATE)" in attempt.error


def test_a_redirect_is_not_followed(receiver):
    receiver.statuses = [307]
    notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url)
    session = crashed("crash-redirect")
    at = stalled_clock(session)
    worker.run_round(now=at)
    [sent] = worker.deliver_webhooks(now=at)
    assert sent.outcome == "retry" and (sent.status_code, sent.error) == (307, "a redirect (not followed)")
    assert len(receiver.received) == 1
    worker.deliver_webhooks(now=at + timedelta(hours=1))
    assert len(receiver.received) == 2  # retried at the same URL
