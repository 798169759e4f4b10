"""The access log (dashboard/access_log.py): with TURNLOG_LOG_FORMAT=json, one JSON line per HTTP request
and per websocket session, naming who, never a secret; the default text format writes none.

The main tests run a real Daphne and read what it wrote; the in-process ones
send requests to the ASGI application with the access logger turned on.
"""

from __future__ import annotations

import http.client
import json
import logging
import time

import pytest
from asgiref.testing import ApplicationCommunicator
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from dashboard.access_log import common_fields
from dashboard.asgi import application
from sessions_app import services
from sessions_app.models import Role
from tests.access import member, token_for
from tests.asgi import close_connections_of_the_sync_thread, http_scope, response_of
from tests.servers import DaphneServer

TOKEN_NAME = "nightly-agent"
QUERY_SECRET = "query-secret-3b7f0c"  # a ?token= an unwary client puts in a URL
COOKIE_SECRET = "cookie-secret-91ad2e"
LINK_SECRET = "link-secret-c0ffee"  # the one-time part of a set-password link


def request(server: DaphneServer, method: str, path: str, body: bytes | None = None, **headers: str) -> int:
    client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        client.request(method, path, body=body, headers=headers)
        response = client.getresponse()
        response.read()
        return response.status
    finally:
        client.close()


def json_lines(log: str) -> list[dict]:
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def access_lines(log: str) -> list[dict]:
    return [line for line in json_lines(log) if line["logger"] == "turnlog.access"]


def wait_for_line(server: DaphneServer, wanted) -> None:
    deadline = time.monotonic() + 10
    while not any(wanted(line) for line in access_lines(server.log_path.read_text())):
        assert time.monotonic() < deadline, server.log_path.read_text()
        time.sleep(0.05)


@pytest.fixture
def agent(django_user_model):
    user = django_user_model.objects.create_user("agent-owner")
    return token_for(user, name=TOKEN_NAME)


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_daphne_logs_each_request_and_socket_as_a_json_line_without_secrets(tmp_path, agent):
    sid = "logged-session-1"
    services.create_session(session_id=sid)
    # Daphne's own access log is plain text and carries query strings: a JSON deployment turns it off (docs/guide/health-and-logs.md).
    server = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", arguments=("--access-log", "/dev/null"), TURNLOG_LOG_FORMAT="json")
    server.start()
    try:
        bearer = {"Authorization": f"Bearer {agent}", "Content-Type": "application/json"}
        body = json.dumps({"events": [{"type": "user_message", "data": {"text": "hi"}}]}).encode()
        assert request(server, "POST", f"/api/v1/sessions/{sid}/events", body, **bearer) == 201  # the append lane
        assert request(server, "POST", f"/api/v1/sessions/{sid}/events?token={QUERY_SECRET}", body, **bearer) == 201  # Django
        assert request(server, "GET", f"/api/v1/sessions/{sid}/events?since=0&token={QUERY_SECRET}", **bearer) == 200
        assert request(server, "GET", "/", Cookie=f"{settings.SESSION_COOKIE_NAME}={COOKIE_SECRET}") == 302  # not logged in
        assert request(server, "GET", f"/account/set-password/MQ/{LINK_SECRET}/") == 410  # no such link
        headers = {"Authorization": f"Bearer {agent}"}
        with connect(f"ws://127.0.0.1:{server.port}/ws/v1/sessions/{sid}/events?token={QUERY_SECRET}", additional_headers=headers) as ws:
            assert json.loads(ws.recv(timeout=10))["event"]["seq"] == 0
            assert json.loads(ws.recv(timeout=10))["event"]["seq"] == 1
        with connect(f"ws://127.0.0.1:{server.port}/ws/v1/sessions/{sid}/events") as refused:
            with pytest.raises(ConnectionClosed) as closed:
                refused.recv(timeout=10)
            assert closed.value.rcvd.code == 4401
        wait_for_line(server, lambda line: line.get("close_code") == 4401)
        wait_for_line(server, lambda line: line.get("close_code") == 1000)
    finally:
        server.stop()
    log = server.log_path.read_text()
    for secret in (agent, QUERY_SECRET, COOKIE_SECRET, LINK_SECRET, "Bearer", "Cookie", "Authorization"):
        assert secret not in log, (secret, log)

    lines = access_lines(log)
    appends = [line for line in lines if line.get("method") == "POST"]
    assert len(appends) == 2, log
    for line in appends:
        assert line["path"] == f"/api/v1/sessions/{sid}/events" and line["status"] == 201
        assert {k: line[k] for k in ("type", "session_id", "token", "user", "project", "client")} == {
            "type": "http", "session_id": sid, "token": TOKEN_NAME, "user": "agent-owner", "project": "default", "client": "127.0.0.1",
        }  # fmt: skip
        assert isinstance(line["token_id"], int) and 0 < line["duration_ms"] < 30_000
        assert line["message"] == f"POST /api/v1/sessions/{sid}/events 201" and line["level"] == "INFO"
    read = next(line for line in lines if line.get("method") == "GET" and line["path"].endswith("/events"))
    assert (read["status"], read["token"], read["session_id"]) == (200, TOKEN_NAME, sid)
    page = next(line for line in lines if line["path"] == "/")
    assert page["status"] == 302 and "user" not in page and "token" not in page
    link = next(line for line in lines if line["path"].startswith("/account/set-password/"))
    assert link["path"] == "/account/set-password/MQ/…/"

    (unauthenticated,) = [line for line in lines if line["type"] == "websocket" and line["close_code"] == 4401]
    assert (unauthenticated["closed_by"], unauthenticated["frames_sent"]) == ("server", 0)
    assert not {"user", "token", "project"} & set(unauthenticated)
    (socket,) = [line for line in lines if line["type"] == "websocket" and line["close_code"] == 1000]
    assert {k: socket[k] for k in ("kind", "path", "session_id", "token", "user", "project", "close_code", "closed_by", "frames_sent")} == {
        "kind": "events", "path": f"/ws/v1/sessions/{sid}/events", "session_id": sid, "token": TOKEN_NAME, "user": "agent-owner",
        "project": "default", "close_code": 1000, "closed_by": "client", "frames_sent": 2,
    }  # fmt: skip
    assert socket["duration_ms"] > 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(90)
