"""Settings taken from the environment, checked on a real Daphne started with them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from django.db import connection

from sessions_app import services
from sessions_app.models import ApiToken
from tests.servers import DaphneServer

LIMIT = 4096


def post(server: DaphneServer, token: str, path: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{server.url}{path}", data=body, method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def append_body(size: int) -> bytes:
    """An append of one user message, padded to exactly `size` bytes."""
    empty = json.dumps({"events": [{"type": "user_message", "data": {"content": ""}}]})
    return json.dumps({"events": [{"type": "user_message", "data": {"content": "x" * (size - len(empty))}}]}).encode()


@pytest.fixture
def limited_server(transactional_db, tmp_path):
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", TURNLOG_MAX_REQUEST_BYTES=str(LIMIT)).start()
    yield daphne
    daphne.stop()


def test_turnlog_max_request_bytes_is_the_real_limit_of_a_request_body(limited_server, django_user_model):
    services.create_session(session_id="limited")
    _, token = ApiToken.issue(django_user_model.objects.create_user("agent"))
    path = "/api/v1/sessions/limited/events"

    status, body = post(limited_server, token, path, append_body(LIMIT + 1))
    assert (status, body["error"]) == (413, "too_large")
    assert str(LIMIT) in body["detail"]
    status, body = post(limited_server, token, path, append_body(LIMIT))
    assert (status, body) == (201, {"first_seq": 0, "next_seq": 1})
