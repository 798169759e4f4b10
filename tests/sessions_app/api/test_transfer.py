"""transfer.py over HTTP: a session exported as a blob, and sessions imported from blobs."""

import re

import pytest

from sessions_app.models import Event, Note, Session
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_of_role(django_user_model):
    def client_of_role(name: str, role: str) -> ApiClient:
        return ApiClient(token_for(django_user_model.objects.create_user(name), role))

    return client_of_role


# Export and import -----------------------------------------------------------


def test_export_then_import_gives_the_same_events(api):
    make_session(api, "orig", agent_name="billing-bot")
    append(api, "orig", [{**e, "time": f"2026-01-01T00:00:{i:02}.5Z"} for i, e in enumerate(f.worked_example())])
    append(api, "orig", [f.event("user_message", content="sum", name=None, metadata={}, surface_op=["replace", 0, 2])])
    blob = api.get("/api/v1/sessions/orig/export").json()
    assert blob["version"] == 2 and blob["session"] == {"id": "orig", "agent_name": "billing-bot", "parent": None}
    response = api.post("/api/v1/sessions/import?id=copy", blob)
    assert response.status_code == 201, response.content
    assert response.json()["warnings"] == []
    assert response.json()["session"]["agent_name"] == "billing-bot"
    original = api.get("/api/v1/sessions/orig/events").json()["events"]
    copy = api.get("/api/v1/sessions/copy/events").json()["events"]
    assert copy == original
    assert api.get("/api/v1/sessions/copy").json()["open_turns"] == [1]


def test_import_drops_an_unknown_event_type_and_says_so(api):
    make_session(api, "orig")
    append(api, "orig", [f.user("a"), f.user("b")])
    blob = api.get("/api/v1/sessions/orig/export").json()
    blob["events"].insert(1, {"seq": 1, "type": "hologram", "time": "2026-01-01T00:00:00Z", "data": {}})
    response = api.post("/api/v1/sessions/import?id=copy", blob)
    assert response.status_code == 201
    [warning] = response.json()["warnings"]
    assert "hologram" in warning
    assert [e["data"]["content"] for e in api.get("/api/v1/sessions/copy/events").json()["events"]] == ["a", "b"]


def test_import_without_id_generates_one(api):
    response = api.post("/api/v1/sessions/import", {"version": 2, "events": [{"type": "user_message", "time": "2026-01-01T00:00:00Z", "data": {"content": "x"}}]})
    assert response.status_code == 201
    assert re.fullmatch(r"[0-9a-f]{32}", response.json()["session"]["id"])


@pytest.mark.parametrize("version", [3, "2", None, True])
def test_import_of_an_unsupported_version_is_422_and_stores_nothing(api, version):
    assert_error(api.post("/api/v1/sessions/import?id=x", {"version": version, "events": []}), 422, "unsupported_version")
    assert not Session.objects.exists()


def test_import_onto_an_existing_id_is_409_and_stores_nothing(api):
    make_session(api, "taken")
    blob = {"version": 2, "events": [{"type": "user_message", "time": "2026-01-01T00:00:00Z", "data": {"content": "x"}}]}
    assert_error(api.post("/api/v1/sessions/import?id=taken", blob), 409, "session_exists")
    assert not Event.objects.exists()


def test_import_restores_the_parent_only_when_it_exists(api):
    make_session(api, "parent")
    blob = {"version": 2, "events": [], "session": {"id": "child", "agent_name": None, "parent": {"session_id": "parent", "seed_length": 0}}}
    kept = api.post("/api/v1/sessions/import?id=child", blob).json()
    assert kept["session"]["parent"] == {"session_id": "parent", "seed_length": 0}
    assert kept["warnings"] == []
    blob["session"]["parent"]["session_id"] = "elsewhere"
    lost = api.post("/api/v1/sessions/import?id=orphan", blob).json()
    assert lost["session"]["parent"] is None
    assert "elsewhere" in lost["warnings"][0]


def test_import_of_a_v1_blob_seeds_events_from_messages(api):
    blob = {"version": 1, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "tool_calls": []}]}
    response = api.post("/api/v1/sessions/import?id=v1", blob)
    assert response.status_code == 201
    assert [e["type"] for e in api.get("/api/v1/sessions/v1/events").json()["events"]] == ["user_message", "assistant_message"]


def test_import_of_a_non_json_body_is_400_invalid_json(api):
    assert_error(api.post_raw("/api/v1/sessions/import", b"{nope"), 400, "invalid_json")


