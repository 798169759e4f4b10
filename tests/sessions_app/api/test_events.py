import re
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from sessions_app.models import Event, IdempotentRequest, Session
from tests.conftest import ApiClient
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


def make_session(api, session_id="s1", **fields):
    response = api.post("/api/v1/sessions", {"id": session_id, **fields})
    assert response.status_code == 201, response.content
    return response.json()


def append(api, session_id, events, **extra):
    headers = extra.pop("headers", {})
    return api.post(f"/api/v1/sessions/{session_id}/events", {"events": events, **extra}, **headers)


def assert_error(response, status, error=None):
    assert response.status_code == status, response.content
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"]
    if error is not None:
        assert body["error"] == error
    return body


# Authentication ---------------------------------------------------------


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_requests_without_a_valid_token_get_401_and_store_nothing(token):
    anonymous = ApiClient(token)
    assert_error(anonymous.get("/api/v1/sessions"), 401)
    assert_error(anonymous.post("/api/v1/sessions", {"id": "x"}), 401)
    assert not Session.objects.exists()


def test_a_token_of_an_inactive_user_is_refused(api, agent_user):
    agent_user.is_active = False
    agent_user.save()
    assert_error(api.get("/api/v1/sessions"), 401)


def test_the_login_session_also_authenticates(client, agent_user):
    client.force_login(agent_user)
    assert client.get("/api/v1/sessions").status_code == 200


# Sessions -----------------------------------------------------------------


def test_create_session_returns_the_session_object(api):
    body = make_session(api, "billing:run-1.a_b", agent_name="billing-bot", metadata={"env": "prod"})
    assert body == {
        "id": "billing:run-1.a_b",
        "project": "default",
        "agent_name": "billing-bot",
        "metadata": {"env": "prod"},
        "created_at": body["created_at"],
        "last_event_at": None,
        "last_activity_at": body["created_at"],
        "event_count": 0,
        "parent": None,
        "open_turns": [],
        "interrupted": False,
        "status": "clean",
    }
    assert body["created_at"].endswith("Z")


def test_create_session_generates_a_32_hex_id(api):
    response = api.post("/api/v1/sessions", {})
    assert response.status_code == 201
    assert re.fullmatch(r"[0-9a-f]{32}", response.json()["id"])


def test_create_session_twice_is_409_session_exists(api):
    make_session(api, "s1", agent_name="first")
    assert_error(api.post("/api/v1/sessions", {"id": "s1", "agent_name": "second"}), 409, "session_exists")
    assert Session.objects.get().agent_name == "first"


@pytest.mark.parametrize("bad_id", ["", "has space", "slash/no", "é", "x" * 129])
def test_create_session_with_a_bad_id_is_422_and_stores_nothing(api, bad_id):
    assert_error(api.post("/api/v1/sessions", {"id": bad_id}), 422)
    assert not Session.objects.exists()


def test_create_session_with_non_object_metadata_is_422(api):
    body = assert_error(api.post("/api/v1/sessions", {"id": "s1", "metadata": [1]}), 422, "invalid_request")
    assert "metadata" in body["detail"]
    assert not Session.objects.exists()


def test_get_unknown_session_is_404_not_found(api):
    assert_error(api.get("/api/v1/sessions/nope"), 404, "not_found")


def test_get_session_reports_open_turns_innermost_first(api):
    make_session(api)
    append(api, "s1", [f.event("turn_start", turn=1), f.event("turn_start", turn=2)])
    body = api.get("/api/v1/sessions/s1").json()
    assert body["open_turns"] == [1, 0]
    assert body["interrupted"] is True
    assert body["event_count"] == 2
    append(api, "s1", [f.event("turn_end", turn=2, steps=0, reason="complete"), f.event("turn_end", turn=1, steps=0, reason="complete")])
    body = api.get("/api/v1/sessions/s1").json()
    assert (body["open_turns"], body["interrupted"]) == ([], False)


