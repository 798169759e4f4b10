"""Each committed event is published once, after commit (session-log.md section 7).

A commit's events travel together in one `session_events` layer message.
"""

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from sessions_app import services
from sessions_app.lib import errors
from sessions_app.log.events import validate_batch
from sessions_app.models import Event
from sessions_app.services import publishing
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db(transaction=True)


class Subscriber:
    """A channel subscribed to a session's group, read synchronously."""

    def __init__(self, session_id: str):
        self.layer = get_channel_layer()
        self.channel = async_to_sync(self.layer.new_channel)()
        async_to_sync(self.layer.group_add)(services.session_group(session_id), self.channel)

    def drain(self) -> list[dict]:
        async def read_all():
            import asyncio

            received = []
            while True:
                try:
                    received.append(await asyncio.wait_for(self.layer.receive(self.channel), 0.3))
                except asyncio.TimeoutError:
                    return received

        return async_to_sync(read_all)()


def test_each_committed_event_is_published_once_in_order():
    services.create_session(session_id="pub")
    subscriber = Subscriber("pub")
    services.append_events(session_id="pub", events=validate_batch([f.user("a"), f.event("turn_start", turn=1)]))
    services.append_events(session_id="pub", events=validate_batch([f.user("b")]))
    messages = subscriber.drain()
    assert [m["type"] for m in messages] == ["session_events"] * 2  # one message per commit
    events = [event for m in messages for event in m["events"]]
    assert [e["seq"] for e in events] == [0, 1, 2]
    assert events[1]["type"] == "turn_start"
    assert events[2]["data"]["content"] == "b"


def test_a_refused_append_publishes_nothing():
    services.create_session(session_id="pub")
    subscriber = Subscriber("pub")
    services.append_events(session_id="pub", events=validate_batch([f.user()]))
    with pytest.raises(errors.SeqConflict):
        services.append_events(session_id="pub", events=validate_batch([f.user()]), expected_seq=0)
    assert [e["seq"] for m in subscriber.drain() for e in m["events"]] == [0]


def test_a_failing_publish_never_breaks_the_append(monkeypatch):
    services.create_session(session_id="pub")

    async def broken_send(*args, **kwargs):
        raise ConnectionError("layer is down")

    monkeypatch.setattr(get_channel_layer(), "group_send", broken_send)
    result = services.append_events(session_id="pub", events=validate_batch([f.user()]))
    assert result.first_seq == 0
    assert Event.objects.filter(session_id="pub").count() == 1


def test_a_replayed_idempotent_request_publishes_nothing_new():
    services.create_session(session_id="pub")
    subscriber = Subscriber("pub")
    for _ in range(2):
        services.append_events(session_id="pub", events=validate_batch([f.user()]), idempotency_key="k", request_sha256="h")
    assert [e["seq"] for m in subscriber.drain() for e in m["events"]] == [0]


def test_the_session_list_hears_once_per_commit():
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(services.SESSIONS_GROUP, channel)
    listener = Subscriber.__new__(Subscriber)
    listener.layer, listener.channel = layer, channel
    services.create_session(session_id="pub")
    services.append_events(session_id="pub", events=validate_batch([f.user(), f.user()]))
    assert [(m["type"], m["session_id"]) for m in listener.drain()] == [("session_changed", "pub")] * 2


@pytest.mark.asyncio
async def test_from_a_database_thread_each_commit_is_published_once_in_order_by_the_event_loop(settings):
    """The async views' appends post their messages to the server's loop instead of waiting on it."""
    import asyncio

    from asgiref.sync import sync_to_async

    from sessions_app.lib import db_threads

    settings.TURNLOG_DB_THREADS = 2
    db_threads.stop()
    try:
        await sync_to_async(services.create_session)(session_id="posted")
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(services.session_group("posted"), channel)
        waited_on_the_loop = []
        real_async_to_sync = publishing.async_to_sync
        publishing.async_to_sync = lambda fn: waited_on_the_loop.append(fn) or real_async_to_sync(fn)
        try:
            for i in range(20):
                await db_threads.run(services.append_events, session_id="posted", events=validate_batch([f.user(str(i))]))
        finally:
            publishing.async_to_sync = real_async_to_sync
        received = []
        while len(received) < 20:
            received.append(await asyncio.wait_for(layer.receive(channel), 5))
        assert [e["seq"] for m in received for e in m["events"]] == list(range(20))
        assert [e["data"]["content"] for m in received for e in m["events"]] == [str(i) for i in range(20)]
        assert waited_on_the_loop == []
        with pytest.raises(asyncio.TimeoutError):  # once each
            await asyncio.wait_for(layer.receive(channel), 0.5)
    finally:
        await sync_to_async(db_threads.stop)()
        from django.db import connections

        await sync_to_async(connections.close_all)()  # the sync thread's, which created the session


def test_a_publish_posted_to_a_loop_that_closed_is_logged_not_raised(monkeypatch, caplog):
    """A commit on a database thread while the server stops: the append stands, the publish is skipped."""
    import asyncio

    from sessions_app.lib import db_threads

    closed = asyncio.new_event_loop()
    closed.close()
    monkeypatch.setattr(db_threads, "caller_loop", lambda: closed)
    services.create_session(session_id="stopping")
    result = services.append_events(session_id="stopping", events=validate_batch([f.user("a")]))
    assert [e.seq for e in result.events] == [0]
    assert Event.objects.filter(session_id="stopping").count() == 1
    assert "the event loop is closed" in caplog.text


@pytest.mark.asyncio
async def test_from_database_threads_a_group_slow_to_publish_holds_up_no_other(settings, monkeypatch):
    import asyncio

    from asgiref.sync import sync_to_async

    from sessions_app.lib import db_threads

    settings.TURNLOG_DB_THREADS = 2
    db_threads.stop()
    layer = get_channel_layer()
    release = asyncio.Event()
    real_group_send = layer.group_send

    async def group_send(group, message):
        if group == services.session_group("slow"):
            await release.wait()  # a Redis that takes its time with this one group
        await real_group_send(group, message)

    try:
        for session_id in ("slow", "quick"):
            await sync_to_async(services.create_session)(session_id=session_id)
        channel = await layer.new_channel()
        await layer.group_add(services.session_group("quick"), channel)
        monkeypatch.setattr(layer, "group_send", group_send)
        for session_id in ("slow", "quick"):
            await db_threads.run(services.append_events, session_id=session_id, events=validate_batch([f.user("x")]))
        message = await asyncio.wait_for(layer.receive(channel), 5)
        assert message["session_id"] == "quick"
    finally:
        release.set()
        await sync_to_async(db_threads.stop)()
        from django.db import connections

        await sync_to_async(connections.close_all)()
