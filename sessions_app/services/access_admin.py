"""Access administration: API tokens and project memberships, each change audited."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from sessions_app.log import events as log_events
from sessions_app.models import ApiToken, AuditEntry, Membership, Project, Role
from sessions_app.selectors import access

from .audit_log import audit
from .publishing import publish_credentials_ended_on_commit


class InvalidScopes(ValueError):
    pass


def issue_token(
    *,
    user,
    project: Project | None,
    scopes,
    name: str = "",
    expires_at: datetime | None = None,
    created_by=None,
    secret: str | None = None,
) -> tuple[ApiToken, str]:
    """A new token for `user` in `project` (None: site-level, `metrics` only); returns it and its only copy.

    The scopes must be ones the user's role there allows (InvalidScopes otherwise).
    """
    scopes = {str(scope) for scope in scopes}  # Scope members as their names, so refusals read 'recover'
    if not scopes:
        raise InvalidScopes("a token needs at least one scope")
    if project is None:
        if not scopes <= access.SITE_SCOPES:
            raise InvalidScopes(f"a site-level token may only carry {sorted(access.SITE_SCOPES)}")
        if not user.is_superuser:
            raise InvalidScopes("only a superuser may hold a site-level (metrics) token")
    else:
        if not scopes <= access.PROJECT_SCOPES:
            raise InvalidScopes(f"a project token's scopes are among {sorted(access.PROJECT_SCOPES)}")
        allowed = access.Actor(user=user).capabilities(project.pk)
        if not scopes <= allowed:
            held = access.Actor(user=user).roles().get(project.pk)
            raise InvalidScopes(
                f"{user.get_username()} is {'a ' + held if held else 'not a member'} of {project.slug}"
                f" and may not use the scopes {sorted(scopes - allowed)}"
            )
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidScopes("the expiry must be in the future")
    with transaction.atomic():
        row, secret = ApiToken.issue(
            user, project=project, scopes=scopes, name=name, expires_at=expires_at, created_by=created_by, secret=secret
        )
        audit(
            project=project,
            actor=created_by,
            action=AuditEntry.TOKEN_CREATED,
            target=row.prefix,
            detail={"user": user.get_username(), "scopes": row.scopes, "name": name,
                    "expires_at": log_events.format_time(expires_at) if expires_at else None},
        )
    return row, secret


def revoke_token(*, token: ApiToken, by=None) -> bool:
    """Revoke a token at once (API answers 401; its open streams send nothing more and close within moments).

    False when it was already revoked.
    """
    with transaction.atomic():
        changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if changed:
            publish_credentials_ended_on_commit()
            audit(
                project=token.project_id,
                actor=by,
                action=AuditEntry.TOKEN_REVOKED,
                target=token.prefix,
                detail={"user": token.user.get_username(), "name": token.name},
            )
    token.refresh_from_db(fields=["revoked_at"])
    return bool(changed)


class LastAdmin(ValueError):
    """Removing or lowering the project's only admin would leave nobody to manage it."""


def set_membership(*, project: Project, user, role: str | None, by=None) -> Membership | None:
    """Add a member, change their role, or (role None) remove them; audited. Their tokens stay bounded by the new role.

    LastAdmin when that would leave the project without an admin member.
    """
    with transaction.atomic():
        # The admins are locked too, so two admins demoting each other at once cannot leave none.
        admins = list(Membership.objects.select_for_update().filter(project=project, role=Role.ADMIN).values_list("user_id", flat=True))
        current = Membership.objects.select_for_update().filter(project=project, user=user).first()
        target = user.get_username()
        if current is not None and current.role == Role.ADMIN and role != Role.ADMIN and admins == [user.pk]:
            raise LastAdmin(f"{target} is the only admin of {project.slug}: make someone else an admin first")
        if role is None:
            if current is not None:
                current.delete()
                audit(project=project, actor=by, action=AuditEntry.MEMBER_REMOVED, target=target, detail={"role": current.role})
            return None
        if current is None:
            current = Membership.objects.create(project=project, user=user, role=role)
            audit(project=project, actor=by, action=AuditEntry.MEMBER_ADDED, target=target, detail={"role": role})
        elif current.role != role:
            before, current.role = current.role, role
            current.save(update_fields=["role"])
            audit(project=project, actor=by, action=AuditEntry.MEMBER_CHANGED, target=target, detail={"from": before, "to": role})
        return current
