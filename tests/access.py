"""Project membership for tests: users see nothing until they are members of a project."""

from __future__ import annotations

from sessions_app import services
from sessions_app.models import ApiToken, Project, Role
from sessions_app.selectors import access


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


def case_tokens(user_model, *, scoped: str, scopes: list[str]) -> dict[str, str]:
    """Tokens (secrets) for requests refused and served for each reason: a member's, a viewer's,
    the member's with only `scopes` (named `scoped`), a stranger's of another project, a revoked one."""
    agent = user_model.objects.create_user("agent")
    viewer = user_model.objects.create_user("viewer")
    stranger = user_model.objects.create_user("stranger")
    other = Project.objects.create(slug="other", name="Other")
    tokens = {
        "member": token_for(agent),
        "viewer": token_for(viewer, Role.VIEWER),
        scoped: token_for(agent, scopes=scopes),
        "other_project": token_for(stranger, project=other),
        "revoked": token_for(agent),
    }
    services.revoke_token(token=ApiToken.usable_for(tokens["revoked"]))
    member(stranger, project=other)
    return tokens
