"""`seen_at`: the instant a page read what it shows, which its live socket catches up from.

A page is read, then its socket joins the groups that carry changes: what is committed
in between, or while the socket is away, reaches no socket. Events catch up by seq
(`after`); notes, verdicts and the session list catch up by time (sessions_app.selectors.changes).
The page renders `_live_seen.html` with the instant its view began; turnlog.js sends it
as `seen_at` on every (re)connect; each socket, once joined, sends the instant it joined
in its place, so a reconnect asks only for what came after.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from django.template.loader import render_to_string

PARAM = "seen_at"
INSTANT = re.compile(r"[0-9T:.+Z-]{10,40}")


class BadSeenAt(ValueError):
    pass


def read(query: dict[str, str]) -> datetime | None:
    """The instant in the socket's query, None when it has none; BadSeenAt when it is no ISO 8601 instant with its offset."""
    text = query.get(PARAM, "")
    if not text:
        return None
    try:  # the characters of an ISO 8601 instant alone (fromisoformat lets a trailing NUL by), and one that
        # moves back by a day without leaving the calendar (the catch-up reads a little before it)
        instant = datetime.fromisoformat(text) if INSTANT.fullmatch(text) else None
        if instant is not None and instant.tzinfo is not None:
            instant.astimezone(UTC) - timedelta(days=1)
    except (ValueError, OverflowError):
        instant = None
    if instant is None or instant.tzinfo is None:
        raise BadSeenAt(f"{PARAM} must be an ISO 8601 instant with its offset, as the page gives it; {text[:40]!r} is not")
    return instant


def marker(joined_at: datetime) -> str:
    """The frame that moves the page's instant to the socket's join: what came later, the socket sent."""
    return render_to_string("_live_seen.html", {"seen_at": joined_at, "oob": True}).strip()
