"""The JSON event stream /ws/v1/sessions/{id}/events (api.md, "Websocket streams").

Driven through the real ASGI application (routing, cookie/session/auth
middleware) with channels' WebsocketCommunicator. Appends go through
services.append_events, which publishes on commit through the configured
channel layer (in-memory, or Redis when REDIS_URL is set).

The watcher's poll is slowed to an hour by default so that a test of the
layer path cannot pass thanks to the poll; the poll's own tests shorten it.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import OperationalError

from dashboard.asgi import application
from dashboard.live import stream
from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from sessions_app.models import AuditEntry, Event, Role
# Aliased: a test below names its own switch `publishing`.
from sessions_app.services import publishing as services_publishing
from tests.access import member, token_for
from tests.dashboard.conftest import QUIET, WAIT, down_for, opened
from tests.sessions_app import factories as f

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]



# Helpers ---------------------------------------------------------------



@database_sync_to_async
def create(session_id: str, count: int = 0) -> None:
    services.create_session(session_id=session_id)
    if count:
        append_sync(session_id, count)


def append_sync(session_id: str, count: int, start: int | None = None) -> None:
    start = Event.objects.filter(session_id=session_id).count() if start is None else start
    services.append_events(session_id=session_id, events=validate_batch([f.user(f"m{start + i}") for i in range(count)]))


append = database_sync_to_async(append_sync)


@database_sync_to_async
def stored_wire(session_id: str) -> list[dict]:
    from sessions_app.log.events import event_to_wire

    session = selectors.get_session(session_id)
    return [event_to_wire(e) for e in selectors.events_since(session)]


def socket(session_id: str, *, token: str | None = None, cookie: str | None = None, origin: str | None = None, query: str = "") -> WebsocketCommunicator:
    headers = [(b"host", b"testserver")]  # the server the socket is opened on, as a browser says
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if cookie is not None:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    path = f"/ws/v1/sessions/{session_id}/events" + (f"?{query}" if query else "")
    communicator = WebsocketCommunicator(application, path, headers=headers)
    opened.append(communicator)
    return communicator


async def open_socket(*args, **kwargs) -> WebsocketCommunicator:
    communicator = socket(*args, **kwargs)
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected
    return communicator


async def frames(communicator: WebsocketCommunicator, count: int) -> list[dict]:
    received = []
    for _ in range(count):
        frame = await communicator.receive_json_from(timeout=WAIT)
        assert frame["type"] == "session_event"
        assert set(frame) == {"type", "event"}
        received.append(frame["event"])
    return received


async def seqs(communicator: WebsocketCommunicator, count: int) -> list[int]:
    return [e["seq"] for e in await frames(communicator, count)]


async def closed_with(communicator: WebsocketCommunicator) -> int:
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected, "the socket is accepted first, then closed with a code"
    message = await communicator.receive_output(timeout=WAIT)
    assert message["type"] == "websocket.close"
    assert await communicator.receive_nothing(0.05), "nothing follows the close"
    await communicator.disconnect(code=message.get("code"), timeout=WAIT)  # as the server does after the close
    return message.get("code")


async def close(communicator: WebsocketCommunicator) -> None:
    await communicator.disconnect(timeout=WAIT)


# Backlog ---------------------------------------------------------------


async def test_without_after_every_stored_event_arrives_as_stored(sid, token):
    await create(sid, 5)
    ws = await open_socket(sid, token=token)
    assert await frames(ws, 5) == await stored_wire(sid)
    assert await ws.receive_nothing(QUIET)
    await close(ws)


@pytest.mark.parametrize(
    ("after", "expected"), [("2", [3, 4]), ("0", [1, 2, 3, 4]), ("-1", [0, 1, 2, 3, 4]), ("4", []), ("99", []), (str(10**30), [])]
)
async def test_after_n_sends_only_the_events_after_n(sid, token, after, expected):
    await create(sid, 5)
    ws = await open_socket(sid, token=token, query=f"after={after}")
    assert await seqs(ws, len(expected)) == expected
    assert await ws.receive_nothing(QUIET)
    await close(ws)


async def test_a_backlog_of_several_pages_arrives_complete_in_order_and_paged(sid, token, monkeypatch):
    total = 2 * stream.PAGE_SIZE + 201
    await create(sid, total)
    limits = []
    real_events_since = selectors.events_since

    def spy(session, *, since=0, limit=None):
        limits.append(limit)
        return real_events_since(session, since=since, limit=limit)

    monkeypatch.setattr(selectors, "events_since", spy)
    ws = await open_socket(sid, token=token)
    received = await frames(ws, total)
    assert [e["seq"] for e in received] == list(range(total))
    assert [e["data"]["content"] for e in received] == [f"m{i}" for i in range(total)]
    assert await ws.receive_nothing(QUIET)
    assert len(limits) >= 3 and all(limit is not None and limit <= stream.PAGE_SIZE for limit in limits)
    await close(ws)


# Live ------------------------------------------------------------------


async def test_live_events_arrive_exactly_once_in_order_and_as_stored(sid, token):
    await create(sid, 2)
    ws = await open_socket(sid, token=token)
    assert await seqs(ws, 2) == [0, 1]
    await append(sid, 3)
    await append(sid, 1)
    live = await frames(ws, 4)
    assert [e["seq"] for e in live] == [2, 3, 4, 5]
    assert await ws.receive_nothing(QUIET)
    # A live frame is the same event the database (and a new socket's backlog) holds.
    assert live == (await stored_wire(sid))[2:]
    await append(sid, 1)
    assert await seqs(ws, 1) == [6]
    assert await ws.receive_nothing(QUIET)
    await close(ws)


async def test_two_sockets_on_one_session_each_get_every_event_once(sid, token):
    await create(sid)
    first = await open_socket(sid, token=token)
    second = await open_socket(sid, token=token, query="after=0")
    await append(sid, 3)
    assert await seqs(first, 3) == [0, 1, 2]
    assert await seqs(second, 2) == [1, 2]
    assert await first.receive_nothing(QUIET) and await second.receive_nothing(QUIET)
    await close(first)
    await close(second)


@pytest.mark.parametrize("append_during_read", ["before", "after"])
async def test_an_event_committed_while_the_backlog_is_read_arrives_once(sid, token, monkeypatch, append_during_read):
    """The consumer joins the group before the backlog: an event committed just
    after the backlog's read only arrives through the layer (the poll is off);
    one committed just before it is in the backlog and its layer copy is dropped."""
    await create(sid, 3)
    real_events_since = selectors.events_since
    calls = []

    def events_since(session, *, since=0, limit=None):
        calls.append(since)
        if len(calls) > 1:
            return real_events_since(session, since=since, limit=limit)
        if append_during_read == "before":
            append_sync(sid, 1)
            return real_events_since(session, since=since, limit=limit)
        page = real_events_since(session, since=since, limit=limit)
        append_sync(sid, 1)
        return page

    monkeypatch.setattr(selectors, "events_since", events_since)
    ws = await open_socket(sid, token=token)
    assert await seqs(ws, 4) == [0, 1, 2, 3]
    assert await ws.receive_nothing(QUIET)
    await close(ws)


async def test_appends_racing_a_paged_backlog_arrive_exactly_once_in_order(sid, token, monkeypatch):
    monkeypatch.setattr(stream, "PAGE_SIZE", 7)
    await create(sid, 60)
    ws = await open_socket(sid, token=token)

    async def writer():
        for _ in range(40):
            await append(sid, 1)
            await asyncio.sleep(0)

    writing = asyncio.create_task(writer())
    received = await seqs(ws, 100)
    await writing
    assert received == list(range(100))
    assert await ws.receive_nothing(QUIET)
    await close(ws)


# Repair from the database ------------------------------------------------


async def test_a_lost_layer_message_is_repaired_from_the_database_without_duplicates(sid, token, monkeypatch):
    real_publish = services_publishing.publish_events
    lost = {2}

    def lossy_publish(session_id, events):
        real_publish(session_id, [e for e in events if e.seq not in lost])

    monkeypatch.setattr(services_publishing, "publish_events", lossy_publish)
    await create(sid, 1)
    ws = await open_socket(sid, token=token)
    assert await seqs(ws, 1) == [0]  # the backlog is done: what follows is live
    await append(sid, 1)
    assert await seqs(ws, 1) == [1]
    await append(sid, 1)  # seq 2: never published, and the poll is off
    assert await ws.receive_nothing(QUIET)
    await append(sid, 2)  # seqs 3, 4: the layer message for 3 reveals the gap
    received = await frames(ws, 3)
    assert [e["seq"] for e in received] == [2, 3, 4]
    assert received == (await stored_wire(sid))[2:]
    assert await ws.receive_nothing(QUIET)
    await close(ws)


async def test_hand_crafted_layer_messages_the_database_decides(sid, token, monkeypatch):
    publishing = {"on": False}
    real_publish = services_publishing.publish_events
    monkeypatch.setattr(services_publishing, "publish_events", lambda s, e: real_publish(s, e) if publishing["on"] else None)
    await create(sid, 1)
    ws = await open_socket(sid, token=token)
    assert await seqs(ws, 1) == [0]  # the backlog is done
    await append(sid, 3)  # seqs 1-3, unpublished, and the poll is off
    assert await ws.receive_nothing(QUIET)
    layer = get_channel_layer()
    group = services.session_group(sid)
    forged = {"seq": 3, "type": "user_message", "time": "2020-01-01T00:00:00Z", "data": {"content": "forged"}}
    await layer.group_send(group, {"type": "session_events", "session_id": sid, "events": [forged]})
    received = await frames(ws, 3)
    assert received == (await stored_wire(sid))[1:]  # the gap 1-3 read from the database, not the forged copy
    # A duplicate, a message from the future the database does not hold yet,
    # another session's message and a malformed one: nothing is sent.
    await layer.group_send(group, {"type": "session_events", "session_id": sid, "events": [received[1]]})
    await layer.group_send(group, {"type": "session_events", "session_id": sid, "events": [{**forged, "seq": 10}]})
    await layer.group_send(group, {"type": "session_events", "session_id": "other", "events": [{**forged, "seq": 4}]})
    await layer.group_send(group, {"type": "session_events", "session_id": sid, "events": [{"seq": "4"}]})
    assert await ws.receive_nothing(QUIET)
    publishing["on"] = True
    await append(sid, 1)
    assert await frames(ws, 1) == (await stored_wire(sid))[4:]
    assert await ws.receive_nothing(QUIET)
    await close(ws)


async def test_writes_never_published_here_arrive_through_the_poll_exactly_once(sid, token, monkeypatch):
    """Another process with the in-memory layer: this process hears nothing."""
    monkeypatch.setattr(stream, "POLL_INTERVAL", 0.05)
    monkeypatch.setattr(services_publishing, "publish_events", lambda session_id, events: None)
    await create(sid, 2)
    ws = await open_socket(sid, token=token, query="after=0")
    assert await seqs(ws, 1) == [1]
    await append(sid, 3)
    await append(sid, 1)
    received = await frames(ws, 4)
    assert [e["seq"] for e in received] == [2, 3, 4, 5]
    assert received == (await stored_wire(sid))[2:]
    assert await ws.receive_nothing(QUIET)  # several polls later: no duplicate
    await close(ws)


# Authentication, origin, parameters --------------------------------------


async def test_without_credentials_the_socket_is_closed_4401(sid):
    await create(sid, 1)
    assert await closed_with(socket(sid)) == 4401


@pytest.mark.parametrize("header_token", ["tl_not-a-token", ""])
async def test_a_bad_token_is_closed_4401(sid, token, header_token):
    await create(sid, 1)
    assert await closed_with(socket(sid, token=header_token)) == 4401


async def test_a_token_of_an_inactive_user_is_closed_4401(sid, token, user):
    await create(sid, 1)
    user.is_active = False
    await database_sync_to_async(user.save)()
    assert await closed_with(socket(sid, token=token)) == 4401


async def test_an_unknown_session_is_closed_4404(token):
    assert await closed_with(socket("no-such-session", token=token)) == 4404


@database_sync_to_async
def create_in(project, session_id: str, count: int = 0) -> None:
    services.create_session(session_id=session_id, project=project)
    if count:
        append_sync(session_id, count)


@database_sync_to_async
def refusals(project) -> list[tuple[str, str]]:
    return list(AuditEntry.objects.filter(project=project, action=AuditEntry.ACCESS_DENIED).values_list("actor_name", "target"))


async def test_a_session_of_a_project_one_is_no_member_of_is_closed_4404_like_an_unknown_one(sid, token, session_cookie, team):
    await create_in(team, sid, 1)
    assert await closed_with(socket(sid, token=token)) == 4404
    assert await closed_with(socket(sid, cookie=session_cookie, origin="http://testserver")) == 4404
    assert await refusals(team) == [("viewer", sid)] * 2


async def test_a_token_streams_only_its_own_projects_sessions(sid, user, token, session_cookie, team):
    """The user reads both projects, and so does their login; a token of the default project reads only that one."""
    await database_sync_to_async(member)(user, Role.VIEWER, team)
    await create_in(team, sid, 1)
    assert await closed_with(socket(sid, token=token)) == 4404
    by_login = await open_socket(sid, cookie=session_cookie, origin="http://testserver")
    assert await seqs(by_login, 1) == [0]
    await close(by_login)
    team_token = await database_sync_to_async(token_for)(user, Role.VIEWER, team)
    by_team_token = await open_socket(sid, token=team_token)
    assert await seqs(by_team_token, 1) == [0]
    await close(by_team_token)


async def test_a_token_without_the_read_scope_is_closed_4404(sid, user):
    await create(sid, 1)
    appender = await database_sync_to_async(token_for)(user, scopes=["append"])
    assert await closed_with(socket(sid, token=appender)) == 4404


async def test_an_unknown_session_without_credentials_is_closed_4401():
    assert await closed_with(socket("no-such-session")) == 4401


@pytest.mark.parametrize("after", ["abc", "-2", "-0", "-01", "", "1.5", "-1.5", "+1", " 1", " -1", "1&after=2", "-1&after=-1"])
async def test_a_bad_after_is_closed_4400(sid, token, after):
    await create(sid, 1)
    assert await closed_with(socket(sid, token=token, query=f"after={after}")) == 4400


async def test_a_token_socket_needs_no_origin(sid, token):
    await create(sid, 1)
    ws = await open_socket(sid, token=token)
    assert await seqs(ws, 1) == [0]
    await close(ws)


async def test_a_login_cookie_socket_from_an_allowed_origin_is_served(sid, session_cookie):
    """Which origins are allowed: tests/dashboard/live/test_socket_origin.py."""
    await create(sid, 2)
    ws = await open_socket(sid, cookie=session_cookie, origin="http://testserver")
    assert await seqs(ws, 2) == [0, 1]
    await append(sid, 1)
    assert await seqs(ws, 1) == [2]
    await close(ws)


@pytest.mark.parametrize("origin", ["https://evil.example", "http://testserver.evil.example", "null", None])
async def test_a_login_cookie_socket_from_a_foreign_or_missing_origin_is_closed_4403(sid, session_cookie, origin):
    await create(sid, 1)
    assert await closed_with(socket(sid, cookie=session_cookie, origin=origin)) == 4403


async def test_a_bad_cookie_from_an_allowed_origin_is_closed_4401(sid):
    await create(sid, 1)
    assert await closed_with(socket(sid, cookie="not-a-session", origin="http://testserver")) == 4401


async def test_client_frames_are_ignored(sid, token):
    await create(sid, 1)
    ws = await open_socket(sid, token=token)
    await ws.send_to(text_data="not json")
    await ws.send_json_to({"after": 5})
    assert await seqs(ws, 1) == [0]
    await append(sid, 1)
    assert await seqs(ws, 1) == [1]
    await close(ws)


async def test_a_failing_stream_closes_the_socket_4500_so_the_client_reconnects(sid, token, monkeypatch):
    await create(sid, 1)

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(stream, "read_page", broken)
    assert await closed_with(socket(sid, token=token)) == 4500


async def test_a_stream_that_loses_the_database_stays_open_and_catches_up(sid, token, monkeypatch, caplog, fresh_outage):
    await create(sid, 2)
    monkeypatch.setattr(stream, "read_page", flaky := down_for(3, stream.read_page))
    ws = await open_socket(sid, token=token)
    assert await seqs(ws, 2) == [0, 1]
    assert len(flaky.failures) == 3
    await append(sid, 1)
    assert await seqs(ws, 1) == [2]
    assert await ws.receive_nothing(QUIET)
    outage_lines = [r.getMessage() for r in caplog.records if r.name == "dashboard.outage"]
    assert len(outage_lines) == 2 and "unreachable" in outage_lines[0] and "reachable again" in outage_lines[1]
    assert not [r for r in caplog.records if r.exc_info]
    await close(ws)


async def test_a_socket_opened_without_the_database_is_closed_4503(sid, token, monkeypatch, fresh_outage):
    await create(sid, 1)

    def down(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(stream, "readable_session", down)
    assert await closed_with(socket(sid, token=token)) == 4503


# Cleanup -----------------------------------------------------------------


async def test_closing_the_socket_stops_watching_and_leaves_the_group(sid, token):
    await create(sid, 1)
    ws = await open_socket(sid, token=token)
    assert await seqs(ws, 1) == [0]  # the stream runs (it is watched before its backlog)
    assert stream.watched_sessions() == {sid}
    await close(ws)
    assert stream.watched_sessions() == set()
    # The group is empty again: a publish reaches no channel (in-memory layer only).
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        assert not layer.groups.get(services.session_group(sid))


async def test_a_cancelled_application_leaves_no_stream_behind(sid, token):
    """The server may cancel an application without a disconnect (shutdown, timeouts)."""
    await create(sid, 1)
    ws = await open_socket(sid, token=token)
    assert await seqs(ws, 1) == [0]
    ws.future.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ws.future
    assert stream.watched_sessions() == set()
