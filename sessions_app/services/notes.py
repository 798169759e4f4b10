"""Notes: adding, editing and deleting the notes people pin beside a session's log.

Notes are not events: each write here changes the notes table (and the
audit log; adding and editing also what retention counts from,
Session.retained_from) only, never an event, so the log stays append-only.
Each write checks who may do it through `access` first, outside its
transaction (a refusal's audit entry stays), then validates its input
against the limits below, and stores nothing when either refuses.
"""

from __future__ import annotations

import re
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from sessions_app.lib import statements
from sessions_app.lib.errors import InvalidNote, NoteNotFound
from sessions_app.log import events as log_events
from sessions_app.models import AuditEntry, Note, Session
from sessions_app.selectors import access
from sessions_app.services.search import index_note, unindex_note

from .audit_log import audit
from .event_rows import locked_session, retain_from
from .publishing import publish_notes_changed_on_commit

# The limits of docs/api.md, Notes.
TEXT_MAX = 10_000  # characters
TAGS_MAX = 20
TAG_MAX = 50  # characters
TAG_PATTERN = r"[a-z0-9][a-z0-9._:-]*"
AUTHOR_MAX = Note._meta.get_field("author_name").max_length
TAG_RE = re.compile(TAG_PATTERN)
UNCHANGED = object()  # edit_note: a field the edit leaves as it is


def checked_text(text: object) -> str:
    """The text as stored (as sent), or InvalidNote saying why not."""
    if not isinstance(text, str):
        raise InvalidNote("text", "not_text", f"text must be a string, not {log_events.show_json(text)}")
    if not text.strip():
        raise InvalidNote("text", "empty", "text is empty: a note needs words")
    if len(text) > TEXT_MAX:
        raise InvalidNote("text", "too_long", f"text has {len(text)} characters; at most {TEXT_MAX}")
    return text


def checked_tags(tags: object) -> list[str]:
    """The tags as stored (duplicates dropped, first order kept), or InvalidNote naming the first bad one."""
    if tags is None:
        return []
    if not isinstance(tags, list):
        raise InvalidNote("tags", "not_a_list", f"tags must be a list of words, not {log_events.show_json(tags)}")
    kept: list[str] = []
    for index, tag in enumerate(tags):
        if not isinstance(tag, str) or len(tag) > TAG_MAX or not TAG_RE.fullmatch(tag):
            raise InvalidNote(
                f"tags[{index}]",
                "invalid_tag",
                f"tags[{index}] {log_events.show_json(tag)} is not a tag: 1 to {TAG_MAX} characters of a-z 0-9 . _ : -,"
                " starting with a letter or digit",
            )
        if tag not in kept:
            kept.append(tag)
    if len(kept) > TAGS_MAX:
        raise InvalidNote("tags", "too_many", f"{len(kept)} tags; a note has at most {TAGS_MAX}")
    return kept


def checked_seq(seq: object, session: Session) -> int | None:
    """The seq of an event of the session (or None: the whole session), or InvalidNote."""
    if seq is None:
        return None
    if not log_events.is_integer(seq) or not 0 <= seq < session.event_count:
        last = f"its seqs are 0 to {session.event_count - 1}" if session.event_count else "its log is empty"
        raise InvalidNote("seq", "unknown_seq", f"seq {log_events.show_json(seq)} is not an event of session {session.id!r}: {last}")
    return seq


def add_note(*, actor: access.Actor, session_id: str, text: object, tags: object = None, seq: object = None) -> Note:
    """Pin a note to the session (seq None) or to one of its events; the actor needs APPEND there."""
    session = access.session_for(actor, session_id, access.APPEND, related=False)
    text, tags, seq = checked_text(text), checked_tags(tags), checked_seq(seq, session)
    now = timezone.now()
    with transaction.atomic():
        # Under the session's lock: a sweep deleting it meanwhile makes this SessionNotFound, and one deciding
        # now sees the note keep it (retention counts from the last note written).
        session = locked_session(session.pk)
        retain_from(session, now)
        note = Note.objects.create(
            session=session, seq=seq, text=text, tags=tags, author=actor.user, author_name=actor.name, created_at=now, updated_at=now
        )
        _audit(note, actor, AuditEntry.NOTE_ADDED)
        publish_notes_changed_on_commit(session.id, [seq])
        index_note(note)
    return note


