"""Closing open streams whose credentials or access end, and sending nothing once they have.

A socket is checked when it opens; a stream may then stay open for days.
Revoking a token, its expiry, its owner's deactivation, the end of the
login session a cookie socket was opened with (logout, a password change,
the session's expiry), or removing the user from the session's project
must also end the streams they opened (api.md: 4401 for the credential,
4404 for the access).

A login session is checked where Django keeps it, whichever process or
path ended it: a logout deletes it, a password change (set_password and
save, by any page, command or the admin) changes the user's session auth
hash it holds, and its expiry date passes.

Sockets `register` (who they act for, what they show, and a callback that
closes them for a reason) and `unregister` when they end. One task per
process (per event loop), running only while something is registered,
checks them in rounds, a few queries for all the sockets of a round:

- every frame a socket sends waits for a round that started after its
  content was in hand (`CheckedSends`: a frame of events, once the events
  were read or received): a logout (or a password change, a deactivation, a
  revocation) commits before it answers, so an event committed after that
  answer was in hand only after the end committed, and that round sees it.
  The round answers every socket waiting when it starts (one for all the
  viewers of a commit), and checks their credentials only;
- the end of a credential is told to every process through the channel
  layer (services' CREDENTIALS_GROUP, sent on commit): it starts a full
  round at once, so idle streams close within moments too;
- every TURNLOG_CREDENTIAL_CHECK_SECONDS, a full round checks every socket's
  credential and what its user may read now (the safety net: a token's or a
  login session's expiry, a lost message, a write no signal saw).

A database outage skips a round: a socket is never closed because it could
not be checked, and its frames wait until a check can be made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from channels.layers import get_channel_layer
from django.conf import settings

from dashboard import outage
from dashboard.live import stream
from dashboard.outage import DATABASE_UNAVAILABLE
from sessions_app import services
from sessions_app.lib import db_threads
from sessions_app.models import ApiToken
from sessions_app.selectors import access

logger = logging.getLogger(__name__)

# Why a socket is closed: its token, login session or user no longer authenticates (4401);
# it may no longer read its session's project (4404); a list socket's set of
# readable projects changed (it is renewed, and reconnects with the new set).
LOST_CREDENTIAL, LOST_ACCESS, ACCESS_CHANGED = "lost_credential", "lost_access", "access_changed"
CloseSocket = Callable[[str], Awaitable[None]]
# Seconds between two joins of the credentials group: a layer forgets a member after a day (group_expiry).
REJOIN_SECONDS = 3600


@dataclass(eq=False)  # compared by identity: two sockets of one token are two registrations
class Registration:
    user_id: int
    token: ApiToken | None
    close: CloseSocket = field(repr=False)
    project_id: int | None = None  # a session socket: its session's project
    projects: frozenset[int] | None = None  # a list socket: every project it may show rows of
    session_key: str | None = None  # a login-cookie socket: the login session it was opened with
    # Set once it is being closed for a verdict, or unregistered: its socket sends nothing more.
    ended: bool = field(default=False, init=False)


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


def ended_credentials(registrations: list[Registration]) -> list[tuple[Registration, str]]:
    """Each registration whose token or login no longer authenticates (its user deactivated included),
    LOST_CREDENTIAL (one to three queries for all): the check of the frames a round clears."""
    tokens = {r.token.pk for r in registrations if r.token is not None}
    usable = access.usable_token_ids(tokens)
    ended = ended_logins(registrations)
    return [(r, LOST_CREDENTIAL) for r in registrations if (r.token is not None and r.token.pk not in usable) or r in ended]


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


class _Round:
    """One round of checks to come: the registrations asking, and what their frames await."""

    __slots__ = ("asking", "done", "error")

    def __init__(self):
        self.asking: set[Registration] = set()
        self.done = asyncio.Event()
        self.error: BaseException | None = None  # a check that failed for a bug


class _AccessWatcher:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.sockets: set[Registration] = set()
        self.task: asyncio.Task | None = None
        self.listener: asyncio.Task | None = None
        # The next round (frames waiting for it, sockets just registered), and those an outage held back.
        self.next = _Round()
        self.held: list[_Round] = []
        self.wake = asyncio.Event()
        self.heard = False  # a credential ended somewhere: the next round is a full one

    def add(self, registration: Registration) -> None:
        self.sockets.add(registration)
        # Checked again soon: an end told between its socket's authentication and now was told to the sockets before it.
        self.next.asking.add(registration)
        self.wake.set()
        if self.task is None:
            self.task = self.loop.create_task(self._run(), name="turnlog-access-watcher")
            self.listener = self.loop.create_task(self._listen(), name="turnlog-credentials-listener")

    def discard(self, registration: Registration) -> None:
        self.sockets.discard(registration)

    def ask(self, registration: Registration) -> _Round:
        """The round that will check the registration's credential: the next one to start."""
        if registration not in self.sockets:  # registered with a watcher that died
            self.add(registration)
        self.next.asking.add(registration)
        self.wake.set()
        return self.next

    def hear(self) -> None:
        self.heard = True
        self.wake.set()

    def check_all(self) -> None:
        """Every socket's credential, at the next round (not their access)."""
        self.next.asking |= self.sockets
        self.wake.set()

    def stop(self) -> None:
        for task in (self.task, self.listener):
            if task is not None and not self.loop.is_closed():
                task.cancel()

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done() and not self.loop.is_closed()

    async def _run(self) -> None:
        next_full = self.loop.time() + settings.TURNLOG_CREDENTIAL_CHECK_SECONDS
        held_until, delay = None, None  # an outage: no round for waiting frames before then
        while self.sockets:
            if held_until is not None:
                await asyncio.sleep(max(min(held_until, next_full) - self.loop.time(), 0))
            else:
                await self._woken_or(next_full)
            if not self.sockets:
                return
            self.wake.clear()
            # Read at every round, so tests (and a changed setting) need no restart.
            full = self.heard or self.loop.time() >= next_full
            if not full and (not (self.next.asking or self.held) or (held_until is not None and self.loop.time() < held_until)):
                continue
            # Only what is known now: a socket registered or a frame asked during the query waits for the next round.
            rounds, self.next, self.held, self.heard = [*self.held, self.next], _Round(), [], False
            asked = list(self.sockets) if full else [r for r in set().union(*(r.asking for r in rounds)) if r in self.sockets]
            if full:
                next_full = self.loop.time() + settings.TURNLOG_CREDENTIAL_CHECK_SECONDS
            try:
                verdicts = await db_threads.run(lost if full else ended_credentials, asked) if asked else []
            except DATABASE_UNAVAILABLE as error:
                outage.database_outage.failed(error)
                self.held = [r for r in rounds if r.asking]  # their frames wait until a round can be made
                delay = min(delay * 2, stream.DB_RETRY_CAP) if delay else stream.DB_RETRY_FIRST
                held_until = self.loop.time() + delay if self.held else None
                continue
            except Exception as error:
                logger.exception("checking the access of %d open streams failed", len(asked))
                for done in rounds:  # their streams fail (4500) and reconnect, rather than wait for ever
                    done.error = error
                    done.done.set()
                continue
            held_until, delay = None, None
            if full:  # (the frames' rounds leave the outage's end to the periodic round and the streams' reads)
                outage.database_outage.reached()
            # Only sockets that were asked about and are still open.
            closing = [(registration, why) for registration, why in verdicts if registration in self.sockets]
            for registration, _ in closing:
                registration.ended = True
                self.sockets.discard(registration)
            for done in rounds:
                done.done.set()
            if closing:
                # Shielded: the last socket going away cancels this task, which must not cut a close short.
                await asyncio.shield(self._close(closing))

    async def _woken_or(self, deadline: float) -> None:
        """Until woken or the loop's time `deadline` (no wait_for: a cancelled task must end at once)."""
        timer = self.loop.call_at(deadline, self.wake.set)
        try:
            await self.wake.wait()
        finally:
            timer.cancel()

    async def _listen(self) -> None:
        """Hear of every credential that ended, in any process (services.publish_credentials_ended_on_commit)."""
        layer = get_channel_layer()
        if layer is None:
            return
        channel = await layer.new_channel()
        try:
            while True:
                try:
                    await layer.group_add(services.CREDENTIALS_GROUP, channel)
                    self.check_all()  # what ended before it joined was told to no one here
                    async with asyncio.timeout(REJOIN_SECONDS):  # then joined again
                        while True:
                            await layer.receive(channel)
                            self.hear()
                except TimeoutError:
                    continue
                except Exception:  # a layer failure its own retries did not ride out: the periodic rounds remain meanwhile
                    logger.warning("hearing of ended credentials failed", exc_info=True)
                    await asyncio.sleep(stream.DB_RETRY_CAP)
        finally:
            try:
                await layer.group_discard(services.CREDENTIALS_GROUP, channel)
            except Exception:  # the layer is down: the group entry expires on its own
                logger.warning("leaving group %s failed", services.CREDENTIALS_GROUP, exc_info=True)

    @staticmethod
    async def _close(closing: list[tuple[Registration, str]]) -> None:
        results = await asyncio.gather(*(r.close(why) for r, why in closing), return_exceptions=True)
        for (registration, why), result in zip(closing, results, strict=True):
            if isinstance(result, Exception):
                logger.error("closing a stream of user %s (%s) failed", registration.user_id, why, exc_info=result)


