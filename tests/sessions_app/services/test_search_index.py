"""search_index.py: which rows the append transaction indexes, a fork's prefix left to its parent, notes, and
the backfill of events stored before the index (resumable), on SQLite and PostgreSQL."""

import pytest
from django.core.management import call_command
from django.db import connection

from sessions_app import access, search, services
from sessions_app.models import Event, Project
from sessions_app.services import appends, search_index
from sessions_app.log.events import validate_batch
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


def indexed_ids(*words: str) -> set[int]:
    """The ids of the events in the word index holding any of `words` (a contentless FTS5 table cannot be scanned)."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT rowid FROM sessions_app_search_words WHERE sessions_app_search_words MATCH %s", [" OR ".join(words)])
        else:
            cursor.execute("SELECT event_id FROM sessions_app_search_event WHERE words @@ to_tsquery('simple', %s)", [" | ".join(words)])
        return {row[0] for row in cursor.fetchall()}


def store(session_id, items, **fields):
    services.create_session(session_id=session_id, **fields)
    return services.append_events(session_id=session_id, events=validate_batch(items))


def hits(q):
    project = Project.objects.get(slug="default").pk
    return sorted((hit.kind, hit.session_id, hit.seq) for hit in search.search(q=q, projects=[project], limit=200).items)


def test_searchable_events_are_indexed_in_the_append_and_bookkeeping_is_not():
    store("s1", [f.user("hello"), f.event("turn_start", turn=1), f.assistant(calls=["c1"]), f.tool_call("c1"), f.tool_result("c1")])
    by_seq = dict(Event.objects.filter(session_id="s1").values_list("seq", "id"))
    assert indexed_ids("hello", "tool", "ok", "c1") == {by_seq[0], by_seq[2], by_seq[3], by_seq[4]}


def test_a_fork_adds_no_row_for_its_prefix_and_its_own_events_are_indexed():
    store("parent", [f.user("one"), f.user("two")])
    before = indexed_ids("one", "two", "three")
    assert len(before) == 2
    child = services.fork(session_id="parent", new_session_id="child")
    assert indexed_ids("one", "two", "three") == before
    services.append_events(session_id=child.id, events=validate_batch([f.user("three")]))
    assert len(indexed_ids("one", "two", "three") - before) == 1
    assert hits("one") == [("event", "child", 0), ("event", "parent", 0)]


def test_the_backfill_indexes_old_events_once_resumes_and_skips_forks_prefixes(monkeypatch):
    monkeypatch.setattr(appends, "index_events", lambda session_id, rows: None)  # as if stored before 0012_search
    store("old", [f.user(f"legacy {i}") for i in range(5)])
    services.fork(session_id="old", new_session_id="old-fork")
    monkeypatch.undo()
    services.append_events(session_id="old-fork", events=validate_batch([f.user("legacy new")]))
    last_old = Event.objects.filter(session_id="old-fork").order_by("id").values_list("id", flat=True)[4]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE sessions_app_search_backfill SET done = 0, until = %s", [last_old])
    assert hits("legacy") == [("event", "old-fork", 5)]

    assert search_index.backfill_step(batch=3)[0] < last_old  # stopped after one batch: a later run resumes
    call_command("search_index", batch=2, stdout=open("/dev/null", "w"))
    expected = [("event", "old", i) for i in range(5)] + [("event", "old-fork", i) for i in range(6)]
    assert hits("legacy") == sorted(expected)
    call_command("search_index", stdout=open("/dev/null", "w"))  # nothing left: nothing twice
    assert hits("legacy") == sorted(expected)


def test_notes_are_indexed_on_add_and_edit_and_the_command_reindexes_them_once(django_user_model):
    store("s1", [f.user("hi")])
    admin = django_user_model.objects.create_superuser("root")
    note = services.add_note(actor=access.Actor(user=admin), session_id="s1", text="pinned words", tags=["verified"])
    assert hits("pinned") == [("note", "s1", None)]
    services.edit_note(actor=access.Actor(user=admin), note_id=note.pk, tags=["refund-confirmed"])
    assert hits("verified") == [] and hits("refund") == [("note", "s1", None)]
    call_command("search_index", stdout=open("/dev/null", "w"))
    assert hits("pinned") == [("note", "s1", None)]
