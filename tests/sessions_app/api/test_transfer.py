"""transfer.py over HTTP: a session exported as a blob, and sessions imported from blobs."""

import re

import pytest

from sessions_app.models import Event, Session
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session

pytestmark = pytest.mark.django_db


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
