"""calls.py over HTTP: GET /api/v1/sessions/{id}/calls, the Call object of api.md ("Calls, notes and search")."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.models import Project, Role, Session, ToolPolicy
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app.api.http import append, assert_error, make_session
from tests.sessions_app.log.strategies import message

pytestmark = pytest.mark.django_db

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"
CALL_KEYS = {
    "session_id", "project", "agent_name", "call_id", "name", "arguments", "class",
    "state", "seq", "result_seq", "turn_seq", "time", "notes", "idempotency_key", "receipt", "verdict",
}  # fmt: skip


def ev(type_: str, data: dict) -> dict:
    return {"type": type_, "data": data}


# An open turn owing charge_card (dispatched: outcome unknown) after a completed lookup.
CRASH = [
    ev("user_message", message("pay")),  # 0
    ev("turn_start", {"turn": 1}),  # 1
    ev("assistant_message", message("", tool_calls=[{"id": "q1", "name": "lookup", "arguments": {"who": "ada"}}])),  # 2
    ev("tool_result", message("found", tool_call_id="q1", name="lookup")),  # 3
    ev("assistant_message", message("", tool_calls=[{"id": "p1", "name": "charge_card", "arguments": {"cents": 500}}])),  # 4
    ev("tool_call", {"id": "p1", "name": "charge_card"}),  # 5
]


@pytest.fixture
def policies(db):
    ToolPolicy.objects.create(pattern="lookup", side_effect="read_only")
    ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect")


@pytest.fixture
def staff(django_user_model):
    """An operator of the default project: the role that may apply recoveries and patches."""
    return ApiClient(token_for(django_user_model.objects.create_user("ops", is_staff=True), role=Role.OPERATOR))


def store(client, session_id: str, events: list[dict], **fields) -> None:
    make_session(client, session_id, **fields)
    response = append(client, session_id, events)
    assert response.status_code == 201, response.content


def quiet(session_id: str) -> None:
    """The session went quiet an hour ago: stalled if a turn is open, else recovered or clean."""
    hour_ago = timezone.now() - timedelta(hours=1)
    Session.objects.filter(pk=session_id).update(last_activity_at=hour_ago, last_received_at=hour_ago)


def calls(client, session_id: str, query: str = "") -> list[dict]:
    response = client.get(f"/api/v1/sessions/{session_id}/calls{query}")
    assert response.status_code == 200, response.content
    return response.json()["calls"]


def test_a_crashed_turn_owing_an_external_call_reads_outcome_unknown_once_not_running(api, policies):
    store(api, "crash", CRASH, agent_name="billing-bot")
    assert [(c["call_id"], c["state"]) for c in calls(api, "crash")] == [("p1", "pending")]  # running
    quiet("crash")
    [call] = calls(api, "crash")
    assert set(call) == CALL_KEYS
    assert call == {
        **call,
        "session_id": "crash", "project": "default", "agent_name": "billing-bot",
        "call_id": "p1", "name": "charge_card", "arguments": {"cents": 500}, "class": "external_effect",
        "state": "tool_outcome_unknown", "seq": 4, "result_seq": None, "turn_seq": 1, "notes": [],
    }  # fmt: skip
    assert re.fullmatch(TIME, call["time"])
    events = api.get("/api/v1/sessions/crash/events").json()["events"]
    assert call["time"] == events[4]["time"]


def test_the_default_hides_read_only_and_idempotent_calls_and_all_shows_them(api, policies):
    ToolPolicy.objects.create(pattern="refund", side_effect="idempotent")
    store(api, "s", [
        ev("assistant_message", message("", tool_calls=[
            {"id": "q1", "name": "lookup"}, {"id": "r1", "name": "refund"},
            {"id": "p1", "name": "charge_card"}, {"id": "x1", "name": "mystery"},
        ])),
    ])  # fmt: skip
    assert [(c["call_id"], c["class"]) for c in calls(api, "s")] == [("p1", "external_effect"), ("x1", "unknown")]
    everything = calls(api, "s", "?all=true")
    assert [(c["call_id"], c["class"]) for c in everything] == [
        ("q1", "read_only"), ("r1", "idempotent"), ("p1", "external_effect"), ("x1", "unknown")
    ]
    assert calls(api, "s", "?all=false") == calls(api, "s")


def test_the_class_follows_a_policy_changed_after_the_call(api, policies):
    store(api, "crash", CRASH)
    assert [c["call_id"] for c in calls(api, "crash")] == ["p1"]
    ToolPolicy.objects.filter(pattern="charge_*").update(side_effect="idempotent")
    ToolPolicy.objects.filter(pattern="lookup").update(side_effect="external_effect")
    assert [(c["call_id"], c["class"]) for c in calls(api, "crash")] == [("q1", "external_effect")]
    assert [c["class"] for c in calls(api, "crash", "?all=true")] == ["external_effect", "idempotent"]


def test_after_recovery_a_late_real_result_supersedes_the_synthetic_one(staff, policies):
    store(staff, "crash", CRASH)
    quiet("crash")
    plan = staff.get("/api/v1/sessions/crash/recovery-plan").json()
    recovered = staff.post("/api/v1/sessions/crash/recover", {"digest": plan["digest"]})
    assert recovered.status_code == 200, recovered.content
    synthetic = next(e["seq"] for e in recovered.json()["appended"] if e["type"] == "tool_result")
    [call] = calls(staff, "crash")
    assert (call["state"], call["result_seq"]) == ("tool_outcome_unknown", synthetic)
    late = append(staff, "crash", [ev("tool_result", message("charged", tool_call_id="p1", name="charge_card"))])
    assert late.status_code == 201, late.content
    [call] = calls(staff, "crash")
    assert (call["state"], call["result_seq"]) == ("superseded", late.json()["first_seq"])


def test_a_dangling_patch_then_a_late_result_is_superseded(staff, policies):
    store(staff, "s", [ev("assistant_message", message("", tool_calls=[{"id": "p1", "name": "charge_card"}])), ev("user_message", message("hi"))])
    quiet("s")
    assert [c["state"] for c in calls(staff, "s")] == ["no_result"]
    preview = staff.get("/api/v1/sessions/s/dangling-calls").json()
    patched = staff.post("/api/v1/sessions/s/patch-dangling-calls", {"digest": preview["digest"]})
    assert patched.status_code == 200, patched.content
    [patch_seq] = [e["seq"] for e in patched.json()["appended"]]
    quiet("s")
    # The patch's result reads as no result, not as the tool's own answer.
    assert [(c["state"], c["result_seq"]) for c in calls(staff, "s")] == [("no_result", patch_seq)]
    late = append(staff, "s", [ev("tool_result", message("charged", tool_call_id="p1", name="charge_card"))])
    assert [(c["state"], c["result_seq"]) for c in calls(staff, "s")] == [("superseded", late.json()["first_seq"])]


def patched_session(staff, session_id: str) -> int:
    """A session whose one dangling call (p1, after a user message) was patched; the patch result's seq."""
    store(staff, session_id, [ev("user_message", message("pay")), ev("assistant_message", message("", tool_calls=[{"id": "p1", "name": "charge_card"}]))])
    preview = staff.get(f"/api/v1/sessions/{session_id}/dangling-calls").json()
    patched = staff.post(f"/api/v1/sessions/{session_id}/patch-dangling-calls", {"digest": preview["digest"]})
    assert patched.status_code == 200, patched.content
    [patch_seq] = [e["seq"] for e in patched.json()["appended"]]
    return patch_seq


