"""Tool policies, changed by a project's admins (its Tools page, the API) or, for the site-wide ones, by
superusers (the Django admin): each change checked, audited, and a changed receipt pointer re-read.

A policy classes a tool's calls (how bad an unknown outcome is), says where a real result holds the
call's receipt (an RFC 6901 pointer), and may name a reconciler (`check_url`), which the worker asks,
signed with the policy's own secret, whether a call took effect. The secret is returned once, when the
address is set or changed, and never shown again.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.utils import timezone

from sessions_app.lib.errors import InvalidPolicy, PolicyNotFound
from sessions_app.log import events as log_events
from sessions_app.models import AuditEntry, Project, ToolPolicy, new_secret
from sessions_app.selectors import access

from .audit_log import audit
from .receipts import sweep_for_policy_change
from .notify.addresses import refusal_for_url

CLASSES = (ToolPolicy.READ_ONLY, ToolPolicy.IDEMPOTENT, ToolPolicy.EXTERNAL_EFFECT)
PATTERN_MAX = ToolPolicy._meta.get_field("pattern").max_length
NOTE_MAX = ToolPolicy._meta.get_field("note").max_length
POINTER_MAX = ToolPolicy._meta.get_field("receipt_pointer").max_length
CHECK_URL_MAX = ToolPolicy._meta.get_field("check_url").max_length
# RFC 6901: "/"-separated reference tokens in which "~" only starts "~0" (a ~) or "~1" (a /).
POINTER = re.compile(r"(/([^~/]|~[01])*)+")
SITE = None  # the project_slug of a site-wide policy


def _text(field: str, value: object, *, most: int, least: int = 0) -> str:
    if not isinstance(value, str):
        raise InvalidPolicy(field, "not_text", f"{field} must be a string, not {log_events.show_json(value)}")
    if "\x00" in value:
        raise InvalidPolicy(field, "invalid_text", f"{field} holds NUL, which is not allowed")
    if len(value) > most:
        raise InvalidPolicy(field, "too_long", f"{field} has {len(value)} characters; at most {most}")
    if len(value) < least:
        raise InvalidPolicy(field, "empty", f"{field} is empty: name a tool, or a pattern such as send_* or *")
    return value


def checked_pattern(pattern: object) -> str:
    return _text("pattern", pattern, most=PATTERN_MAX, least=1)


def checked_side_effect(side_effect: object) -> str:
    if side_effect not in CLASSES:
        words = ", ".join(f'"{word}"' for word in CLASSES)
        raise InvalidPolicy(
            "side_effect", "invalid_class", f"side_effect must be one of {words}, not {log_events.show_json(side_effect)}"
        )
    return side_effect


def checked_pointer(pointer: object) -> str:
    pointer = _text("receipt_pointer", pointer, most=POINTER_MAX)
    if pointer and not POINTER.fullmatch(pointer):
        raise InvalidPolicy(
            "receipt_pointer",
            "invalid_pointer",
            f"receipt_pointer {pointer!r} is not an RFC 6901 JSON pointer: it starts with / (as /id or /charge/id),"
            " and ~ appears only as ~0 (for ~) or ~1 (for /)",
        )
    return pointer


def checked_check_url(url: object) -> str:
    url = _text("check_url", url, most=CHECK_URL_MAX).strip()
    if url and _has_userinfo(url):
        # Every member reads a policy's check_url: a password in it would be theirs. The request is signed instead.
        why = "it holds a user name or password (user@host); the check is signed with the policy's secret instead"
        raise InvalidPolicy("check_url", "address_refused", f"check_url is refused: {why}")
    if url and (why := refusal_for_url(url)):
        raise InvalidPolicy("check_url", "address_refused", f"check_url is refused: {why}")
    return url


def _has_userinfo(url: str) -> bool:
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:  # refusal_for_url says what is wrong with it
        return False


def _project(actor: access.Actor, project_slug: str | None) -> Project | None:
    """The project whose policies the actor changes (its admins only); SITE: superusers only."""
    if project_slug is not SITE:
        return access.project_for(actor, project_slug, access.ADMIN)
    user = actor.user
    if actor.token is not None or user is None or not (user.is_authenticated and user.is_active and user.is_superuser):
        raise access.Forbidden("only superusers change site-wide tool policies", capability=access.ADMIN)
    return None


def save_policy(
    *,
    actor: access.Actor,
    project_slug: str | None,
    pattern: object,
    side_effect: object,
    note: object = "",
    receipt_pointer: object = "",
    check_url: object = "",
) -> tuple[ToolPolicy, str | None]:
    """Create or update the project's policy with this pattern (SITE: the site-wide one); returns it and,
    when check_url was set or changed, its new secret (else None), which nothing shows again.
    InvalidPolicy (field, reason) for bad input; ProjectNotFound / Forbidden as access.project_for."""
    project = _project(actor, project_slug)
    checks = {"note": lambda v: _text("note", v, most=NOTE_MAX), "receipt_pointer": checked_pointer, "check_url": checked_check_url}
    given = {"note": note, "receipt_pointer": receipt_pointer, "check_url": check_url}
    # None keeps the field as it is (empty on a new policy): the API's absent fields.
    values = {"side_effect": checked_side_effect(side_effect)} | {
        name: checks[name](value) for name, value in given.items() if value is not None
    }
    pattern = checked_pattern(pattern)
    try:
        return _save(actor, project, pattern, values)
    except IntegrityError:  # the same pattern created meanwhile: now it is there to change
        return _save(actor, project, pattern, values)


def _save(actor: access.Actor, project: Project | None, pattern: str, values: dict) -> tuple[ToolPolicy, str | None]:
    now = timezone.now()
    with transaction.atomic():
        policy = ToolPolicy.objects.select_for_update().filter(project=project, pattern=pattern).first()
        created = policy is None
        if created:
            policy = ToolPolicy(project=project, pattern=pattern, created_at=now)
            before = {"side_effect": "", "note": "", "receipt_pointer": "", "check_url": ""}
        else:
            before = {name: getattr(policy, name) for name in values}
        changed = [name for name, value in values.items() if before[name] != value]
        if not created and not changed:
            return policy, None
        for name in changed:
            setattr(policy, name, values[name])
        secret = None
        if "check_url" in changed:
            secret = new_secret() if policy.check_url else None
            policy.check_secret = secret or ""
        policy.updated_at = now
        policy.save()
        fields = changed + (["check_secret"] if secret else [])
        _audit(actor, policy, {"created": True} if created else {"changed": fields})
        if "receipt_pointer" in changed:
            _sweep_receipts(project_id=policy.project_id, pattern=pattern)
    return policy, secret


def delete_policy(*, actor: access.Actor, project_slug: str | None, pattern: object) -> None:
    """Delete the project's policy with this pattern (SITE: the site-wide one); PolicyNotFound when there is none."""
    project = _project(actor, project_slug)
    if not isinstance(pattern, str) or "\x00" in pattern:  # no policy holds NUL (and PostgreSQL cannot be asked)
        raise PolicyNotFound(project_slug, str(pattern))
    with transaction.atomic():
        policy = ToolPolicy.objects.select_for_update().filter(project=project, pattern=pattern).first()
        if policy is None:
            raise PolicyNotFound(project_slug, pattern)
        _audit(actor, policy, {"deleted": True})
        if policy.receipt_pointer:
            _sweep_receipts(project_id=policy.project_id, pattern=pattern)
        policy.delete()


def _audit(actor: access.Actor, policy: ToolPolicy, what: dict) -> None:
    user = actor.user if actor.user is not None and actor.user.is_authenticated else None
    detail = {"scope": policy.scope, **what, "side_effect": policy.side_effect}
    audit(project=policy.project_id, actor=user, action=AuditEntry.TOOL_POLICY_CHANGED, target=policy.pattern, detail=detail)


def _sweep_receipts(*, project_id: int | None, pattern: str) -> None:
    """The worker re-reads the receipts of the stored calls this pattern may match (project None: every project's)."""
    sweep_for_policy_change(project_id=project_id, pattern=pattern)
