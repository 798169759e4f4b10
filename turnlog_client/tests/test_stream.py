"""The websocket stream against a live Daphne: backlog then live events, resumption after the server goes away,
and the final refusals (4401, 4404) that end it."""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time

import pytest

from sessions_app import services
from sessions_app.models import ApiToken, hash_token
from turnlog_client import AsyncClient, Client, StreamClosed


pytestmark = pytest.mark.django_db(transaction=True)  # the server reads what the test commits


def note(i: int) -> dict:
    return {"type": "user_message", "data": {"content": f"note {i}"}}


class Follower:
    """Client.stream in a thread: what it yields goes to a queue, how it ends to `ended`."""

    def __init__(self, api: Client, session_id: str, after: int | None = None):
        self.events: queue.Queue = queue.Queue()
        self.ended: queue.Queue = queue.Queue()
        self.stream = api.stream(session_id, after=after, open_timeout=2)
        threading.Thread(target=self.run, daemon=True).start()

    def run(self) -> None:
        try:
            for event in self.stream:
                self.events.put(event)
        except BaseException as error:
            self.ended.put(error)

    def take(self, n: int, timeout: float = 20) -> list[int]:
        return [self.events.get(timeout=timeout)["seq"] for _ in range(n)]


def test_the_stream_sends_the_backlog_then_each_new_event(client):
    client.create_session("s1")
    client.append("s1", [note(i) for i in range(3)])
    follower = Follower(client, "s1", after=0)
    assert follower.take(2) == [1, 2]
    client.append("s1", [note(3), note(4)])
    assert follower.take(2) == [3, 4]
    assert follower.events.empty()


def test_a_stream_after_minus_one_starts_from_the_first_event(client):
    client.create_session("from-the-start")
    client.append("from-the-start", [note(i) for i in range(3)])
    follower = Follower(client, "from-the-start", after=-1)
    assert follower.take(3) == [0, 1, 2]
    client.append("from-the-start", [note(3)])
    assert follower.take(1) == [3]
    assert follower.ended.empty()


def test_a_stream_after_below_minus_one_is_refused_4400(client):
    client.create_session("below-minus-one")
    with pytest.raises(StreamClosed) as closed:
        next(client.stream("below-minus-one", after=-2))
    assert closed.value.code == 4400


def test_the_stream_resumes_from_its_last_seq_after_the_server_goes_away(own_server, token):
    with Client(own_server.url, token) as api:
        api.create_session("s1")
        api.append("s1", [note(i) for i in range(3)])
        follower = Follower(api, "s1")
        assert follower.take(3) == [0, 1, 2]
        own_server.stop()  # the server closes every socket
        time.sleep(0.5)  # the stream tries to come back while nothing listens
        own_server.start()
        api.append("s1", [note(3)])
        api.append("s1", [note(4), note(5)])
        assert follower.take(3) == [3, 4, 5]
        time.sleep(0.3)
        assert follower.events.empty() and follower.ended.empty()  # nothing twice, and still following


def test_an_unknown_session_ends_the_stream_with_4404(client):
    with pytest.raises(StreamClosed) as closed:
        next(client.stream("nobody-here"))
    assert closed.value.code == 4404


def test_a_bad_token_ends_the_stream_with_4401(server):
    with Client(server.url, "tl_unknown") as stranger, pytest.raises(StreamClosed) as closed:
        next(stranger.stream("s1"))
    assert closed.value.code == 4401  # (Daphne 4.2 sends no close reason)


def test_frames_up_to_max_frame_bytes_arrive_and_a_larger_one_ends_the_stream_with_1009(client, server, token):
    client.create_session("large-frames")
    client.append("large-frames", [note(0), {"type": "user_message", "data": {"content": "x" * 2000}}])
    assert [event["seq"] for event in itertools.islice(client.stream("large-frames", max_frame_bytes=3000), 2)] == [0, 1]
    with pytest.raises(StreamClosed) as closed:
        list(itertools.islice(client.stream("large-frames", max_frame_bytes=1000), 2))
    assert closed.value.code == 1009 and "max_frame_bytes (1000)" in closed.value.reason

    async def read_async() -> list[int]:
        async with AsyncClient(server.url, token) as api:
            events = [event["seq"] async for event in take(api.stream("large-frames", max_frame_bytes=None), 2)]
            with pytest.raises(StreamClosed) as closed_async:
                await anext(aiter(api.stream("large-frames", after=0, max_frame_bytes=1000)))
            assert closed_async.value.code == 1009
            return events

    assert asyncio.run(read_async()) == [0, 1]


async def take(stream, count: int):
    async for event in stream:
        yield event
        count -= 1
        if not count:
            await stream.aclose()
            return


def test_a_token_revoked_while_streaming_ends_the_stream(client, token):
    client.create_session("s1")
    client.append("s1", [note(0)])
    follower = Follower(client, "s1")
    assert follower.take(1) == [0]
    services.revoke_token(token=ApiToken.objects.get(token_sha256=hash_token(token)))
    ended = follower.ended.get(timeout=15)
    assert isinstance(ended, StreamClosed) and ended.code == 4401