def test_a_fork_of_a_patched_session_still_reads_the_patch_result_as_no_result(staff, policies):
    patch_seq = patched_session(staff, "s")
    for boundary, fork_id in (("last", "f1"), (patch_seq, "f2")):
        assert staff.post("/api/v1/sessions/s/fork", {"boundary": boundary, "id": fork_id}).status_code == 201
        quiet(fork_id)
        assert [(c["state"], c["result_seq"]) for c in calls(staff, fork_id)] == [("no_result", patch_seq)]
    # A fork of the fork inherits it too; a fork that stops before the patch holds no patch result.
    assert staff.post("/api/v1/sessions/f1/fork", {"boundary": "last", "id": "f3"}).status_code == 201
    assert staff.post("/api/v1/sessions/s/fork", {"boundary": patch_seq - 1, "id": "f4"}).status_code == 201
    quiet("f3")
    quiet("f4")
    assert [(c["state"], c["result_seq"]) for c in calls(staff, "f3")] == [("no_result", patch_seq)]
    assert [(c["state"], c["result_seq"]) for c in calls(staff, "f4")] == [("no_result", None)]
    # A late real result on the fork supersedes the inherited patch result, as it would on the parent.
    late = append(staff, "f1", [ev("tool_result", message("charged", tool_call_id="p1", name="charge_card"))])
    assert [(c["state"], c["result_seq"]) for c in calls(staff, "f1")] == [("superseded", late.json()["first_seq"])]


