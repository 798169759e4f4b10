"""sessions.py over HTTP: creating a session, reading one, listing those one may read."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.models import Session
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session

pytestmark = pytest.mark.django_db


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
        "usage": {
            "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0,
            "models": [], "cost": "0", "currency": "USD", "priced": True, "unpriced": [],
        },
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
