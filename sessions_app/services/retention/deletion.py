"""Deleting a whole session with everything that hangs on it: the one code path that deletes events.

Forks keep their parent (docs/session-log.md, Retention): a fork's search hits and
calls below its seed are answered from its parent's rows, so a session with forks
is refused (SessionHasForks) until they are gone. Audit entries stay, and one more
records what went.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from sessions_app.lib import statements
from sessions_app.lib.errors import SessionHasForks, SessionNotExpired, SessionNotFound
from sessions_app.log import search_text
from sessions_app.models import AuditEntry, CallSighting, Event, Note, Project, Session, UsageSum
from sessions_app.selectors import retention as expiry
from sessions_app.services import audit
from sessions_app.services import search as search_index
from sessions_app.services.publishing import publish_session_changed_on_commit

RETENTION = "retention"  # the audit entries' actor name when the sweep deleted the session
# Their querysets refuse deletes (append-only everywhere else): removed here with one statement each.
APPEND_ONLY = (Event, CallSighting, UsageSum)


@dataclass(frozen=True)
class DeletedSession:
    session_id: str
    project_id: int
    agent_name: str
    events: int
    # Rows removed per table (the model's label, or the search index's table name).
    rows: dict[str, int] = field(default_factory=dict)


def delete_session(*, session_id: str, actor=None, by_retention: bool = False, now: datetime | None = None) -> DeletedSession:
    """Delete the session and every row that names it, under its lock, in one transaction.

    `actor` is who asked (None: a command). `by_retention`: the sweep asks, so its project's retention
    (as set now) is checked again under the lock, by the clock `now`: SessionNotExpired when an open turn
    is unrecovered or the session is within it (written to, annotated or recovered since the sweep's
    read, as Session.retained_from says, or the setting changed). Refuses a session
    with forks (SessionHasForks) and a missing one (SessionNotFound).
    """
    with transaction.atomic():
        _claim_from_indexer(session_id)
        session = statements.get_for_update(Session, session_id)
        if session is None:
            raise SessionNotFound(session_id)
        fork_ids = list(Session.objects.filter(parent_id=session_id).order_by("id").values_list("id", flat=True))
        if fork_ids:
            raise SessionHasForks(session_id, fork_ids)
        days = _retention_days(session, now or timezone.now()) if by_retention else None
        rows = {**_unindex(session), **_delete_dependents(session)}
        Session.objects.filter(pk=session_id).delete()
        rows[Session._meta.label] = 1
        events = rows.get(Event._meta.label, 0)
        detail = {"session": session_id, "agent": session.agent_name, "events": events, "rows": rows,
                  "last_activity_at": session.last_activity_at.isoformat(), "retained_from": session.retained_from.isoformat()}  # fmt: skip
        if by_retention:
            detail["policy"] = f"retention: {days} days"
        audit(
            project=session.project_id, actor=actor, action=AuditEntry.SESSION_DELETED, target=session_id, detail=detail,
            actor_name=RETENTION if by_retention else "cli",
        )  # fmt: skip
        publish_session_changed_on_commit(session_id)  # the list drops its row
    return DeletedSession(session_id, session.project_id, session.agent_name, events, rows)


def _retention_days(session: Session, now: datetime) -> int:
    """The retention the session passed, read under its lock; SessionNotExpired when it is kept."""
    if session.interrupted:
        raise SessionNotExpired(session.pk, expiry.HELD_WORDS[expiry.BLOCKED])
    project = Project.objects.only("retention_days").get(pk=session.project_id)
    limit = expiry.cutoff(project, now)
    if limit is None or session.retained_from >= limit:
        raise SessionNotExpired(session.pk, "it is within its project's retention")
    return project.retention_days


def _claim_from_indexer(session_id: str) -> None:
    """PostgreSQL: the search indexer's claim on the session, taken before the row lock as the indexer does, so
    it never writes rows of events deleted meanwhile. (SQLite's single writer is the claim there.)"""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [search_index.CLAIM_SPACE, session_id])


def _unindex(session: Session) -> dict[str, int]:
    """The session's rows in the search index: its events' and its notes'."""
    removed: dict[str, int] = {}
    for note_id in Note.objects.filter(session=session).values_list("pk", flat=True):
        search_index.unindex_note(note_id)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "DELETE FROM sessions_app_search_event WHERE event_id IN (SELECT id FROM sessions_app_event WHERE session_id = %s)",
                [session.pk],
            )
            removed["sessions_app_search_event"] = cursor.rowcount
            return removed
        # Contentless FTS5 tables forget a row only when told the values it was indexed with, which
        # search_index wrote for the events from the seed (a fork's prefix is its parent's) up to the mark.
        words, shorts = [], []
        indexed = Event.objects.filter(
            session=session, seq__gte=session.seed_length, seq__lt=session.search_indexed_seq, type__in=search_text.SEARCHABLE_TYPES
        )
        for event_id, type_, data in indexed.values_list("id", "type", "data"):
            if found := search_text.event_searchable(type_, data):
                if found.words:
                    words.append((event_id, found.words))
                if found.short:
                    shorts.append((event_id, found.short))
        for table, column, rows in (("sessions_app_search_words", "words", words), ("sessions_app_search_short", "short", shorts)):
            if rows:
                statements.execute_many(f"INSERT INTO {table} ({table}, rowid, {column}) VALUES ('delete', %s, %s)", rows)
        removed["sessions_app_search_words"], removed["sessions_app_search_short"] = len(words), len(shorts)
    return removed


def session_relations() -> list:
    """Every key to Session from another table, hidden ones (related_name "+") included."""
    fields = Session._meta.get_fields(include_hidden=True)
    return [f for f in fields if f.auto_created and not f.concrete and (f.one_to_many or f.one_to_one)]


def _delete_dependents(session: Session) -> dict[str, int]:
    """Every row with a key to the session (whatever models name it: a table added later goes too), forks excepted."""
    removed: dict[str, int] = {}
    for relation in session_relations():
        model = relation.related_model
        if model is Session:
            continue  # forks: refused above
        column = relation.field.column
        if model in APPEND_ONLY:
            with connection.cursor() as cursor:
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(model._meta.db_table)} WHERE {column} = %s", [session.pk])
                removed[model._meta.label] = cursor.rowcount
            continue
        _, per_model = model._base_manager.filter(**{relation.field.name: session.pk}).delete()
        for label, count in per_model.items():
            removed[label] = removed.get(label, 0) + count
    return {label: count for label, count in removed.items() if count}
