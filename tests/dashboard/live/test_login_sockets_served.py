"""Login-cookie sockets against real Daphnes (tests/servers.py): a logout through one server closes
the JSON stream and the page socket a browser opened on another with 4401, and so do a password change,
a deactivation and the login session's expiry. On PostgreSQL + Redis (REDIS_URL) the servers share the layer too.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import threading
import time
import urllib.parse
import urllib.request
import uuid
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password, make_password
from django.contrib.sessions.models import Session as LoginSession
from django.db import connection
from django.test import Client
from django.utils import timezone
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.access import member, token_for
from tests.conftest import load_factor
from tests.servers import DaphneServer, RedisServer
from tests.sessions_app import factories as f

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

CHECK_SECONDS = "0.3"
WAIT = 10
PASSWORD = "old-horse-battery"


@pytest.fixture
def start_daphne(start_daphne):
    """Daphnes whose periodic credential round runs every CHECK_SECONDS."""
    return lambda: start_daphne(TURNLOG_CREDENTIAL_CHECK_SECONDS=CHECK_SECONDS)

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
    expiry = timezone.now() + timedelta(seconds=5)
    LoginSession.objects.filter(pk=session_cookie).update(expire_date=expiry)
    # 1.5 s each, one socket after the other: both checked open well before the expiry.
    assert all(still_open(ws, 1.5) for ws in sockets), "open until the session expires"
    assert [close_code(ws) for ws in sockets] == [4401, 4401]
    assert timezone.now() >= expiry


# The end of a login, exactly: nothing committed after its answer, 4401 within 2 s ------------------------
#
# At the default check interval (2 s). On one Daphne with the in-memory layer, and on two Daphnes sharing a
# Redis of the test's own: the login ends through one, its streams are on the other. An agent appends in a
# tight loop from the moment the answer arrives; none of those events may reach a stream of the ended login,
# and the user's token stream (or another user's, after a deactivation) shows they were being delivered.

# The bounds on wall time stretch as pytest-xdist's workers outnumber the cores (load_factor; 1 when the
# module runs alone): a busy worker waits for a core, not for the login's end.
CLOSE_WITHIN = 2.0 * load_factor()  # seconds from the answer to the streams' 4401 (at the default interval)
ANSWER_WITHIN = 1.0 * load_factor()  # the longest the logout (or the password change, or the deactivation) may take to answer
APPEND_FOR = CLOSE_WITHIN + 0.5  # seconds of appends after the answer: past CLOSE_WITHIN


@pytest.fixture(params=["one daphne", "two daphnes on redis"])
def login_servers(request, tmp_path):
    """(the server the login ends through, the server its streams are on), at the default check interval."""
    env = {"TURNLOG_CREDENTIAL_CHECK_SECONDS": "2"}
    servers, redis_server = [], None
    if request.param != "one daphne":
        redis_server = RedisServer(tmp_path / "redis.log").start()
        env["REDIS_URL"] = redis_server.url
    else:
        env["REDIS_URL"] = ""  # the in-memory layer, whatever the run's REDIS_URL
    for number in range(1 if redis_server is None else 2):
        servers.append(DaphneServer(connection.settings_dict, tmp_path / f"daphne-{number}.log", **env).start())
    yield servers[0], servers[-1]
    for server in servers:
        server.stop()
    if redis_server is not None:
        redis_server.kill()


class Recorder(threading.Thread):
    """Every frame a socket receives until it closes, and when it closed with what code."""

    def __init__(self, ws: ClientConnection):
        super().__init__(daemon=True)
        self.ws, self.frames, self.code, self.closed_at = ws, [], None, None
        self.start()

    def run(self) -> None:
        try:
            while True:
                self.frames.append(self.ws.recv())
        except ConnectionClosed as closed:
            self.code, self.closed_at = closed.rcvd.code if closed.rcvd else None, time.monotonic()

    def received(self, text: str) -> bool:
        return any(text in frame for frame in list(self.frames))


def create_with_one_event(sid: str) -> None:
    services.create_session(session_id=sid)
    services.append_events(session_id=sid, events=validate_batch([f.user("m0")]))


def agent_token() -> str:
    return token_for(get_user_model().objects.create_user(f"agent-{uuid.uuid4().hex[:8]}"))


def append_text(server: DaphneServer, token: str, sid: str, text: str) -> None:
    body = json.dumps({"events": [f.user(text)]}).encode()
    request = urllib.request.Request(
        f"{server.url}/api/v1/sessions/{sid}/events", data=body, method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201, response.read()


def token_stream(server: DaphneServer, token: str, sid: str, stack: contextlib.ExitStack) -> ClientConnection:
    url = f"ws://127.0.0.1:{server.port}/ws/v1/sessions/{sid}/events"
    return stack.enter_context(connect(url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=WAIT))


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def assert_the_login_ends_exactly(
    end_login, *, watching: DaphneServer, ended: list[ClientConnection], kept: ClientConnection, sid: str, own_work: float = 0.0
) -> None:
    """`end_login()` (a request that answers when the login has ended) answers within ANSWER_WITHIN more than
    its `own_work` takes; the `ended` streams receive none of the events appended after its answer and close
    4401 within CLOSE_WITHIN of it; `kept` receives them."""
    agent = agent_token()
    ended, kept = [Recorder(ws) for ws in ended], Recorder(kept)
    append_text(watching, agent, sid, "before-the-end")
    wait_until(lambda: all(r.received("before-the-end") for r in [*ended, kept]), "the streams show the events before the end")

    asked = time.monotonic()
    end_login()
    answered = time.monotonic()
    # Its own work (hashing a password) slows under load as the rest does: both stretch with load_factor.
    assert answered - asked < ANSWER_WITHIN + own_work * load_factor(), f"answered after {answered - asked:.2f} s ({own_work:.2f} s of its own work)"
    count = 0
    while time.monotonic() - answered < APPEND_FOR:
        append_text(watching, agent, sid, f"after-the-end-{count}")
        count += 1
    for recorder in ended:
        assert recorder.code == 4401, f"closed with {recorder.code}" if recorder.code else "still open"
        assert recorder.closed_at - answered <= CLOSE_WITHIN, f"closed {recorder.closed_at - answered:.2f} s after the answer"
        assert not recorder.received("after-the-end-"), [frame[:300] for frame in recorder.frames if "after-the-end-" in frame]
    wait_until(lambda: kept.received(f"after-the-end-{count - 1}"), "the kept stream receives the events after the end")
    assert kept.code is None, f"the kept stream closed with {kept.code}"


def test_no_event_committed_after_a_logouts_answer_reaches_its_streams(login_servers, cookie_sockets, browser_login, user, token, sid, sockets_of_test):
    through, watching = login_servers
    create_with_one_event(sid)  # the page socket shows what follows seq 0
    ended = cookie_sockets(watching, browser_login, sid)
    kept = token_stream(watching, token, sid, sockets_of_test)  # the same user's token: a logout does not end it
    assert_the_login_ends_exactly(lambda: log_out_through(through, browser_login), watching=watching, ended=ended, kept=kept, sid=sid)


class Form(HTMLParser):
    """The fields of one form of a page (by its id), as a browser would submit them untouched."""

    def __init__(self, page: str, form_id: str):
        super().__init__()
        self.form_id, self.inside, self.select, self.fields = form_id, False, None, []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.inside = attrs.get("id") == self.form_id
        elif not self.inside or "name" not in attrs and tag != "option":
            return
        elif tag == "input" and attrs.get("type") in ("checkbox", "radio"):
            if "checked" in attrs:
                self.fields.append((attrs["name"], attrs.get("value") or "on"))  # a browser's value of a box without one
        elif tag == "input" and attrs.get("type") != "submit":
            self.fields.append((attrs["name"], attrs.get("value") or ""))
        elif tag == "select":
            self.select = attrs["name"]
        elif tag == "option" and self.select and "selected" in attrs:
            self.fields.append((self.select, attrs.get("value") or ""))

    def handle_endtag(self, tag):
        if tag == "select":
            self.select = None
        elif tag == "form":
            self.inside = False


def post_form(server: DaphneServer, path: str, cookie: str, form_id: str | None, changes: dict[str, str | None]) -> http.client.HTTPResponse:
    """GET the page, then POST its form (by id; None: only `changes` and the CSRF token) with `changes` (None drops a field)."""
    client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    client.request("GET", path, headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"})
    response = client.getresponse()
    page = response.read().decode()
    assert response.status == 200, page[:500]
    csrf = re.search(r"csrftoken=([^;]+)", response.getheader("Set-Cookie"))[1]
    fields = [(name, value) for name, value in (Form(page, form_id).fields if form_id else []) if name not in changes]
    fields += [(name, value) for name, value in changes.items() if value is not None]
    fields = [(name, value) for name, value in fields if name != "csrfmiddlewaretoken"] + [("csrfmiddlewaretoken", re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1])]
    cookies = f"{settings.SESSION_COOKIE_NAME}={cookie}; csrftoken={csrf}"
    headers = {"Cookie": cookies, "Content-Type": "application/x-www-form-urlencoded", "Origin": server.url}
    client.request("POST", path, body=urllib.parse.urlencode(fields), headers=headers)
    response = client.getresponse()
    response.body = response.read()
    client.close()
    return response


def test_no_event_committed_after_a_password_changes_answer_reaches_the_users_login_streams(
    login_servers, cookie_sockets, user, token, sid, sockets_of_test
):
    """The account page's form: the other logins of the user end, and so does the changer's own (its key changes)."""
    through, watching = login_servers
    user.set_password(PASSWORD)
    user.save()
    changer, other = Client(), Client()
    changer.force_login(user)
    other.force_login(user)
    changer_cookie, other_cookie = (c.cookies[settings.SESSION_COOKIE_NAME].value for c in (changer, other))
    create_with_one_event(sid)  # the page socket shows what follows seq 0
    ended = cookie_sockets(watching, other_cookie, sid) + cookie_sockets(watching, changer_cookie, sid)
    kept = token_stream(watching, token, sid, sockets_of_test)  # tokens outlive a password change

    # The form checks the old password and hashes the new one: PBKDF2's work, ~1 s here, is not waiting for streams.
    started = time.monotonic()
    check_password(PASSWORD, user.password) and make_password("a-new-horse-battery")
    hashing = time.monotonic() - started

    def change_password():
        new = "a-new-horse-battery"
        response = post_form(through, "/account/password/", changer_cookie, None, {"old_password": PASSWORD, "new_password1": new, "new_password2": new})
        assert response.status == 302 and response.getheader("Location") == "/account/", response.body[:500]

    assert_the_login_ends_exactly(change_password, watching=watching, ended=ended, kept=kept, sid=sid, own_work=2 * hashing)


def test_no_event_committed_after_a_deactivations_answer_reaches_the_users_streams(login_servers, cookie_sockets, browser_login, user, token, sid, sockets_of_test):
    """Deactivating is the admin's user page, "Active" unticked: the user's login and token streams end alike."""
    through, watching = login_servers
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("admin", password="not-used-here"))
    admin_cookie = admin.cookies[settings.SESSION_COOKIE_NAME].value
    create_with_one_event(sid)  # the page socket shows what follows seq 0
    ended = cookie_sockets(watching, browser_login, sid) + [token_stream(watching, token, sid, sockets_of_test)]
    bystander = get_user_model().objects.create_user("bystander")
    member(bystander)
    others = Client()
    others.force_login(bystander)
    kept = cookie_sockets(watching, others.cookies[settings.SESSION_COOKIE_NAME].value, sid)[0]  # another user's login

    def save_through_the_admin(changed, changes: dict[str, str | None]) -> None:
        response = post_form(through, f"/admin/auth/user/{changed.pk}/change/", admin_cookie, "user_form", {**changes, "_save": "Save"})
        assert response.status == 302, response.body.decode()[:2000]

    # The admin's own work (its form, its save, ~0.5 s on a loaded machine): the same save, of a name.
    started = time.monotonic()
    save_through_the_admin(bystander, {"first_name": "Bea"})
    own_work = time.monotonic() - started
    bystander.refresh_from_db()
    assert bystander.is_active and bystander.first_name == "Bea", "the form was posted as the page has it"

    def deactivate():
        save_through_the_admin(user, {"is_active": None})
        user.refresh_from_db()
        assert not user.is_active

    assert_the_login_ends_exactly(deactivate, watching=watching, ended=ended, kept=kept, sid=sid, own_work=own_work)
