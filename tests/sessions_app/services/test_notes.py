"""services/notes.py: notes beside the log, their limits, who may change them, their audit, and that no event changes."""

import pytest
from django.contrib.auth import get_user_model

from sessions_app import services
from sessions_app.lib.errors import InvalidNote, NoteNotFound, SessionNotFound
from sessions_app.log.events import validate_batch
from sessions_app.models import ApiToken, AuditEntry, Event, Note, Project, Role
from sessions_app.selectors import access
from sessions_app.services import notes as note_rules
from tests.access import member, token_for
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


def person(name: str, role: str = Role.MEMBER) -> access.Actor:
    user = get_user_model().objects.create_user(name)
    member(user, role)
    return access.Actor(user=user)


def token_actor(user, role: str = Role.MEMBER, scopes=None) -> access.Actor:
    return access.Actor(user=user, token=ApiToken.usable_for(token_for(user, role, scopes=scopes)))


def event_rows() -> list[tuple]:
    return list(Event.objects.order_by("session_id", "seq").values_list("session_id", "seq", "type", "time", "received_at", "data"))


@pytest.fixture
def session():
    services.create_session(session_id="s1")
    services.append_events(session_id="s1", events=validate_batch([f.user("a"), f.assistant(calls=["c1"]), f.tool_result("c1")]))


@pytest.fixture
def alice(session):
    return person("alice")


def test_a_note_on_the_session_and_one_on_an_event_are_stored_with_their_author_and_audited(alice):
    whole = services.add_note(actor=alice, session_id="s1", text="checked by phone", tags=["verified"])
    pinned = services.add_note(actor=alice, session_id="s1", text="refund went out", tags=["refund-confirmed", "verified"], seq=2)
    assert (whole.seq, whole.tags, whole.author_name, whole.author) == (None, ["verified"], "alice", alice.user)
    assert (pinned.seq, pinned.tags) == (2, ["refund-confirmed", "verified"])
    entries = AuditEntry.objects.filter(action=AuditEntry.NOTE_ADDED).order_by("pk")
    assert [(e.target, e.detail["note"], e.detail["seq"], e.actor_name) for e in entries] == [
        ("s1", whole.pk, None, "alice"),
        ("s1", pinned.pk, 2, "alice"),
    ]


def test_no_note_operation_changes_an_event(alice):
    before = event_rows()
    note = services.add_note(actor=alice, session_id="s1", text="one", seq=0)
    services.edit_note(actor=alice, note_id=note.pk, text="two", tags=["needs-follow-up"])
    services.delete_note(actor=alice, note_id=note.pk)
    assert event_rows() == before


@pytest.mark.parametrize(
    "fields, field, reason",
    [
        ({"text": ""}, "text", "empty"),
        ({"text": " \n\t"}, "text", "empty"),
        ({"text": "x" * (note_rules.TEXT_MAX + 1)}, "text", "too_long"),
        ({"text": 7}, "text", "not_text"),
        ({"tags": "verified"}, "tags", "not_a_list"),
        ({"tags": ["ok", "Verified"]}, "tags[1]", "invalid_tag"),
        ({"tags": ["-dash-first"]}, "tags[0]", "invalid_tag"),
        ({"tags": [""]}, "tags[0]", "invalid_tag"),
        ({"tags": ["a b"]}, "tags[0]", "invalid_tag"),
        ({"tags": ["x" * (note_rules.TAG_MAX + 1)]}, "tags[0]", "invalid_tag"),
        ({"tags": [f"t{i}" for i in range(note_rules.TAGS_MAX + 1)]}, "tags", "too_many"),
        ({"seq": 3}, "seq", "unknown_seq"),
        ({"seq": -1}, "seq", "unknown_seq"),
        ({"seq": True}, "seq", "unknown_seq"),
    ],
)
def test_bad_input_is_refused_with_where_and_why_and_stores_nothing(alice, fields, field, reason):
    audited = AuditEntry.objects.count()
    with pytest.raises(InvalidNote) as refused:
        services.add_note(actor=alice, session_id="s1", **{"text": "fine", **fields})
    assert (refused.value.field, refused.value.reason) == (field, reason)
    assert refused.value.detail
    assert not Note.objects.exists() and AuditEntry.objects.count() == audited


def test_the_limits_themselves_are_allowed_and_a_repeated_tag_is_kept_once(alice):
    tags = [f"t{i}" for i in range(note_rules.TAGS_MAX - 1)] + ["a" * note_rules.TAG_MAX]
    note = services.add_note(actor=alice, session_id="s1", text="x" * note_rules.TEXT_MAX, tags=[*tags, "t0", "t1"], seq=2)
    assert note.tags == tags and len(note.tags) == note_rules.TAGS_MAX
    assert services.add_note(actor=alice, session_id="s1", text="ok", tags=["a.b:c_d-0"]).tags == ["a.b:c_d-0"]


