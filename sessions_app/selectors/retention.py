"""Retention's reads: the sessions past their project's retention (Project.retention_days), by the server's clock.

Retention counts from Session.retained_from: the latest of the session's
creation or import, its last event received, its last note added or edited
and its last recovery (not last_activity_at, which for an import is its
events' claimed time). A session past it is deleted by the sweep
(sessions_app/services/retention) unless it is held: an open turn still unrecovered
(Session.interrupted) blocks it, and forks keep their parent
(docs/session-log.md, Retention). Each read is one query on
session_retention_idx per project with a retention.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef

from sessions_app.models import Project, Session

BLOCKED = "blocked"  # an open turn still unrecovered
HAS_FORKS = "has_forks"  # forks keep their parent
HELD_WORDS = {
    BLOCKED: "an open turn is still unrecovered: recover the session (or close its turn) and the sweep deletes it",
    HAS_FORKS: "it has forks, whose inherited search hits and calls read its rows: it goes after them",
}


@dataclass(frozen=True)
class Expired:
    """A session past its project's retention."""

    session_id: str
    project_id: int
    agent_name: str
    retained_from: datetime  # what its retention counts from
    held: str | None  # None: the sweep deletes it; else BLOCKED or HAS_FORKS

    @property
    def why(self) -> str:
        return HELD_WORDS.get(self.held, "")


def cutoff(project: Project, now: datetime) -> datetime | None:
    """Sessions retained from before this (Session.retained_from) are past the project's retention; None: kept forever."""
    return None if project.retention_days is None else now - timedelta(days=project.retention_days)


def projects_with_retention(projects: list[int] | None = None) -> list[Project]:
    found = Project.objects.filter(retention_days__isnull=False).order_by("pk")
    return list(found if projects is None else found.filter(pk__in=projects))


def expired_sessions(*, now: datetime, held: bool, limit: int, projects: list[int] | None = None) -> list[Expired]:
    """Sessions past retention, oldest first (by what retention counts from): those the sweep deletes (held=False)
    or those it keeps (held=True, with why), at most `limit`."""
    found: list[Expired] = []
    for project in projects_with_retention(projects):
        if len(found) >= limit:
            break
        forked = Exists(Session.objects.filter(parent_id=OuterRef("pk")))
        rows = Session.objects.filter(project=project, retained_from__lt=cutoff(project, now)).annotate(forked=forked)
        rows = rows.filter(interrupted=True) | rows.filter(forked=True) if held else rows.filter(interrupted=False, forked=False)
        for session_id, agent_name, retained_from, interrupted, has_forks in rows.order_by("retained_from", "id").values_list(
            "id", "agent_name", "retained_from", "interrupted", "forked"
        )[: limit - len(found)]:
            why = BLOCKED if interrupted else HAS_FORKS if has_forks else None
            found.append(Expired(session_id, project.pk, agent_name, retained_from, why))
    return found
