"""Search over events and notes (reads): the index's hits, a fork's inherited ones, snippets, and pages.

Results are newest first: events by id (the order they were stored), a note
at the position of the newest event stored when it was written (after it).
A fork's copied prefix is not in the index (services/search.py): a hit
in a parent below a fork's seed length is also the fork's hit, at the same
place in the order. A page's cursor is its last result's key.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import defaultdict
from dataclasses import dataclass

from sessions_app.lib.cursors import ROW_ID_MAX, SESSION_ID, InvalidCursor
from sessions_app.log import search_text
from sessions_app.log import values as log_values
from sessions_app.models import Event, Note, Session

from . import hits, references

EVENT, NOTE = 0, 1  # at the same position a note is newer than the event

__all__ = ["Hit", "InvalidCursor", "SearchPage", "reference_hits", "search"]


@dataclass(frozen=True)
class Hit:
    kind: str  # "event" or "note"
    session_id: str
    seq: int | None
    type: str | None
    note_id: int | None
    snippet: str
    highlights: list[tuple[int, int]]


@dataclass(frozen=True)
class SearchPage:
    items: list[Hit]
    next_cursor: str | None


def search(*, q: str, projects: list[int], limit: int, cursor: str | None = None) -> SearchPage:
    """The first `limit` hits of `q` (1..QUERY_MAX characters) in `projects`, after `cursor`."""
    after = _decode(cursor) if cursor else (ROW_ID_MAX, NOTE + 1, "")
    query = search_text.parse_query(q)
    if query.empty or not projects:
        return SearchPage(items=[], next_cursor=None)
    ids = hits.event_ids(query, projects, bound=after[0], limit=limit + 2)
    # Notes strictly below the cursor: after an event, those at a lower position; after a note, the lower ones too.
    note_bound = (after[0], after[2]) if after[1] == NOTE else (after[0], 0 if after[1] == EVENT else ROW_ID_MAX)
    notes = hits.note_keys(query, projects, bound=note_bound, limit=limit + 1)
    keyed = [*_event_hits(ids, query), *_note_hits(notes, query)]
    keyed = sorted((kh for kh in keyed if _before(kh[0], after)), key=lambda kh: kh[0], reverse=True)
    page = keyed[:limit]
    next_cursor = _encode(page[-1][0]) if len(keyed) > limit else None
    return SearchPage(items=[hit for _, hit in page], next_cursor=next_cursor)


def reference_hits(q: str, projects: list[int], *, limit: int = references.CALLS_SHOWN) -> list[Hit]:
    """The calls whose receipt, idempotency key or current verdict's reference is exactly `q`, each as a hit on
    its first sighting (kind "event") whose snippet says which reference matched (selectors.search.references)."""
    rows = references.reference_calls(q, projects, limit=limit)
    if not rows:
        return []
    types, ref = references.sighting_types(rows), references.reference_of(q)
    found = []
    for row in rows:
        snippet, highlights = references.reference_snippet(row, ref)
        found.append(Hit("event", row.session.id, row.call.seq, types.get((row.session.id, row.call.seq)), None, snippet, highlights))
    return found


def _before(key: tuple, after: tuple) -> bool:
    if key[:2] != after[:2]:
        return key[:2] < after[:2]
    return key[2] < after[2]


def _event_hits(ids: list[int], query: search_text.Query):
    rows = Event.objects.filter(id__in=ids).values_list("id", "session_id", "seq", "type", "data")
    heirs = _forks_below(row[1] for row in rows)
    for event_id, session_id, seq, type_, data in rows:
        text, highlights = search_text.snippet(search_text.event_searchable(type_, data).text, query)
        for owner in _owners(session_id, seq, heirs):
            yield (event_id, EVENT, owner), Hit("event", owner, seq, type_, None, text, highlights)


def _note_hits(keys: list[tuple[int, int]], query: search_text.Query):
    positions = dict((note_id, position) for position, note_id in keys)
    for note in Note.objects.filter(id__in=positions):
        text = search_text.note_searchable(note.text, note.tags).words
        snippet, highlights = search_text.snippet(text, query)
        yield (positions[note.pk], NOTE, note.pk), Hit("note", note.session_id, note.seq, None, note.pk, snippet, highlights)


def _forks_below(session_ids) -> dict[str, list[tuple[str, int]]]:
    """Each session's forks (and theirs, down the tree): parent id -> [(fork id, seed length)]."""
    heirs: dict[str, list[tuple[str, int]]] = defaultdict(list)
    wanted = set(session_ids)
    while wanted:
        forks = list(Session.objects.filter(parent_id__in=wanted).values_list("id", "parent_id", "seed_length"))
        for fork_id, parent_id, seed_length in forks:
            heirs[parent_id].append((fork_id, seed_length))
        wanted = {fork_id for fork_id, _, _ in forks}
    return heirs


def _owners(session_id: str, seq: int, heirs: dict[str, list[tuple[str, int]]]) -> list[str]:
    """The session holding the row, and every fork whose copied prefix includes it."""
    owners = [session_id]
    for fork_id, seed_length in heirs.get(session_id, ()):
        if seq < seed_length:
            owners.extend(_owners(fork_id, seq, heirs))
    return owners


def _encode(key: tuple) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def _decode(cursor: str) -> tuple:
    """A cursor `_encode` wrote, or InvalidCursor (it comes back in a query string: untrusted)."""
    try:
        position, kind, tiebreak = log_values.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        valid_position = type(position) is int and 0 <= position <= ROW_ID_MAX
        valid_tiebreak = (
            (kind == EVENT and isinstance(tiebreak, str) and SESSION_ID.fullmatch(tiebreak) is not None)
            or (kind == NOTE and type(tiebreak) is int and 0 <= tiebreak <= ROW_ID_MAX)
        )
        if not (valid_position and type(kind) is int and valid_tiebreak):
            raise ValueError("not a search position")
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InvalidCursor(f"cursor {cursor!r} is not one this search gave") from exc
    return position, kind, tiebreak
