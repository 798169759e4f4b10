"""Notifications (sessions_app.services.notify.transitions): one per transition, written by the recovery's own transaction
(recovered, held) or the worker (stalled), each with a delivery to the endpoints that asked for it and existed then."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from sessions_app import services, worker
from sessions_app.models import (
    AutoRecoveryPolicy,
    Delivery,
    Notification,
    Project,
    Session,
    ToolPolicy,
    WebhookEndpoint,
)
from sessions_app.services import notify
from sessions_app.services.notify import transitions

from .crashes import crashed, stalled_clock

pytestmark = pytest.mark.django_db


def endpoint(receiver, **options):
    return notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url, **options)


def test_a_recovery_sends_its_own_notification(receiver, django_user_model):
    hook = endpoint(receiver)
    crashed("crash-r")
    person = django_user_model.objects.create_user("rita")

    services.recover(session_id="crash-r", user=person)
    worker.deliver_webhooks()

    [body] = receiver.verified(hook.secret)
    assert body["type"] == "session.recovered"
    assert body["detail"]["recovered_by"] == "rita" and body["detail"]["automatic"] is False
    # The plan as it stood before the recovery: what was owed and what was recommended.
    assert {call["id"] for call in body["owed_calls"]} == {"c2", "c3"} and body["recommended_strategy"] == "manual_check"
    note = Notification.objects.get(kind="recovered")
    assert note.log_length == Session.objects.get(pk="crash-r").event_count


def test_a_rolled_back_recovery_writes_no_notification(receiver, django_user_model):
    endpoint(receiver)
    crashed("crash-rb")
    person = django_user_model.objects.create_user("rita")
    with pytest.raises(RuntimeError), transaction.atomic():
        services.recover(session_id="crash-rb", user=person)
        raise RuntimeError("rolled back")
    assert not Notification.objects.exists() and not Delivery.objects.exists()


def test_an_automatic_recovery_held_for_repeated_failures_is_notified(receiver):
    hook = endpoint(receiver, kinds=["held"])
    ToolPolicy.objects.create(pattern="tool_*", side_effect=ToolPolicy.READ_ONLY)
    policy = AutoRecoveryPolicy.objects.create(agent_pattern="bot", max_per_hour=0, min_quiet_seconds=900)
    session = crashed("crash-h")
    at = session.last_activity_at + timedelta(seconds=1000)

    assert services.recover_automatically(session_id="crash-h", policy=policy, now=at) is None
    worker.deliver_webhooks(now=at)

    [body] = receiver.verified(hook.secret)
    assert body["type"] == "session.held" and body["detail"] == {"policy": "bot", "limit": 0}
    assert body["recommended_strategy"] == "restart_turn"


def test_one_transition_is_one_row_however_many_see_it(receiver):
    endpoint(receiver)
    session = crashed("crash-twice")
    at = stalled_clock(session)
    with transaction.atomic():
        first = transitions.record(session, "stalled", at=at)
    with transaction.atomic():
        second = transitions.record(session, "stalled", at=at + timedelta(seconds=5))
        session.agent_name = "still writable"  # the caller's transaction goes on after the refused row
        session.save(update_fields=["agent_name"])
    assert first is not None and second is None
    assert Notification.objects.count() == 1 and Delivery.objects.count() == 1
    assert Session.objects.get(pk=session.pk).agent_name == "still writable"


def test_an_endpoint_added_after_a_stall_is_not_told_of_it(receiver):
    session = crashed("crash-old")
    Session.objects.filter(pk="crash-old").update(last_activity_at=timezone.now() - timedelta(hours=2))
    endpoint(receiver)  # added now, long after the session stalled

    worker.run_round()
    worker.deliver_webhooks()

    assert Notification.objects.filter(session=session, kind="stalled").exists()  # the stall is recorded
    assert not Delivery.objects.exists() and receiver.received == []


def test_an_endpoint_enabled_again_is_not_told_of_what_happened_while_it_was_off(receiver):
    hook = endpoint(receiver, enabled=False)
    type(hook).objects.filter(pk=hook.pk).update(created_at=timezone.now() - timedelta(hours=3))  # added long ago
    crashed("crash-off")
    Session.objects.filter(pk="crash-off").update(last_activity_at=timezone.now() - timedelta(hours=2))  # stalled while off

    notify.update_endpoint(endpoint=hook, actor=None, enabled=True)
    worker.run_round()  # the first round to see the stall
    worker.deliver_webhooks()

    assert Notification.objects.filter(kind="stalled").exists() and not Delivery.objects.exists() and receiver.received == []
    hook.refresh_from_db()
    assert hook.created_at > timezone.now() - timedelta(minutes=1)


def test_only_the_agents_and_transitions_an_endpoint_names(receiver):
    wanted = endpoint(receiver, agent_patterns="indexer-* mailer", kinds=["stalled"])
    endpoint(receiver, kinds=["recovered"])
    for session_id, agent in (("a", "indexer-7"), ("b", "mailer"), ("c", "other")):
        crashed(session_id, agent=agent)
    worker.run_round(now=stalled_clock(Session.objects.get(pk="c")))
    told = set(Delivery.objects.filter(endpoint=wanted).values_list("notification__session_id", flat=True))
    assert told == {"a", "b"}
    assert Delivery.objects.count() == 2  # the recovered-only endpoint: nothing for stalls


def test_a_session_written_to_before_the_lock_is_not_stalled(receiver):
    endpoint(receiver)
    session = crashed("crash-back")
    at = stalled_clock(session)
    Session.objects.filter(pk="crash-back").update(last_activity_at=at)  # the agent came back meanwhile
    assert transitions.record_stalls(now=at) == []


def test_a_deleted_session_takes_its_notifications_deliveries_and_attempts_along(receiver):
    from sessions_app.models import DeliveryAttempt
    from sessions_app.services import retention

    hook = endpoint(receiver)
    session = crashed("crash-gone")
    worker.run_round(now=stalled_clock(session))
    worker.deliver_webhooks(now=stalled_clock(session))
    assert DeliveryAttempt.objects.exists()
    gone = retention.delete_session(session_id="crash-gone")
    assert gone.rows["sessions_app.Notification"] == 1 and gone.rows["sessions_app.Delivery"] == 1
    assert not Notification.objects.exists() and not Delivery.objects.exists() and not DeliveryAttempt.objects.exists()
    assert WebhookEndpoint.objects.filter(pk=hook.pk).exists()  # the project's endpoint stays
