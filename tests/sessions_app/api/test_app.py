"""app.py over HTTP: who is authenticated; bad input is a clear 4xx that stores
nothing (the body parser and the error answers) and whatever was accepted reads
back everywhere; paths and methods no endpoint serves answer in JSON; the
OpenAPI document and its page.

Every test here runs on SQLite and, with DATABASE_URL, on PostgreSQL: the
same input must get the same answer from both.
"""

import json
import re
import typing
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from ninja import Schema

from sessions_app import services
from sessions_app.api.app import api
from sessions_app.lib import field_paths
from sessions_app.models import (
    REPLACE_BOUND_MAX,
    ApiToken,
    CallSighting,
    Event,
    IdempotentRequest,
    RecoveryRecord,
    Role,
    Session,
    ToolPolicy,
)
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app import factories as f
from tests.sessions_app.api.http import assert_error, make_session

pytestmark = pytest.mark.django_db

SURROGATE = "\ud800"
NUL = "\x00"


def post_json(api, path, text: str, **headers):
    """Post JSON text as given (json.dumps would refuse or rewrite what these tests send)."""
    return api.post_raw(path, text.encode("utf-8", "surrogatepass"), **headers)


def stored_counts():
    return (
        Session.objects.count(),
        Event.objects.count(),
        CallSighting.objects.count(),
        IdempotentRequest.objects.count(),
        RecoveryRecord.objects.count(),
    )


@pytest.fixture
def staff_api(django_user_model):
    """An operator of the default project: may also recover and patch."""
    return ApiClient(token_for(django_user_model.objects.create_user("ops"), role=Role.OPERATOR))


# What the log accepted reads back everywhere --------------------------------------


ODD_CALLS = [
    pytest.param({"id": "c1", "name": "lookup", "arguments": {}}, id="single-object"),
    pytest.param("call c1 please", id="string"),
    pytest.param([1, "two", None, ["c9"]], id="list-of-non-objects"),
    pytest.param([{"id": 7, "name": 42, "arguments": "raw"}], id="integer-id-and-name"),
    pytest.param([{"id": True, "name": {"odd": 1}}], id="boolean-id-object-name"),
]


@pytest.mark.parametrize("tool_calls", ODD_CALLS)
def test_every_read_endpoint_and_page_answers_for_odd_tool_calls_and_ids(api, staff_api, client, agent_user, tool_calls):
    ToolPolicy.objects.create(pattern="*", side_effect=ToolPolicy.READ_ONLY)  # matching is tried on every name
    make_session(api)
    events = [
        f.event("turn_start", turn=1),
        f.event("assistant_message", content="", tool_calls=tool_calls),
        f.event("tool_result", tool_call_id=7, content="r", name=None, metadata={}),
        f.event("tool_call", id=123, name=456),
    ]
    assert api.post("/api/v1/sessions/s1/events", {"events": events}).status_code == 201
    messages = api.get("/api/v1/sessions/s1/messages")
    assert messages.status_code == 200, messages.content
    assistant, tool = messages.json()["messages"]
    assert assistant["tool_calls"] == tool_calls  # kept exactly as accepted
    assert tool["tool_call_id"] == 7  # an integer stays an integer
    for path in ["", "/events", "/export", "/recovery-plan", "/dangling-calls"]:
        response = api.get(f"/api/v1/sessions/s1{path}")
        assert response.status_code == 200, (path, response.content)
    client.force_login(agent_user)
    for page in ["/sessions/s1/", "/sessions/s1/?view=raw", "/sessions/s1/recovery", "/sessions/s1/events/1.json"]:
        assert client.get(page).status_code == 200, page
    plan = api.get("/api/v1/sessions/s1/recovery-plan").json()
    assert [r["type"] for r in plan["repairs"]][-1] == "turn_end"
    recovered = staff_api.post("/api/v1/sessions/s1/recover", {"digest": plan["digest"]})
    assert recovered.status_code == 200, recovered.content
    patched = staff_api.post("/api/v1/sessions/s1/patch-dangling-calls", {})
    assert patched.status_code == 200, patched.content


