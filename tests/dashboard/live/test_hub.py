"""The per-process fan-out hub (dashboard.live.hub): one subscription per session, many sockets.

Real sockets through the ASGI application (channels' WebsocketCommunicator),
on whichever layer the settings choose: the in-memory one, or Redis when
REDIS_URL is set (with DATABASE_URL on PostgreSQL, as in production).
"""

from __future__ import annotations

import asyncio
import random
import re

import pytest
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.live import hub, stream
from sessions_app import services
from sessions_app.models import Session
from tests.dashboard.conftest import QUIET, WAIT
from tests.dashboard.live.test_consumers import append, close, create, frames, open_socket, stored_wire
from tests.dashboard.live.test_sessions import browser_socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("fresh_layer")]

CURSOR = re.compile(r'id="live-cursor" data-last-seq="(\d+)"')


async def drain_json(ws, received: list[dict], until: int) -> None:
    while not received or received[-1]["seq"] < until:
        received.extend(await frames(ws, 1))


async def test_sockets_joining_and_leaving_mid_stream_each_get_every_event_exactly_once(sid, token, session_cookie, slow_poll):
    """JSON and page sockets come and go while a writer appends; each gets exactly its seqs, in order, once."""
    await create(sid, 5)
    rng = random.Random(12)
    first = await open_socket(sid, token=token, query="after=1")
    received = {first: []}
    await drain_json(first, received[first], 4)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=4", session_cookie)
    page_cursor = 4
    afters = {first: 1}
    left = {}
    total = 5
    for round_ in range(12):
        await append(sid, rng.randint(1, 3))  # published: the live path through the hub
        total = await Session.objects.filter(pk=sid).values_list("event_count", flat=True).aget()
        if round_ % 3 == 0:  # a JSON socket joins mid-stream, from a cursor behind the head
            after = rng.randrange(total)
            ws = await open_socket(sid, token=token, query=f"after={after}")
            received[ws], afters[ws] = [], after
        if round_ % 4 == 3:  # the oldest one still open leaves mid-stream
            ws = next(w for w in received if w not in left)
            await drain_json(ws, received[ws], total - 1)
            await close(ws)
            left[ws] = total - 1
        await asyncio.sleep(rng.choice([0, 0.01, 0.05]))
    for ws in received:
        if ws not in left:
            await drain_json(ws, received[ws], total - 1)
            assert await ws.receive_nothing(QUIET)
            await close(ws)
            left[ws] = total - 1
    wire = await stored_wire(sid)
    assert len(received) == 5
    for ws, events in received.items():
        assert [e["seq"] for e in events] == list(range(afters[ws] + 1, left[ws] + 1)), "every event after the cursor, once, in order"
        assert events == wire[afters[ws] + 1 : left[ws] + 1]
    while page_cursor < total - 1:  # the page socket: cursors only move forward, by whole ranges
        shown = int(CURSOR.search(await page.receive_from(timeout=WAIT)).group(1))
        assert shown > page_cursor
        page_cursor = shown
    assert await page.receive_nothing(QUIET)
    await page.disconnect()
    assert hub.hub_sessions() == {} and stream.watched_sessions() == set()


async def test_one_entry_one_group_membership_per_session_whatever_the_sockets(sid, token, session_cookie, slow_poll):
    await create(sid, 2)
    sockets = [await open_socket(sid, token=token, query="after=0") for _ in range(5)]
    pages = [await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie) for _ in range(3)]
    for ws in sockets:
        assert [e["seq"] for e in await frames(ws, 1)] == [1]
    for page in pages:
        assert 'data-last-seq="1"' in await page.receive_from(timeout=WAIT)
    assert hub.hub_sessions() == {sid: 8}
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        assert len(layer.groups[services.session_group(sid)]) == 1
    await append(sid, 1)
    for ws in sockets:
        assert [e["seq"] for e in await frames(ws, 1)] == [2]
    for ws in sockets:
        await close(ws)
    assert hub.hub_sessions() == {sid: 3}
    for page in pages:
        assert 'data-last-seq="2"' in await page.receive_from(timeout=WAIT)
        await page.disconnect()
    assert hub.hub_sessions() == {}
    if isinstance(layer, InMemoryChannelLayer):
        assert not layer.groups.get(services.session_group(sid))


