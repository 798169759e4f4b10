"""dashboard.live.frames served: a page socket on a real Daphne follows a turn of 10,000 events in messages a browser takes.

A raw websocket client connects as the session page does (its login cookie, an allowed Origin, ?after=N). The
events are written through the API of one Daphne and the socket is served by another, the two joined by Redis
(PostgreSQL); on SQLite one Daphne does both.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request

import pytest
from django.conf import settings
from django.db import connection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests import dom
from tests.servers import DaphneServer, RedisServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

MESSAGE_BYTES = 64 * 1024  # the most a page's socket is sent in one message
CATCH_UP = 240  # s: the longest the socket may take to follow 9,998 events on a loaded machine
WAIT = 30  # s: the longest one frame may take
CURSOR = re.compile(r'id="live-cursor" data-last-seq="(\d+)"')


@pytest.fixture
def servers(transactional_db, tmp_path):
    """(the writes' server, the page's server): one Daphne on SQLite; two joined by Redis on PostgreSQL."""
    started, redis, env = [], None, {}
    if connection.vendor == "postgresql":
        env["REDIS_URL"] = os.environ.get("REDIS_URL") or ""
        if not env["REDIS_URL"]:
            redis = RedisServer(tmp_path / "redis.log").start()
            env["REDIS_URL"] = redis.url
    try:
        for number in range(2 if connection.vendor == "postgresql" else 1):
            started.append(DaphneServer(connection.settings_dict, tmp_path / f"daphne-{number}.log", **env).start())
        yield started[0], started[-1]
    finally:
        for server in started:
            server.stop()
        if redis is not None:
            redis.kill()


def api_append(server: DaphneServer, token: str, session_id: str, events: list[tuple[str, dict]]) -> None:
    body = json.dumps({"events": [{"type": t, "data": d} for t, d in events]}).encode()
    request = urllib.request.Request(
        f"{server.url}/api/v1/sessions/{session_id}/events", data=body, method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 201, response.read()


def page_html(server: DaphneServer, cookie: str, path: str) -> str:
    request = urllib.request.Request(f"{server.url}{path}", headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        return response.read().decode()


def messages_through(ws: ClientConnection, seq: int, timeout: float) -> list[str]:
    """The messages the socket receives up to the one whose cursor reaches `seq` (that one last)."""
    received = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            message = ws.recv(timeout=max(deadline - time.monotonic(), 0.01))
        except TimeoutError:
            shown = [int(m) for message in received for m in CURSOR.findall(message)]
            raise AssertionError(f"no frame through seq {seq} within {timeout} s (the last cursor: {shown[-1:]})") from None
        except ConnectionClosed as closed:
            raise AssertionError(f"the server closed the socket: {closed.rcvd}") from None
        received.append(message)
        cursors = [int(found) for found in CURSOR.findall(message)]
        if cursors and cursors[-1] >= seq:
            assert cursors[-1] == seq, f"the cursor went past seq {seq} to {cursors[-1]}"
            return received


def tool_steps(count: int) -> list[tuple[str, dict]]:
    events = []
    for n in range(count):
        cid, name = f"c{n}", "charge_card" if n % 4 == 0 else "lookup"
        events += [
            ("step_start", {"step": n}),
            ("assistant_message", {"content": "", "tool_calls": [{"id": cid, "name": name, "arguments": {"n": n}}]}),
            ("tool_call", {"id": cid, "name": name}),
            ("tool_result", {"tool_call_id": cid, "content": f"answer {n}"}),
            ("step_end", {"step": n, "outcome": "ok"}),
        ]  # fmt: skip
    return events


def test_the_10000th_event_of_a_turn_reaches_a_page_socket_in_messages_a_browser_takes(servers, user, token, session_cookie):
    """9,999 events of one open turn, then its 10,000th (the turn's end, which re-reads the turn of 250 pages
    whole): each frame arrives, every message under 64 KiB, and the page it updates reads as a reload."""
    writes, pages = servers
    sid = "ten-thousand"
    services.create_session(session_id=sid)
    services.append_events(session_id=sid, events=validate_batch([{"type": "turn_start", "data": {"turn": 1}}]))
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={session_cookie}", "Origin": pages.url}
    url = f"ws://127.0.0.1:{pages.port}/ws/sessions/{sid}/live?after=0"
    with connect(url, additional_headers=headers, open_timeout=WAIT, max_size=None) as ws:
        events = tool_steps(1999) + [("assistant_message", {"content": f"thinking {n}"}) for n in range(3)]  # seqs 1 to 9998
        for start in range(0, len(events), 2000):
            api_append(writes, token, sid, events[start : start + 2000])
        caught_up = messages_through(ws, 9998, CATCH_UP)
        sizes = [len(message.encode()) for message in caught_up]
        assert max(sizes) <= MESSAGE_BYTES, f"catching up, messages of {sorted(sizes)[-3:]} bytes"

        page = dom.parse(page_html(pages, session_cookie, f"/sessions/{sid}/"))
        assert page.by_id("live-cursor").attrs["data-last-seq"] == "9998"
        api_append(writes, token, sid, [("turn_end", {"turn": 1, "reason": "complete"})])
        last = messages_through(ws, 9999, WAIT)
        sizes = [len(message.encode()) for message in last]
        assert max(sizes) <= MESSAGE_BYTES, f"the 10,000th event's frame in messages of {sizes} bytes"
        assert 'data-last-seq="9999"' in last[-1]

    for message in last:  # as htmx applies them, then the ledger panel arranged as turnlog.js does
        assert dom.apply(page, message) == [], message[:300]
        dom.arrange_ledger(page, lambda path: page_html(pages, session_cookie, path))
    fresh = dom.parse(page_html(pages, session_cookie, f"/sessions/{sid}/"))
    for element_id in ("session-head", "session-tabs", "ledger-panel", "turn-0"):
        kept_html, fresh_html = dom.normalized(page.by_id(element_id)), dom.normalized(fresh.by_id(element_id))
        assert kept_html == fresh_html, f"{element_id}:\n" + dom.difference(kept_html, fresh_html)
