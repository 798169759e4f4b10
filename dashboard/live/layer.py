"""The channel layers: Redis, made to ride out Redis outages; and the in-memory one, made cheaper.

`InMemoryChannelLayer` is channels' own, except that its expiry sweep (which
walks every channel and every group member) runs at most once per
`SWEEP_SECONDS` instead of on every receive and group_send: with one
channel per watched session (dashboard.live.hub), that sweep per message grew
with sessions x messages.

The Redis channel layer:

channels-redis raises on every call while Redis is unreachable. A consumer's
receive loop (channels' `await_many_dispatch`) then dies, and Daphne closes
the websocket with 1011; a connect's `group_add` fails the same way. Here
instead:

- `receive` waits: one task per process reads Redis for all of its channels
  and retries, so the socket stays open and its stream is served by the
  database poll (dashboard.live.stream's watcher) meanwhile;
- `group_add` / `group_discard` record the process's memberships and never
  raise; when Redis is back (a restarted Redis has no groups at all) every
  membership is added again, so live delivery resumes;
- `group_send` is best effort, as the layer always is: a message Redis cannot
  take is dropped, and the streams read the gap from the database.

Members of a group in this same process get a group message straight into
their receive buffer, never through Redis. channels-redis costs three
sequential Redis round trips per message received (a cleanup script,
BZPOPMIN, the backup ZADD; then a ZPOPMIN that the next receive waits for)
plus the sender's push, all on the event loop. The Daphne that takes a
session's appends then heard of its own commits last: with 250 sessions
watched there and 100 commits a second, its viewers fell seconds behind
while the other Daphne's were at ~220 ms (docs/internals/live.md, *Local
delivery in the Redis layer*). That is why Redis is read by a task of its own rather than by whichever
receive holds channels-redis's receive lock: that one waits in BZPOPMIN and
would not see a message put in its buffer. A channel gets local delivery
from the loop that joined it to the group, always (whether or not anything
reads Redis at the time), so that the messages of one sender reach it in the
order sent: if local delivery began only once a reader ran, a message sent
after a receive started could overtake those sent before, still in Redis. A
send from another thread's loop (async_to_sync) goes through Redis, as before,
because an asyncio queue is not thread-safe.

An outage is logged once when it starts and once when it ends, never per
call or per socket.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import time

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer as ChannelsInMemoryChannelLayer
from channels_redis.core import RedisChannelLayer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sessions_app.lib import instruments

logger = logging.getLogger(__name__)

UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)
# The channels the current task's group_send delivered in this process (per task: sends interleave).
_delivered: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("delivered", default=frozenset())
# Seconds between two tries to reach Redis again during an outage (doubling up to the cap).
RETRY_FIRST, RETRY_CAP = 0.5, 5.0
# Seconds without any receiver after which the task reading Redis for the process stops.
PUMP_IDLE_STOP = 1.0
# Seconds between two expiry sweeps of the in-memory layer (messages expire after `expiry`, 60 s).
SWEEP_SECONDS = 1.0


class InMemoryChannelLayer(ChannelsInMemoryChannelLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._next_sweep = 0.0

    def _clean_expired(self):
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_SECONDS
            super()._clean_expired()

    async def group_send(self, group, message):
        """channels' group_send without a task per member and an as_completed over them (6% of a
        single append's CPU, mostly for groups nobody watches): each send only puts a copy in a queue."""
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        for channel in list(self.groups.get(group, ())):
            try:
                await self.send(channel, message)
            except ChannelFull:
                pass


