"""Scale-out: a real Daphne with a Redis channel layer and PostgreSQL keeps its sockets through idle time and outages.

Each test runs Daphne (tests/servers.py) as a subprocess on the test database
and talks to it over real sockets: HTTP appends with a bearer token, the JSON
stream and a browser page's socket with the `websockets` client. The Redis
tests start their own redis-server on a free port, so they can stop it
without touching the shared one; in CI a missing redis-server fails them.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest
import redis
from django.conf import settings
from django.db import connection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import Event
from tests.servers import DaphneServer, free_port
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db(transaction=True)

QUIET = 1.0  # how long "nothing more arrives" is watched for
WAIT = 10  # the longest a frame that must come may take (a database poll, a loaded machine)
CURSOR = re.compile(r'id="live-cursor" data-last-seq="(\d+)"')


# Clients ------------------------------------------------------------------


def api_append(server: DaphneServer, token: str, session_id: str, count: int, start: int) -> None:
    body = json.dumps({"events": [f.user(f"m{start + i}") for i in range(count)]}).encode()
    request = urllib.request.Request(
        f"{server.url}/api/v1/sessions/{session_id}/events", data=body, method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201, response.read()


def json_stream(server: DaphneServer, token: str, session_id: str, query: str = "") -> ClientConnection:
    url = f"ws://127.0.0.1:{server.port}/ws/v1/sessions/{session_id}/events" + (f"?{query}" if query else "")
    return connect(url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=WAIT)


def browser_socket(server: DaphneServer, cookie: str, path: str) -> ClientConnection:
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": server.url}
    return connect(f"ws://127.0.0.1:{server.port}{path}", additional_headers=headers, open_timeout=WAIT)


def receive(ws: ClientConnection, timeout: float = WAIT) -> str:
    try:
        return ws.recv(timeout=timeout)
    except ConnectionClosed as closed:
        raise AssertionError(f"the server closed the socket: {closed.rcvd}") from None


def stream_seqs(ws: ClientConnection, count: int) -> list[int]:
    return [json.loads(receive(ws))["event"]["seq"] for _ in range(count)]


def page_cursor(ws: ClientConnection) -> int:
    """The cursor (last seq shown) of the page's next frame with one."""
    while True:
        found = CURSOR.search(receive(ws))
        if found:
            return int(found.group(1))


def assert_open_and_silent(ws: ClientConnection, seconds: float) -> None:
    """Nothing arrives for `seconds` and the socket is still open after them."""
    try:
        frame = ws.recv(timeout=seconds)
    except TimeoutError:
        return
    except ConnectionClosed as closed:
        raise AssertionError(f"the server closed the socket: {closed.rcvd}") from None
    raise AssertionError(f"unexpected frame: {frame[:200]}")


def stored_seqs(session_id: str) -> list[int]:
    return list(Event.objects.filter(session_id=session_id).order_by("seq").values_list("seq", flat=True))


# Redis: idle sockets ------------------------------------------------------


def test_idle_sockets_stay_open_on_redis_well_past_its_timeouts(redis_server, start_daphne, token, session_cookie, sid):
    """redis-py 8 times out a socket read after 5 s, channels-redis blocks 5 s on each read: every idle socket used to close with 1011."""
    services.create_session(session_id=sid)
    services.append_events(session_id=sid, events=validate_batch([f.user("m0"), f.user("m1"), f.user("m2")]))
    server = start_daphne(REDIS_URL=redis_server.url)

    with json_stream(server, token, sid) as stream, browser_socket(server, session_cookie, f"/ws/sessions/{sid}/live?after=2") as page:
        assert stream_seqs(stream, 3) == [0, 1, 2]
        assert_open_and_silent(stream, 15)
        assert_open_and_silent(page, 0.1)

        api_append(server, token, sid, 1, start=3)
        assert stream_seqs(stream, 1) == [3]
        assert page_cursor(page) == 3
        assert_open_and_silent(stream, QUIET)
        assert_open_and_silent(page, QUIET)


# Redis: an outage -----------------------------------------------------------


def layer_members(redis_url: str, group: str) -> int:
    """How many channels Redis holds in a group (channels-redis's key for it)."""
    with redis.Redis.from_url(redis_url, socket_timeout=5) as client:
        return client.zcard(f"asgi:group:{group}")


