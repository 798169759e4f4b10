"""The search index: kept current in the append transaction, and filled for events stored before it.

`index_events` runs inside `_store` (appends, OTLP, recovery's synthetic
events, imports), keyed by the event's id, read by (session, seq): on
SQLite in one SELECT, then one INSERT per event that has searchable text
(FTS5 tokenizes it); on PostgreSQL in one INSERT per append, of the words
cut in Python (search_text.lexemes says why). A fork's
copied prefix never comes here (services/forks.py copies rows in SQL):
queries answer it from the parent's rows (sessions_app/search). Notes are
indexed on add and edit, and leave the index on delete; a note's `position`
is the newest event id when it was written, so that notes and events
share one order, newest first.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection, transaction

from sessions_app import statements
from sessions_app.log import search_text
from sessions_app.models import Event, Note

EVENT_TABLE = Event._meta.db_table
_SQLITE_WORDS = "INSERT INTO sessions_app_search_words (rowid, words) VALUES (%s, %s)"
_SQLITE_SHORT = "INSERT INTO sessions_app_search_short (rowid, short) VALUES (%s, %s)"
# One statement per append, whatever its size: the rows as arrays, each matched to its event by seq.
_POSTGRESQL_EVENTS = (
    "INSERT INTO sessions_app_search_event (event_id, words, short)"
    " SELECT e.id, array_to_tsvector(string_to_array(u.words, ' ')), u.short"
    " FROM unnest(%s::integer[], %s::text[], %s::text[]) AS u(seq, words, short)"
    f" JOIN {EVENT_TABLE} e ON e.session_id = %s AND e.seq = u.seq"
)


def index_events(session_id: str, rows: Sequence) -> None:
    """Index stored rows (anything with seq, type and data) of one session, in the caller's transaction."""
    texts = []
    for row in rows:
        found = search_text.event_searchable(row.type, row.data)
        if found:
            texts.append((row.seq, found))
    if not texts:
        return
    if connection.vendor == "sqlite":
        # The ids read first: FTS5 took four times as long for an INSERT ... SELECT per row.
        first, last = texts[0][0], texts[-1][0]
        ids = dict(statements.rows("search_event_ids", _event_ids, [session_id, first, last], bound=[first, last, session_id]))
        statements.execute_many(_SQLITE_WORDS, [(ids[seq], found.words) for seq, found in texts if found.words])
        shorts = [(ids[seq], found.short) for seq, found in texts if found.short]
        if shorts:
            statements.execute_many(_SQLITE_SHORT, shorts)
    else:
        words = [search_text.lexemes(found.words) or None for _, found in texts]
        statements.execute(_POSTGRESQL_EVENTS, [[seq for seq, _ in texts], words, [found.short or None for _, found in texts], session_id])


def _event_ids(session_id: str, first: int, last: int):
    return Event.objects.filter(session_id=session_id, seq__gte=first, seq__lte=last).order_by().values_list("seq", "id")


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


def backfill_step(*, batch: int = 5000) -> tuple[int, int]:
    """Index the next `batch` events stored before the index existed; (done, until) event ids after it.

    Resumable: progress is kept in sessions_app_search_backfill in the same
    transaction as the rows. A fork's copied prefix (seq below its seed length)
    is skipped as it is on append. Notes are indexed by `reindex_notes`.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT done, until FROM sessions_app_search_backfill WHERE id = 1")
        done, until = cursor.fetchone()
        if done >= until:
            return done, until
        events = (
            Event.objects.filter(id__gt=done, id__lte=until)
            .order_by("id")
            .values_list("id", "session_id", "seq", "type", "data", "session__seed_length")[:batch]
        )
        last = done
        for event_id, session_id, seq, type_, data, seed_length in events.iterator(chunk_size=batch):
            last = event_id
            if seq >= seed_length:
                index_events(session_id, [_Row(seq, type_, data)])
        last = until if last == done else last
        cursor.execute("UPDATE sessions_app_search_backfill SET done = %s WHERE id = 1", [last])
    return last, until


def reindex_notes() -> int:
    count = 0
    for note in Note.objects.order_by("id").iterator():
        index_note(note)
        count += 1
    return count


class _Row:
    __slots__ = ("seq", "type", "data")

    def __init__(self, seq: int, type_: str, data: dict):
        self.seq, self.type, self.data = seq, type_, data
