"""Project membership for tests: users see nothing until they are members of a project."""

from __future__ import annotations

from sessions_app import access, services
from sessions_app.models import Project, Role


def member(user, role: str = Role.MEMBER, project: Project | None = None) -> Project:
    """Make `user` a `role` of `project` (default: the default project); returns the project."""
    project = project or Project.default()
    services.set_membership(project=project, user=user, role=role)
    return project


def token_for(user, role: str = Role.MEMBER, project: Project | None = None, scopes=None, **options) -> str:
    """A member's token (its secret) with the scopes of their role unless `scopes` says otherwise."""
    project = member(user, role, project)
    scopes = access.role_scopes(role) if scopes is None else scopes
    return services.issue_token(user=user, project=project, scopes=scopes, **options)[1]