# Notes travel with exports and imports -----------------------------------------


def test_export_then_import_keeps_notes_their_seqs_and_authors_as_text(api, client_of_role):
    make_session(api, "orig")
    append(api, "orig", [f.user("a"), f.assistant(calls=["c1"]), f.tool_result("c1")])
    pinned = api.post("/api/v1/sessions/orig/notes", {"text": "refund confirmed", "tags": ["refund-confirmed"], "seq": 2}).json()
    whole = api.post("/api/v1/sessions/orig/notes", {"text": "whole session"}).json()
    blob = api.get("/api/v1/sessions/orig/export").json()
    assert blob["notes"] == [pinned, whole]
    events_before = list(Event.objects.filter(session_id="orig").values_list("seq", "type", "time", "data"))

    response = api.post("/api/v1/sessions/import?id=copy", blob)
    assert response.status_code == 201, response.content
    assert response.json()["warnings"] == []
    copied = api.get("/api/v1/sessions/copy/notes").json()["notes"]
    keep = ("seq", "text", "tags", "author", "created_at", "updated_at")
    assert [{k: n[k] for k in keep} for n in copied] == [{k: n[k] for k in keep} for n in (pinned, whole)]
    assert all(n["session_id"] == "copy" for n in copied)
    assert list(Event.objects.filter(session_id="orig").values_list("seq", "type", "time", "data")) == events_before
    # The author is text only: the agent who wrote the original may not edit the imported copy; an admin may.
    assert_error(api.patch(f"/api/v1/notes/{copied[0]['id']}", {"text": "mine?"}), 403, "forbidden")
    assert Note.objects.get(pk=copied[0]["id"]).author is None
    admin = client_of_role("ada", "admin")
    assert admin.patch(f"/api/v1/notes/{copied[0]['id']}", {"text": "checked"}).json()["author"] == "agent"


def test_an_imported_note_follows_its_events_new_seq_or_falls_back_to_the_whole_session(api):
    make_session(api, "orig")
    append(api, "orig", [f.user("a"), f.user("b"), f.user("c")])
    for seq in (0, 2):
        api.post("/api/v1/sessions/orig/notes", {"text": f"on {seq}", "seq": seq})
    blob = api.get("/api/v1/sessions/orig/export").json()
    blob["events"][1]["type"] = "hologram"  # dropped: seq 2 becomes seq 1
    blob["notes"].append({**blob["notes"][1], "seq": 1, "text": "on the dropped event"})
    response = api.post("/api/v1/sessions/import?id=copy", blob)
    assert response.status_code == 201, response.content
    warnings = response.json()["warnings"]
    assert len(warnings) == 2 and "hologram" in warnings[0]
    assert warnings[1] == "notes[2]: its event (seq 1) was not imported; kept as a note on the whole session"
    notes = api.get("/api/v1/sessions/copy/notes").json()["notes"]
    events = api.get("/api/v1/sessions/copy/events").json()["events"]
    assert [(n["text"], n["seq"]) for n in notes] == [("on 0", 0), ("on 2", 1), ("on the dropped event", None)]
    assert [e["data"]["content"] for e in events] == ["a", "c"]


def test_an_import_drops_a_note_breaking_the_limits_and_says_so(api):
    blob = {
        "version": 2,
        "events": [{"seq": 0, "type": "user_message", "time": "2026-01-01T00:00:00Z", "data": {"content": "x"}}],
        "notes": [
            {"seq": 0, "text": "", "author": "someone"},
            {"seq": 0, "text": "fine", "tags": ["Bad Tag"], "author": "someone"},
            "not a note",
            {"seq": "0", "text": "kept", "author": 7},
        ],
    }
    response = api.post("/api/v1/sessions/import?id=copy", blob)
    assert response.status_code == 201, response.content
    assert [w.split(" ")[0].rstrip(":") for w in response.json()["warnings"]] == ["notes[0]", "notes[1]", "notes[2]", "notes[3]", "notes[3]"]
    [note] = api.get("/api/v1/sessions/copy/notes").json()["notes"]
    assert (note["text"], note["seq"], note["author"]) == ("kept", None, "unknown")


def test_a_refused_import_stores_no_notes(api):
    make_session(api, "taken")
    blob = {"version": 2, "events": [], "notes": [{"text": "x", "author": "a"}]}
    assert_error(api.post("/api/v1/sessions/import?id=taken", blob), 409, "session_exists")
    assert not Note.objects.exists()
