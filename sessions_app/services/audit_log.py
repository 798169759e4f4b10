"""Audit entries for the writes: who (a person, a command or the worker) changed what, in which project."""

from __future__ import annotations

from sessions_app.models import AuditEntry, Project

WORKER = "worker"  # the actor name of the automatic recovery worker


def audit(
    *, project: Project | int | None, actor, action: str, target: str = "", detail: dict | None = None, actor_name: str = "cli"
) -> AuditEntry:
    """One audit entry; `actor` None means a management command ("cli") or, named so, the worker."""
    return AuditEntry.objects.create(
        project_id=project.pk if isinstance(project, Project) else project,
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=actor.get_username() if actor is not None and actor.is_authenticated else actor_name,
        action=action,
        target=target,
        detail=detail or {},
    )
