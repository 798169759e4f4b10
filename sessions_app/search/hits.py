"""The index's rows that match a query, newest first, per database (the tables of migration 0011_search).

Each function answers at most `limit` keys at or below `bound` (an event id
or a note's position) in the given projects, driven by the index in its own
order (FTS5's rowid, PostgreSQL's primary key) so that a common word's first
page reads a page of rows, not every match.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from sessions_app.log import search_text
from sessions_app.models import Event, Note, Session

EVENTS, SESSIONS, NOTES = Event._meta.db_table, Session._meta.db_table, Note._meta.db_table


def event_ids(query: search_text.Query, projects: Sequence[int], *, bound: int, limit: int) -> list[int]:
    """Ids of events matching the query's words, or holding its piece in a short field; newest first."""
    found: set[int] = set()
    if query.terms:
        found.update(_events_by_words(query.terms, projects, bound, limit))
    if query.substring:
        found.update(_events_by_piece(query.substring, projects, bound, limit))
    return sorted(found, reverse=True)[:limit]


def note_keys(query: search_text.Query, projects: Sequence[int], *, bound: tuple[int, int], limit: int) -> list[tuple[int, int]]:
    """(position, note id) of notes matching the query's words, below `bound`; newest first."""
    if not query.terms:
        return []
    position, note_id = bound
    marks = _marks(projects)
    if connection.vendor == "sqlite":
        sql = (
            f"SELECT x.position, x.rowid FROM sessions_app_search_notes x JOIN {NOTES} n ON n.id = x.rowid"
            f" JOIN {SESSIONS} s ON s.id = n.session_id WHERE sessions_app_search_notes MATCH %s AND s.project_id IN ({marks})"
            " AND (x.position < %s OR (x.position = %s AND x.rowid < %s)) ORDER BY x.position DESC, x.rowid DESC LIMIT %s"
        )
        params = [search_text.fts5_match(query.terms), *projects, position, position, note_id, limit]
    else:
        sql = (
            f"SELECT x.position, x.note_id FROM sessions_app_search_note x JOIN {NOTES} n ON n.id = x.note_id"
            f" JOIN {SESSIONS} s ON s.id = n.session_id WHERE x.words @@ plainto_tsquery('simple', %s) AND s.project_id IN ({marks})"
            " AND (x.position, x.note_id) < (%s, %s) ORDER BY x.position DESC, x.note_id DESC LIMIT %s"
        )
        params = [" ".join(query.terms), *projects, position, note_id, limit]
    return [(int(p), int(n)) for p, n in _rows(sql, params)]


def _events_by_words(terms, projects, bound, limit) -> list[int]:
    marks = _marks(projects)
    if connection.vendor == "sqlite":
        sql = (
            f"SELECT x.rowid FROM sessions_app_search_words x JOIN {EVENTS} e ON e.id = x.rowid"
            f" JOIN {SESSIONS} s ON s.id = e.session_id WHERE sessions_app_search_words MATCH %s AND x.rowid <= %s"
            f" AND s.project_id IN ({marks}) ORDER BY x.rowid DESC LIMIT %s"
        )
        params = [search_text.fts5_match(terms), bound, *projects, limit]
    else:
        sql = (
            f"SELECT x.event_id FROM sessions_app_search_event x JOIN {EVENTS} e ON e.id = x.event_id"
            f" JOIN {SESSIONS} s ON s.id = e.session_id WHERE x.words @@ plainto_tsquery('simple', %s) AND x.event_id <= %s"
            f" AND s.project_id IN ({marks}) ORDER BY x.event_id DESC LIMIT %s"
        )
        params = [" ".join(terms), bound, *projects, limit]
    return [row[0] for row in _rows(sql, params)]


def _events_by_piece(piece, projects, bound, limit) -> list[int]:
    marks = _marks(projects)
    if connection.vendor == "sqlite":
        sql = (
            f"SELECT x.rowid FROM sessions_app_search_short x JOIN {EVENTS} e ON e.id = x.rowid"
            f" JOIN {SESSIONS} s ON s.id = e.session_id WHERE sessions_app_search_short MATCH %s AND x.rowid <= %s"
            f" AND s.project_id IN ({marks}) ORDER BY x.rowid DESC LIMIT %s"
        )
        params = [search_text.fts5_substring(piece), bound, *projects, limit]
    else:
        sql = (
            f"SELECT x.event_id FROM sessions_app_search_event x JOIN {EVENTS} e ON e.id = x.event_id"
            f" JOIN {SESSIONS} s ON s.id = e.session_id WHERE x.short ILIKE %s AND x.event_id <= %s"
            f" AND s.project_id IN ({marks}) ORDER BY x.event_id DESC LIMIT %s"
        )
        params = ["%" + _like_escaped(piece) + "%", bound, *projects, limit]
    return [row[0] for row in _rows(sql, params)]


def _like_escaped(piece: str) -> str:
    return piece.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _marks(projects: Sequence[int]) -> str:
    return ", ".join(["%s"] * len(projects))


def _rows(sql: str, params: Sequence) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