def test_an_owed_call_with_an_integer_id_and_name_is_in_the_plan(api):
    make_session(api)
    calls = [{"id": 9, "name": 10, "arguments": None}]
    api.post("/api/v1/sessions/s1/events", {"events": [f.event("turn_start", turn=1), f.event("assistant_message", tool_calls=calls)]})
    plan = api.get("/api/v1/sessions/s1/recovery-plan")
    assert plan.status_code == 200, plan.content
    (owed,) = plan.json()["owed_calls"]
    assert (owed["id"], owed["name"]) == ("9", 10)


def test_a_call_id_longer_than_the_column_is_stored_and_answered(api):
    make_session(api)
    long_id = "c" * 5000
    events = [f.event("turn_start", turn=1), f.assistant(calls=[long_id]), f.tool_call(long_id), f.tool_result(long_id)]
    assert api.post("/api/v1/sessions/s1/events", {"events": events}).status_code == 201
    assert Event.objects.filter(call_id=long_id).count() == 2  # looked up by the id itself
    plan = api.get("/api/v1/sessions/s1/recovery-plan").json()
    assert [r["type"] for r in plan["repairs"]] == ["turn_end"]  # the call was answered
    assert api.get("/api/v1/sessions/s1/messages").json()["messages"][1]["tool_call_id"] == long_id


# Text: a lone surrogate or NUL anywhere is refused, the same on both databases ------------


@pytest.mark.parametrize("bad", [SURROGATE, NUL, "\udfff", "ok" + SURROGATE + "ok"])
def test_unstorable_text_in_an_event_is_invalid_data_naming_the_path(api, bad):
    make_session(api)
    event = f.event("user_message", content=[{"type": "text", "text": f"a{bad}"}], name=None, metadata={})
    body = {"events": [f.user(), f.user(), event]}
    response = post_json(api, "/api/v1/sessions/s1/events", json.dumps(body))
    answer = assert_error(response, 422, "invalid_event")
    assert (answer["index"], answer["reason"]) == (2, "invalid_data")
    assert answer["detail"].startswith("events[2].data.content[0].text: contains ")
    assert json.dumps(bad.strip("ok"))[1:-1] in answer["detail"] or "U+0000" in answer["detail"]
    assert Event.objects.count() == 0
    assert Session.objects.get().event_count == 0


def test_a_batch_is_refused_at_its_first_invalid_event_whatever_the_reasons(api):
    make_session(api)
    body = {"events": [f.user(), {"type": "bogus", "data": {}}, f.user("\x00")]}
    answer = assert_error(api.post("/api/v1/sessions/s1/events", body), 422, "invalid_event")
    assert (answer["index"], answer["reason"]) == (1, "unknown_event_type")
    body = {"events": [f.user(), {**f.user(), "extra": ["\ud800"]}]}
    answer = assert_error(post_json(api, "/api/v1/sessions/s1/events", json.dumps(body)), 422, "invalid_event")
    assert (answer["index"], answer["reason"], answer["detail"][:16]) == (1, "invalid_data", "events[1].extra[")
    assert Event.objects.count() == 0


def test_an_oversized_batch_is_413_whatever_its_events_hold(api, settings):
    settings.TURNLOG_MAX_BATCH_EVENTS = 2
    make_session(api)
    assert_error(api.post("/api/v1/sessions/s1/events", {"events": [f.user("\x00")] * 3}), 413, "too_large")


@pytest.mark.parametrize("bad", [SURROGATE, NUL])
def test_unstorable_text_in_a_key_or_a_tool_name_is_refused(api, bad):
    make_session(api)
    for event in [
        f.event("user_message", content="x", metadata={f"k{bad}": 1}),
        f.event("assistant_message", tool_calls=[{"id": "c1", "name": f"echo{bad}"}]),
        f.event("tool_call", id=f"c{bad}", name="echo"),
    ]:
        answer = assert_error(post_json(api, "/api/v1/sessions/s1/events", json.dumps({"events": [event]})), 422, "invalid_event")
        assert (answer["index"], answer["reason"]) == (0, "invalid_data")
    assert stored_counts() == (1, 0, 0, 0, 0)


