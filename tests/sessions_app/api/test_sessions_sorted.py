"""GET /api/v1/sessions sorted by cost, tokens or duration (ties newest activity first), with cursors, and ?model=."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from sessions_app.models import Session
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import append, assert_error, make_session

pytestmark = pytest.mark.django_db


def spend(api, session_id: str, input_tokens: int, output_tokens: int, model: str = "gpt-4o") -> None:
    make_session(api, session_id)
    append(api, session_id, [f.assistant("answer", metadata={"usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}, "model": model})])


def walk(api, params: dict, limit: int = 2) -> list[str]:
    """Every page of the list, following next_cursor."""
    seen, cursor = [], None
    while True:
        page = api.get("/api/v1/sessions", {**params, "limit": limit, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.content
        seen += [s["id"] for s in page.json()["items"]]
        if (cursor := page.json()["next_cursor"]) is None:
            return seen


def test_sorted_by_cost_from_append_time_sums_most_expensive_first_or_last(api):
    spend(api, "cheap", 1000, 10)
    spend(api, "dear", 100_000, 10_000)
    spend(api, "middle", 10_000, 1000)
    make_session(api, "idle")
    costs = {s["id"]: Decimal(s["usage"]["cost"]) for s in api.get("/api/v1/sessions").json()["items"]}
    assert costs["dear"] > costs["middle"] > costs["cheap"] > costs["idle"] == 0
    assert walk(api, {"sort": "-cost"}) == ["dear", "middle", "cheap", "idle"]
    assert walk(api, {"sort": "cost"}) == ["idle", "cheap", "middle", "dear"]
    assert walk(api, {"sort": "-tokens"}, limit=3) == ["dear", "middle", "cheap", "idle"]


def test_ties_keep_the_default_order_across_pages_in_either_direction(api):
    now = timezone.now()
    for i in range(7):
        make_session(api, f"s{i}")
    # Three values, several sessions on each, activity times that differ and one that ties too (then by id).
    for i, (tokens, ago) in enumerate([(5, 1), (5, 2), (9, 3), (5, 3), (1, 4), (9, 5), (9, 5)]):
        Session.objects.filter(pk=f"s{i}").update(tokens=tokens, duration_ms=tokens * 1000, last_activity_at=now - timedelta(minutes=ago))
    by_default = [s["id"] for s in api.get("/api/v1/sessions").json()["items"]]
    assert by_default == ["s0", "s1", "s3", "s2", "s4", "s6", "s5"]
    expected_desc = ["s2", "s6", "s5", "s0", "s1", "s3", "s4"]
    expected_asc = ["s4", "s0", "s1", "s3", "s2", "s6", "s5"]
    for limit in (1, 2, 3, 50):
        assert walk(api, {"sort": "-tokens"}, limit) == expected_desc
        assert walk(api, {"sort": "tokens"}, limit) == expected_asc
        assert walk(api, {"sort": "-duration"}, limit) == expected_desc
        assert walk(api, {"sort": "duration"}, limit) == expected_asc


def test_filtered_by_model_lists_the_sessions_that_used_it(api):
    spend(api, "four", 10, 1, model="gpt-4o")
    spend(api, "mini", 10, 1, model="gpt-4o-mini")
    append(api, "four", [f.assistant("again", metadata={"usage": {"input_tokens": 1, "output_tokens": 1}, "model": "o3"})])
    make_session(api, "none")
    assert walk(api, {"model": "gpt-4o"}) == ["four"]
    assert sorted(walk(api, {"model": "o3"})) == ["four"]
    assert walk(api, {"model": "gpt-4o-mini", "sort": "-cost"}) == ["mini"]
    assert walk(api, {"model": "gpt-4"}) == []
    assert_error(api.get("/api/v1/sessions", {"model": "nul\x00"}), 422, "invalid_text")


def test_a_bad_sort_is_422_saying_where(api):
    body = assert_error(api.get("/api/v1/sessions", {"sort": "price"}), 422, "invalid_request")
    assert "sort" in body["detail"]


def test_a_cursor_of_another_order_or_forged_is_422(api):
    for i in range(3):
        make_session(api, f"s{i}")
    by_cost = api.get("/api/v1/sessions", {"sort": "-cost", "limit": 1}).json()["next_cursor"]
    default = api.get("/api/v1/sessions", {"limit": 1}).json()["next_cursor"]
    assert_error(api.get("/api/v1/sessions", {"sort": "tokens", "cursor": by_cost}), 422, "invalid_cursor")
    assert_error(api.get("/api/v1/sessions", {"sort": "cost", "cursor": by_cost}), 422, "invalid_cursor")
    assert_error(api.get("/api/v1/sessions", {"sort": "-cost", "cursor": default}), 422, "invalid_cursor")
    assert_error(api.get("/api/v1/sessions", {"cursor": by_cost}), 422, "invalid_cursor")
    assert_error(api.get("/api/v1/sessions", {"sort": "-cost", "cursor": "garbage!"}), 422, "invalid_cursor")


@pytest.mark.parametrize("name", ["sort", "model", "cursor", "status", "q", "project", "limit"])
def test_no_hostile_value_of_the_list_s_parameters_gives_a_5xx(api, name):
    spend(api, "s", 10, 2)
    for value in ["", "\x00", "x" * 5000, "-1", "9" * 400, "1e309", "NaN", "😀", "-cost,cost", "%00", "cost\x00"]:
        response = api.get("/api/v1/sessions", {name: value})
        assert response.status_code in (200, 422), (name, value, response.status_code)
