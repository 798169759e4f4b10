"""Sessions that crash, and the clock at which they read stalled, for the notify tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import Session
from tests.sessions_app import factories as f


def crashed(session_id: str, agent: str = "bot", project=None) -> Session:
    """session-log.md's worked example: turn 1 open, call c3 dispatched and never answered."""
    services.create_session(session_id=session_id, agent_name=agent, project=project)
    services.append_events(session_id=session_id, events=validate_batch(f.worked_example()))
    return Session.objects.get(pk=session_id)


def stalled_clock(session: Session, after: timedelta = timedelta(seconds=1)) -> datetime:
    """A moment at which the session reads stalled (its stall window passed, nothing written)."""
    return session.last_activity_at + timedelta(seconds=settings.TURNLOG_STALL_SECONDS) + after


def now() -> datetime:
    return timezone.now()
