"""A project's own settings beside retention (services/retention/policy.py), changed by its admins on the project page."""

from __future__ import annotations

from django.db import transaction

from sessions_app.models import AuditEntry, Project

from .audit_log import audit


def set_auto_recover_settled(*, project: Project, enabled: bool, actor) -> Project:
    """Whether the worker recovers a crash on its own once a reconciler settled every call whose outcome was
    unknown (Project.auto_recover_settled); audited when it changes."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False, not {enabled!r}")
    with transaction.atomic():
        before = Project.objects.select_for_update().values_list("auto_recover_settled", flat=True).get(pk=project.pk)
        project.auto_recover_settled = enabled
        if before != enabled:
            Project.objects.filter(pk=project.pk).update(auto_recover_settled=enabled)
            audit(
                project=project, actor=actor, action=AuditEntry.PROJECT_SETTINGS_CHANGED, target=project.slug,
                detail={"field": "auto_recover_settled", "before": before, "after": enabled},
            )  # fmt: skip
    return project