def wait_for(condition, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def test_streams_ride_out_a_redis_outage_on_the_database_poll(redis_server, start_daphne, token, session_cookie, sid):
    """Without Redis, open streams keep going and new ones connect; when it is back, live delivery resumes."""
    services.create_session(session_id=sid)
    services.append_events(session_id=sid, events=validate_batch([f.user("m0"), f.user("m1")]))
    server = start_daphne(REDIS_URL=redis_server.url)

    with json_stream(server, token, sid) as first, browser_socket(server, session_cookie, "/ws/sessions/live") as listing:
        assert stream_seqs(first, 2) == [0, 1]
        wait_for(lambda: layer_members(redis_server.url, services.SESSIONS_GROUP) == 1, "the list socket joined its group")

        redis_server.kill()
        api_append(server, token, sid, 2, start=2)  # appends do not need the layer
        assert stream_seqs(first, 2) == [2, 3]
        with json_stream(server, token, sid, "after=1") as second:
            assert stream_seqs(second, 2) == [2, 3]
            api_append(server, token, sid, 1, start=4)
            assert stream_seqs(first, 1) == [4]
            assert stream_seqs(second, 1) == [4]

            redis_server.start()  # on the same port, empty: no groups
            group = services.session_group(sid)
            # One membership per process (dashboard.live.hub), however many of its sockets follow the session.
            wait_for(lambda: layer_members(redis_server.url, group) == 1, "the process's hub joined the group again")
            wait_for(lambda: layer_members(redis_server.url, services.SESSIONS_GROUP) == 1, "the list socket joined again")
            api_append(server, token, sid, 1, start=5)
            assert stream_seqs(first, 1) == [5]
            assert stream_seqs(second, 1) == [5]
            # The list has no database poll: its row comes through Redis alone.
            assert sid in receive(listing)
            assert_open_and_silent(first, QUIET)
            assert_open_and_silent(second, 0.1)

    assert stored_seqs(sid) == [0, 1, 2, 3, 4, 5]
    log = server.log_path.read_text()
    assert "Traceback" not in log, log
    assert log.count("Redis channel layer unreachable") == 1, log


# PostgreSQL: dropped connections and an unreachable database ---------------

on_postgresql = pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
    reason="PostgreSQL only (the suite's PostgreSQL pass runs it)",
)


def http(server: DaphneServer, path: str, *, method: str = "GET", body: dict | None = None, headers: dict | None = None):
    """(status, headers, body) of a request to the Daphne; error statuses are answers too."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{server.url}{path}", data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def server_connections(database: str) -> list[int]:
    """The backend pids of the other connections to the test database (the Daphne's, and this process's idle pooled ones)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [database])
        return [pid for (pid,) in cursor.fetchall()]


@pytest.mark.postgres
@on_postgresql
def test_requests_after_the_database_dropped_every_connection_all_succeed(start_daphne, token, sid):
    """Each pooled connection is checked on checkout: a dropped one is replaced, and no request fails,
    appends included, whose statements the dropped connections had prepared."""
    services.create_session(session_id=sid)
    database = connection.settings_dict["NAME"]
    # This process's own idle pool connections (left by earlier tests) are not the Daphne's:
    # dropping them too broke the next test's first checkout.
    ours = set(server_connections(database))
    server = start_daphne()
    auth = {"Authorization": f"Bearer {token}"}
    # Several at once, so the pool holds several connections that all get dropped.
    # One event per request, more than the 4 database threads times the prepare threshold (5):
    # some connection has prepared the append's statements before it is dropped.
    for seq in range(24):
        api_append(server, token, sid, 1, start=seq)
    for _ in range(3):
        assert [http(server, f"/api/v1/sessions/{sid}", headers=auth)[0] for _ in range(6)] == [200] * 6

    dropped = sorted(set(server_connections(database)) - ours)
    assert dropped, "the Daphne's pool keeps connections open"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [dropped])
    wait_for(lambda: not set(dropped) & set(server_connections(database)), "the connections were terminated")

    statuses = [http(server, f"/api/v1/sessions/{sid}", headers=auth)[0] for _ in range(20)]
    assert statuses == [200] * 20
    for seq in range(24, 30):
        api_append(server, token, sid, 1, start=seq)
    assert stored_seqs(sid) == list(range(30))
    assert "Traceback" not in server.log_path.read_text()


def test_a_request_that_cannot_reach_the_database_gets_a_503_with_retry_after(start_daphne, token, sid):
    """Works on either backend: the Daphne's DATABASE_URL names a PostgreSQL on a closed port."""
    nowhere = f"postgres://postgres@127.0.0.1:{free_port()}/turnlog_unreachable"
    server = start_daphne(DATABASE_URL=nowhere, TURNLOG_DB_POOL_TIMEOUT="1")
    auth = {"Authorization": f"Bearer {token}"}

    for method, path, body in [("GET", "/api/v1/sessions", None), ("POST", f"/api/v1/sessions/{sid}/events", {"events": [f.user()]})]:
        status, headers, text = http(server, path, method=method, body=body, headers=auth)
        assert status == 503, text
        assert headers["Content-Type"] == "application/json"
        assert headers["Retry-After"] == "5"
        answer = json.loads(text)
        assert answer["error"] == "database_unavailable" and answer["detail"]

    status, headers, text = http(server, "/", headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}=some-session"})
    assert status == 503
    assert headers["Content-Type"].startswith("text/plain") and headers["Retry-After"] == "5"
    assert "database" in text

    # A stream cannot authenticate either: closed with 4503 (reconnect later with ?after=).
    with json_stream(server, token, sid) as stream:
        with pytest.raises(ConnectionClosed) as closed:
            stream.recv(timeout=WAIT)
    assert closed.value.rcvd.code == 4503
    # Nor can a browser's socket read its login session: 4503 too, and the page reconnects later.
    with browser_socket(server, "some-session", f"/ws/sessions/{sid}/live") as page:
        with pytest.raises(ConnectionClosed) as closed:
            page.recv(timeout=WAIT)
    assert closed.value.rcvd.code == 4503
    assert "Traceback" not in server.log_path.read_text(), server.log_path.read_text()


