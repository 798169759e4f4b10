"""Projects and access: members, accounts by name, API tokens, session counts."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Count

from sessions_app.models import ApiToken, Membership, Project, Session


def session_counts(project_ids: list[int]) -> dict[int, int]:
    """project id -> how many sessions it holds (projects with none are absent)."""
    rows = Session.objects.filter(project_id__in=project_ids).values("project_id").annotate(n=Count("pk")).order_by()
    return {row["project_id"]: row["n"] for row in rows}


def project_members(project: Project) -> list[Membership]:
    return list(Membership.objects.filter(project=project).select_related("user").order_by("user__username"))


def project_member(project: Project, user_id: int) -> Membership | None:
    return Membership.objects.filter(project=project, user_id=user_id).select_related("user").first()


def user_named(username: str):
    """The account with this username, or None."""
    return get_user_model().objects.filter(username=username).first()


def project_token(project: Project, token_id: int) -> ApiToken | None:
    """One of the project's tokens (None for another project's: its admins manage only their own)."""
    return ApiToken.objects.filter(project=project, pk=token_id).select_related("user").first()


def project_tokens(project: Project) -> list[ApiToken]:
    """The project's tokens, newest first, revoked and expired ones included (the list shows their state)."""
    return list(ApiToken.objects.filter(project=project).select_related("user", "created_by").order_by("-created_at", "-id"))


def user_tokens(user) -> list[ApiToken]:
    """The user's own tokens in every project (site-level ones too), newest first, revoked and expired ones included."""
    return list(ApiToken.objects.filter(user=user).select_related("project", "created_by").order_by("-created_at", "-id"))


def user_token(user, token_id: int) -> ApiToken | None:
    """One of the user's own tokens (None for anyone else's: a person revokes only their own here)."""
    return ApiToken.objects.filter(user=user, pk=token_id).select_related("user", "project").first()


def user_named_alike(username: str):
    """An account whose username differs from this one by case only (or is it), or None."""
    return get_user_model().objects.filter(username__iexact=username).first()
