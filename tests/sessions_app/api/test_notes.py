"""notes.py over HTTP: the Note object, each answer and refusal of api.md's notes rows, and tokens' scopes."""

import re

import pytest

from sessions_app.models import AuditEntry, Event, Note, Project, Role
from sessions_app.services import notes as note_rules
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session

pytestmark = pytest.mark.django_db

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"


@pytest.fixture
def s1(api):
    make_session(api, "s1")
    append(api, "s1", [f.user("a"), f.assistant(calls=["c1"]), f.tool_result("c1")])
    return "s1"


@pytest.fixture
def client_of(django_user_model):
    def client_of(name: str, role: str = Role.MEMBER, scopes=None) -> ApiClient:
        user = django_user_model.objects.filter(username=name).first() or django_user_model.objects.create_user(name)
        return ApiClient(token_for(user, role, scopes=scopes))

    return client_of


def event_rows():
    return list(Event.objects.order_by("session_id", "seq").values_list("session_id", "seq", "type", "time", "received_at", "data"))


def add(api, session_id="s1", **body):
    return api.post(f"/api/v1/sessions/{session_id}/notes", body)


def test_a_note_is_added_listed_edited_and_deleted_and_no_event_changes(api, s1):
    before = event_rows()
    response = add(api, text="called the bank: refund confirmed", tags=["refund-confirmed", "verified"], seq=2)
    assert response.status_code == 201, response.content
    note = response.json()
    assert set(note) == {"id", "session_id", "seq", "text", "tags", "author", "created_at", "updated_at"}
    assert (note["session_id"], note["seq"], note["tags"], note["author"]) == ("s1", 2, ["refund-confirmed", "verified"], "agent")
    assert re.fullmatch(TIME, note["created_at"]) and note["updated_at"] == note["created_at"]
    whole = add(api, text="needs a second look").json()
    assert (whole["seq"], whole["tags"]) == (None, [])
    assert api.get("/api/v1/sessions/s1/notes").json() == {"notes": [note, whole]}

    edited = api.patch(f"/api/v1/notes/{note['id']}", {"tags": ["verified"]})
    assert edited.status_code == 200, edited.content
    assert (edited.json()["text"], edited.json()["tags"]) == (note["text"], ["verified"])
    assert edited.json()["updated_at"] >= note["updated_at"]
    deleted = api.delete(f"/api/v1/notes/{note['id']}")
    assert deleted.status_code == 204 and deleted.content == b""
    assert [n["id"] for n in api.get("/api/v1/sessions/s1/notes").json()["notes"]] == [whole["id"]]
    assert event_rows() == before
    actions = list(AuditEntry.objects.filter(action__startswith="note_").order_by("pk").values_list("action", flat=True))
    assert actions == ["note_added", "note_added", "note_edited", "note_deleted"]


@pytest.mark.parametrize(
    "body, field, reason",
    [
        ({"text": ""}, "text", "empty"),
        ({"text": "   "}, "text", "empty"),
        ({"text": "x" * (note_rules.TEXT_MAX + 1)}, "text", "too_long"),
        ({"text": "x", "seq": 3}, "seq", "unknown_seq"),
        ({"text": "x", "seq": -2}, "seq", "unknown_seq"),
        ({"text": "x", "tags": ["Needs Follow-up"]}, "tags[0]", "invalid_tag"),
        ({"text": "x", "tags": [f"t{i}" for i in range(note_rules.TAGS_MAX + 1)]}, "tags", "too_many"),
    ],
)
def test_bad_input_answers_422_invalid_note_with_where_and_why_and_stores_nothing(api, s1, body, field, reason):
    audited = AuditEntry.objects.count()
    refused = assert_error(add(api, **body), 422, "invalid_note")
    assert (refused["field"], refused["reason"]) == (field, reason)
    assert not Note.objects.exists() and AuditEntry.objects.count() == audited


@pytest.mark.parametrize(
    "body, where",
    [({}, "text"), ({"text": 5}, "text"), ({"text": "x", "seq": "1"}, "seq"), ({"text": "x", "seq": True}, "seq"), ({"text": "x", "tags": [1]}, "tags[0]")],
)
def test_a_field_of_the_wrong_type_answers_422_invalid_request_naming_it(api, s1, body, where):
    refused = assert_error(add(api, **body), 422, "invalid_request")
    assert where in refused["detail"]
    assert not Note.objects.exists()


def test_a_body_that_is_not_storable_text_is_refused(api, s1):
    assert_error(api.post("/api/v1/sessions/s1/notes", {"text": "nul \u0000 here"}), 422, "invalid_text")
    assert not Note.objects.exists()