async def test_a_slow_socket_whose_runs_overflow_catches_up_from_the_database(sid, token, slow_poll, monkeypatch):
    monkeypatch.setattr(hub, "FOLLOWER_PENDING", 1)
    await create(sid, 1)
    slow = await open_socket(sid, token=token, query="after=0")
    other = await open_socket(sid, token=token, query="after=0")
    for _ in range(100):  # the socket is accepted before it subscribes
        if len(hub.followers_of(sid)) == 2:
            break
        await asyncio.sleep(0.02)
    follower = hub.followers_of(sid)[0]  # the slow socket's
    send = follower._send

    async def stuck_once(wires):
        follower._send = send
        await asyncio.sleep(0.5)  # the socket is busy while four runs arrive: three are dropped
        await send(wires)

    follower._send = stuck_once
    for _ in range(5):
        await append(sid, 1)
    wire = await stored_wire(sid)
    assert await frames(other, 5) == wire[1:6]
    got = await frames(slow, 5)
    assert got == wire[1:6]
    assert await slow.receive_nothing(QUIET) and await other.receive_nothing(0.05)
    await close(slow)
    await close(other)


async def test_runs_that_queue_while_a_page_socket_is_busy_go_out_as_one_frame(sid, session_cookie, slow_poll):
    """A busy socket gets the runs that queued meanwhile in one frame: every event once, in fewer frames."""
    await create(sid, 1)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)
    for _ in range(100):  # the socket is accepted before it subscribes
        if hub.followers_of(sid):
            break
        await asyncio.sleep(0.02)
    follower = hub.followers_of(sid)[0]
    send, sent_runs = follower._send, []

    async def busy_with_the_first(wires):
        sent_runs.append([w["seq"] for w in wires])
        if len(sent_runs) == 1:
            await asyncio.sleep(0.5)  # busy while the next four runs arrive
        await send(wires)

    follower._send = busy_with_the_first
    for _ in range(5):
        await append(sid, 1)
    cursors = []
    while not cursors or cursors[-1] < 5:
        found = CURSOR.search(await page.receive_from(timeout=WAIT))
        if found:
            cursors.append(int(found.group(1)))
    assert sent_runs == [[1], [2, 3, 4, 5]]
    assert cursors == [1, 5]
    assert await page.receive_nothing(QUIET)
    await page.disconnect()


async def test_the_count_poll_is_one_query_for_all_the_watched_sessions(token, monkeypatch):
    """500 watched sessions, one socket each: one count query per interval, not one per session or socket."""
    monkeypatch.setattr(stream, "POLL_INTERVAL", 3600)
    monkeypatch.setattr(stream, "_watcher", None)
    ids = [f"many-{i:03d}" for i in range(500)]

    def make():
        for sid in ids:
            services.create_session(session_id=sid)

    await asyncio.to_thread(make)
    sockets = [await open_socket(sid, token=token) for sid in ids]
    for _ in range(200):  # a socket is accepted before it subscribes
        if len(stream.watched_sessions()) == 500:
            break
        await asyncio.sleep(0.02)
    assert len(stream.watched_sessions()) == 500 and len(hub.hub_sessions()) == 500
    watched = stream.watched_sessions()

    def poll():
        with CaptureQueriesContext(connection) as queries:
            return stream.event_counts(watched), len(queries)

    counts, queries = await asyncio.to_thread(poll)
    assert len(counts) == 500 and queries == 1
    for ws in sockets:
        await close(ws)
    assert stream.watched_sessions() == set()


async def test_json_text_is_encoded_once_per_wire():
    wire = {"seq": 1, "type": "user_message", "time": "t", "data": {}}
    first = hub.json_text(wire)
    assert hub.json_text(wire) is first
    assert hub.json_text(dict(wire)) == first and hub.json_text(dict(wire)) is not first

