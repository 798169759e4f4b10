"""Notifications: one row per transition of a session (stalled, recovered, held), unique on (session, kind, the
log's length), and a pending delivery for each endpoint of its project that asked for it and existed then.

Recoveries and holds are recorded in their own transaction (services/recovery.py calls `record`); a stall
happens by time alone, so the worker finds it (`record_stalls`). Several processes and workers may see one
transition: the unique key refuses the second row (IntegrityError, in a savepoint), so it is written once.
"""

from __future__ import annotations

import fnmatch
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from sessions_app.lib import statements
from sessions_app.log import recovery as log_recovery
from sessions_app.log import strategy as log_strategy
from sessions_app.models import STALLED, Delivery, Notification, Session, WebhookEndpoint
from sessions_app.selectors.sessions import STALLED as STALLED_STATUS
from sessions_app.selectors.sessions import status_filter

from . import payload

STALLS_PER_ROUND = 200  # the oldest first; the rest next round


def record(
    session: Session,
    kind: str,
    *,
    at: datetime | None = None,
    plan: log_recovery.Plan | None = None,
    turns: list[log_strategy.TurnStrategy] | None = None,
    detail: dict | None = None,
) -> Notification | None:
    """The transition's notification and its deliveries, inside the caller's transaction (the session locked);
    None when another process or worker wrote it first (its deliveries came with it)."""
    at = at or timezone.now()
    body = payload.build(session, kind, at=at, plan=plan, turns=turns, detail=detail)
    try:
        with transaction.atomic():  # a savepoint: the unique key refuses a second row, and the caller's work goes on
            notification = Notification.objects.create(session_id=session.pk, kind=kind, log_length=session.event_count, occurred_at=at, payload=body)
    except IntegrityError:
        return None
    endpoints = WebhookEndpoint.objects.filter(project_id=session.project_id, enabled=True, created_at__lte=notification.occurred_at)
    wanted = [e for e in endpoints if kind in e.kinds and matches(session.agent_name, e.patterns)]
    Delivery.objects.bulk_create([Delivery(notification=notification, endpoint=e, next_attempt_at=at) for e in wanted])
    return notification


def matches(agent_name: str, patterns: list[str]) -> bool:
    return any(agent_name == p or fnmatch.fnmatchcase(agent_name, p) for p in patterns)


def record_stalls(*, now: datetime | None = None, limit: int = STALLS_PER_ROUND) -> list[Notification]:
    """The worker's part: sessions that stalled (status_filter's rule) and have no notification of it at their length.

    Each is checked again under its lock (the agent may have written since), in its own short transaction.
    """
    now = now or timezone.now()
    told = Notification.objects.filter(session=OuterRef("pk"), kind=STALLED, log_length=OuterRef("event_count"))
    candidates = (
        Session.objects.filter(status_filter(STALLED_STATUS, now))
        .exclude(Exists(told))
        .order_by("last_activity_at", "id")
        .values_list("id", flat=True)[:limit]
    )
    recorded = []
    for session_id in list(candidates):
        with transaction.atomic():
            session = statements.get_for_update(Session, session_id)
            if session is None or not session.interrupted or session.last_activity_at > now - _window():
                continue  # deleted, or written to since the read
            if notification := record(session, STALLED, at=session.last_activity_at + _window()):
                recorded.append(notification)
    return recorded


def _window() -> timedelta:
    return timedelta(seconds=settings.TURNLOG_STALL_SECONDS)