def test_an_unknown_session_or_note_is_404(api, s1):
    assert_error(add(api, "nope", text="x"), 404, "not_found")
    assert_error(api.get("/api/v1/sessions/nope/notes"), 404, "not_found")
    assert_error(api.patch("/api/v1/notes/999999", {"text": "x"}), 404, "not_found")
    assert_error(api.delete("/api/v1/notes/999999"), 404, "not_found")
    assert_error(api.delete(f"/api/v1/notes/{2**70}"), 404, "not_found")
    assert_error(api.patch("/api/v1/notes/abc", {"text": "x"}), 404, "not_found")  # no note id: no endpoint
    assert_error(api.delete("/api/v1/notes/-1"), 404, "not_found")


def test_an_edit_by_another_member_is_403_and_changes_nothing(api, s1, client_of):
    note = add(api, text="mine", tags=["verified"], seq=0).json()
    other = client_of("other")
    refused = assert_error(other.patch(f"/api/v1/notes/{note['id']}", {"text": "his"}), 403, "forbidden")
    assert "agent's" in refused["detail"]
    assert_error(other.delete(f"/api/v1/notes/{note['id']}"), 403, "forbidden")
    assert api.get("/api/v1/sessions/s1/notes").json()["notes"] == [note]
    assert AuditEntry.objects.filter(action="access_denied", target=f"note {note['id']} of s1").exists()


def test_an_admin_may_edit_and_delete_any_note(api, s1, client_of):
    note = add(api, text="mine").json()
    admin = client_of("ada", Role.ADMIN)
    edited = admin.patch(f"/api/v1/notes/{note['id']}", {"text": "checked: fine", "tags": ["verified"]})
    assert edited.status_code == 200, edited.content
    assert (edited.json()["text"], edited.json()["author"]) == ("checked: fine", "agent")
    assert admin.delete(f"/api/v1/notes/{note['id']}").status_code == 204
    assert not Note.objects.exists()


def test_a_viewer_reads_notes_but_may_not_add_any(api, s1, client_of):
    note = add(api, text="mine").json()
    viewer = client_of("vera", Role.VIEWER)
    assert viewer.get("/api/v1/sessions/s1/notes").json()["notes"] == [note]
    assert_error(add(viewer, text="x"), 403, "forbidden")
    assert Note.objects.count() == 1


def test_a_token_with_only_read_reads_but_cannot_write_notes(api, s1, client_of):
    note = add(api, text="mine").json()
    reader = client_of("agent", scopes=["read"])  # the author's own token, read scope only
    assert reader.get("/api/v1/sessions/s1/notes").json()["notes"] == [note]
    for response in (
        add(reader, text="more"),
        reader.patch(f"/api/v1/notes/{note['id']}", {"text": "changed"}),
        reader.delete(f"/api/v1/notes/{note['id']}"),
    ):
        assert "'append' scope" in assert_error(response, 403, "forbidden")["detail"]
    assert list(Note.objects.values_list("text", flat=True)) == ["mine"]


def test_a_token_with_only_append_writes_notes(s1, client_of):
    writer = client_of("scribe", scopes=["append"])
    note = add(writer, text="from a script")
    assert note.status_code == 201, note.content
    assert writer.patch(f"/api/v1/notes/{note.json()['id']}", {"text": "edited"}).json()["text"] == "edited"
    assert_error(writer.get("/api/v1/sessions/s1/notes"), 403, "forbidden")


def test_another_projects_member_sees_neither_the_session_nor_its_notes(api, s1, django_user_model):
    note = add(api, text="mine").json()
    stranger = django_user_model.objects.create_user("stranger")
    outsider = ApiClient(token_for(stranger, Role.ADMIN, Project.objects.create(slug="other", name="Other")))
    assert_error(outsider.get("/api/v1/sessions/s1/notes"), 404, "not_found")
    assert_error(outsider.patch(f"/api/v1/notes/{note['id']}", {"text": "x"}), 404, "not_found")
    assert_error(outsider.delete(f"/api/v1/notes/{note['id']}"), 404, "not_found")
    assert_error(add(outsider, text="x"), 404, "not_found")
    assert Note.objects.get().text == "mine"


def test_an_edit_refuses_null_and_bad_values_and_leaves_absent_fields_alone(api, s1):
    note = add(api, text="mine", tags=["a"]).json()
    path = f"/api/v1/notes/{note['id']}"
    assert assert_error(api.patch(path, {"tags": None}), 422, "invalid_note")["field"] == "tags"
    assert assert_error(api.patch(path, {"text": None}), 422, "invalid_note")["field"] == "text"
    assert assert_error(api.patch(path, {"text": ""}), 422, "invalid_note")["reason"] == "empty"
    assert api.patch(path, {}).json() == note  # nothing to change: the same note, updated_at included
    assert api.patch(path, {"tags": []}).json()["tags"] == []
    assert Note.objects.get().text == "mine"