class ResilientRedisChannelLayer(RedisChannelLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # group -> the channels of this process in it, each with the event loop that joined it (its receiver's)
        self.memberships: dict[str, dict[str, asyncio.AbstractEventLoop]] = collections.defaultdict(dict)
        self.down_since: float | None = None  # time.monotonic() of the outage's first failure
        self._recovery: asyncio.Lock | None = None
        self._next_try = 0.0  # time.monotonic() before which no socket tries again
        self._pumps: dict[str, asyncio.Task] = {}  # per process channel prefix (channels' "specific.<id>!")
        self._receivers: collections.Counter[str] = collections.Counter()  # receives waiting, per prefix

    @property
    def reachable(self) -> bool:
        return self.down_since is None

    async def receive(self, channel):
        if "!" not in channel:  # a channel shared across processes (none here): channels-redis's own
            return await super().receive(channel)
        process_channel = self.non_local_name(channel)
        self._receivers[process_channel] += 1
        self._pump(process_channel)
        queue = self.receive_buffer[channel]
        try:
            return await queue.get()
        finally:
            if queue.empty() and self.receive_buffer.get(channel) is queue:
                del self.receive_buffer[channel]
            self._receivers[process_channel] -= 1
            if not self._receivers[process_channel]:
                asyncio.get_running_loop().call_later(PUMP_IDLE_STOP, self._stop_idle_pump, process_channel)

    def _pump(self, process_channel: str) -> None:
        """Start the task that moves this process's messages from Redis into the receive buffers, unless it runs."""
        loop = asyncio.get_running_loop()
        pump = self._pumps.get(process_channel)
        if pump is not None and not pump.done() and not pump.cancelling():
            if pump.get_loop() is loop:
                return
            if not pump.get_loop().is_closed():
                raise RuntimeError("Two event loops are trying to receive() on one channel layer at once!")
        self._pumps[process_channel] = loop.create_task(self._pump_messages(process_channel), name=f"turnlog-layer-{process_channel}")

    async def close_pools(self):
        # The readers first: each holds a pooled connection in BZPOPMIN and would take its closing for an outage.
        pumps, self._pumps = list(self._pumps.values()), {}
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        await super().close_pools()

    def _stop_idle_pump(self, process_channel: str) -> None:
        if not self._receivers[process_channel] and (pump := self._pumps.pop(process_channel, None)) is not None:
            pump.cancel()  # safe inside receive_single: a message it took stays in Redis's backup queue

    async def _pump_messages(self, process_channel: str) -> None:
        """One receive from Redis at a time for every channel of the process, as channels-redis's receive
        does, but in a task of its own: a receiver waits on its buffer alone, so a message put there
        locally (group_send) reaches it at once."""
        delay = RETRY_FIRST
        while True:
            if self.reachable:
                try:
                    channels, message = await self.receive_single(process_channel)
                except UNREACHABLE as error:
                    self._went_down(error)
                except Exception:  # an unreadable message, say: the next one is read all the same
                    logger.exception("reading the channel layer failed")
                    await asyncio.sleep(RETRY_FIRST)
                    continue
                else:
                    for name in channels if isinstance(channels, list) else [channels]:
                        self.receive_buffer[name].put_nowait(message)
                    delay = RETRY_FIRST
                    continue
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP)
            await self._try_recover()

    async def group_add(self, group, channel):
        self.memberships[group][channel] = asyncio.get_running_loop()
        if self.reachable:
            try:
                await super().group_add(group, channel)
            except UNREACHABLE as error:
                self._went_down(error)

    async def group_discard(self, group, channel):
        if (members := self.memberships.get(group)) is not None:
            members.pop(channel, None)
            if not members:
                del self.memberships[group]
        if self.reachable:
            try:
                await super().group_discard(group, channel)
            except UNREACHABLE as error:  # the entry expires in Redis on its own (group_expiry)
                self._went_down(error)

    async def group_send(self, group, message):
        reset = _delivered.set(self._deliver_locally(group, message))
        try:
            await super().group_send(group, message)
        except UNREACHABLE as error:
            self._went_down(error)
            instruments.PUBLISH_FAILURES.labels(instruments.UNREACHABLE).inc()
        finally:
            _delivered.reset(reset)

    def _map_channel_keys_to_connection(self, channel_names, message):
        # The group's members in Redis, less those this send delivered itself.
        delivered = _delivered.get()
        return super()._map_channel_keys_to_connection([name for name in channel_names if name not in delivered], message)

    def _deliver_locally(self, group, message) -> frozenset[str]:
        """Put the message in the receive buffer of each member of the group that this loop joined; those channels."""
        loop = asyncio.get_running_loop()
        local = frozenset(channel for channel, joined_on in self.memberships.get(group, {}).items() if joined_on is loop)
        if local:
            # One copy for them all, as channels-redis hands one message read from Redis to every local member.
            received = self.deserialize(self.serialize(message))
            for channel in local:
                self.receive_buffer[channel].put_nowait(received)
        return local

    def _went_down(self, error: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            logger.warning("Redis channel layer unreachable (%s): live streams are served from the database poll until it is back", error)

    async def _try_recover(self) -> None:
        """Join every group again; the layer is back when Redis took them all.

        One try at a time and at most one every RETRY_FIRST seconds per
        process, however many sockets wait.
        """
        if self._recovery is None:
            self._recovery = asyncio.Lock()
        async with self._recovery:
            if self.reachable or time.monotonic() < self._next_try:  # another socket just tried
                return
            self._next_try = time.monotonic() + RETRY_FIRST
            joined: set[tuple[str, str]] = set()
            try:
                await self.connection(0).ping()
                # Sockets may join while this awaits: loop until none is left out.
                while pending := {(group, channel) for group, members in self.memberships.items() for channel in members} - joined:
                    for group, channel in pending:
                        await super().group_add(group, channel)
                    joined |= pending
            except UNREACHABLE:
                return
            outage, self.down_since = time.monotonic() - self.down_since, None
            logger.warning("Redis channel layer is back after %.0f s: %d group memberships joined again", outage, sum(map(len, self.memberships.values())))
