"""Closing the streams of API tokens that stop authenticating.

A token is checked when its socket opens; a stream may then stay open for
days. Revoking a token, its expiry, or its owner's deactivation must also
end the streams it opened, within a few seconds (api.md, close code 4401).

Token-authenticated sockets `register` (their token's id and a callback
that closes them with 4401) and `unregister` when they end. One task per
process (per event loop), running only while something is registered,
asks the database every TURNLOG_CREDENTIAL_CHECK_SECONDS which of the
registered tokens are still usable, in one query for all of them, and
closes the sockets of the others. A database outage skips a round: a
socket is never closed because its token could not be checked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.conf import settings

from dashboard import stream
from dashboard.middleware import DATABASE_UNAVAILABLE
from sessions_app.models import ApiToken

logger = logging.getLogger(__name__)

CloseSocket = Callable[[], Awaitable[None]]


@dataclass(eq=False)  # compared by identity: two sockets of one token are two registrations
class Registration:
    token_id: int
    close: CloseSocket = field(repr=False)


def usable_token_ids(token_ids: list[int]) -> set[int]:
    return set(ApiToken.objects.usable().filter(pk__in=token_ids).values_list("pk", flat=True))


class _CredentialWatcher:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.sockets: dict[int, set[Registration]] = {}  # token id -> its open sockets
        self.task: asyncio.Task | None = None

    def add(self, registration: Registration) -> None:
        self.sockets.setdefault(registration.token_id, set()).add(registration)
        if self.task is None:
            self.task = self.loop.create_task(self._run(), name="turnlog-credential-watcher")

    def discard(self, registration: Registration) -> None:
        registered = self.sockets.get(registration.token_id)
        if registered is not None:
            registered.discard(registration)
            if not registered:
                del self.sockets[registration.token_id]

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done() and not self.loop.is_closed()

    async def _run(self) -> None:
        while self.sockets:
            # Read at every round, so tests (and a changed setting) need no restart.
            await asyncio.sleep(settings.TURNLOG_CREDENTIAL_CHECK_SECONDS)
            if not self.sockets:
                return
            asked = list(self.sockets)
            try:
                usable = await database_sync_to_async(usable_token_ids)(asked)
            except DATABASE_UNAVAILABLE as error:
                stream.database_outage.failed(error)
                continue
            except Exception:
                logger.exception("checking the %d tokens of open streams failed", len(asked))
                continue
            stream.database_outage.reached()
            # Only tokens that were asked about: one registered during the query is checked next round.
            lost = [token_id for token_id in asked if token_id not in usable and token_id in self.sockets]
            closing = [registration for token_id in lost for registration in self.sockets.pop(token_id)]
            if closing:
                # Shielded: the last socket going away cancels this task, which must not cut a close short.
                await asyncio.shield(self._close(closing))

    @staticmethod
    async def _close(closing: list[Registration]) -> None:
        results = await asyncio.gather(*(r.close() for r in closing), return_exceptions=True)
        for registration, result in zip(closing, results, strict=True):
            if isinstance(result, Exception):
                logger.error("closing a stream of token %s failed", registration.token_id, exc_info=result)


_watcher: _CredentialWatcher | None = None


def register(token_id: int, close: CloseSocket) -> Registration:
    """Have `close` called (once) when the token stops being usable; call from the socket's event loop."""
    global _watcher
    loop = asyncio.get_running_loop()
    if _watcher is None or _watcher.loop is not loop or (_watcher.task is not None and not _watcher.alive):
        _watcher = _CredentialWatcher(loop)
    registration = Registration(token_id, close)
    _watcher.add(registration)
    return registration


def unregister(registration: Registration) -> None:
    """The socket ended (idempotent); the task ends with the last registration."""
    global _watcher
    watcher = _watcher
    if watcher is None:
        return
    watcher.discard(registration)
    if not watcher.sockets:
        if watcher.task is not None and not watcher.loop.is_closed():
            watcher.task.cancel()
        _watcher = None


def watched_tokens() -> set[int]:
    """The token ids the current watcher checks (for tests and diagnostics)."""
    return set(_watcher.sockets) if _watcher is not None else set()


def watcher_running() -> bool:
    """Whether this process has a check task (for tests: none once every socket is gone)."""
    return _watcher is not None and _watcher.alive
