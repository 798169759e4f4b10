"""services/search.py: appends leave their events pending and the indexer (worker, search, command) indexes them
once, in resumable batches, several at once; a fork's prefix left to its parent; imports, recovery, notes;
on SQLite and PostgreSQL."""

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import F

from dashboard.pages import search as search_hits
from sessions_app import selectors, services
from sessions_app.log import blob as log_blob
from sessions_app.log.events import validate_batch
from sessions_app.models import Event, Project, Session
from sessions_app.selectors import access, search
from sessions_app.services import search as search_index
from tests.concurrency import run_at_once
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
    """What the selector answers from the index as it stands (the views index what is pending first)."""
    project = Project.objects.get(slug="default").pk
    return sorted((hit.kind, hit.session_id, hit.seq) for hit in search.search(q=q, projects=[project], limit=200).items)


def pending():
    return dict(Session.objects.filter(search_indexed_seq__lt=F("event_count")).values_list("id", "search_indexed_seq"))


def test_an_append_leaves_its_events_pending_and_indexing_them_holds_the_searchable_ones_once():
    store("s1", [f.user("hello"), f.event("turn_start", turn=1), f.assistant(calls=["c1"]), f.tool_call("c1"), f.tool_result("c1")])
    assert indexed_ids("hello", "tool", "ok", "c1") == set() and pending() == {"s1": 0}
    assert search_index.index_pending(wait=False) == 5
    by_seq = dict(Event.objects.filter(session_id="s1").values_list("seq", "id"))
    assert indexed_ids("hello", "tool", "ok", "c1") == {by_seq[0], by_seq[2], by_seq[3], by_seq[4]}
    assert pending() == {} and search_index.index_pending(wait=False) == 0
    services.append_events(session_id="s1", events=validate_batch([f.user("again")]))
    assert pending() == {"s1": 5} and search_index.index_pending(wait=True) == 1
    assert indexed_ids("again") == {Event.objects.get(session_id="s1", seq=5).pk}


def test_a_search_indexes_what_was_appended_a_moment_ago_in_its_own_projects_only():
    store("s1", [f.user("fresh words")])
    other = Project.objects.create(slug="other", name="Other")
    store("elsewhere", [f.user("fresh elsewhere")], project=other)
    page = search_hits.hits_for("fresh", [Project.objects.get(slug="default").pk])
    assert [(row.hit.session_id, row.hit.seq) for row in page.items] == [("s1", 0)]
    assert pending() == {"elsewhere": 0}  # another project's backlog is not the caller's to wait for


def test_a_fork_starts_indexed_to_its_seed_and_its_own_events_are_indexed():
    store("parent", [f.user("one"), f.user("two")])
    search_index.index_pending(wait=False)
    before = indexed_ids("one", "two", "three")
    assert len(before) == 2
    child = services.fork(session_id="parent", new_session_id="child")
    assert pending() == {} and indexed_ids("one", "two", "three") == before
    services.append_events(session_id=child.id, events=validate_batch([f.user("three")]))
    assert pending() == {"child": 2}
    search_index.index_pending(wait=False)
    assert len(indexed_ids("one", "two", "three") - before) == 1
    assert hits("one") == [("event", "child", 0), ("event", "parent", 0)]


def test_imports_and_recoverys_synthetic_events_are_indexed_like_appends(django_user_model):
    store("crashed", [f.user("go"), f.event("turn_start", turn=1), f.assistant(calls=["c1"]), f.tool_call("c1")])
    search_index.index_pending(wait=False)
    user = django_user_model.objects.create_superuser("root")
    services.recover(session_id="crashed", user=user)
    assert pending() == {"crashed": 4}
    search_index.index_pending(wait=False)
    assert hits("interrupted") != [] and pending() == {}
    blob = log_blob.write_blob(selectors.session_log(Session.objects.get(pk="crashed")))
    imported, _ = services.import_blob(blob=blob, session_id="copy")
    assert pending() == {imported.id: 0}
    search_index.index_pending(wait=True)
    assert ("event", "copy", 0) in hits("go")


def test_indexing_runs_in_batches_that_commit_their_progress_and_the_command_finishes_it():
    store("big", [f.user(f"legacy {i}") for i in range(7)])
    store("small", [f.user("legacy small")])
    assert search_index._index_some(None, wait=True, batch=3) == 3
    assert pending() == {"big": 3, "small": 0}  # stopped inside a session: a later call resumes from its mark
    call_command("search_index", batch=2, stdout=open("/dev/null", "w"))
    expected = [("event", "big", i) for i in range(7)] + [("event", "small", 0)]
    assert pending() == {} and hits("legacy") == sorted(expected)
    call_command("search_index", stdout=open("/dev/null", "w"))  # nothing left: nothing twice
    assert hits("legacy") == sorted(expected)


@pytest.mark.django_db(transaction=True)
def test_several_indexers_at_once_index_each_event_once_while_appends_go_on():
    for n in range(8):
        store(f"s{n}", [f.user(f"busy {n} {i}") for i in range(30)])

    def append_more(n):
        for i in range(5):
            services.append_events(session_id=f"s{n}", events=validate_batch([f.user(f"busy later {n} {i}")]))

    def index(wait):
        return search_index.index_pending(wait=wait, batch=40)

    outcomes = run_at_once(lambda job, arg: job(arg), [(index, True), (index, False), (index, True), (append_more, 0), (append_more, 5)])
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    search_index.index_pending(wait=True)
    ids = list(Event.objects.values_list("id", flat=True))
    assert sorted(indexed_ids("busy")) == sorted(ids) and pending() == {}


def test_notes_are_indexed_on_add_and_edit_and_the_command_reindexes_them_once(django_user_model):
    store("s1", [f.user("hi")])
    admin = django_user_model.objects.create_superuser("root")
    note = services.add_note(actor=access.Actor(user=admin), session_id="s1", text="pinned words", tags=["verified"])
    assert hits("pinned") == [("note", "s1", None)]
    services.edit_note(actor=access.Actor(user=admin), note_id=note.pk, tags=["refund-confirmed"])
    assert hits("verified") == [] and hits("refund") == [("note", "s1", None)]
    call_command("search_index", stdout=open("/dev/null", "w"))
    assert hits("pinned") == [("note", "s1", None)]
