"""The search index: filled after the append commits, up to each session's `search_indexed_seq`.

Appends pay nothing for it: an append (OTLP, recovery's synthetic events, an
import) only moves the session's event_count, which leaves its new events
pending (session_search_pending_idx holds just those sessions). `index_pending`
indexes them: the worker calls it every second without waiting for sessions
being appended to, and every search calls it first, waiting, so a search finds
everything committed before it began. Indexing events as they were appended
cost a quarter to a third of the append's throughput on PostgreSQL
(docs/benchmarks.md, *Append throughput with the ledger and search on*).

SQLite: one INSERT per event with searchable text into contentless FTS5 tables
keyed by the event's id (FTS5 tokenizes). PostgreSQL: one INSERT per batch, of
the words cut in Python (search_text.lexemes says why). A fork starts indexed
to its seed length: queries answer its copied prefix from the parent's rows
(sessions_app/search). Notes are indexed on add and edit and leave the index on
delete; a note's `position` is the newest event id when it was written, so that
notes and events share one order, newest first.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from django.db import connection, transaction
from django.db.models import F

from sessions_app import statements
from sessions_app.log import search_text
from sessions_app.models import Event, Note, Session

EVENT_TABLE = Event._meta.db_table
_SQLITE_WORDS = "INSERT INTO sessions_app_search_words (rowid, words) VALUES (%s, %s)"
_SQLITE_SHORT = "INSERT INTO sessions_app_search_short (rowid, short) VALUES (%s, %s)"
# One statement per batch, whatever its size: the rows as arrays.
_POSTGRESQL_EVENTS = (
    "INSERT INTO sessions_app_search_event (event_id, words, short)"
    " SELECT u.id, array_to_tsvector(string_to_array(u.words, ' ')), u.short"
    " FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS u(id, words, short)"
)
BATCH_EVENTS = 5000  # events per transaction: the sessions indexed in it stay locked meanwhile
_SESSIONS_PER_CLAIM = 100


def index_pending(*, projects: Collection[int] | None = None, wait: bool, batch: int = BATCH_EVENTS) -> int:
    """Index every event still pending (of `projects`' sessions, or all), in transactions of about `batch`
    events; the number of events read.

    Each transaction locks the sessions it indexes and moves their `search_indexed_seq` with the rows, so
    that several processes never index an event twice. `wait=False` (the worker) leaves a session locked
    by an append to a later call; `wait=True` (a search) waits for that append to commit and indexes it too.
    """
    total = 0
    while (done := _index_some(projects, wait=wait, batch=batch)) is not None:
        total += done
    return total


def _index_some(projects: Collection[int] | None, *, wait: bool, batch: int) -> int | None:
    pending = Session.objects.filter(search_indexed_seq__lt=F("event_count"))
    if projects is not None:
        pending = pending.filter(project_id__in=projects)
    if not pending.exists():  # the common case, read without SQLite's write lock
        return None
    with transaction.atomic():
        claimed = pending.order_by("id").values_list("id", "search_indexed_seq", "event_count")
        if connection.vendor == "postgresql":
            claimed = claimed.select_for_update(skip_locked=not wait, of=("self",))
        budget = batch
        for session_id, start, end in claimed[:_SESSIONS_PER_CLAIM]:
            stop = min(end, start + budget)
            events = Event.objects.filter(session_id=session_id, seq__gte=start, seq__lt=stop).order_by("seq")
            index_events(list(events.values_list("id", "type", "data")))
            Session.objects.filter(pk=session_id).update(search_indexed_seq=stop)
            budget -= stop - start
            if budget <= 0:
                break
        else:
            if budget == batch:
                return None  # every pending session is being appended to (wait=False): a later call
    return batch - budget


def index_events(rows: Sequence[tuple[int, str, dict]]) -> None:
    """Index stored events given as (id, type, data), in the caller's transaction."""
    texts = [(event_id, found) for event_id, type_, data in rows if (found := search_text.event_searchable(type_, data))]
    if not texts:
        return
    if connection.vendor == "sqlite":
        statements.execute_many(_SQLITE_WORDS, [(event_id, found.words) for event_id, found in texts if found.words])
        shorts = [(event_id, found.short) for event_id, found in texts if found.short]
        if shorts:
            statements.execute_many(_SQLITE_SHORT, shorts)
    else:
        statements.execute(
            _POSTGRESQL_EVENTS,
            [
                [event_id for event_id, _ in texts],
                [search_text.lexemes(found.words) or None for _, found in texts],
                [found.short or None for _, found in texts],
            ],
        )


def index_note(note: Note) -> None:
    """(Re)index a note, as the newest thing written: it ranks with the events stored by now."""
    found = search_text.note_searchable(note.text, note.tags)
    with connection.cursor() as cursor:
        unindex_note(note.pk)
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {EVENT_TABLE}")
        position = cursor.fetchone()[0]
        if connection.vendor == "sqlite":
            cursor.execute(
                "INSERT INTO sessions_app_search_notes (rowid, words, position) VALUES (%s, %s, %s)",
                [note.pk, found.words, position],
            )
        else:
            cursor.execute(
                "INSERT INTO sessions_app_search_note (note_id, position, words)"
                " VALUES (%s, %s, array_to_tsvector(string_to_array(%s, ' ')))",
                [note.pk, position, search_text.lexemes(found.words)],
            )


def unindex_note(note_id: int) -> None:
    table, key = ("sessions_app_search_notes", "rowid") if connection.vendor == "sqlite" else ("sessions_app_search_note", "note_id")
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE {key} = %s", [note_id])


def reindex_notes() -> int:
    count = 0
    for note in Note.objects.order_by("id").iterator():
        index_note(note)
        count += 1
    return count
