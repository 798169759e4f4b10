"""events.py over HTTP: appending batches (all or nothing, idempotent, within the limits), reading events and messages."""

import pytest
from django.test import override_settings

from sessions_app.models import Event, IdempotentRequest, Session
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session

pytestmark = pytest.mark.django_db


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