@pytest.mark.parametrize("bad", [SURROGATE, NUL])
@pytest.mark.parametrize(
    "path, body, where",
    [
        ("/api/v1/sessions", {"id": "n1", "agent_name": "bot{bad}"}, "agent_name"),
        ("/api/v1/sessions", {"id": "n1", "metadata": {"env": ["prod{bad}"]}}, "metadata.env[0]"),
        ("/api/v1/sessions", {"id": "n1", "metadata": {"k{bad}": 1}}, "metadata["),
        ("/api/v1/sessions/s1/fork", {"id": "n1{bad}"}, "id"),
        ("/api/v1/sessions/s1/recover", {"note": "why{bad}"}, "note"),
        ("/api/v1/sessions/s1/patch-dangling-calls", {"note": "why{bad}"}, "note"),
        ("/api/v1/sessions/import?id=n1", {"version": 2, "agent_name": "a{bad}", "events": []}, "agent_name"),
        (
            "/api/v1/sessions/import?id=n1",
            {"version": 2, "events": [{"type": "user_message", "time": "2026-01-01T00:00:00Z", "data": {"content": "x{bad}"}}]},
            "events[0].data.content",
        ),
        ("/api/v1/sessions/import?id=n1", {"version": 1, "messages": [{"role": "user", "content": "{bad}"}]}, "messages[0].content"),
    ],
)
def test_unstorable_text_in_any_other_body_is_invalid_text_naming_the_path(api, staff_api, bad, path, body, where):
    make_session(api)
    api.post("/api/v1/sessions/s1/events", {"events": [f.event("turn_start", turn=1)]})
    before = stored_counts()
    text = json.dumps(body).replace("{bad}", json.dumps(bad)[1:-1])
    answer = assert_error(post_json(staff_api, path, text), 422, "invalid_text")
    assert answer["detail"].startswith(where)
    assert stored_counts() == before


def test_utf8_bytes_of_a_surrogate_are_not_json(api):
    make_session(api)
    raw = b'{"events": [{"type": "user_message", "data": {"content": "\xed\xa0\x80"}}]}'
    assert_error(api.post_raw("/api/v1/sessions/s1/events", raw), 400, "invalid_json")
    assert Event.objects.count() == 0


def test_nul_in_a_query_string_or_the_idempotency_key_is_invalid_text(api):
    make_session(api)
    for params in [{"q": "a\x00"}, {"cursor": "\x00"}]:
        assert_error(api.get("/api/v1/sessions", params), 422, "invalid_text")
    response = api.post("/api/v1/sessions/s1/events", {"events": [f.user()]}, **{"Idempotency-Key": "k\x00"})
    assert_error(response, 422, "invalid_text")
    assert stored_counts() == (1, 0, 0, 0, 0)


# Numbers: NaN, Infinity, overflow are not JSON; integers stay exact ----------------------


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" * 4301])
@pytest.mark.parametrize(
    "path, template",
    [
        ("/api/v1/sessions/s1/events", '{"events": [{"type": "user_message", "data": {"content": "x", "n": NUMBER}}]}'),
        ("/api/v1/sessions", '{"id": "n1", "metadata": {"n": [NUMBER]}}'),
        ("/api/v1/sessions/import?id=n1", '{"version": 2, "events": [{"type": "user_message", "data": {"n": NUMBER}}]}'),
        ("/api/v1/sessions/s1/fork", '{"boundary": NUMBER}'),
        ("/api/v1/sessions/s1/events", '{"events": [{"type": "user_message", "data": {}}], "expected_seq": NUMBER}'),
    ],
)
def test_numbers_json_cannot_hold_are_400_invalid_json(api, number, path, template):
    make_session(api)
    answer = assert_error(post_json(api, path, template.replace("NUMBER", number)), 400, "invalid_json")
    assert "line 1 column " in answer["detail"]
    assert stored_counts() == (1, 0, 0, 0, 0)


def test_the_invalid_json_answer_points_at_the_number(api):
    make_session(api)
    text = '{"events": [{"type": "user_message",\n "data": {"content": "NaN 1e400", "n": 1e400}}]}'
    answer = assert_error(post_json(api, "/api/v1/sessions/s1/events", text), 400, "invalid_json")
    assert "1e400" in answer["detail"] and "line 2 column 40" in answer["detail"]


def test_big_integers_are_kept_exactly(api):
    make_session(api)
    huge = 10**4299 + 7
    text = '{"events": [{"type": "user_message", "data": {"n": %d, "m": -%d}}]}' % (2**64 + 1, huge)
    assert post_json(api, "/api/v1/sessions/s1/events", text).status_code == 201
    data = json.loads(api.get("/api/v1/sessions/s1/events").content)["events"][0]["data"]
    assert (data["n"], data["m"]) == (2**64 + 1, -huge)


