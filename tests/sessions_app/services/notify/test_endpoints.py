"""A project's webhook endpoints (sessions_app.services.notify.endpoints): checked, audited, a new secret on request."""

from __future__ import annotations

import pytest
from standardwebhooks import Webhook

from sessions_app.models import AuditEntry, Project, WebhookEndpoint
from sessions_app.services import notify

pytestmark = pytest.mark.django_db


def test_changes_are_audited_and_a_new_secret_replaces_the_old(receiver):
    hook = notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url, kinds=["stalled"])
    assert hook.secret.startswith("whsec_") and Webhook(hook.secret)  # a Standard Webhooks secret
    old = hook.secret
    notify.update_endpoint(endpoint=hook, actor=None, kinds=["stalled", "held"], rotate_secret=True)
    hook.refresh_from_db()
    assert hook.secret != old and hook.kinds == ["stalled", "held"]
    notify.delete_endpoint(endpoint=hook, actor=None)
    assert not WebhookEndpoint.objects.exists()
    details = list(AuditEntry.objects.filter(action=AuditEntry.WEBHOOK_CHANGED).order_by("pk").values_list("detail", flat=True))
    assert [d.get("created") or d.get("changed") or d.get("deleted") for d in details] == [True, ["kinds", "secret"], True]
    assert "secret" not in str([d.get("kinds") for d in details]) and old not in str(details)  # secrets never audited


@pytest.mark.parametrize(
    ("change", "field"), [({"kinds": []}, "kinds"), ({"kinds": ["crashed"]}, "kinds"), ({"agent_patterns": "  "}, "agent_patterns")]
)
def test_an_endpoint_needs_transitions_and_agents(receiver, change, field):
    with pytest.raises(notify.EndpointRefused) as refused:
        notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url, **change)
    assert refused.value.field == field and not WebhookEndpoint.objects.exists()


def test_a_change_to_nothing_is_not_audited(receiver):
    hook = notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url)
    notify.update_endpoint(endpoint=hook, actor=None, url=receiver.url, enabled=True)
    assert AuditEntry.objects.filter(action=AuditEntry.WEBHOOK_CHANGED).count() == 1
