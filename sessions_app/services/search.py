"""The search index: filled after the append commits, up to each session's `search_indexed_seq`.

Appends pay nothing for it: an append (OTLP, recovery's synthetic events, an
import) only moves the session's event_count, which leaves its new events
pending (session_search_pending_idx holds just those sessions). `index_pending`
indexes them: the worker calls it every second without waiting for sessions
being appended to, and every search calls it first, waiting, so a search finds
everything committed before it began. Indexing events as they were appended
cost a quarter to a third of the append's throughput on PostgreSQL
(docs/performance.md, *Append throughput with the ledger and search on*).

SQLite: one INSERT per event with searchable text into contentless FTS5 tables
keyed by the event's id (FTS5 tokenizes). PostgreSQL: one INSERT per batch, of
the words cut in Python (search_text.lexemes says why). A fork starts indexed
to its seed length: queries answer its copied prefix from the parent's rows
(sessions_app/selectors/search). Notes are indexed on add and edit and leave the index on
delete; a note's `position` is the newest event id when it was written, so that
notes and events share one order, newest first.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from django.db import connection, transaction
from django.db.models import F

from sessions_app.lib import statements
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
BATCH_EVENTS = 2000  # events per transaction (on SQLite the writer's lock is held while it writes them)
_SESSIONS_PER_CLAIM = 100


def index_pending(*, projects: Collection[int] | None = None, wait: bool, batch: int = BATCH_EVENTS) -> int:
    """Index every event still pending (of `projects`' sessions, or all), about `batch` events per
    transaction; the number of events passed (searchable or not).

    The events are read and their words cut before the writing transaction, which holds no session
    row until its last statement moves the sessions' marks: appends to those sessions never wait
    for the indexing. Two indexers never index an event twice: each claims a session (PostgreSQL:
    an advisory lock; SQLite: its single writer) and writes only if the session's mark is still
    where it read it. `wait=False` (the worker) leaves a session another indexer holds to a later
    call; `wait=True` (a search) waits for it.
    """
    total = 0
    while (done := _index_some(projects, wait=wait, batch=batch)) is not None:
        total += done
    return total


_MARK = "UPDATE sessions_app_session SET search_indexed_seq = %s WHERE id = %s"
CLAIM_SPACE = 27001  # the advisory locks' first key: the search index's (the second is the session id's hash)
# Waiting, the locks are taken in the order of their keys: two searches' claims never wait on each other in a circle.
_CLAIM_WAIT = (
    "SELECT pg_advisory_xact_lock(%s, k.h) FROM (SELECT DISTINCT hashtext(u.id) AS h FROM unnest(%s::text[]) AS u(id) ORDER BY 1) AS k"
)
_CLAIM_TRY = "SELECT u.id FROM unnest(%s::text[]) AS u(id) WHERE pg_try_advisory_xact_lock(%s, hashtext(u.id))"


def _index_some(projects: Collection[int] | None, *, wait: bool, batch: int) -> int | None:
    """One transaction's worth; None when nothing was left to index (or, wait=False, nothing free)."""
    pending = Session.objects.filter(search_indexed_seq__lt=F("event_count"))
    if projects is not None:
        pending = pending.filter(project_id__in=projects)
    plan, budget = [], batch
    for session_id, start, end in pending.order_by("id").values_list("id", "search_indexed_seq", "event_count")[:_SESSIONS_PER_CLAIM]:
        stop = min(end, start + budget)
        plan.append((session_id, start, stop))
        budget -= stop - start
        if budget <= 0:
            break
    if not plan:  # the common case: one read of session_search_pending_idx, no write
        return None
    prepared = {session_id: _index_rows(session_id, start, stop) for session_id, start, stop in plan}
    with transaction.atomic():
        claimed = _claim([session_id for session_id, _, _ in plan], wait=wait)
        marks = dict(Session.objects.filter(pk__in=claimed).values_list("id", "search_indexed_seq"))
        written = [(session_id, start, stop) for session_id, start, stop in plan if marks.get(session_id) == start]
        if written:
            index_events([row for session_id, _, _ in written for row in prepared[session_id]])
            statements.execute_many(_MARK, [(stop, session_id) for session_id, _, stop in written])
    if not written and not wait:
        return None  # every pending session is another indexer's right now: a later call
    return sum(stop - start for _, start, stop in written)


def _claim(session_ids: list[str], *, wait: bool) -> list[str]:
    if connection.vendor != "postgresql":
        return session_ids  # SQLite's write lock, taken by the transaction, is the claim
    with connection.cursor() as cursor:
        if wait:
            cursor.execute(_CLAIM_WAIT, [CLAIM_SPACE, session_ids])
            return session_ids
        cursor.execute(_CLAIM_TRY, [session_ids, CLAIM_SPACE])
        return [row[0] for row in cursor.fetchall()]


def _index_rows(session_id: str, start: int, stop: int) -> list[tuple[int, str, str]]:
    """(event id, words, short) of the session's searchable events in [start, stop); on PostgreSQL the words
    as `lexemes` gives them."""
    events = Event.objects.filter(session_id=session_id, seq__gte=start, seq__lt=stop, type__in=search_text.SEARCHABLE_TYPES)
    rows = []
    for event_id, type_, data in events.order_by("seq").values_list("id", "type", "data"):
        if found := search_text.event_searchable(type_, data):
            words = found.words if connection.vendor == "sqlite" else search_text.lexemes(found.words)
            rows.append((event_id, words, found.short))
    return rows


def index_events(rows: Sequence[tuple[int, str, str]]) -> None:
    """Write index rows (event id, words, short) in the caller's transaction."""
    if not rows:
        return
    if connection.vendor == "sqlite":
        statements.execute_many(_SQLITE_WORDS, [(event_id, words) for event_id, words, _ in rows if words])
        shorts = [(event_id, short) for event_id, _, short in rows if short]
        if shorts:
            statements.execute_many(_SQLITE_SHORT, shorts)
    else:
        statements.execute(
            _POSTGRESQL_EVENTS,
            [[event_id for event_id, _, _ in rows], [words or None for _, words, _ in rows], [short or None for _, _, short in rows]],
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