# surface_op bounds past the columns' range ---------------------------------------------


@pytest.mark.parametrize("bound", [2**31, 2**63 - 1, 2**63, 10**30])
def test_replace_bounds_of_any_size_are_accepted_and_kept(api, bound):
    make_session(api)
    summary = f.event("user_message", content="summary", surface_op=["replace", 1, bound])
    far = f.event("user_message", content="far", surface_op=["replace", bound, bound])
    assert api.post("/api/v1/sessions/s1/events", {"events": [f.user("a"), f.user("b"), summary, far]}).status_code == 201
    stored = list(Event.objects.filter(replace_start__isnull=False).order_by("seq").values_list("replace_start", "replace_stop"))
    assert stored == [(1, min(bound, REPLACE_BOUND_MAX)), (min(bound, REPLACE_BOUND_MAX),) * 2]
    events = api.get("/api/v1/sessions/s1/events").json()["events"]
    assert events[2]["data"]["surface_op"] == ["replace", 1, bound]
    contents = [m["content"] for m in api.get("/api/v1/sessions/s1/messages").json()["messages"]]
    assert contents == ["a", "summary", "far"]
    assert api.get("/api/v1/sessions/s1/export").status_code == 200


# Nesting --------------------------------------------------------------------------------


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("levels", [62, 5_000, 100_000])
def test_event_data_nested_too_deep_is_invalid_data_naming_the_event(api, levels):
    make_session(api)
    text = '{"events": [{"type": "user_message", "data": {}}, {"type": "user_message", "data": {"x": %s}}]}' % nested(levels)
    answer = assert_error(post_json(api, "/api/v1/sessions/s1/events", text), 422, "invalid_event")
    assert (answer["index"], answer["reason"]) == (1, "invalid_data")
    assert answer["detail"].startswith("events[1].data.x[0][0]") and "64 levels" in answer["detail"]
    assert Event.objects.count() == 0


def test_data_at_the_depth_limit_is_accepted(api):
    make_session(api)
    text = '{"events": [{"type": "user_message", "data": {"x": %s}}]}' % nested(60)  # 64 levels in all
    assert post_json(api, "/api/v1/sessions/s1/events", text).status_code == 201


@pytest.mark.parametrize("levels", [64, 5_000, 100_000])
@pytest.mark.parametrize(
    "path, template",
    [
        ("/api/v1/sessions", '{"id": "n1", "metadata": {"x": DEEP}}'),
        ("/api/v1/sessions/import?id=n1", '{"version": 2, "events": [{"type": "user_message", "data": {"x": DEEP}}]}'),
        ("/api/v1/sessions/s1/fork", '{"boundary": DEEP}'),
        ("/api/v1/sessions/s1/recover", '{"note": DEEP}'),
    ],
)
def test_any_other_body_nested_too_deep_is_too_deep(api, staff_api, levels, path, template):
    make_session(api)
    answer = assert_error(post_json(staff_api, path, template.replace("DEEP", nested(levels))), 422, "too_deep")
    assert "64 levels" in answer["detail"]
    assert stored_counts() == (1, 0, 0, 0, 0)


# Bodies that are not objects ---------------------------------------------------------------


@pytest.mark.parametrize("body", ["[null, null]", "[]", "null", "3", '"x"'])
@pytest.mark.parametrize(
    "path", ["/api/v1/sessions", "/api/v1/sessions/s1/fork", "/api/v1/sessions/s1/recover", "/api/v1/sessions/s1/patch-dangling-calls", "/api/v1/sessions/s1/events"]
)
def test_a_body_that_is_not_an_object_is_422_and_applies_nothing(api, staff_api, body, path):
    make_session(api)
    api.post("/api/v1/sessions/s1/events", {"events": [f.event("turn_start", turn=1)]})
    before = stored_counts()
    assert_error(post_json(staff_api, path, body), 422, "invalid_request")
    assert stored_counts() == before
    assert Session.objects.get(pk="s1").interrupted  # recover was never applied


