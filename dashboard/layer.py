"""The channel layers: Redis, made to ride out Redis outages; and the in-memory one, made cheaper.

`InMemoryChannelLayer` is channels' own, except that its expiry sweep (which
walks every channel and every group member) runs at most once per
`SWEEP_SECONDS` instead of on every receive and group_send: with one
channel per watched session (dashboard.hub), that sweep per message grew
with sessions x messages.

The Redis channel layer:

channels-redis raises on every call while Redis is unreachable. A consumer's
receive loop (channels' `await_many_dispatch`) then dies, and Daphne closes
the websocket with 1011; a connect's `group_add` fails the same way. Here
instead:

- `receive` waits and retries: the socket stays open and its stream is served
  by the database poll (dashboard.stream's watcher) meanwhile;
- `group_add` / `group_discard` record the process's memberships and never
  raise; when Redis is back (a restarted Redis has no groups at all) every
  membership is added again, so live delivery resumes;
- `group_send` is best effort, as the layer always is: a message Redis cannot
  take is dropped, and the streams read the gap from the database.

An outage is logged once when it starts and once when it ends, never per
call or per socket.
"""

from __future__ import annotations

import asyncio
import logging
import time

from channels.layers import InMemoryChannelLayer as ChannelsInMemoryChannelLayer
from channels_redis.core import RedisChannelLayer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)

UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)
# Seconds between two tries to reach Redis again during an outage (doubling up to the cap).
RETRY_FIRST, RETRY_CAP = 0.5, 5.0
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


class ResilientRedisChannelLayer(RedisChannelLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.memberships: set[tuple[str, str]] = set()  # (group, channel) this process joined
        self.down_since: float | None = None  # time.monotonic() of the outage's first failure
        self._recovery: asyncio.Lock | None = None
        self._next_try = 0.0  # time.monotonic() before which no socket tries again

    @property
    def reachable(self) -> bool:
        return self.down_since is None

    async def receive(self, channel):
        delay = RETRY_FIRST
        while True:
            if self.reachable:
                try:
                    return await super().receive(channel)
                except UNREACHABLE as error:
                    self._went_down(error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP)
            await self._try_recover()

    async def group_add(self, group, channel):
        self.memberships.add((group, channel))
        if self.reachable:
            try:
                await super().group_add(group, channel)
            except UNREACHABLE as error:
                self._went_down(error)

    async def group_discard(self, group, channel):
        self.memberships.discard((group, channel))
        if self.reachable:
            try:
                await super().group_discard(group, channel)
            except UNREACHABLE as error:  # the entry expires in Redis on its own (group_expiry)
                self._went_down(error)

    async def group_send(self, group, message):
        try:
            await super().group_send(group, message)
        except UNREACHABLE as error:
            self._went_down(error)

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
                while pending := self.memberships - joined:
                    for group, channel in pending:
                        await super().group_add(group, channel)
                    joined |= pending
            except UNREACHABLE:
                return
            outage, self.down_since = time.monotonic() - self.down_since, None
            logger.warning("Redis channel layer is back after %.0f s: %d group memberships joined again", outage, len(self.memberships))
