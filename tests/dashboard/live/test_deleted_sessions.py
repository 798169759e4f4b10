"""A session deleted while it is watched (sessions_app/services/retention): its page says so and closes 4410, its JSON streams
close 4410, reconnecting is refused 4404 as for any unknown session, and the session list drops its row; nothing
fails on the server."""

from __future__ import annotations

import asyncio
import logging

import pytest
from channels.db import database_sync_to_async

from dashboard.live import sessions as live
from dashboard.live import stream
from dashboard.live.consumers import CLOSE_GONE
from sessions_app.services import retention
from tests.dashboard.conftest import QUIET, WAIT
from tests.dashboard.live.test_consumers import append, create, open_socket
from tests.dashboard.live.test_sessions import browser_socket, closed_with

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("fresh_layer")]

delete = database_sync_to_async(lambda session_id: retention.delete_session(session_id=session_id))


@pytest.fixture
def quick_poll(monkeypatch):
    monkeypatch.setattr(stream, "POLL_INTERVAL", 0.1)
    monkeypatch.setattr(stream, "_watcher", None)


async def test_viewers_of_a_deleted_session_are_told_it_is_gone_and_cannot_come_back(sid, session_cookie, token, quick_poll, caplog):
    await create(sid, 2)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=1", session_cookie)
    json_stream = await open_socket(sid, token=token, query="after=1")
    assert await page.receive_nothing(QUIET) and await json_stream.receive_nothing(QUIET)
    with caplog.at_level(logging.WARNING):
        await delete(sid)
        assert await page.receive_from(timeout=WAIT) == live.GONE_FRAME
        assert await closed_with(page) == CLOSE_GONE == 4410
        message = await json_stream.receive_output(timeout=WAIT)
        assert (message["type"], message["code"]) == ("websocket.close", CLOSE_GONE)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text  # nothing failed, nothing logged
    for _ in range(50):  # the hub's entry stops watching once it told its sockets
        if not stream.watched_sessions():
            break
        await asyncio.sleep(0.02)
    assert stream.watched_sessions() == set()
    # A reload (or a client's reconnect) finds no such session.
    assert await closed_with(await browser_socket(f"/ws/sessions/{sid}/live?after=1", session_cookie)) == 4404


async def test_the_session_list_drops_the_row_of_a_deleted_session(sid, session_cookie):
    await create(sid, 1)
    await create(f"{sid}-kept", 1)
    listing = await browser_socket("/ws/sessions/live", session_cookie)
    # A change answered once the socket read the rows it shows (as test_sessions's list tests wait for).
    await append(f"{sid}-kept", 1)
    assert (await listing.receive_from(timeout=WAIT)).startswith(f'<tr id="session-{sid}-kept"')
    await delete(sid)
    assert await listing.receive_from(timeout=WAIT) == f'<tr id="session-{sid}" hx-swap-oob="delete"></tr>'
    await append(f"{sid}-kept", 1)  # the list goes on
    frame = await listing.receive_from(timeout=WAIT)
    assert frame.startswith(f'<tr id="session-{sid}-kept"') and 'hx-swap-oob="true"' in frame


async def test_the_fleet_page_drops_the_calls_of_a_deleted_session(sid, session_cookie, monkeypatch, settings):
    from tests.dashboard.live.test_calls import CRASH, store

    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    settings.TURNLOG_STALL_SECONDS = 0
    await store(sid, CRASH)
    await store(f"{sid}-kept", CRASH)
    listing = await browser_socket("/ws/calls/live", session_cookie)
    assert await listing.receive_nothing(QUIET * 2)  # both listed by the page already
    await delete(sid)
    assert await listing.receive_from(timeout=WAIT) == f'<tr id="call-{sid}--p1" hx-swap-oob="delete"></tr>'
    assert await listing.receive_nothing(QUIET * 2)  # once, and the other call stays
