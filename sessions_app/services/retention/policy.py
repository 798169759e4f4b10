"""A project's retention setting (Project.retention_days), changed by its admins on the project's page."""

from __future__ import annotations

from django.db import transaction

from sessions_app.models import AuditEntry, Project
from sessions_app.models.projects import RETENTION_DAYS_MAX
from sessions_app.services import audit


def set_retention(*, project: Project, days: int | None, actor) -> Project:
    """Keep the project's sessions `days` after what retention counts from (Session.retained_from; None: forever);
    audited when it changes."""
    if days is not None and not 1 <= days <= RETENTION_DAYS_MAX:
        raise ValueError(f"retention must be 1 to {RETENTION_DAYS_MAX} days, or none (keep forever), not {days}")
    with transaction.atomic():
        before = Project.objects.select_for_update().values_list("retention_days", flat=True).get(pk=project.pk)
        project.retention_days = days
        if before != days:
            Project.objects.filter(pk=project.pk).update(retention_days=days)
            audit(project=project, actor=actor, action=AuditEntry.RETENTION_CHANGED, target=project.slug, detail={"before": before, "after": days})
    return project
