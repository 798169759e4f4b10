"""Sending webhooks (sessions_app.services.notify.delivery) to a real HTTP receiver: signed the Standard Webhooks way and
verified by the receiver with `standardwebhooks`, once with two workers at once, retried with the same webhook-id,
a 410 disabling its endpoint, Slack's {"text"} body. SQLite, then PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from sessions_app import worker
from sessions_app.models import AuditEntry, Delivery, DeliveryAttempt, Notification, Project, Session, WebhookEndpoint
from sessions_app.services import notify
from tests.concurrency import run_at_once

from .crashes import crashed, stalled_clock

HOUR = timedelta(hours=1)  # past any retry's backoff in these tests


def delivered_count() -> float:
    return REGISTRY.get_sample_value("turnlog_webhook_deliveries_total", {"outcome": "delivered"}) or 0.0


def endpoint_for(receiver, **options) -> WebhookEndpoint:
    return notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url, **options)


@pytest.mark.django_db(transaction=True)
def test_a_stalled_session_is_delivered_once_signed_with_two_workers_at_once(receiver):
    endpoint = endpoint_for(receiver)
    session = crashed("crash-1")
    later = stalled_clock(session)
    delivered_before = delivered_count()

    def one_worker():
        worker.run_round(now=later)
        return worker.deliver_webhooks(now=later)

    outcomes = run_at_once(one_worker, [(), ()])

    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    assert len(receiver.received) == 1
    [body] = receiver.verified(endpoint.secret)
    assert body["type"] == "session.stalled" and body["session"]["id"] == "crash-1"
    assert Notification.objects.filter(session=session, kind="stalled").count() == 1
    delivery = Delivery.objects.get()
    assert delivery.state == Delivery.DELIVERED and receiver.received[0].headers["webhook-id"] == delivery.webhook_id
    assert list(DeliveryAttempt.objects.values_list("number", "status_code")) == [(1, 200)]
    assert delivered_count() == delivered_before + 1  # turnlog_webhook_deliveries_total{outcome="delivered"}, after commit
    # Another round finds nothing new: the notification is of the log at this length.
    worker.run_round(now=later + HOUR)
    worker.deliver_webhooks(now=later + HOUR)
    assert len(receiver.received) == 1


@pytest.mark.django_db
def test_the_payload_names_the_owed_calls_their_risk_and_class_the_strategy_and_the_preview(receiver):
    endpoint = endpoint_for(receiver)
    session = crashed("crash-2")
    worker.run_round(now=stalled_clock(session))
    worker.deliver_webhooks(now=stalled_clock(session))
    [body] = receiver.verified(endpoint.secret)
    assert body["project"] == {"slug": "default", "name": "Default"}
    assert body["open_turns"] == [{"seq": 1, "label": "turn 1 (opened at seq 1)"}]
    owed = {call["id"]: (call["name"], call["risk"], call["side_effect"]) for call in body["owed_calls"]}
    assert owed == {"c2": ("tool_c2", "tool_not_started", "unknown"), "c3": ("tool_c3", "tool_outcome_unknown", "unknown")}
    assert body["recommended_strategy"] == "manual_check" and body["strategies"][0]["strategy"] == "manual_check"
    assert body["recovery_preview_url"] == "https://turnlog.example.org/sessions/crash-2/recovery"
    assert body["session"]["url"] == "https://turnlog.example.org/sessions/crash-2/"


@pytest.mark.django_db
def test_a_receiver_failing_twice_gets_three_attempts_with_one_webhook_id(receiver):
    receiver.statuses = [500, 503]
    endpoint = endpoint_for(receiver)
    session = crashed("crash-3")
    at = stalled_clock(session)
    worker.run_round(now=at)

    sent = [worker.deliver_webhooks(now=at + HOUR * n) for n in range(4)]

    assert [[s.outcome for s in batch] for batch in sent] == [["retry"], ["retry"], ["delivered"], []]
    ids = {r.headers["webhook-id"] for r in receiver.received}
    assert len(receiver.received) == 3 and len(ids) == 1
    assert len(receiver.verified(endpoint.secret)) == 3  # each attempt signed afresh, each verifies
    attempts = DeliveryAttempt.objects.order_by("number")
    assert [(a.number, a.status_code, a.error) for a in attempts] == [(1, 500, ""), (2, 503, ""), (3, 200, "")]
    assert all(a.latency_ms >= 0 for a in attempts)


@pytest.mark.django_db
def test_a_retry_waits_its_backoff(receiver):
    receiver.statuses = [500]
    endpoint_for(receiver)
    session = crashed("crash-4")
    at = stalled_clock(session)
    worker.run_round(now=at)
    worker.deliver_webhooks(now=at)
    delivery = Delivery.objects.get()
    # The first retry waits the base (0.01 s here) plus up to as much again.
    assert delivery.state == Delivery.PENDING and delivery.attempts == 1
    assert timedelta(0) < delivery.next_attempt_at - DeliveryAttempt.objects.get().at <= timedelta(seconds=0.02)
    assert notify.delivery.backoff(4) >= timedelta(seconds=0.08)


@pytest.mark.django_db
def test_a_connection_error_is_retried_and_the_last_attempt_fails_the_delivery(receiver, settings):
    settings.TURNLOG_WEBHOOK_MAX_ATTEMPTS = 2
    endpoint = notify.create_endpoint(project=Project.default(), actor=None, url="http://127.0.0.1:9/nothing-listens")
    session = crashed("crash-5")
    at = stalled_clock(session)
    worker.run_round(now=at)
    first = worker.deliver_webhooks(now=at)
    second = worker.deliver_webhooks(now=at + HOUR)
    assert [s.outcome for s in first + second] == ["retry", "failed"]
    assert all(a.status_code is None and "ConnectError" in a.error for a in DeliveryAttempt.objects.all())
    assert Delivery.objects.get(endpoint=endpoint).state == Delivery.FAILED


@pytest.mark.django_db
def test_a_410_disables_the_endpoint_and_cancels_what_it_was_still_owed(receiver):
    receiver.statuses = [410]
    endpoint = endpoint_for(receiver)
    first, second = crashed("crash-6"), crashed("crash-7")
    at = stalled_clock(second)
    worker.run_round(now=at)
    assert Delivery.objects.count() == 2

    sent = worker.deliver_webhooks(now=at)

    assert [s.outcome for s in sent] == ["gone"] and len(receiver.received) == 1  # the other one is cancelled, not sent
    endpoint.refresh_from_db()
    assert not endpoint.enabled and "410" in endpoint.disabled_reason
    assert sorted(Delivery.objects.values_list("state", flat=True)) == [Delivery.CANCELLED, Delivery.FAILED]
    entry = AuditEntry.objects.get(action=AuditEntry.WEBHOOK_CHANGED, actor_name="webhooks")
    assert entry.detail["why"] == "410 Gone" and entry.target == endpoint.url


@pytest.mark.django_db
def test_a_slack_endpoint_gets_one_line_of_text(receiver):
    endpoint = endpoint_for(receiver, slack=True)
    session = crashed("crash-8", agent="mailer")
    worker.run_round(now=stalled_clock(session))
    worker.deliver_webhooks(now=stalled_clock(session))
    [body] = receiver.verified(endpoint.secret)
    assert set(body) == {"text"}
    assert "session crash-8 (agent mailer) in project default stalled" in body["text"]
    assert "tool_c3 (c3): tool_outcome_unknown, unknown" in body["text"]
    assert "https://turnlog.example.org/sessions/crash-8/recovery" in body["text"]


@pytest.mark.django_db
def test_a_claimed_delivery_is_left_to_its_worker(receiver):
    endpoint_for(receiver)
    session = crashed("crash-9")
    at = stalled_clock(session)
    worker.run_round(now=at)
    Delivery.objects.update(claimed_until=timezone.now() + HOUR)  # another worker is sending it
    assert worker.deliver_webhooks(now=at) == [] and receiver.received == []


@pytest.mark.django_db
def test_a_pass_starts_no_delivery_after_its_time_and_leaves_the_rest_unclaimed(receiver, monkeypatch):
    endpoint_for(receiver)
    for n in range(3):
        crashed(f"slow-{n}")
    at = stalled_clock(Session.objects.get(pk="slow-2"))
    worker.run_round(now=at)
    monkeypatch.setattr(notify.delivery, "PASS_SECONDS", 0.0)  # out of time after the first
    assert len(worker.deliver_webhooks(now=at)) == 1
    assert Delivery.objects.filter(state=Delivery.PENDING, claimed_until__isnull=True).count() == 2
    assert len(worker.deliver_webhooks(now=at)) == 1