def test_an_import_of_an_exported_patched_session_still_reads_the_patch_result_as_no_result(staff, policies):
    patch_seq = patched_session(staff, "s")
    blob = staff.get("/api/v1/sessions/s/export").json()
    imported = staff.post("/api/v1/sessions/import?id=i1", blob)
    assert imported.status_code == 201, imported.content
    assert imported.json()["warnings"] == []
    assert [(c["state"], c["result_seq"]) for c in calls(staff, "i1")] == [("no_result", patch_seq)]
    # A fork's export carries what it inherited, and its import keeps it.
    assert staff.post("/api/v1/sessions/s/fork", {"boundary": "last", "id": "f1"}).status_code == 201
    blob = staff.get("/api/v1/sessions/f1/export").json()
    assert staff.post("/api/v1/sessions/import?id=i2", blob).status_code == 201
    assert [(c["state"], c["result_seq"]) for c in calls(staff, "i2")] == [("no_result", patch_seq)]


def test_notes_appear_on_their_call(api, policies):
    store(api, "crash", CRASH + [ev("tool_result", message("charged", tool_call_id="p1", name="charge_card"))])
    on_sighting = api.post("/api/v1/sessions/crash/notes", {"text": "customer asked for it", "seq": 4}).json()
    on_result = api.post("/api/v1/sessions/crash/notes", {"text": "bank confirms", "tags": ["verified"], "seq": 6}).json()
    api.post("/api/v1/sessions/crash/notes", {"text": "on the lookup", "seq": 2})
    api.post("/api/v1/sessions/crash/notes", {"text": "whole session"})
    [call] = calls(api, "crash")
    assert (call["state"], call["result_seq"]) == ("completed", 6)
    assert call["notes"] == [on_sighting, on_result]
    lookup = calls(api, "crash", "?all=true")[0]
    assert [n["text"] for n in lookup["notes"]] == ["on the lookup"]


def test_another_projects_session_is_404_and_viewers_read(api, policies, django_user_model):
    store(api, "crash", CRASH)
    stranger = ApiClient(token_for(django_user_model.objects.create_user("stranger"), Role.ADMIN, Project.objects.create(slug="other", name="Other")))
    assert_error(stranger.get("/api/v1/sessions/crash/calls"), 404, "not_found")
    assert_error(api.get("/api/v1/sessions/ghost/calls"), 404, "not_found")
    viewer = ApiClient(token_for(django_user_model.objects.create_user("watcher"), Role.VIEWER))
    assert [c["call_id"] for c in calls(viewer, "crash")] == ["p1"]


@pytest.mark.parametrize("value", ["maybe", "", "2", "TRUEISH"])
def test_a_bad_all_is_422_with_a_reason(api, policies, value):
    store(api, "crash", CRASH)
    body = assert_error(api.get(f"/api/v1/sessions/crash/calls?all={value}"), 422, "invalid_request")
    assert body["errors"][0]["loc"] == ["all"] and "all" in body["detail"]
