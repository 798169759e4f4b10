"""Login-cookie sockets against real Daphnes (tests/servers.py): a logout through one server closes
the JSON stream and the page socket a browser opened on another with 4401, and so do a password change,
a deactivation and the login session's expiry. On PostgreSQL + Redis (REDIS_URL) the servers share the layer too.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.sessions.models import Session as LoginSession
from django.db import connection
from django.test import Client
from django.utils import timezone
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from sessions_app import services
from tests.servers import DaphneServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

CHECK_SECONDS = "0.3"
WAIT = 10


@pytest.fixture
def start_daphne(tmp_path):
    servers = []

    def start() -> DaphneServer:
        server = DaphneServer(connection.settings_dict, tmp_path / f"daphne-{len(servers)}.log", TURNLOG_CREDENTIAL_CHECK_SECONDS=CHECK_SECONDS)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def browser_login(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


@pytest.fixture
def sockets_of_test():
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.fixture
def cookie_sockets(sockets_of_test):
    def open_both(server: DaphneServer, cookie: str, sid: str) -> list[ClientConnection]:
        """The JSON stream and the session page's socket, as the browser opens them on the server's page (closed after the test)."""
        headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": server.url}
        base = f"ws://127.0.0.1:{server.port}"
        paths = [f"/ws/v1/sessions/{sid}/events", f"/ws/sessions/{sid}/live?after=0"]
        return [sockets_of_test.enter_context(connect(base + path, additional_headers=headers, open_timeout=WAIT)) for path in paths]

    return open_both


def close_code(ws: ClientConnection, within: float = WAIT) -> int:
    """The code the server closes the socket with (frames before it are skipped)."""
    deadline = time.monotonic() + within
    try:
        while True:
            ws.recv(timeout=max(deadline - time.monotonic(), 0.01))
    except ConnectionClosed as closed:
        return closed.rcvd.code
    except TimeoutError:
        raise AssertionError(f"still open after {within} s") from None


def still_open(ws: ClientConnection, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            ws.recv(timeout=max(deadline - time.monotonic(), 0.01))
    except TimeoutError:
        return True
    except ConnectionClosed:
        return False
    return True


def log_out_through(server: DaphneServer, cookie: str) -> None:
    """The page's "Log out" button: a POST to /logout/ with the CSRF token of the login page."""
    client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    client.request("GET", "/login/")
    response = client.getresponse()
    response.read()
    csrf = re.search(r"csrftoken=([^;]+)", response.getheader("Set-Cookie"))[1]
    cookies = f"{settings.SESSION_COOKIE_NAME}={cookie}; csrftoken={csrf}"
    client.request("POST", "/logout/", headers={"Cookie": cookies, "X-CSRFToken": csrf, "Content-Type": "application/x-www-form-urlencoded"})
    assert client.getresponse().status == 302
    client.close()


def test_a_logout_through_another_server_closes_the_logins_sockets(start_daphne, cookie_sockets, browser_login, session_cookie, sid):
    services.create_session(session_id=sid)
    watching, other = start_daphne(), start_daphne()
    logged_out = cookie_sockets(watching, browser_login, sid)
    kept = cookie_sockets(watching, session_cookie, sid)  # another login of the same user
    assert all(still_open(ws, 1) for ws in logged_out + kept)
    log_out_through(other, browser_login)
    assert [close_code(ws) for ws in logged_out] == [4401, 4401]
    assert all(still_open(ws, 1) for ws in kept)


def test_a_password_change_closes_the_users_login_sockets(start_daphne, cookie_sockets, user, session_cookie, sid):
    services.create_session(session_id=sid)
    sockets = cookie_sockets(start_daphne(), session_cookie, sid)
    assert all(still_open(ws, 1) for ws in sockets)
    user.set_password("a-new-horse-battery")
    user.save()
    assert [close_code(ws) for ws in sockets] == [4401, 4401]


def test_deactivating_the_user_closes_their_login_sockets(start_daphne, cookie_sockets, user, session_cookie, sid):
    services.create_session(session_id=sid)
    sockets = cookie_sockets(start_daphne(), session_cookie, sid)
    assert all(still_open(ws, 1) for ws in sockets)
    user.is_active = False
    user.save()
    assert [close_code(ws) for ws in sockets] == [4401, 4401]


def test_the_login_sessions_expiry_closes_its_sockets_once_it_passes(start_daphne, cookie_sockets, session_cookie, sid):
    services.create_session(session_id=sid)
    sockets = cookie_sockets(start_daphne(), session_cookie, sid)
    expiry = timezone.now() + timedelta(seconds=3)
    LoginSession.objects.filter(pk=session_cookie).update(expire_date=expiry)
    assert all(still_open(ws, 1.5) for ws in sockets), "open until the session expires"
    assert [close_code(ws) for ws in sockets] == [4401, 4401]
    assert timezone.now() >= expiry
