"""Inviting a person into a project: their account, their membership and a one-time link to set a password.

The link is Django's password-reset token for the new account
(default_token_generator): nothing is stored for it. It expires after
PASSWORD_RESET_TIMEOUT seconds and stops working once a password is set (the
token hashes the password). It is shown once to the admin who invited, and
emailed too when an email server is configured (settings.EMAIL_HOST).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from sessions_app import services
from sessions_app.log import events as log_events
from sessions_app.models import AuditEntry, Membership, Project, Role

logger = logging.getLogger(__name__)


class InvitationRefused(ValueError):
    """The username is taken or not a valid username, or the email is not an address."""


@dataclass(frozen=True)
class Invitation:
    user: object
    membership: Membership
    uid: str  # the link's two parts (dashboard.urls: set_password)
    token: str
    expires_at: datetime


def link_expiry(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT)


def invite(*, project: Project, username: str, role: str, email: str = "", by) -> Invitation:
    """Create the account `username` (no usable password until the link is used), make it a `role` of `project`,
    and return the link's parts. Audited as the member's addition, by `by`. InvitationRefused when the name is taken."""
    if role not in Role.values:
        raise InvitationRefused(f"unknown role {role!r}: one of {', '.join(Role.values)}")
    users = get_user_model()
    username = users.normalize_username(username)  # NFKC, as the login form reads what is typed
    try:
        users._meta.get_field(users.USERNAME_FIELD).clean(username, None)  # its length and characters
        if email:
            validate_email(email)
    except ValidationError as invalid:
        raise InvitationRefused(" ".join(invalid.messages)) from None
    expires_at = link_expiry()
    try:
        with transaction.atomic():
            if users.objects.filter(username__iexact=username).exists():
                raise InvitationRefused(f"there already is an account named {username!r}")
            user = users(username=username, email=email)
            user.set_unusable_password()
            user.save()
            membership = Membership.objects.create(project=project, user=user, role=role)
            services.audit(
                project=project,
                actor=by,
                action=AuditEntry.MEMBER_ADDED,
                target=username,
                detail={"role": role, "invited": "new account", "link_expires_at": log_events.format_time(expires_at),
                        **({"email": email} if email else {})},
            )  # fmt: skip
    except IntegrityError:  # invited by someone else at the same moment
        raise InvitationRefused(f"there already is an account named {username!r}") from None
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return Invitation(user=user, membership=membership, uid=uid, token=default_token_generator.make_token(user), expires_at=expires_at)


def email_configured() -> bool:
    """Whether invitations are emailed too: an email server is configured (no email server is assumed)."""
    return bool(settings.EMAIL_HOST)


def email_invitation(*, invitation: Invitation, link: str, project: Project, by) -> str | None:
    """Email the link to the invited person; None when sent, else why not (the admin still has the link to pass on)."""
    user = invitation.user
    if not user.email:
        return "no email address was given"
    if not email_configured():
        return "no email server is configured"
    inviter = by.get_username() if by is not None else "an administrator"
    body = (
        f"{inviter} invited you to the Turnlog project {project.name or project.slug} as {invitation.membership.role}.\n\n"
        f"Your username is {user.get_username()}. Set your password here (the link works once, until"
        f" {log_events.format_time(invitation.expires_at)}):\n\n{link}\n"
    )
    try:
        send_mail(f"Your Turnlog account ({project.slug})", body, None, [user.email])
    except OSError as failed:  # smtplib's errors are OSErrors: the invitation stands, the admin passes the link on
        logger.warning("invitation email to %s not sent: %s", user.email, failed)
        return f"the email could not be sent ({failed})"
    return None
