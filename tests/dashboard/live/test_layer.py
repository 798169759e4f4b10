"""The Redis channel layer (dashboard.live.layer): local delivery within a process, and the task that reads Redis.

Each test builds layers with the project's settings (settings.redis_channel_layer)
on a redis-server of its own (tests.servers.RedisServer, so that it can be
stopped). Two layers stand for two processes: each has its own client prefix,
so between them messages can only travel through Redis.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import async_to_sync

from dashboard.live import layer as layers
from dashboard.settings import redis_channel_layer

pytestmark = pytest.mark.asyncio

WAIT = 3  # the longest a message that must come may take
QUIET = 0.5  # how long "nothing more arrives" is watched for


def new_layer(url: str) -> layers.ResilientRedisChannelLayer:
    return layers.ResilientRedisChannelLayer(**redis_channel_layer(url)["CONFIG"])


class ReadFromRedis:
    """Counts the messages a layer took out of Redis (channels-redis's receive_single), per channel."""

    def __init__(self, layer: layers.ResilientRedisChannelLayer):
        self.channels: list[str] = []
        read = layer.receive_single

        async def counted(channel):
            names, message = await read(channel)
            self.channels.extend(names if isinstance(names, list) else [names])
            return names, message

        layer.receive_single = counted


async def receiving(layer, channel: str) -> asyncio.Task:
    task = asyncio.create_task(layer.receive(channel))
    await asyncio.sleep(0.05)  # the receive has started, and with it the task reading Redis
    return task


async def assert_nothing_more(layer, channel: str) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(layer.receive(channel), QUIET)


async def until(condition, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)


async def stop(*layers_):
    for each in layers_:
        await each.flush()  # and close_pools, which stops the reader first
        await asyncio.sleep(0.1)
        assert each._pumps == {}
        assert each.reachable  # closing its connections did not read as an outage


async def test_a_member_in_the_same_process_gets_the_message_without_redis_and_another_process_through_it(redis_server):
    here, there = new_layer(redis_server.url), new_layer(redis_server.url)
    read_here, read_there = ReadFromRedis(here), ReadFromRedis(there)
    local, remote = await here.new_channel(), await there.new_channel()
    await here.group_add("session.s", local)
    await there.group_add("session.s", remote)
    local_receive, remote_receive = await receiving(here, local), await receiving(there, remote)

    sent = {"type": "session_events", "session_id": "s", "events": [{"seq": 0, "data": {"text": "<b>hi</b>"}}]}
    await here.group_send("session.s", sent)

    assert await asyncio.wait_for(local_receive, WAIT) == sent
    assert await asyncio.wait_for(remote_receive, WAIT) == sent
    assert read_here.channels == []  # nothing for this process went through Redis
    assert read_there.channels == [remote]
    await assert_nothing_more(here, local)  # and no second copy followed through Redis
    await assert_nothing_more(there, remote)
    await stop(here, there)


async def test_each_receiver_gets_its_own_copy_of_what_was_sent(redis_server):
    here = new_layer(redis_server.url)
    channel = await here.new_channel()
    await here.group_add("session.s", channel)
    receive = await receiving(here, channel)
    sent = {"type": "session_events", "events": [{"seq": 0}]}
    await here.group_send("session.s", sent)
    sent["events"].append({"seq": 1})  # the sender's dict, changed after the send
    assert (await asyncio.wait_for(receive, WAIT))["events"] == [{"seq": 0}]
    await stop(here)


async def test_local_messages_arrive_in_the_order_sent_to_every_local_member(redis_server):
    here = new_layer(redis_server.url)
    first, second, outsider = await here.new_channel(), await here.new_channel(), await here.new_channel()
    for channel in (first, second):
        await here.group_add("session.s", channel)
    outsider_receive = await receiving(here, outsider)  # a channel of the process outside the group
    await receiving(here, first)  # receives, then is left waiting: the buffer keeps the rest
    for seq in range(20):
        await here.group_send("session.s", {"type": "session_events", "seq": seq})
    got_first = [(await asyncio.wait_for(here.receive(first), WAIT))["seq"] for _ in range(19)]
    got_second = [(await asyncio.wait_for(here.receive(second), WAIT))["seq"] for _ in range(20)]
    assert got_first == list(range(1, 20))
    assert got_second == list(range(20))
    assert not outsider_receive.done()
    outsider_receive.cancel()
    await stop(here)


async def test_a_member_still_gets_messages_while_redis_is_down_and_through_it_once_it_is_back(redis_server):
    here, there = new_layer(redis_server.url), new_layer(redis_server.url)
    local, remote = await here.new_channel(), await there.new_channel()
    await here.group_add("session.s", local)
    await there.group_add("session.s", remote)
    local_receive = await receiving(here, local)
    await receiving(there, remote)

    redis_server.kill()
    await here.group_send("session.s", {"type": "session_events", "seq": 0})
    assert (await asyncio.wait_for(local_receive, WAIT))["seq"] == 0  # the process's own sockets stay live
    assert not here.reachable

    redis_server.start()  # empty: no groups, until each layer's reader joins them again
    await until(lambda: here.reachable and there.reachable, layers.RETRY_CAP + WAIT)
    await there.group_send("session.s", {"type": "session_events", "seq": 1})
    assert (await asyncio.wait_for(here.receive(local), WAIT))["seq"] == 1
    await stop(here, there)


async def test_a_send_from_another_threads_loop_goes_through_redis_and_arrives(redis_server):
    here = new_layer(redis_server.url)
    read = ReadFromRedis(here)
    channel = await here.new_channel()
    await here.group_add("session.s", channel)
    receive = await receiving(here, channel)

    # As a management command or a sync view publishes: async_to_sync, a loop of its own in its own thread.
    sender = threading.Thread(target=async_to_sync(here.group_send), args=("session.s", {"type": "session_events", "seq": 7}))
    sender.start()
    await asyncio.to_thread(sender.join)
    assert (await asyncio.wait_for(receive, WAIT))["seq"] == 7
    assert read.channels == [channel]
    await stop(here)


async def test_the_reader_stops_when_nothing_receives_and_a_later_receive_gets_what_came_meanwhile(redis_server, monkeypatch):
    monkeypatch.setattr(layers, "PUMP_IDLE_STOP", 0.1)
    here, there = new_layer(redis_server.url), new_layer(redis_server.url)
    channel = await here.new_channel()
    await here.group_add("session.s", channel)
    first = await receiving(here, channel)
    await there.group_send("session.s", {"type": "session_events", "seq": 0})
    assert (await asyncio.wait_for(first, WAIT))["seq"] == 0
    await asyncio.sleep(0.3)
    assert here._pumps == {}  # nobody receives: nothing waits in Redis for this process

    await there.group_send("session.s", {"type": "session_events", "seq": 1})  # waits in Redis
    await here.group_send("session.s", {"type": "session_events", "seq": 2})  # no reader: still local
    assert sorted([(await asyncio.wait_for(here.receive(channel), WAIT))["seq"] for _ in range(2)]) == [1, 2]
    await assert_nothing_more(here, channel)
    await stop(here, there)


async def test_what_was_sent_before_anything_received_comes_first_once_a_receive_starts(redis_server):
    """A send made once a receive has started the reader must not overtake those made before it."""
    here = new_layer(redis_server.url)
    read = ReadFromRedis(here)
    channel = await here.new_channel()
    await here.group_add("session.s", channel)
    for seq in range(19):  # nothing receives yet
        await here.group_send("session.s", {"type": "session_events", "seq": seq})
    first = await receiving(here, channel)
    await here.group_send("session.s", {"type": "session_events", "seq": 19})
    got = [(await asyncio.wait_for(first, WAIT))["seq"]]
    got += [(await asyncio.wait_for(here.receive(channel), WAIT))["seq"] for _ in range(19)]
    assert got == list(range(20))
    assert read.channels == []
    await assert_nothing_more(here, channel)
    await stop(here)


async def test_a_receive_left_waiting_does_not_stop_the_reader(redis_server, monkeypatch):
    monkeypatch.setattr(layers, "PUMP_IDLE_STOP", 0.1)
    here, there = new_layer(redis_server.url), new_layer(redis_server.url)
    waiting, channel = await here.new_channel(), await here.new_channel()
    await here.group_add("session.s", channel)
    waiting_receive = await receiving(here, waiting)
    for seq in range(3):  # each receive of `channel` ends, while `waiting` still waits
        receive = await receiving(here, channel)
        await there.group_send("session.s", {"type": "session_events", "seq": seq})
        assert (await asyncio.wait_for(receive, WAIT))["seq"] == seq
        await asyncio.sleep(0.2)
    assert len(here._pumps) == 1 and not next(iter(here._pumps.values())).done()
    waiting_receive.cancel()
    await stop(here, there)


async def test_the_in_memory_layer_sends_a_group_each_its_own_copy_in_order_past_a_full_member():
    from dashboard.live.layer import InMemoryChannelLayer

    layer = InMemoryChannelLayer(capacity=2)
    members = [await layer.new_channel() for _ in range(3)]
    for channel in members:
        await layer.group_add("g", channel)
    await layer.send(members[0], {"type": "filler"})
    await layer.send(members[0], {"type": "filler"})  # full from now on
    await layer.group_send("nobody", {"type": "lost"})  # a group nobody joined: nothing, no error
    sent = {"type": "m", "payload": {"n": 1}}
    await layer.group_send("g", sent)
    await layer.group_send("g", {"type": "m", "payload": {"n": 2}})
    sent["payload"]["n"] = 99  # the sender's dict is its own: receivers got copies
    for channel in members[1:]:
        first, second = await layer.receive(channel), await layer.receive(channel)
        assert [first["payload"]["n"], second["payload"]["n"]] == [1, 2]
    got = [await layer.receive(members[0]) for _ in range(2)]
    assert [m["type"] for m in got] == ["filler", "filler"]
    assert await layer.group_send("g", {"type": "m"}) is None
    first = await layer.receive(members[1])
    first["type"] = "changed"  # and each receiver its own copy
    assert (await layer.receive(members[2]))["type"] == "m"
