"""Sending: the worker claims each due delivery (a conditional UPDATE, so of several workers one sends it),
sends it signed the Standard Webhooks way, records the attempt, and schedules the next one with exponential
backoff and jitter after a timeout, a connection error or an answer other than 2xx. A 410 disables the endpoint.
Every attempt of one delivery carries the same webhook-id; receivers deduplicate on it (at least once)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from standardwebhooks import Webhook

from sessions_app.lib import instruments
from sessions_app.models import AuditEntry, Delivery, DeliveryAttempt, WebhookEndpoint
from sessions_app.services.audit_log import audit

from . import addresses, payload

SENDS_PER_PASS = 50  # the rest next pass (the worker passes every second)
PASS_SECONDS = 5.0  # no new delivery is started after this long, so slow receivers hold up the worker's rounds little
CLAIM_MARGIN = timedelta(seconds=30)  # a claim outlives its attempt's timeout by this much; a crashed worker's expires
ERROR_CHARS = 500
WEBHOOKS = "webhooks"  # the audit entries' actor name when a 410 disabled an endpoint


@dataclass(frozen=True)
class Sent:
    webhook_id: str
    outcome: str  # delivered | retry | failed (out of attempts) | gone (410: endpoint disabled) | cancelled
    attempt: int
    status_code: int | None
    error: str


def send_due(*, now: datetime | None = None, limit: int = SENDS_PER_PASS) -> list[Sent]:
    """Send the deliveries that are due, each claimed first; what happened to each one sent."""
    now = now or timezone.now()
    due = Q(state=Delivery.PENDING, next_attempt_at__lte=now) & (Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
    ids = list(Delivery.objects.filter(due).order_by("next_attempt_at", "id").values_list("pk", flat=True)[:limit])
    if not ids:
        return []
    sent = []
    claim_until = now + timedelta(seconds=settings.TURNLOG_WEBHOOK_TIMEOUT_SECONDS) + CLAIM_MARGIN
    started = time.monotonic()
    with addresses.client() as client:
        for delivery_id in ids:
            if not Delivery.objects.filter(due, pk=delivery_id).update(claimed_until=claim_until):
                continue  # another worker claimed it, or sent it, meanwhile
            delivery = Delivery.objects.select_related("endpoint", "notification").get(pk=delivery_id)
            sent.append(_attempt(client, delivery))
            if time.monotonic() - started > PASS_SECONDS:
                break  # the rest, unclaimed, next pass
    return sent


def _attempt(client: httpx.Client, delivery: Delivery) -> Sent:
    endpoint = delivery.endpoint
    if not endpoint.enabled:
        Delivery.objects.filter(pk=delivery.pk).update(state=Delivery.CANCELLED, claimed_until=None)
        return Sent(delivery.webhook_id, Delivery.CANCELLED, delivery.attempts, None, "endpoint disabled")
    body_of = payload.slack_text(delivery.notification.payload) if endpoint.slack else delivery.notification.payload
    body = orjson.dumps(body_of)
    at = timezone.now()
    headers = signed_headers(endpoint.secret, delivery.webhook_id, at, body)
    started = time.monotonic()
    status, error = None, ""  # error: what the status does not say (no answer, a redirect)
    try:
        response = client.post(endpoint.url, content=body, headers=headers)
        status = response.status_code
        if 300 <= status < 400:
            error = "a redirect (not followed)"
    except httpx.TimeoutException as exc:
        error = f"timed out after {settings.TURNLOG_WEBHOOK_TIMEOUT_SECONDS:g} s ({type(exc).__name__})"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    latency_ms = (time.monotonic() - started) * 1000
    return _record(delivery, at=at, status=status, error=error[:ERROR_CHARS], latency_ms=latency_ms)


def signed_headers(secret: str, message_id: str, at: datetime, body: bytes, *, user_agent: str = "Turnlog-Webhooks") -> dict[str, str]:
    """The Standard Webhooks headers of one request (reconcilers' requests are signed the same way)."""
    return {
        "content-type": "application/json",
        "user-agent": user_agent,
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, at, body),
    }


def _record(delivery: Delivery, *, at: datetime, status: int | None, error: str, latency_ms: float) -> Sent:
    """The attempt and what follows: delivered on a 2xx; else retried, or failed when out of attempts or gone (410)."""
    number = delivery.attempts + 1
    if status is not None and 200 <= status < 300:
        outcome = Delivery.DELIVERED
    elif status == 410:
        outcome = "gone"
    elif number >= settings.TURNLOG_WEBHOOK_MAX_ATTEMPTS:
        outcome = Delivery.FAILED
    else:
        outcome = "retry"
    state = {"gone": Delivery.FAILED, "retry": Delivery.PENDING}.get(outcome, outcome)
    with transaction.atomic():
        DeliveryAttempt.objects.create(delivery=delivery, number=number, at=at, status_code=status, latency_ms=latency_ms, error=error)
        Delivery.objects.filter(pk=delivery.pk).update(
            attempts=F("attempts") + 1, state=state, claimed_until=None, next_attempt_at=at + backoff(number)
        )
        if outcome == "gone":
            _disable(delivery.endpoint, at=at)
        transaction.on_commit(instruments.WEBHOOK_DELIVERIES.labels(outcome).inc)
    return Sent(delivery.webhook_id, outcome, number, status, error)


def backoff(attempt: int) -> timedelta:
    """The wait after the attempt-th failure: the base doubled each time, plus up to as much again at random."""
    wait = settings.TURNLOG_WEBHOOK_RETRY_SECONDS * 2 ** (attempt - 1)
    return timedelta(seconds=wait + random.uniform(0, wait))


def _disable(endpoint: WebhookEndpoint, *, at: datetime) -> None:
    """A 410 Gone: the receiver says the endpoint is no more. Disabled (a project admin may enable it again), audited."""
    reason = f"disabled: the receiver answered 410 Gone at {at.isoformat(timespec='seconds')}"
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(enabled=False, disabled_reason=reason)
    Delivery.objects.filter(endpoint=endpoint, state=Delivery.PENDING).exclude(claimed_until__gt=at).update(state=Delivery.CANCELLED)
    audit(
        project=endpoint.project_id, actor=None, action=AuditEntry.WEBHOOK_CHANGED, target=endpoint.url,
        detail={"endpoint": endpoint.pk, "enabled": False, "why": "410 Gone"}, actor_name=WEBHOOKS,
    )  # fmt: skip