@pytest.mark.parametrize("body", ["[null, null]", "null", "[]"])
def test_an_import_that_is_not_an_object_is_422(api, body):
    assert_error(post_json(api, "/api/v1/sessions/import", body), 422, "invalid_request")
    assert stored_counts() == (0, 0, 0, 0, 0)


# Odd paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path",
    [
        ("get", "/api/v1/nope"),
        ("post", "/api/v1/nope"),
        ("get", "/api/v2/sessions"),
        ("get", "/api/v1/sessions/a%2Fb"),
        ("get", "/api/v1/sessions/a%2Fb/events"),
        ("post", "/api/v1/sessions/a%2Fb/events"),
        ("get", "/api/v1/sessions/a%00b"),
        ("get", "/api/v1/sessions/a%00b/messages"),
        ("post", "/api/v1/sessions/a%00b/fork"),
        ("get", "/api/v1/sessions/%ED%A0%80"),
        ("get", "/api/v1/sessions/" + "x" * 129),
    ],
)
def test_unknown_api_paths_and_odd_ids_are_json_404(api, method, path):
    make_session(api)
    response = getattr(api, method)(path)
    assert_error(response, 404, "not_found")
    assert stored_counts() == (1, 0, 0, 0, 0)


@pytest.mark.parametrize("method, path", [("delete", "/api/v1/sessions"), ("put", "/api/v1/sessions/s1/events"), ("get", "/api/v1/sessions/s1/fork")])
def test_a_method_an_endpoint_does_not_serve_is_a_json_405(api, method, path):
    make_session(api)
    response = getattr(api.client, method)(path, headers=api.headers)
    assert_error(response, 405, "method_not_allowed")
    assert response["Allow"]


@pytest.mark.parametrize(
    "path",
    ["/sessions/a%2Fb/", "/sessions/a%00b/", "/sessions/a%00b/recovery", "/sessions/s1/events/99999999999999999999.json", "/sessions/a%00b/events/0.json"],
)
def test_odd_ids_and_seqs_on_pages_are_404(api, client, agent_user, path):
    make_session(api)
    client.force_login(agent_user)
    assert client.get(path).status_code == 404


def test_the_list_page_with_nul_in_q_or_a_forged_cursor_is_not_a_500(api, client, agent_user):
    make_session(api)
    client.force_login(agent_user)
    assert client.get("/", {"q": "s\x00"}).status_code == 200
    assert client.get("/", {"cursor": "\x00"}).status_code == 400


def test_a_recovery_confirmed_on_the_page_with_nul_in_its_note_says_so_and_appends_nothing(api, client, django_user_model):
    make_session(api)
    api.post("/api/v1/sessions/s1/events", {"events": [f.event("turn_start", turn=1)]})
    client.force_login(django_user_model.objects.create_user("ops", is_staff=True, is_superuser=True))
    digest = api.get("/api/v1/sessions/s1/recovery-plan").json()["digest"]
    response = client.post("/sessions/s1/recovery", {"digest": digest, "note": "why\x00"}, follow=True)
    assert response.status_code == 200
    assert "U+0000" in response.content.decode()
    assert stored_counts() == (1, 1, 0, 0, 0)


def test_a_since_past_any_integer_column_is_an_empty_page(api):
    make_session(api)
    api.post("/api/v1/sessions/s1/events", {"events": [f.user()]})
    response = api.get("/api/v1/sessions/s1/events", {"since": 10**30})
    assert response.status_code == 200 and response.json() == {"events": [], "next_seq": 1}


def test_a_huge_fork_boundary_is_out_of_range(api):
    make_session(api)
    answer = assert_error(api.post("/api/v1/sessions/s1/fork", {"boundary": 10**30}), 422, "boundary_out_of_range")
    assert answer["boundary"] == 10**30


def test_an_import_with_an_odd_agent_name_or_seed_length_warns_and_stores_what_fits(api):
    make_session(api, "parent")
    blob = {
        "version": 2,
        "events": [],
        "session": {"agent_name": "x" * 201, "parent": {"session_id": "parent", "seed_length": 2**40}},
    }
    response = api.post("/api/v1/sessions/import?id=child", blob)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["session"]["agent_name"] == "" and body["session"]["parent"] is None
    assert len(body["warnings"]) == 2


