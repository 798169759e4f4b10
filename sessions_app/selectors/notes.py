"""Notes: a session's notes, and one note with its session (who may see or change it is access's to say)."""

from __future__ import annotations

from sessions_app.errors import NoteNotFound
from sessions_app.models import Note, Session


def session_notes(session: Session) -> list[Note]:
    """The session's notes, oldest first (the order they were written)."""
    return list(Note.objects.filter(session=session).order_by("created_at", "id"))


def get_note(note_id: int) -> Note:
    """The note with its session; NoteNotFound when there is none."""
    try:
        return Note.objects.select_related("session").get(pk=note_id)
    except Note.DoesNotExist:
        raise NoteNotFound(note_id) from None
