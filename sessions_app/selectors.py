"""Reads: the queries views, the API and consumers use."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from sessions_app.log import events as log_events
from sessions_app.log import fold
from sessions_app.models import Event, Session
from sessions_app.services import SessionNotFound


class InvalidCursor(ValueError):
    pass


@dataclass(frozen=True)
class SessionPage:
    items: list[Session]
    next_cursor: str | None


def get_session(session_id: str) -> Session:
    try:
        return Session.objects.select_related("parent").get(pk=session_id)
    except Session.DoesNotExist:
        raise SessionNotFound(session_id) from None


def list_sessions(
    *, interrupted: bool | None = None, q: str = "", limit: int = 50, cursor: str | None = None
) -> SessionPage:
    """Sessions by newest activity first, keyset-paginated on (activity, id)."""
    sessions = Session.objects.order_by("-last_activity_at", "-id")
    if interrupted is not None:
        sessions = sessions.filter(interrupted=interrupted)
    if q:
        sessions = sessions.filter(Q(id__icontains=q) | Q(agent_name__icontains=q))
    if cursor:
        activity, last_id = decode_cursor(cursor)
        sessions = sessions.filter(Q(last_activity_at__lt=activity) | Q(last_activity_at=activity, id__lt=last_id))
    items = list(sessions[: limit + 1])
    has_more = len(items) > limit
    items = items[:limit]
    next_cursor = encode_cursor(items[-1]) if has_more else None
    return SessionPage(items=items, next_cursor=next_cursor)


def encode_cursor(session: Session) -> str:
    raw = json.dumps([session.last_activity_at.isoformat(), session.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        activity, session_id = json.loads(raw)
        return datetime.fromisoformat(activity), str(session_id)
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InvalidCursor(f"cursor {cursor!r} is not one this API returned") from exc


def events_since(session: Session, *, since: int = 0, limit: int | None = None) -> list[log_events.Event]:
    """Stored events with seq >= since, oldest first (since is inclusive)."""
    if since < 0:
        raise ValueError(f"since must be 0 or more, got {since}")
    rows = Event.objects.filter(session=session, seq__gte=since).order_by("seq")
    if limit is not None:
        rows = rows[:limit]
    return [log_events.Event(seq=r[0], type=r[1], time=r[2], data=r[3]) for r in rows.values_list("seq", "type", "time", "data")]


def session_log(session: Session) -> list[log_events.Event]:
    return events_since(session, since=0)


def session_messages(session: Session) -> list[dict]:
    return fold.project(session_log(session))