def test_a_note_on_an_empty_log_names_no_seq(alice):
    services.create_session(session_id="empty")
    with pytest.raises(InvalidNote, match="its log is empty"):
        services.add_note(actor=alice, session_id="empty", text="x", seq=0)


def test_a_viewer_may_not_add_and_an_outsider_does_not_see_the_session(session):
    viewer = person("vera", Role.VIEWER)
    with pytest.raises(access.Forbidden):
        services.add_note(actor=viewer, session_id="s1", text="x")
    stranger = get_user_model().objects.create_user("stranger")
    member(stranger, project=Project.objects.create(slug="other", name="Other"))
    with pytest.raises(SessionNotFound):
        services.add_note(actor=access.Actor(user=stranger), session_id="s1", text="x")
    assert not Note.objects.exists()


def test_another_member_may_not_edit_or_delete_a_note_and_nothing_changes(alice):
    note = services.add_note(actor=alice, session_id="s1", text="mine", tags=["verified"])
    bob = person("bob", Role.OPERATOR)
    for attempt in (
        lambda: services.edit_note(actor=bob, note_id=note.pk, text="his"),
        lambda: services.delete_note(actor=bob, note_id=note.pk),
    ):
        with pytest.raises(access.Forbidden, match="alice's"):
            attempt()
    stored = Note.objects.get()
    assert (stored.text, stored.tags, stored.updated_at) == ("mine", ["verified"], note.updated_at)
    assert AuditEntry.objects.filter(action=AuditEntry.ACCESS_DENIED, actor=bob.user).exists()
    assert not AuditEntry.objects.filter(action__in=[AuditEntry.NOTE_EDITED, AuditEntry.NOTE_DELETED]).exists()


@pytest.mark.parametrize("by_token", [False, True], ids=["logged in", "token with the append scope"])
def test_an_admin_may_edit_and_delete_any_note(alice, by_token):
    note = services.add_note(actor=alice, session_id="s1", text="mine")
    admin = person("ada", Role.ADMIN)
    admin = token_actor(admin.user, Role.ADMIN) if by_token else admin
    edited = services.edit_note(actor=admin, note_id=note.pk, tags=["needs-follow-up"])
    assert (edited.text, edited.tags, edited.author_name) == ("mine", ["needs-follow-up"], "alice")
    assert edited.updated_at > note.updated_at
    entry = AuditEntry.objects.get(action=AuditEntry.NOTE_EDITED)
    assert (entry.actor_name, entry.detail["changed"], entry.detail["author"]) == ("ada", ["tags"], "alice")
    services.delete_note(actor=admin, note_id=note.pk)
    assert not Note.objects.exists()
    assert AuditEntry.objects.get(action=AuditEntry.NOTE_DELETED).detail["note"] == note.pk


def test_the_author_edits_their_own_and_an_edit_changing_nothing_stores_nothing(alice):
    note = services.add_note(actor=alice, session_id="s1", text="mine", tags=["a"])
    same = services.edit_note(actor=alice, note_id=note.pk, text="mine", tags=["a", "a"])
    assert same.updated_at == note.updated_at
    assert not AuditEntry.objects.filter(action=AuditEntry.NOTE_EDITED).exists()
    edited = services.edit_note(actor=alice, note_id=note.pk, text="mine, checked")
    assert (edited.text, edited.tags) == ("mine, checked", ["a"])
    with pytest.raises(InvalidNote) as refused:
        services.edit_note(actor=alice, note_id=note.pk, tags=None)
    assert refused.value.field == "tags"


def test_a_token_with_only_read_may_not_write_notes_even_its_own(session):
    user = get_user_model().objects.create_user("writer")
    note = services.add_note(actor=token_actor(user), session_id="s1", text="mine")
    reader = token_actor(user, scopes=["read"])
    with pytest.raises(access.Forbidden, match="'append' scope"):
        services.add_note(actor=reader, session_id="s1", text="more")
    with pytest.raises(access.Forbidden, match="'append' scope"):
        services.edit_note(actor=reader, note_id=note.pk, text="changed")
    with pytest.raises(access.Forbidden, match="'append' scope"):
        services.delete_note(actor=reader, note_id=note.pk)
    assert list(Note.objects.values_list("text", flat=True)) == ["mine"]


def test_an_unknown_note_is_not_found(alice):
    with pytest.raises(NoteNotFound):
        services.edit_note(actor=alice, note_id=12345, text="x")
    with pytest.raises(NoteNotFound):
        services.delete_note(actor=alice, note_id=12345)
