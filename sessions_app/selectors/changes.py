"""What changed since an instant: what a page's live socket catches up on when it joins.

A page is rendered, then its socket joins the groups that carry changes: a change
committed in between (or while the socket was away) reaches no socket. Events catch up
by seq (`after`); the rest is found here by the times it was written. The instant the
page passes is moved back by CLOCK_MARGIN, so a transaction that set its time just
before the page read, and committed just after, is caught up too (and writers on
other hosts may run a little behind).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q

from sessions_app.models import AuditEntry, CheckAttempt, LedgerCall, Note, Session, Verdict

CLOCK_MARGIN = timedelta(seconds=2)
IN_BATCH = 500  # values per IN (...) list: SQLite's variable limit


def sessions_active_since(*, projects: list[int], since: datetime, limit: int = 50) -> list[tuple[str, datetime]]:
    """(id, created_at) of the sessions of `projects` created or appended to since `since`, the `limit` latest, oldest
    activity first (the order to put them at the top of a list that shows the newest first)."""
    rows = (
        Session.objects.filter(project_id__in=projects, last_activity_at__gte=since - CLOCK_MARGIN)
        .order_by("-last_activity_at", "-id")
        .values_list("id", "created_at")[:limit]
    )
    return list(reversed(rows))


def sessions_deleted_since(*, projects: list[int], since: datetime, limit: int = 500) -> list[str]:
    """The sessions of `projects` deleted since `since` (retention, `turnlog manage delete_session`), as audited."""
    deleted = AuditEntry.objects.filter(project_id__in=projects, created_at__gte=since - CLOCK_MARGIN, action=AuditEntry.SESSION_DELETED)
    return list(deleted.order_by("created_at", "id").values_list("target", flat=True)[:limit])


def sessions_annotated_since(*, session_ids: list[str], since: datetime) -> set[str]:
    """Those of `session_ids` whose list row changed with no event since `since`: a verdict recorded or withdrawn, a
    reconciler's attempt, automatic recovery held for a person."""
    after = since - CLOCK_MARGIN
    found: set[str] = set()
    for start in range(0, len(session_ids), IN_BATCH):
        ids = session_ids[start : start + IN_BATCH]
        verdicts = Verdict.objects.filter(Q(at__gte=after) | Q(withdrawn_at__gte=after), session_id__in=ids)
        found.update(verdicts.values_list("session_id", flat=True))
        found.update(CheckAttempt.objects.filter(session_id__in=ids, at__gte=after).values_list("session_id", flat=True))
        found.update(Session.objects.filter(pk__in=ids, repeated_failures_at__gte=after).values_list("id", flat=True))
    return found


def changed_since(*, projects: list[int], since: datetime) -> bool:
    """Whether a session of `projects` was created, appended to or deleted, a verdict on one of its calls recorded
    or withdrawn, or a reconciler's attempt made, since `since`."""
    after = since - CLOCK_MARGIN
    verdicts = Verdict.objects.filter(Q(at__gte=after) | Q(withdrawn_at__gte=after), session__project_id__in=projects)
    attempts = CheckAttempt.objects.filter(at__gte=after, session__project_id__in=projects)
    return (
        bool(sessions_active_since(projects=projects, since=since, limit=1) or sessions_deleted_since(projects=projects, since=since, limit=1))
        or verdicts.exists()
        or attempts.exists()
    )


def annotated_seqs_since(*, session_id: str, project_id: int, since: datetime) -> list[int | None]:
    """The places whose notes, verdicts or reconciler attempts changed since `since`: the seqs they are pinned to
    (None: a note on the whole session), as the services publish them (services.publishing's "session_notes")."""
    after = since - CLOCK_MARGIN
    seqs: set[int | None] = set(
        Note.objects.filter(Q(created_at__gte=after) | Q(updated_at__gte=after), session_id=session_id).values_list("seq", flat=True)
    )
    # A deleted note is gone but for its audit entry, which names its seq.
    deleted = AuditEntry.objects.filter(project_id=project_id, created_at__gte=after, action=AuditEntry.NOTE_DELETED, target=session_id)
    seqs.update(detail.get("seq") for detail in deleted.values_list("detail", flat=True) if isinstance(detail, dict))
    verdicts = Verdict.objects.filter(Q(at__gte=after) | Q(withdrawn_at__gte=after), session_id=session_id).values("call_id")
    attempts = CheckAttempt.objects.filter(session_id=session_id, at__gte=after).values("call_id")
    calls = LedgerCall.objects.filter(Q(call_id__in=verdicts) | Q(call_id__in=attempts), session_id=session_id)
    for seq, result_seq in calls.values_list("seq", "result_seq"):
        seqs.update(s for s in (seq, result_seq) if s is not None)
    return sorted(seqs, key=lambda s: (s is not None, s or 0))