def test_an_agent_name_longer_than_the_column_is_422(api):
    assert_error(api.post("/api/v1/sessions", {"id": "n1", "agent_name": "x" * 201}), 422, "invalid_request")
    assert stored_counts() == (0, 0, 0, 0, 0)


# Authentication ------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic eDp5"}])
@pytest.mark.parametrize("path", ["/api/v1/sessions", "/api/v1/sessions/s1/events", "/api/v1/sessions/s1/recover"])
def test_writes_without_valid_credentials_are_401_unauthenticated(headers, path):
    browserless = Client(enforce_csrf_checks=True)
    response = browserless.post(path, {}, content_type="application/json", headers=headers)
    assert_error(response, 401, "unauthenticated")
    assert stored_counts() == (0, 0, 0, 0, 0)


def test_a_logged_in_browser_write_still_needs_its_csrf_token(agent_user):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(agent_user)
    response = browser.post("/api/v1/sessions", {"id": "n1"}, content_type="application/json")
    assert response.status_code == 403
    assert not Session.objects.exists()


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


# A revoked or expired token's 401 says so ------------------------------

SEND = "send Authorization: Bearer <token> (or log in)"

# A read of each kind of endpoint (sync, async) and the append, whose fast lane leaves refusals to the API.
REQUESTS = [("get", "/api/v1/sessions", None), ("get", "/api/v1/sessions/s", None), ("post", "/api/v1/sessions/s/events", {"events": [f.user()]})]


def refused(token: str | None, method: str, path: str, body) -> dict:
    client = ApiClient(token)
    response = client.get(path) if method == "get" else client.post(path, body)
    assert response.status_code == 401
    answer = response.json()
    assert answer["error"] == "unauthenticated"  # the code stays; the words say why
    return answer


@pytest.mark.parametrize("method, path, body", REQUESTS)
def test_a_revoked_tokens_401_says_it_was_revoked(agent_user, method, path, body):
    services.create_session(session_id="s")
    secret = token_for(agent_user)
    token = ApiToken.usable_for(secret)
    services.revoke_token(token=token)
    detail = refused(secret, method, path, body)["detail"]
    assert detail.startswith(f"token {token.prefix}… was revoked at ") and detail.endswith(SEND)


@pytest.mark.parametrize("method, path, body", REQUESTS)
def test_an_expired_tokens_401_says_it_expired(agent_user, method, path, body):
    services.create_session(session_id="s")
    secret = token_for(agent_user, expires_at=timezone.now() + timedelta(days=1))
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(minutes=1))
    assert " expired at " in refused(secret, method, path, body)["detail"]


def test_a_deactivated_users_token_and_an_unknown_token_say_so_and_no_token_asks_for_one(agent_user):
    services.create_session(session_id="s")
    secret = token_for(agent_user)
    agent_user.is_active = False
    agent_user.save()
    assert "user is deactivated: " in refused(secret, "get", "/api/v1/sessions", None)["detail"]
    assert refused("tl_never-issued", "get", "/api/v1/sessions", None)["detail"] == f"unknown token: {SEND}"
    assert refused(None, "get", "/api/v1/sessions", None)["detail"] == SEND


# Error locations name the field as the client sent it -------------------


@pytest.mark.parametrize("method, path, body, loc, shown", [
    ("post", "/api/v1/sessions", {"agent_name": 5}, ["agent_name"], "agent_name: "),
    ("post", "/api/v1/sessions/s/events", {"events": "x"}, ["events"], "events: "),
    ("post", "/api/v1/sessions/s/events", {"events": [f.user()], "expected_seq": "a"}, ["expected_seq"], "expected_seq: "),
    ("post", "/api/v1/sessions/s/recover", {"context": "yes"}, ["context"], "context: "),
    ("post", "/api/v1/sessions/s/patch-dangling-calls", {"note": 5}, ["note"], "note: "),
    ("post", "/api/v1/sessions/s/fork", {"id": 5}, ["id"], "id: "),
    ("get", "/api/v1/sessions?limit=x", None, ["limit"], "limit: "),
    ("get", "/api/v1/sessions?status=paused", None, ["status"], "status: "),  # refused, as docs/api.md says
    ("get", "/api/v1/sessions/s/events?since=x", None, ["since"], "since: "),
])  # fmt: skip
def test_an_invalid_request_names_the_field_as_the_client_sent_it(api, method, path, body, loc, shown):
    api.post("/api/v1/sessions", {"id": "s"})
    response = api.get(path) if method == "get" else api.post(path, body)
    assert response.status_code == 422
    answer = response.json()
    assert answer["error"] == "invalid_request"
    assert [error["loc"] for error in answer["errors"]] == [loc]
    assert answer["detail"].startswith(shown) and "payload" not in answer["detail"] and "query." not in answer["detail"]


