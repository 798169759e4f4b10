"""The retention sweep: sessions past their project's retention deleted in batches, each in its own short
transaction (deletion.delete_session, which checks again under the session's lock)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from sessions_app.lib.errors import SessionHasForks, SessionNotExpired, SessionNotFound
from sessions_app.selectors import retention as expiry

from .deletion import DeletedSession, delete_session

BATCH = 100  # sessions read per query
SWEEP_LIMIT = 500  # deletions per sweep: the worker's other work waits meanwhile; the rest goes next round


@dataclass(frozen=True)
class Swept:
    deleted: list[DeletedSession]
    kept: list[expiry.Expired]  # past retention and kept (blocked, or forked), with why


def sweep(*, now: datetime | None = None, limit: int = SWEEP_LIMIT, batch: int = BATCH) -> Swept:
    """Delete the sessions past their project's retention, at most `limit`, oldest first (Session.retained_from); list those kept."""
    now = now or timezone.now()
    projects = [p.pk for p in expiry.projects_with_retention()]
    deleted: list[DeletedSession] = []
    # Found held under their lock (a turn opened, a fork made, written to, annotated or recovered since the
    # read): not tried again this sweep; the list of kept sessions below reads them as they now are.
    skipped: set[str] = set()
    while len(deleted) < limit and projects:
        rows = expiry.expired_sessions(now=now, held=False, limit=batch + len(skipped), projects=projects)
        found = [e for e in rows if e.session_id not in skipped]
        if not found:
            break
        for expired in found[: limit - len(deleted)]:
            try:
                gone = delete_session(session_id=expired.session_id, by_retention=True, now=now)
            except SessionNotFound:
                continue  # deleted meanwhile
            except (SessionHasForks, SessionNotExpired):
                skipped.add(expired.session_id)
                continue
            deleted.append(gone)
    return Swept(deleted, held_sessions(now=now, projects=projects) if projects else [])


def held_sessions(*, now: datetime | None = None, limit: int = 200, projects: list[int] | None = None) -> list[expiry.Expired]:
    """Sessions past retention that the sweep keeps, with why (blocked by an unrecovered open turn, or forked)."""
    return expiry.expired_sessions(now=now or timezone.now(), held=True, limit=limit, projects=projects)