def test_the_default_text_format_writes_no_access_lines(tmp_path, agent):
    sid = "unlogged-session-1"
    services.create_session(session_id=sid)
    server = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", arguments=("--access-log", "/dev/null"))
    server.start()
    try:
        body = json.dumps({"events": [{"type": "user_message", "data": {"text": "hi"}}]}).encode()
        assert request(server, "POST", f"/api/v1/sessions/{sid}/events", body, Authorization=f"Bearer {agent}") == 201
        assert request(server, "GET", "/") == 302
    finally:
        server.stop()
    log = server.log_path.read_text()
    assert json_lines(log) == [] and sid not in log, log


# In process ----------------------------------------------------------------


@pytest.fixture
def access_logged(caplog):
    caplog.set_level(logging.INFO, logger="turnlog.access")
    return caplog


async def served(path: str, **headers: str) -> int:
    communicator = ApplicationCommunicator(application, http_scope("GET", path, headers))
    await communicator.send_input({"type": "http.request", "body": b""})
    status, _, _ = await response_of(communicator)
    return status


def logged_fields(caplog) -> list[dict]:
    return [record.fields for record in caplog.records if record.name == "turnlog.access"]


pytestmark = pytest.mark.usefixtures(close_connections_of_the_sync_thread.__name__)


@pytest.fixture
def reader_cookie(transactional_db, django_user_model):
    """A logged-in admin of the default project (committed: the application reads it on its own thread)."""
    user = django_user_model.objects.create_user("reader")
    member(user, Role.ADMIN)
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_logged_in_page_names_its_user_and_project(access_logged, reader_cookie, settings):
    cookie = reader_cookie
    settings.TURNLOG_BEHIND_PROXY = True
    assert await served("/projects/default/", Cookie=f"{settings.SESSION_COOKIE_NAME}={cookie}", **{"X-Forwarded-For": "6.6.6.6, 203.0.113.9"}) == 200
    (fields,) = logged_fields(access_logged)
    assert {k: fields[k] for k in ("path", "status", "user", "project", "client")} == {
        "path": "/projects/default/", "status": 200, "user": "reader", "project": "default", "client": "203.0.113.9",
    }  # fmt: skip
    assert cookie not in access_logged.text


@pytest.mark.django_db
@pytest.mark.asyncio
async def test_the_health_probes_are_not_logged(access_logged):
    assert await served("/healthz") == 200
    assert logged_fields(access_logged) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_page_socket_names_its_user_kind_and_close(access_logged, reader_cookie, settings):
    channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)  # its pools belong to this test's loop
    headers = [(b"host", b"testserver"), (b"origin", b"http://testserver"), (b"cookie", f"{settings.SESSION_COOKIE_NAME}={reader_cookie}".encode())]
    socket = WebsocketCommunicator(application, "/ws/sessions/live", headers=headers)
    try:
        connected, _ = await socket.connect(timeout=10)
        assert connected
        await socket.disconnect(code=1001, timeout=10)
    finally:
        layer = channel_layers.backends.pop(DEFAULT_CHANNEL_LAYER, None)
        if hasattr(layer, "close_pools"):
            await layer.close_pools()
    (fields,) = logged_fields(access_logged)
    assert {k: fields[k] for k in ("type", "kind", "path", "user", "close_code", "closed_by")} == {
        "type": "websocket", "kind": "session_list", "path": "/ws/sessions/live", "user": "reader", "close_code": 1001, "closed_by": "client",
    }  # fmt: skip
    assert not {"session_id", "token", "client"} & set(fields), fields  # the test client's socket has no address


@pytest.mark.parametrize(
    "path, session_id",
    [
        ("/api/v1/sessions/s-1", "s-1"),
        ("/api/v1/sessions/s-1/events", "s-1"),
        ("/sessions/s-1/", "s-1"),
        ("/ws/v1/sessions/s-1/events", "s-1"),
        ("/ws/sessions/s-1/recovery/live", "s-1"),
        ("/ws/sessions/live", None),  # the session list's socket
        ("/api/v1/sessions", None),
        ("/projects/default/", None),
    ],
)
def test_the_session_a_path_names(path, session_id):
    assert common_fields({"type": "http", "path": path}).get("session_id") == session_id


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_an_otlp_export_names_its_token(access_logged, agent):
    scope = http_scope("POST", "/otlp/v1/traces", {"Authorization": f"Bearer {agent}", "Content-Type": "application/x-protobuf"})
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})  # an export of no spans
    status, _, _ = await response_of(communicator)
    assert status == 200
    (fields,) = logged_fields(access_logged)
    assert {k: fields[k] for k in ("path", "status", "token", "user", "project")} == {
        "path": "/otlp/v1/traces", "status": 200, "token": TOKEN_NAME, "user": "agent-owner", "project": "default",
    }  # fmt: skip