UNREACHABLE = {
    # A PostgreSQL on a closed port, its pool's timeout left at the default 20 s.
    "postgresql": lambda tmp_path: f"postgres://postgres@127.0.0.1:{free_port()}/turnlog_unreachable",
    # A SQLite file that cannot be opened (its directory is missing; root reads a chmod 000 file anyway).
    "sqlite": lambda tmp_path: f"sqlite:///{tmp_path / 'missing' / 'turnlog.sqlite3'}",
}


@pytest.mark.parametrize("database", UNREACHABLE)
def test_every_socket_opened_while_the_database_is_unreachable_closes_4503_at_once(start_daphne, token, session_cookie, sid, tmp_path, database):
    """Not after the pool's 20 s (Daphne drops a handshake not accepted within 5 s), not a refused handshake."""
    server = start_daphne(DATABASE_URL=UNREACHABLE[database](tmp_path))
    sockets = {
        "json stream (token)": lambda: json_stream(server, token, sid),
        "json stream (login)": lambda: browser_socket(server, session_cookie, f"/ws/v1/sessions/{sid}/events"),
        "session page": lambda: browser_socket(server, session_cookie, f"/ws/sessions/{sid}/live?after=0"),
        "session list": lambda: browser_socket(server, session_cookie, "/ws/sessions/live"),
    }
    for name, open_socket in sockets.items():
        started = time.monotonic()
        with open_socket() as ws:
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=WAIT)
        assert closed.value.rcvd.code == 4503, name
        # Well inside the pool's timeout: the socket was not left waiting for it (not a performance bound).
        assert time.monotonic() - started < 15, name
    assert "Traceback" not in server.log_path.read_text(), server.log_path.read_text()


def test_single_appends_of_eight_clients_at_once_mixed_with_refusals_each_read_back_or_store_nothing(start_daphne, token):
    """Through a real Daphne: on SQLite the writer commits the appends queued together in one transaction,
    so refusals and stored batches share it. Every 201 reads back in order; every refusal stores nothing."""
    import random
    import threading
    import uuid

    server = start_daphne()
    auth = {"Authorization": f"Bearer {token}"}
    sessions = [f"mix-{i}-{uuid.uuid4().hex[:8]}" for i in range(8)]
    for session_id in sessions:
        services.create_session(session_id=session_id)
    refusals = [
        ({"events": []}, 422),
        ({"events": [{"type": "bogus"}]}, 422),
        ({"events": [f.user("\ud800")]}, 422),
        ({"events": [f.user("late")], "expected_seq": 10**6}, 409),
    ]
    stored: dict[str, list[str]] = {session_id: [] for session_id in sessions}
    problems: list[str] = []

    def client(session_id: str, seed: int) -> None:
        rng = random.Random(seed)
        for i in range(40):
            if rng.random() < 0.3:
                body, expected = rng.choice(refusals)
                status, _, text = http(server, f"/api/v1/sessions/{session_id}/events", method="POST", body=body, headers=auth)
                if status != expected or "error" not in json.loads(text):
                    problems.append(f"{session_id}: {status} {text[:200]} for {body}")
            else:
                content = f"<b>{i}</b>\u2028{seed}"
                status, _, text = http(server, f"/api/v1/sessions/{session_id}/events", method="POST", body={"events": [f.user(content)]}, headers=auth)
                n = len(stored[session_id])
                if status != 201 or json.loads(text) != {"first_seq": n, "next_seq": n + 1}:
                    problems.append(f"{session_id}: {status} {text[:200]}, expected seq {n}")
                stored[session_id].append(content)

    threads = [threading.Thread(target=client, args=(session_id, seed)) for seed, session_id in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not problems, problems
    for session_id in sessions:
        status, _, text = http(server, f"/api/v1/sessions/{session_id}/events?limit=5000", headers=auth)
        assert [e["data"]["content"] for e in json.loads(text)["events"]] == stored[session_id]
        assert list(Event.objects.filter(session_id=session_id).order_by("seq").values_list("seq", flat=True)) == list(range(len(stored[session_id])))
    assert "Traceback" not in server.log_path.read_text()
