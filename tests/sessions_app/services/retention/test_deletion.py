"""retention.delete_session: a whole session goes with every row that names it (counted per table, search rows
too), the others stay whole and searchable, forks keep their parent, the audit log says what went; on SQLite and
PostgreSQL."""

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from sessions_app import services
from sessions_app.lib.errors import SessionHasForks, SessionNotFound
from sessions_app.log.events import validate_batch
from sessions_app.models import (
    UsageSum,
    AuditEntry,
    CallCheck,
    CallSighting,
    CheckAttempt,
    Event,
    IdempotentRequest,
    LedgerCall,
    Note,
    Notification,
    OtlpSpan,
    OtlpTrace,
    Project,
    RecoveryRecord,
    Role,
    Session,
    Verdict,
)
from sessions_app.selectors import access, search
from sessions_app.services import retention
from sessions_app.services import verdicts as services_verdicts
from sessions_app.services import search as search_index
from sessions_app.services.retention import deletion
from tests.access import member
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db

DEPENDENTS = [
    Event, CallSighting, LedgerCall, RecoveryRecord, IdempotentRequest, Note, OtlpTrace, OtlpSpan, Notification,
    Verdict, CallCheck, CheckAttempt, UsageSum,
]  # fmt: skip


def rows_of(session_id: str) -> dict[str, int]:
    counts = {model._meta.label: model._base_manager.filter(session_id=session_id).count() for model in DEPENDENTS}
    return {label: count for label, count in counts.items() if count}


def indexed_events() -> dict[int, int]:
    """Event id -> its entries in the event search index (SQLite: the terms fts5vocab lists of each document,
    which a 'delete' with other values than the indexed ones would leave behind)."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            found: dict[int, int] = {}
            for table in ("sessions_app_search_words", "sessions_app_search_short"):
                cursor.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_vocab USING fts5vocab(main, {table}, instance)")
                cursor.execute(f"SELECT doc, COUNT(*) FROM temp.{table}_vocab GROUP BY doc")
                for doc, count in cursor.fetchall():
                    found[doc] = found.get(doc, 0) + count
            return found
        cursor.execute("SELECT event_id, 1 FROM sessions_app_search_event")
        return dict(cursor.fetchall())


def hits(q: str) -> set[str]:
    services.index_pending(wait=True)
    project = Project.default().pk
    return {hit.session_id for hit in search.search(q=q, projects=[project], limit=200).items}


def admin_actor():
    user = get_user_model().objects.create_user("ada")
    member(user, Role.ADMIN)
    return user, access.Actor(user=user)


def rich_session(session_id: str, word: str, user, actor) -> None:
    """A session with every kind of dependent row: a crash recovered, an idempotent append, a note, OTLP memory,
    a verdict, a reconciler's check and one of its attempts."""
    services.create_session(session_id=session_id, agent_name="bot")
    services.append_events(session_id=session_id, events=validate_batch([f.user(f"shared {word}")] + f.worked_example()[1:]))
    services.recover(session_id=session_id, user=user)
    services.append_events(session_id=session_id, events=validate_batch([f.user(f"again {word}")]), idempotency_key="k1", request_sha256="x")
    services.append_events(session_id=session_id, events=validate_batch([f.assistant(word, metadata={"usage": {"input_tokens": 3, "output_tokens": 2}})]))
    services.add_note(actor=actor, session_id=session_id, text=f"shared note {word}", seq=1)
    trace = OtlpTrace.objects.create(session_id=session_id, trace_id="t" * 32, last_span_at=timezone.now())
    OtlpSpan.objects.create(session_id=session_id, trace_id=trace.trace_id, span_id="s" * 16)
    services_verdicts.record_verdict(actor=actor, session_id=session_id, call_id="c3", outcome="happened", evidence="seen")
    CallCheck.objects.create(session_id=session_id, project=Project.default(), call_id="c3")
    CheckAttempt.objects.create(session_id=session_id, call_id="c3", pattern="tool_*", status=500, error="boom")


