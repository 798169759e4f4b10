"""The audit log: a project's entries in pages, and what their targets are now."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from sessions_app.lib import cursors
from sessions_app.models import ApiToken, AuditEntry, Membership, Project


@dataclass(frozen=True)
class AuditPage:
    items: list[AuditEntry]
    next_cursor: str | None


def newest_first_page(rows, *, before: str | None, limit: int) -> tuple[list, str | None]:
    """Rows newest first, keyset-paginated on (created_at, id); `before` is a cursor this gave."""
    if before:
        created, row_id = cursors.decode(before, id_kind=int, given_by="this page gave")
        rows = rows.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=row_id))
    items = list(rows.order_by("-created_at", "-id")[: limit + 1])
    if len(items) <= limit:
        return items, None
    last = items[limit - 1]
    return items[:limit], cursors.encode(last.created_at, last.pk)


def audit_entries(project: Project, *, action: str | None = None, before: str | None = None, limit: int = 50) -> AuditPage:
    """The project's audit entries, newest first, keyset-paginated on (time, id); `before` is a next_cursor."""
    entries = AuditEntry.objects.filter(project=project)
    if action:
        entries = entries.filter(action=action)
    items, cursor = newest_first_page(entries, before=before, limit=limit)
    return AuditPage(items=items, next_cursor=cursor)


def audit_targets(project: Project, entries: list[AuditEntry]) -> tuple[dict[str, int], dict[str, int]]:
    """What the entries' token and member targets are now, for links: (token pk by prefix, user id
    by username of the project's current members). A token or member gone is in neither."""
    prefixes = {e.target for e in entries if e.action in (AuditEntry.TOKEN_CREATED, AuditEntry.TOKEN_REVOKED)}
    names = {e.target for e in entries if e.action.startswith("member_")}
    tokens = dict(ApiToken.objects.filter(project=project, prefix__in=prefixes).values_list("prefix", "pk")) if prefixes else {}
    members = {}
    if names:
        rows = Membership.objects.filter(project=project, user__username__in=names).values_list("user__username", "user_id")
        members = dict(rows)
    return tokens, members
