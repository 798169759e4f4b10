"""Issue 24, item 6, over HTTP: a refused token's 401 says why; errors name fields as the client sent them;
an unknown status filter is refused as docs/api.md says (the page ignores it and says so)."""

import typing
from datetime import timedelta

import pytest
from django.utils import timezone
from ninja import Schema

from sessions_app import field_paths, services
from sessions_app.api import api
from sessions_app.models import ApiToken
from tests.access import token_for
from tests.conftest import ApiClient
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db

SEND = "send Authorization: Bearer <token> (or log in)"


# i. A revoked or expired token's 401 says so --------------------------------------------

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


# j. Error locations name the field as the client sent it ---------------------------------


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