def test_a_nested_location_reads_as_a_path():
    assert field_paths.client_loc(["body", "payload", "events", 0, "data"]) == ["events", 0, "data"]
    assert field_paths.dotted(["events", 0, "data"]) == "events[0].data"
    assert field_paths.client_loc(["query", "limit"]) == ["limit"] and field_paths.dotted([]) == "body"


def test_every_endpoint_names_its_body_parameter_as_field_paths_expects():
    """field_paths drops the body schema parameter's name from locations: every endpoint uses that one name."""
    body_parameters = set()
    for _prefix, router in api._routers:
        for path_operation in router.path_operations.values():
            for operation in path_operation.operations:
                hints = typing.get_type_hints(operation.view_func)
                body_parameters |= {name for name, hint in hints.items() if isinstance(hint, type) and issubclass(hint, Schema)}
    assert body_parameters == {field_paths.BODY_PARAMETER}


# The OpenAPI document --------------------------------------------------------------------------


def test_openapi_lists_400_invalid_json_for_every_body_and_links_the_projects_docs(api):
    document = api.get("/api/v1/openapi.json").json()
    assert "docs/session-log.md" in document["info"]["description"]
    assert "docs/api.md" in document["info"]["description"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if "requestBody" in operation or path.endswith("/import"):
                assert "400" in operation["responses"], (method, path)
        assert "{session_id}" in path or "session_id" not in path  # converters do not leak into the document
        assert "{call_id}" in path or "call_id" not in path


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


def test_the_openapi_document_keeps_its_path_order_and_operation_ids_across_the_endpoint_modules(api):
    """The endpoints live in one module per resource; clients generated from the
    document name their methods after its operation ids, and /sessions/import must be tried
    before /sessions/{session_id} ("import" is a valid session id)."""
    paths = api.get("/api/v1/openapi.json").json()["paths"]
    assert list(paths) == [
        "/api/v1/sessions", "/api/v1/sessions/import", "/api/v1/calls", "/api/v1/search", "/api/v1/sessions/{session_id}",
        "/api/v1/sessions/{session_id}/events", "/api/v1/sessions/{session_id}/messages",
        "/api/v1/sessions/{session_id}/export", "/api/v1/sessions/{session_id}/recovery-plan",
        "/api/v1/sessions/{session_id}/dangling-calls", "/api/v1/sessions/{session_id}/recover",
        "/api/v1/sessions/{session_id}/patch-dangling-calls", "/api/v1/sessions/{session_id}/fork",
        "/api/v1/sessions/{session_id}/notes", "/api/v1/notes/{note_id}", "/api/v1/sessions/{session_id}/calls",
        "/api/v1/projects/{slug}/tools", "/api/v1/projects/{slug}/tools/policies/{pattern}",
        "/api/v1/sessions/{session_id}/calls/{call_id}/verdict", "/api/v1/sessions/{session_id}/calls/{call_id}/verdicts",
        "/api/v1/sessions/{session_id}/calls/{call_id}/check", "/api/v1/projects/{slug}/prices",
    ]  # fmt: skip
    assert [operation["operationId"] for path in paths.values() for operation in path.values()] == [
        f"sessions_app_api_{name}"
        for name in [
            "create_session", "list_sessions", "import_session", "list_fleet_calls", "search_log", "get_session", "append_events", "list_events",
            "list_messages", "export_session", "get_recovery_plan", "get_dangling_calls", "recover_session",
            "patch_dangling_calls", "fork_session", "add_note", "list_notes", "edit_note", "delete_note",
            "list_calls", "project_tools", "save_policy", "delete_policy",
            "record_verdict", "withdraw_verdict", "list_verdicts", "queue_check", "project_prices", "set_price", "remove_price",
        ]
    ]  # fmt: skip
    imported = api.post("/api/v1/sessions/import", {"version": 2, "events": []})
    assert imported.status_code != 405, imported.content
