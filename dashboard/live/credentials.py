"""Closing open streams whose credentials or access end.

A socket is checked when it opens; a stream may then stay open for days.
Revoking a token, its expiry, its owner's deactivation, the end of the
login session a cookie socket was opened with (logout, a password change,
the session's expiry), or removing the user from the session's project
must also end the streams they opened, within a few seconds (api.md: 4401
for the credential, 4404 for the access).

A login session is checked where Django keeps it, whichever process or
path ended it: a logout deletes it, a password change (set_password and
save, by any page, command or the admin) changes the user's session auth
hash it holds, and its expiry date passes.

Sockets `register` (who they act for, what they show, and a callback that
closes them for a reason) and `unregister` when they end. One task per
process (per event loop), running only while something is registered,
reads every TURNLOG_CREDENTIAL_CHECK_SECONDS which registered tokens are
still usable and what the registered users may read now (a few queries for
all sockets at once), and closes the sockets that lost it. A database
outage skips a round: a socket is never closed because it could not be checked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.conf import settings

from dashboard import outage
from dashboard.outage import DATABASE_UNAVAILABLE
from sessions_app import access
from sessions_app.models import ApiToken

logger = logging.getLogger(__name__)

# Why a socket is closed: its token, login session or user no longer authenticates (4401);
# it may no longer read its session's project (4404); a list socket's set of
# readable projects changed (it is renewed, and reconnects with the new set).
LOST_CREDENTIAL, LOST_ACCESS, ACCESS_CHANGED = "lost_credential", "lost_access", "access_changed"
CloseSocket = Callable[[str], Awaitable[None]]


@dataclass(eq=False)  # compared by identity: two sockets of one token are two registrations
class Registration:
    user_id: int
    token: ApiToken | None
    close: CloseSocket = field(repr=False)
    project_id: int | None = None  # a session socket: its session's project
    projects: frozenset[int] | None = None  # a list socket: every project it may show rows of
    session_key: str | None = None  # a login-cookie socket: the login session it was opened with


def ended_logins(registrations: list[Registration]) -> set[Registration]:
    """The cookie sockets whose login session ended (two queries for all; none without cookie sockets)."""
    keyed = [r for r in registrations if r.session_key is not None]
    if not keyed:
        return set()
    ended = access.ended_logins({(r.session_key, r.user_id) for r in keyed})
    return {r for r in keyed if (r.session_key, r.user_id) in ended}


def login_session_key(scope) -> str | None:
    """The key of the login session a cookie socket was opened with (channels' SessionMiddleware read its cookie)."""
    session = scope.get("session")
    return session.session_key if session is not None else None


def lost(registrations: list[Registration]) -> list[tuple[Registration, str]]:
    """Each registration that lost its credential or access now, with why (a few queries for all)."""
    tokens = {r.token.pk for r in registrations if r.token is not None}
    usable = access.usable_token_ids(tokens)
    roles = access.roles_of({r.user_id for r in registrations})
    ended = ended_logins(registrations)
    verdicts = []
    for registration in registrations:
        token = registration.token
        if registration.user_id not in roles or (token is not None and token.pk not in usable) or registration in ended:
            verdicts.append((registration, LOST_CREDENTIAL))
            continue
        readable = set(access.Actor(user=None, token=token, _roles=roles[registration.user_id]).project_ids(access.READ))
        if registration.project_id is not None and registration.project_id not in readable:
            verdicts.append((registration, LOST_ACCESS))
        elif registration.projects is not None and registration.projects != readable:
            verdicts.append((registration, ACCESS_CHANGED))
    return verdicts


class _AccessWatcher:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.sockets: set[Registration] = set()
        self.task: asyncio.Task | None = None

    def add(self, registration: Registration) -> None:
        self.sockets.add(registration)
        if self.task is None:
            self.task = self.loop.create_task(self._run(), name="turnlog-access-watcher")

    def discard(self, registration: Registration) -> None:
        self.sockets.discard(registration)

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
                verdicts = await database_sync_to_async(lost)(asked)
            except DATABASE_UNAVAILABLE as error:
                outage.database_outage.failed(error)
                continue
            except Exception:
                logger.exception("checking the access of %d open streams failed", len(asked))
                continue
            outage.database_outage.reached()
            # Only sockets that were asked about and are still open: one registered during the query waits for the next round.
            closing = [(registration, why) for registration, why in verdicts if registration in self.sockets]
            self.sockets.difference_update(registration for registration, _ in closing)
            if closing:
                # Shielded: the last socket going away cancels this task, which must not cut a close short.
                await asyncio.shield(self._close(closing))

    @staticmethod
    async def _close(closing: list[tuple[Registration, str]]) -> None:
        results = await asyncio.gather(*(r.close(why) for r, why in closing), return_exceptions=True)
        for (registration, why), result in zip(closing, results, strict=True):
            if isinstance(result, Exception):
                logger.error("closing a stream of user %s (%s) failed", registration.user_id, why, exc_info=result)


_watcher: _AccessWatcher | None = None


def register(registration: Registration) -> Registration:
    """Have its `close` called (once, with why) when it loses its credential or access; call from the socket's event loop."""
    global _watcher
    loop = asyncio.get_running_loop()
    if _watcher is None or _watcher.loop is not loop or (_watcher.task is not None and not _watcher.alive):
        _watcher = _AccessWatcher(loop)
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
    """The ids of the tokens whose sockets the current watcher checks (for tests and diagnostics)."""
    return {r.token.pk for r in _watcher.sockets if r.token is not None} if _watcher is not None else set()


def watched_sockets() -> int:
    """How many sockets the current watcher checks (for tests: none once every socket is gone)."""
    return len(_watcher.sockets) if _watcher is not None else 0


def watcher_running() -> bool:
    """Whether this process has a check task (for tests: none once every socket is gone)."""
    return _watcher is not None and _watcher.alive