_watcher: _AccessWatcher | None = None


def _current_watcher() -> _AccessWatcher:
    global _watcher
    loop = asyncio.get_running_loop()
    if _watcher is None or _watcher.loop is not loop or (_watcher.task is not None and not _watcher.alive):
        if _watcher is not None:
            _watcher.stop()
        _watcher = _AccessWatcher(loop)
    return _watcher


def register(registration: Registration) -> Registration:
    """Have its `close` called (once, with why) when it loses its credential or access; call from the socket's event loop."""
    _current_watcher().add(registration)
    return registration


def unregister(registration: Registration) -> None:
    """The socket ended (idempotent); the task ends with the last registration."""
    global _watcher
    registration.ended = True
    watcher = _watcher
    if watcher is None:
        return
    watcher.discard(registration)
    if not watcher.sockets:
        watcher.stop()
        _watcher = None


async def still_authenticates(registration: Registration) -> bool:
    """Whether the registration's credential still authenticates, by a round that starts after this call
    (False at once for a socket being closed or gone)."""
    if registration.ended:
        return False
    checked = _current_watcher().ask(registration)
    await checked.done.wait()
    if checked.error is not None:
        raise RuntimeError("checking the credentials of open streams failed") from checked.error
    return not registration.ended


class CheckedSends:
    """A socket authenticated by a token or a login sends each frame only after a round, started once the
    frame's content was in hand, found its credential still authenticating (a frame it drops: the socket is
    being closed). Before it registers (`credential` unset) it sends as it is."""

    credential: Registration | None = None

    async def send(self, text_data=None, bytes_data=None, close=False):
        if self.credential is None or await still_authenticates(self.credential):
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    async def send_cleared(self, texts: list[str]) -> None:
        """Text frames whose content was all in hand before this call, after one round for them all."""
        if self.credential is not None and not await still_authenticates(self.credential):
            return
        for text in texts:
            await super().send(text_data=text)


def watched_tokens() -> set[int]:
    """The ids of the tokens whose sockets the current watcher checks (for tests and diagnostics)."""
    return {r.token.pk for r in _watcher.sockets if r.token is not None} if _watcher is not None else set()


def watched_sockets() -> int:
    """How many sockets the current watcher checks (for tests: none once every socket is gone)."""
    return len(_watcher.sockets) if _watcher is not None else 0


def watcher_running() -> bool:
    """Whether this process has a check task (for tests: none once every socket is gone)."""
    return _watcher is not None and _watcher.alive