def test_list_is_newest_activity_first_with_filters(api):
    for name in ["old", "crashed", "fresh"]:
        make_session(api, name)
    append(api, "old", [f.user()])
    append(api, "crashed", [f.event("turn_start", turn=1)])
    make_session(api, "empty-newest")
    ids = [s["id"] for s in api.get("/api/v1/sessions").json()["items"]]
    assert ids == ["empty-newest", "crashed", "old", "fresh"]
    assert [s["id"] for s in api.get("/api/v1/sessions", {"interrupted": "true"}).json()["items"]] == ["crashed"]
    assert "crashed" not in [s["id"] for s in api.get("/api/v1/sessions", {"interrupted": "false"}).json()["items"]]


def test_list_searches_id_agent_name_and_tool_name(api):
    make_session(api, "alpha", agent_name="billing-bot")
    make_session(api, "beta", agent_name="support")
    append(api, "beta", [f.assistant(calls=["refund"])])
    assert [s["id"] for s in api.get("/api/v1/sessions", {"q": "BILLING"}).json()["items"]] == ["alpha"]
    assert [s["id"] for s in api.get("/api/v1/sessions", {"q": "bet"}).json()["items"]] == ["beta"]
    assert [s["id"] for s in api.get("/api/v1/sessions", {"q": "tool_refu"}).json()["items"]] == ["beta"]


def test_list_filters_by_status(api, settings, django_user_model):
    from sessions_app import services

    settings.TURNLOG_STALL_SECONDS = 60
    for name in ["running", "stalled", "active", "recovered", "clean"]:
        make_session(api, name)
    append(api, "running", [f.event("turn_start", turn=1)])
    append(api, "stalled", [f.event("turn_start", turn=1)])
    append(api, "active", [f.user()])  # no open turn, written to within the stall window
    append(api, "recovered", [f.event("turn_start", turn=1)])
    services.recover(session_id="recovered", user=django_user_model.objects.create_user("ops"))
    append(api, "clean", [f.user()])
    # Quiet since: by the server's clock, whatever time the events claim.
    received = timezone.now() - timedelta(seconds=61)
    Session.objects.filter(pk__in=["stalled", "clean"]).update(last_activity_at=received, last_received_at=received)
    for status in ["running", "stalled", "active", "recovered", "clean"]:
        items = api.get("/api/v1/sessions", {"status": status}).json()["items"]
        assert [(s["id"], s["status"]) for s in items] == [(status, status)]
    assert_error(api.get("/api/v1/sessions", {"status": "asleep"}), 422, "invalid_request")


