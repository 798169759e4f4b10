"""The index's rows that match a query, newest first, per database (the tables of migration 0012_search).

Each function answers at most `limit` keys at or below `bound` (an event id
or a note's position) in the given projects, driven by the index in its own
order (FTS5's rowid, PostgreSQL's primary key) so that a common word's first
page reads a page of rows, not every match.

PostgreSQL's planner cannot tell a rare word from a common one (a word
missing from its statistics is estimated as fairly common), and walking the
primary key backwards for a rare word reads the whole table. So it is asked
first through the GIN index for at most RARE matches: when there are fewer,
those are all of them and the page is cut from them; otherwise the word is
common and the backward walk finds a page within a few thousand rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from sessions_app.log import search_text
from sessions_app.models import Event, Note, Session

EVENTS, SESSIONS, NOTES = Event._meta.db_table, Session._meta.db_table, Note._meta.db_table
RARE = 5000  # matches of a word PostgreSQL reads through its GIN index before walking the key instead


def event_ids(query: search_text.Query, projects: Sequence[int], *, bound: int, limit: int) -> list[int]:
    """Ids of events matching the query's words, or holding its piece in a short field; newest first."""
    found: set[int] = set()
    if connection.vendor == "sqlite" and query.terms:
        found.update(_sqlite_events("sessions_app_search_words", search_text.fts5_match(query.terms), projects, bound, limit))
    elif connection.vendor != "sqlite" and query.lexemes:
        found.update(_postgresql_events("x.words @@ %s::tsquery", query.tsquery, projects, bound, limit))
    if query.substring:
        found.update(_events_by_piece(query.substring, projects, bound, limit))
    return sorted(found, reverse=True)[:limit]


def note_keys(query: search_text.Query, projects: Sequence[int], *, bound: tuple[int, int], limit: int) -> list[tuple[int, int]]:
    """(position, note id) of notes matching the query's words, below `bound`; newest first."""
    if not (query.terms if connection.vendor == "sqlite" else query.lexemes):
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
            f" JOIN {SESSIONS} s ON s.id = n.session_id WHERE x.words @@ %s::tsquery AND s.project_id IN ({marks})"
            " AND (x.position, x.note_id) < (%s, %s) ORDER BY x.position DESC, x.note_id DESC LIMIT %s"
        )
        params = [query.tsquery, *projects, position, note_id, limit]
    return [(int(p), int(n)) for p, n in _rows(sql, params)]


def _events_by_piece(piece, projects, bound, limit) -> list[int]:
    if connection.vendor == "sqlite":
        return _sqlite_events("sessions_app_search_short", search_text.fts5_substring(piece), projects, bound, limit)
    return _postgresql_events("x.short ILIKE %s", "%" + _like_escaped(piece) + "%", projects, bound, limit)


def _sqlite_events(table: str, match: str, projects, bound: int, limit: int) -> list[int]:
    """FTS5 walks its matches by rowid (the event's id) downwards: a page reads a page of matches."""
    sql = (
        f"SELECT x.rowid FROM {table} x JOIN {EVENTS} e ON e.id = x.rowid JOIN {SESSIONS} s ON s.id = e.session_id"
        f" WHERE {table} MATCH %s AND x.rowid <= %s AND s.project_id IN ({_marks(projects)}) ORDER BY x.rowid DESC LIMIT %s"
    )
    return [row[0] for row in _rows(sql, [match, bound, *projects, limit])]


def _postgresql_events(condition: str, value: str, projects, bound: int, limit: int) -> list[int]:
    """A page of events matching `condition`: cut from the rare matches, or walked to when there are many.

    Three plain statements rather than one: in one, the planner took the rare matches for thousands and
    joined them to the events table by hashing all of it.
    """
    scoped = f"JOIN {EVENTS} e ON e.id = x.event_id JOIN {SESSIONS} s ON s.id = e.session_id WHERE s.project_id IN ({_marks(projects)})"
    rare = f"SELECT x.event_id FROM sessions_app_search_event x WHERE {condition} AND x.event_id <= %s LIMIT {RARE + 1}"
    found = [row[0] for row in _rows(rare, [value, bound])]
    if not found:
        return []
    if len(found) <= RARE:
        page = (
            f"SELECT e.id FROM {EVENTS} e JOIN {SESSIONS} s ON s.id = e.session_id"
            f" WHERE e.id = ANY(%s) AND s.project_id IN ({_marks(projects)}) ORDER BY e.id DESC LIMIT %s"
        )
        return [row[0] for row in _rows(page, [found, *projects, limit])]
    common = f"SELECT x.event_id FROM sessions_app_search_event x {scoped} AND {condition} AND x.event_id <= %s ORDER BY x.event_id DESC LIMIT %s"
    return [row[0] for row in _rows(common, [*projects, value, bound, limit])]


def _like_escaped(piece: str) -> str:
    return piece.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _marks(projects: Sequence[int]) -> str:
    return ", ".join(["%s"] * len(projects))


def _rows(sql: str, params: Sequence) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