def test_a_session_goes_with_every_row_that_names_it_and_the_others_stay_whole_and_searchable():
    user, actor = admin_actor()
    rich_session("old", "refund", user, actor)
    rich_session("kept", "invoice", user, actor)
    assert hits("shared") == {"old", "kept"} and hits("refund") == {"old"} and hits("tool_c1") == {"old", "kept"}
    before = rows_of("old")
    assert set(before) == {model._meta.label for model in DEPENDENTS}  # the setup made a row of each kind
    hits("shared")
    kept_before, index_before = rows_of("kept"), indexed_events()
    old_events = set(Event.objects.filter(session_id="old").values_list("pk", flat=True))
    assert old_events & set(index_before)

    gone = retention.delete_session(session_id="old", actor=user)

    assert not Session.objects.filter(pk="old").exists() and rows_of("old") == {}
    assert rows_of("kept") == kept_before
    assert {label: gone.rows[label] for label in before} == before and gone.events == before["sessions_app.Event"]
    assert gone.rows["sessions_app.Session"] == 1
    # Not one index entry of its events is left; the other's are as they were.
    index_after = indexed_events()
    assert not old_events & set(index_after) and index_after == {e: n for e, n in index_before.items() if e not in old_events}
    search_gone = sum(count for table, count in gone.rows.items() if table.startswith("sessions_app_search"))
    assert search_gone >= len(old_events & set(index_before))
    # A search finds nothing of it, and everything of the other, also by a word both held.
    assert hits("shared") == {"kept"} and hits("refund") == set() and hits("invoice") == {"kept"} and hits("tool_c1") == {"kept"}
    assert hits("note") == {"kept"}
    entry = AuditEntry.objects.get(action=AuditEntry.SESSION_DELETED)
    assert (entry.target, entry.actor_name, entry.project_id) == ("old", "ada", Project.default().pk)
    assert entry.detail["events"] == before["sessions_app.Event"] and entry.detail["rows"]["sessions_app.Note"] == 1
    assert "policy" not in entry.detail
    # Audit entries of the session stay (the recovery's, the notes').
    assert AuditEntry.objects.filter(target="old", action=AuditEntry.RECOVERY).exists()


def test_a_parent_stays_while_forks_exist_and_goes_after_them():
    services.create_session(session_id="p")
    services.append_events(session_id="p", events=validate_batch([f.user("parent words"), f.assistant(calls=["c9"]), f.tool_call("c9"), f.tool_result("c9")]))
    services.fork(session_id="p", new_session_id="child")
    services.append_events(session_id="child", events=validate_batch([f.user("child words")]))
    with pytest.raises(SessionHasForks) as refused:
        retention.delete_session(session_id="p")
    assert refused.value.fork_ids == ["child"] and "child" in str(refused.value)
    assert Event.objects.filter(session_id="p").count() == 4 and not AuditEntry.objects.filter(action=AuditEntry.SESSION_DELETED).exists()
    # The fork's inherited hits and calls are the parent's rows: still there.
    assert hits("parent") == {"p", "child"}
    assert LedgerCall.objects.filter(session_id="p").count() == 1

    retention.delete_session(session_id="child")
    assert hits("parent") == {"p"} and hits("child") == set()
    retention.delete_session(session_id="p")
    assert hits("parent") == set() and Session.objects.count() == 0 and Event.objects.count() == 0


def test_an_unknown_session_is_refused_and_nothing_is_audited():
    with pytest.raises(SessionNotFound):
        retention.delete_session(session_id="nope")
    assert not AuditEntry.objects.exists()


def test_every_model_with_a_key_to_sessions_is_deleted_with_it():
    """A table added later that names a session goes too (deletion walks Session's relations); this lists them."""
    related = {relation.related_model._meta.label for relation in deletion.session_relations()} - {"sessions_app.Session"}
    assert related == {model._meta.label for model in DEPENDENTS}, "a new table names sessions: add it to DEPENDENTS and rich_session"


def test_indexing_what_was_pending_before_the_delete_writes_nothing_of_it():
    services.create_session(session_id="old")
    services.append_events(session_id="old", events=validate_batch([f.user("pending words")]))
    retention.delete_session(session_id="old")
    assert search_index.index_pending(wait=True) == 0 and hits("pending") == set()
