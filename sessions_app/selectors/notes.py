"""Notes: a session's notes, and one note with its session (who may see or change it is access's to say)."""

from __future__ import annotations

from sessions_app.lib.errors import NoteNotFound
from sessions_app.models import Note, Session


def session_notes(session: Session) -> list[Note]:
    """The session's notes, oldest first (the order they were written)."""
    return list(Note.objects.filter(session=session).order_by("created_at", "id"))


def notes_by_seq(session: Session) -> dict[int, list[Note]]:
    """The session's notes pinned to events, by seq, oldest first (a note on the whole session has none)."""
    pinned: dict[int, list[Note]] = {}
    for note in session_notes(session):
        if note.seq is not None:
            pinned.setdefault(note.seq, []).append(note)
    return pinned


def get_note(note_id: int) -> Note:
    """The note with its session; NoteNotFound when there is none."""
    try:
        return Note.objects.select_related("session").get(pk=note_id)
    except Note.DoesNotExist:
        raise NoteNotFound(note_id) from None
