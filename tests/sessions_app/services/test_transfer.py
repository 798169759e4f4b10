import pytest

from sessions_app import services
from sessions_app.models import AuditEntry, Note


@pytest.mark.django_db
def test_an_import_warns_of_an_agent_name_or_seed_length_that_does_not_fit_and_leaves_them_out():
    services.create_session(session_id="parent")
    blob = {"version": 2, "events": [], "agent_name": 7, "parent": {"session_id": "parent", "seed_length": 1}}
    session, warnings = services.import_blob(blob=blob, session_id="child")
    assert (session.agent_name, session.parent_id) == ("", None)
    assert [w.split(" ")[0] for w in warnings] == ["agent_name", "parent"]


@pytest.mark.django_db
def test_imported_notes_keep_their_author_as_text_and_times_and_are_not_audited_as_additions():
    blob = {
        "version": 2,
        "events": [{"seq": 4, "type": "user_message", "time": "2026-01-01T00:00:00Z", "data": {"content": "x"}}],
        "notes": [
            {"seq": 4, "text": "checked", "tags": ["verified", "verified"], "author": "admin",
             "created_at": "2026-01-02T00:00:00Z", "updated_at": "2026-01-03T00:00:00Z"},
            {"text": "whole", "author": "ana", "created_at": "not a time"},
        ],
        "session": {"id": "orig"},
    }  # fmt: skip
    session, warnings = services.import_blob(blob=blob, session_id="copy")
    assert warnings == []
    pinned, whole = Note.objects.filter(session=session).order_by("pk")
    assert (pinned.seq, pinned.tags, pinned.author, pinned.author_name) == (0, ["verified"], None, "admin")
    assert (pinned.created_at.isoformat(), pinned.updated_at.isoformat()) == ("2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00")
    assert (whole.seq, whole.author_name, whole.created_at == whole.updated_at) == (None, "ana", True)
    assert not AuditEntry.objects.filter(action=AuditEntry.NOTE_ADDED).exists()


@pytest.mark.django_db
def test_a_notes_key_that_is_not_a_list_is_said_and_left_out():
    session, warnings = services.import_blob(blob={"version": 2, "events": [], "notes": {"text": "x"}}, session_id="copy")
    assert warnings == ['notes {"text": "x"} is not a list; imported without notes'] and not session.notes.exists()
