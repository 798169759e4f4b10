"""Notes over HTTP: pinning notes to a session or one of its events, reading, editing and deleting them.

Notes sit beside the log: none of these endpoints changes an event.
"""

from __future__ import annotations

from ninja import Router, Status

from sessions_app import selectors, services
from sessions_app.api.checks import readable
from sessions_app.api.schemas import BODY_ERRORS, ErrorOut, NoteEditIn, NoteIn, NoteOut, NotesOut
from sessions_app.log import events as log_events
from sessions_app.models import Note
from sessions_app.selectors import access

router = Router(tags=["notes"])


def note_to_wire(note: Note) -> dict:
    return {
        "id": note.pk,
        "session_id": note.session_id,
        "seq": note.seq,
        "text": note.text,
        "tags": list(note.tags),
        "author": note.author_name,
        "created_at": log_events.format_time(note.created_at),
        "updated_at": log_events.format_time(note.updated_at),
    }


@router.post("/sessions/{session_id:session_id}/notes", response={201: NoteOut, 403: ErrorOut, 404: ErrorOut, **BODY_ERRORS})
def add_note(request, session_id: str, payload: NoteIn):
    """Pin a note to the session, or with `seq` to one of its events (members; a token's `append` scope)."""
    note = services.add_note(
        actor=access.actor_of(request), session_id=session_id, text=payload.text, tags=payload.tags, seq=payload.seq
    )
    return Status(201, note_to_wire(note))


@router.get("/sessions/{session_id:session_id}/notes", response={200: NotesOut, 403: ErrorOut, 404: ErrorOut})
def list_notes(request, session_id: str):
    """The session's notes, oldest first."""
    session = readable(request, session_id, related=False)
    return {"notes": [note_to_wire(note) for note in selectors.session_notes(session)]}


@router.patch("/notes/{int:note_id}", response={200: NoteOut, 403: ErrorOut, 404: ErrorOut, **BODY_ERRORS})
def edit_note(request, note_id: int, payload: NoteEditIn):
    """Change a note's text and/or tags (its author, or an admin of the project); absent fields stay as they are."""
    sent = payload.model_fields_set
    changes = {name: getattr(payload, name) for name in ("text", "tags") if name in sent}
    note = services.edit_note(actor=access.actor_of(request), note_id=note_id, **changes)
    return note_to_wire(note)


@router.delete("/notes/{int:note_id}", response={204: None, 403: ErrorOut, 404: ErrorOut})
def delete_note(request, note_id: int):
    """Delete a note (its author, or an admin of the project)."""
    services.delete_note(actor=access.actor_of(request), note_id=note_id)
    return Status(204, None)

