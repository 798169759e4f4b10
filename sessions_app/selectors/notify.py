"""Webhook reads: a project's endpoints, one of them, and its deliveries with every attempt (the admins' history)."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q

from sessions_app.models import Delivery, DeliveryAttempt, Project, WebhookEndpoint

HISTORY_LIMIT = 50  # deliveries shown, newest first


def project_webhooks(project: Project) -> list[WebhookEndpoint]:
    """The project's endpoints, each with its counts of deliveries by state."""
    counts = {
        f"{state}_count": Count("deliveries", filter=Q(deliveries__state=state))
        for state in (Delivery.PENDING, Delivery.DELIVERED, Delivery.FAILED)
    }
    return list(WebhookEndpoint.objects.filter(project=project).annotate(**counts).order_by("id"))


def project_webhook(project: Project, endpoint_id: int) -> WebhookEndpoint | None:
    return WebhookEndpoint.objects.filter(project=project, pk=endpoint_id).first()


def delivery_history(endpoint: WebhookEndpoint, *, limit: int = HISTORY_LIMIT) -> list[Delivery]:
    """The endpoint's latest deliveries, newest first, each with its notification and its attempts in order."""
    attempts = Prefetch("attempt_rows", queryset=DeliveryAttempt.objects.order_by("number"))
    return list(
        Delivery.objects.filter(endpoint=endpoint).select_related("notification").prefetch_related(attempts).order_by("-created_at", "-id")[:limit]
    )
