"""Alerts (sessions_app/services/notify): webhook endpoints per project, one notification per transition of a session,
and each endpoint's delivery of it with every attempt."""

from __future__ import annotations

import base64
import secrets
import uuid

from django.db import models
from django.utils import timezone

from sessions_app.models.projects import Project
from sessions_app.models.sessions import Session

STALLED, RECOVERED, HELD = "stalled", "recovered", "held"
KINDS = [(STALLED, "Stalled (likely crashed)"), (RECOVERED, "Recovered"), (HELD, "Held for a person (repeated failures)")]


def new_secret() -> str:
    """A Standard Webhooks secret: whsec_ and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_webhook_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def all_kinds() -> list[str]:
    return [STALLED, RECOVERED, HELD]


class WebhookEndpoint(models.Model):
    """Where a project's alerts go, and which: agents by name or pattern, and which transitions."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000, verbose_name="URL")
    agent_patterns = models.CharField(
        max_length=500, default="*", help_text="Agent names or shell-style patterns, separated by spaces (* for every agent)"
    )
    kinds = models.JSONField(default=all_kinds, help_text="Transitions to send: stalled, recovered, held")
    secret = models.CharField(max_length=100, default=new_secret, help_text="Standard Webhooks signing secret")
    enabled = models.BooleanField(default=True)
    # Slack's incoming webhooks take {"text": ...}: the same alert as one line of text.
    slack = models.BooleanField(default=False, verbose_name="Slack-compatible payload")
    # An endpoint is told only of transitions from this moment on (set again when it is enabled again).
    created_at = models.DateTimeField(default=timezone.now)
    # Why it was disabled by Turnlog (a 410 Gone), shown on the page.
    disabled_reason = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        ordering = ["project", "id"]

    def __str__(self) -> str:
        return f"{self.url} ({'on' if self.enabled else 'off'})"

    @property
    def patterns(self) -> list[str]:
        return self.agent_patterns.split() or ["*"]


class Notification(models.Model):
    """One transition of a session: written once, whichever process or worker sees it first."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=20, choices=KINDS)
    # The log's length at the transition: a session stalls (or is recovered) again only after it grows.
    log_length = models.PositiveIntegerField()
    occurred_at = models.DateTimeField(default=timezone.now)
    # What every delivery of it sends (built once, so every attempt sends the same body).
    payload = models.JSONField()

    class Meta:
        ordering = ["-occurred_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["session", "kind", "log_length"], name="notification_transition_unique")]

    def __str__(self) -> str:
        return f"{self.session_id} {self.kind} at length {self.log_length}"


class Delivery(models.Model):
    """One notification to one endpoint: attempted until delivered, out of attempts, or the endpoint is gone."""

    PENDING, DELIVERED, FAILED, CANCELLED = "pending", "delivered", "failed", "cancelled"
    STATES = [(PENDING, "Pending"), (DELIVERED, "Delivered"), (FAILED, "Failed"), (CANCELLED, "Cancelled (endpoint disabled)")]

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    # Every attempt carries it: receivers deduplicate on it (delivery is at least once).
    webhook_id = models.CharField(max_length=40, unique=True, default=new_webhook_id)
    state = models.CharField(max_length=10, choices=STATES, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    # A worker sending it holds it until then; another worker leaves it alone meanwhile.
    claimed_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["notification", "endpoint"], name="delivery_once_per_endpoint")]
        indexes = [models.Index(fields=["next_attempt_at"], name="delivery_due_idx", condition=models.Q(state="pending"))]

    def __str__(self) -> str:
        return f"{self.webhook_id} {self.state}"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    at = models.DateTimeField(default=timezone.now)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    latency_ms = models.FloatField()
    error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="delivery_attempt_unique")]

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300