def edit_note(*, actor: access.Actor, note_id: int, text: object = UNCHANGED, tags: object = UNCHANGED) -> Note:
    """Change a note's text and/or tags (its author, or a project admin); UNCHANGED leaves a field as it is, None is
    refused. An edit that changes nothing stores nothing (no audit entry, the same updated_at)."""
    found = access.note_for(actor, note_id, change=True)
    changes = {}
    if text is not UNCHANGED:
        changes["text"] = checked_text(text)
    if tags is not UNCHANGED:
        if tags is None:
            raise InvalidNote("tags", "not_a_list", "tags may not be null: send [] to remove every tag")
        changes["tags"] = checked_tags(tags)
    with transaction.atomic():
        # The session's lock before the note's, in the order retention's deletion takes them.
        session = statements.get_for_update(Session, found.session_id)
        if session is None:  # deleted since the access check, with its notes
            raise NoteNotFound(note_id)
        note = _locked_note(note_id)
        changed = [name for name, value in changes.items() if getattr(note, name) != value]
        if not changed:
            return note
        for name in changed:
            setattr(note, name, changes[name])
        note.updated_at = timezone.now()
        note.save(update_fields=[*changed, "updated_at"])
        retain_from(session, note.updated_at)
        _audit(note, actor, AuditEntry.NOTE_EDITED, changed=changed)
        publish_notes_changed_on_commit(note.session_id, [note.seq])
        index_note(note)
    return note


def delete_note(*, actor: access.Actor, note_id: int) -> None:
    """Delete a note (its author, or a project admin)."""
    access.note_for(actor, note_id, change=True)
    with transaction.atomic():
        note = _locked_note(note_id)
        _audit(note, actor, AuditEntry.NOTE_DELETED)
        publish_notes_changed_on_commit(note.session_id, [note.seq])
        unindex_note(note.pk)
        note.delete()


def _locked_note(note_id: int) -> Note:
    note = Note.objects.select_for_update().select_related("session").filter(pk=note_id).first()
    if note is None:  # deleted since the access check
        raise NoteNotFound(note_id)
    return note


def _audit(note: Note, actor: access.Actor, action: str, **detail) -> None:
    audit(
        project=note.session.project_id,
        actor=actor.user,
        action=action,
        target=note.session_id,
        detail={"note": note.pk, "seq": note.seq, "author": note.author_name, **detail},
    )


# Import -----------------------------------------------------------------------


def import_notes(session: Session, notes: object, follow_seq, warnings: list[str], *, now: datetime) -> list[Note]:
    """Store an imported blob's notes on `session` (inside the import's transaction).

    `follow_seq` maps a seq of the blob to the seq its event got here (None:
    not imported). A note whose event was not imported becomes a note on the
    whole session; its author is kept as text, never matched to a local user.
    A note breaking the limits is dropped; each change is said in `warnings`.
    """
    if notes is None:
        return []
    if not isinstance(notes, list):
        warnings.append(f"notes {log_events.show_json(notes)} is not a list; imported without notes")
        return []
    rows = []
    for index, item in enumerate(notes):
        if (row := _imported_note(session, index, item, follow_seq, warnings, now)) is not None:
            rows.append(row)
    stored = Note.objects.bulk_create(rows)
    for note in stored:
        index_note(note)
    return stored


def _imported_note(session: Session, index: int, item: object, follow_seq, warnings: list[str], now: datetime) -> Note | None:
    name = f"notes[{index}]"
    if not isinstance(item, dict):
        warnings.append(f"{name} dropped: not an object")
        return None
    try:
        text, tags = checked_text(item.get("text")), checked_tags(item.get("tags"))
    except InvalidNote as exc:
        warnings.append(f"{name} dropped: {exc.detail}")
        return None
    author = item.get("author")
    if not isinstance(author, str) or not author.strip() or len(author) > AUTHOR_MAX:
        warnings.append(f"{name}: author {log_events.show_json(author)} is not a text of 1 to {AUTHOR_MAX} characters; kept as 'unknown'")
        author = "unknown"
    seq = item.get("seq")
    if seq is not None:
        followed = follow_seq(seq) if log_events.is_integer(seq) else None
        if followed is None:
            warnings.append(f"{name}: its event (seq {log_events.show_json(seq)}) was not imported; kept as a note on the whole session")
        seq = followed
    created_at = _time_or(now, item.get("created_at"))
    updated_at = max(created_at, _time_or(created_at, item.get("updated_at")))
    return Note(session=session, seq=seq, text=text, tags=tags, author=None, author_name=author, created_at=created_at, updated_at=updated_at)


def _time_or(default: datetime, value: object) -> datetime:
    try:
        return log_events.coerce_time(value)
    except ValueError:
        return default