def test_list_cursor_pagination_visits_every_session_once(api):
    created = {make_session(api, f"s{i:02}")["id"] for i in range(7)}
    seen, cursor = [], None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = api.get("/api/v1/sessions", params).json()
        seen += [s["id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(created) and set(seen) == created


def test_list_with_a_forged_cursor_is_422(api):
    assert_error(api.get("/api/v1/sessions", {"cursor": "garbage!"}), 422, "invalid_cursor")


# Appending ------------------------------------------------------------------


def test_append_assigns_contiguous_seqs_across_batches(api):
    make_session(api)
    first = append(api, "s1", [f.user(), f.assistant("yo")])
    assert first.status_code == 201 and first.json() == {"first_seq": 0, "next_seq": 2}
    second = append(api, "s1", [f.user("again")])
    assert second.json() == {"first_seq": 2, "next_seq": 3}
    assert list(Event.objects.order_by("seq").values_list("seq", "type")) == [
        (0, "user_message"),
        (1, "assistant_message"),
        (2, "user_message"),
    ]


def test_append_keeps_a_caller_time_and_defaults_to_now(api):
    make_session(api)
    append(api, "s1", [{**f.user(), "time": "2026-01-01T01:00:00+01:00"}, f.user()])
    events = api.get("/api/v1/sessions/s1/events").json()["events"]
    assert events[0]["time"] == "2026-01-01T00:00:00Z"
    assert events[1]["time"] > "2026-11"
    assert api.get("/api/v1/sessions/s1").json()["last_event_at"] == events[1]["time"]


def test_append_to_unknown_session_is_404_and_stores_nothing(api):
    assert_error(append(api, "ghost", [f.user()]), 404, "not_found")
    assert not Event.objects.exists() and not Session.objects.exists()


BAD_EVENTS = [
    ({"type": "telepathy", "data": {}}, "unknown_event_type"),
    ({"data": {}}, "unknown_event_type"),
    ({"type": "user_message", "data": "hi"}, "invalid_data"),
    ({"type": "user_message"}, "invalid_data"),
    ({"type": "turn_start", "data": {"turn": 1, "surface_op": "append"}}, "surface_op_on_non_surface_event"),
    ({"type": "user_message", "data": {"content": "s", "surface_op": ["replace", 3, 1]}}, "invalid_surface_op"),
    ({"type": "user_message", "data": {"content": "s", "surface_op": "prepend"}}, "invalid_surface_op"),
    ({"type": "user_message", "data": {}, "time": "yesterday"}, "invalid_time"),
    ({"type": "user_message", "data": {}, "time": "2026-01-01T00:00:00"}, "invalid_time"),
]


@pytest.mark.parametrize("bad, reason", BAD_EVENTS)
def test_one_invalid_event_refuses_the_whole_batch(api, bad, reason):
    make_session(api)
    append(api, "s1", [f.user()])
    response = append(api, "s1", [f.user(), f.user(), bad, f.user()])
    body = assert_error(response, 422, "invalid_event")
    assert (body["index"], body["reason"]) == (2, reason)
    assert Event.objects.count() == 1
    assert Session.objects.get().event_count == 1


def test_a_non_object_event_is_refused_with_its_index(api):
    make_session(api)
    body = assert_error(append(api, "s1", [f.user(), "just text"]), 422, "invalid_event")
    assert body["index"] == 1
    assert not Event.objects.exists()


def test_an_empty_batch_is_422_empty_batch(api):
    make_session(api)
    assert_error(append(api, "s1", []), 422, "empty_batch")


def test_a_body_without_events_is_422(api):
    make_session(api)
    body = assert_error(api.post("/api/v1/sessions/s1/events", {"expected_seq": 0}), 422, "invalid_request")
    assert "events" in body["detail"]


def test_expected_seq_matching_appends(api):
    make_session(api)
    append(api, "s1", [f.user()])
    assert append(api, "s1", [f.user()], expected_seq=1).status_code == 201


def test_stale_expected_seq_is_409_and_stores_nothing(api):
    make_session(api)
    append(api, "s1", [f.user(), f.user()])
    body = assert_error(append(api, "s1", [f.user()], expected_seq=1), 409, "seq_conflict")
    assert body["next_seq"] == 2
    assert Event.objects.count() == 2


def test_expected_seq_must_be_an_integer(api):
    make_session(api)
    assert_error(append(api, "s1", [f.user()], expected_seq="0"), 422, "invalid_request")
    assert not Event.objects.exists()


def test_a_retried_batch_with_the_same_idempotency_key_is_stored_once(api):
    make_session(api)
    batch = [f.user(), f.assistant("done")]
    first = append(api, "s1", batch, headers={"Idempotency-Key": "k-1"})
    again = append(api, "s1", batch, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json() == {"first_seq": 0, "next_seq": 2}
    assert Event.objects.count() == 2


def test_the_same_key_with_another_body_is_409_and_stores_nothing(api):
    make_session(api)
    append(api, "s1", [f.user("a")], headers={"Idempotency-Key": "k-1"})
    assert_error(append(api, "s1", [f.user("b")], headers={"Idempotency-Key": "k-1"}), 409, "idempotency_key_reused")
    assert Event.objects.count() == 1


def test_idempotency_keys_are_per_session(api):
    make_session(api, "a")
    make_session(api, "b")
    assert append(api, "a", [f.user()], headers={"Idempotency-Key": "k"}).status_code == 201
    assert append(api, "b", [f.user()], headers={"Idempotency-Key": "k"}).status_code == 201
    assert Event.objects.count() == 2


def test_a_refused_batch_does_not_consume_its_idempotency_key(api):
    make_session(api)
    assert append(api, "s1", [{"type": "bogus", "data": {}}], headers={"Idempotency-Key": "k"}).status_code == 422
    assert not IdempotentRequest.objects.exists()
    assert append(api, "s1", [f.user()], headers={"Idempotency-Key": "k"}).status_code == 201


def test_a_batch_of_1000_events_is_accepted(api):
    make_session(api)
    response = append(api, "s1", [f.user(str(i)) for i in range(1000)])
    assert response.json() == {"first_seq": 0, "next_seq": 1000}


def test_a_request_of_8_mib_is_accepted(api):
    make_session(api)
    blob = "x" * (8 * 1024 * 1024 - 200)
    assert append(api, "s1", [f.tool_result("c1", content=blob)]).status_code == 201
    assert len(Event.objects.get().data["content"]) == len(blob)


@override_settings(TURNLOG_MAX_BATCH_EVENTS=5)
def test_too_many_events_is_413_and_stores_nothing(api):
    make_session(api)
    body = assert_error(append(api, "s1", [f.user()] * 6), 413, "too_large")
    assert "5" in body["detail"]
    assert not Event.objects.exists()


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_too_many_bytes_is_413_and_stores_nothing(api):
    make_session(api)
    assert_error(append(api, "s1", [f.user("x" * 2000)]), 413, "too_large")
    assert not Event.objects.exists()


def test_malformed_json_is_a_400_invalid_json_naming_the_place(api):
    make_session(api)
    body = assert_error(api.post_raw("/api/v1/sessions/s1/events", b'{"events": ['), 400, "invalid_json")
    assert "line 1 column 13" in body["detail"]
    assert not Event.objects.exists()


# Reading ------------------------------------------------------------------------


def test_events_since_is_inclusive_and_pages(api):
    make_session(api)
    append(api, "s1", [f.user(str(i)) for i in range(10)])
    page = api.get("/api/v1/sessions/s1/events", {"since": 4, "limit": 3}).json()
    assert [e["seq"] for e in page["events"]] == [4, 5, 6]
    assert page["next_seq"] == 10
    assert page["events"][0] == {"seq": 4, "type": "user_message", "time": page["events"][0]["time"], "data": {"content": "4", "name": None, "metadata": {}}}
    assert api.get("/api/v1/sessions/s1/events", {"since": 10}).json() == {"events": [], "next_seq": 10}
    assert api.get("/api/v1/sessions/s1/events", {"since": 99}).json()["events"] == []


def test_events_since_negative_is_422(api):
    make_session(api)
    assert_error(api.get("/api/v1/sessions/s1/events", {"since": -1}), 422)


def test_events_of_unknown_session_is_404(api):
    assert_error(api.get("/api/v1/sessions/ghost/events"), 404, "not_found")
    assert_error(api.get("/api/v1/sessions/ghost/messages"), 404, "not_found")
    assert_error(api.get("/api/v1/sessions/ghost/export"), 404, "not_found")


def test_messages_are_the_fold_with_compaction(api):
    make_session(api)
    append(
        api,
        "s1",
        [
            f.user("q1"),
            f.assistant("a1"),
            f.event("turn_start", turn=1),
            f.user("q2"),
            f.event("user_message", content="summary of 0-1", name=None, metadata={}, surface_op=["replace", 0, 1]),
        ],
    )
    messages = api.get("/api/v1/sessions/s1/messages").json()["messages"]
    assert [(m["seq"], m["role"], m["content"]) for m in messages] == [(4, "user", "summary of 0-1"), (3, "user", "q2")]
    assert messages[0]["tool_calls"] == [] and messages[0]["metadata"] == {}
    assert messages[0]["created_at"].endswith("Z")


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


# Documentation ---------------------------------------------------------------------


def test_openapi_describes_every_endpoint(api):
    schema = api.get("/api/v1/openapi.json").json()
    paths = {(method.upper(), path) for path, ops in schema["paths"].items() for method in ops}
    assert {
        ("POST", "/api/v1/sessions"),
        ("GET", "/api/v1/sessions"),
        ("GET", "/api/v1/sessions/{session_id}"),
        ("POST", "/api/v1/sessions/{session_id}/events"),
        ("GET", "/api/v1/sessions/{session_id}/events"),
        ("GET", "/api/v1/sessions/{session_id}/messages"),
        ("GET", "/api/v1/sessions/{session_id}/export"),
        ("POST", "/api/v1/sessions/import"),
    } <= paths


def test_docs_are_served_without_a_cdn(api, agent_user, client):
    client.force_login(agent_user)
    page = client.get("/api/v1/docs").content.decode()
    assert "swagger-ui-bundle.js" in page
    assert not re.search(r"https?://(?!127\.0\.0\.1|localhost)[^\"']*\.(js|css)", page)
