"""Websocket consumers.

`SessionEventsConsumer` serves `/ws/v1/sessions/{id}/events?after=N`
(api.md, "Websocket streams"); the stream logic lives in dashboard.live.stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from dashboard import outage
from dashboard.live import credentials, hub, stream
from dashboard.outage import CLOSE_UNAVAILABLE, DATABASE_UNAVAILABLE
from sessions_app.selectors import access

logger = logging.getLogger(__name__)

# Close codes. The socket is always accepted first, so a client sees the code.
# An application on Daphne may close only with 1000 or 3000-4999 (autobahn
# refuses any other code and the socket stays open), hence 4012 for 1012
# "service restart", and 4500/4503 named after HTTP statuses like the others.
# The pages reconnect after 4012, 4500 and 4503 (static/turnlog/turnlog.js).
CLOSE_BAD_REQUEST = 4400  # `after` is not a single decimal integer >= -1, or a number too long to read (sessions_app.lib.params)
CLOSE_UNAUTHENTICATED = 4401  # no valid token and no login session; or the token or login session ended since (api.md)
CLOSE_FORBIDDEN_ORIGIN = 4403  # login-cookie socket whose Origin is missing or not the site's own (stream.origin_allowed)
CLOSE_NOT_FOUND = 4404  # no such session (api.md)
CLOSE_GONE = 4410  # the session was deleted while streaming (sessions_app/services/retention): it will not come back
CLOSE_SERVER_ERROR = 4500  # the stream failed on the server (a bug); reconnect with ?after=<last seq>
# CLOSE_UNAVAILABLE, 4503 (dashboard.outage; dashboard.middleware closes most of them): the database is
# unreachable as the socket opens; reconnect later with ?after=<last seq>.
CLOSE_RENEW = 4012  # a browser socket is renewed (dashboard.live.sessions); reconnect now with ?after=<last seq>


class FrameTooLarge(Exception):
    """An event whose frame is larger than the websocket message limit (TURNLOG_WS_MAX_MESSAGE_BYTES)."""


async def close_without_database(consumer, error: BaseException) -> None:
    """A socket that cannot start without the database: 4503, and a single log line per outage."""
    outage.database_outage.failed(error)
    await consumer.close(code=CLOSE_UNAVAILABLE, reason="database unavailable")


class SessionEventsConsumer(credentials.CheckedSends, AsyncJsonWebsocketConsumer):
    """JSON frames `{"type": "session_event", "event": Event}` for one session.

    First every stored event with seq > `after` (all when `after` is absent or -1),
    read in pages of `stream.PAGE_SIZE`; then each new event, exactly once and
    in seq order, for as long as the socket is open. Frames from the client
    are ignored.

    Authentication, in this order: `Authorization: Bearer <token>` (no Origin
    needed), else the Django login session, which must come with the Origin
    of the page's own site, as Django's CSRF check judges a POST's
    (stream.origin_allowed; cross-site websocket hijacking).

    Close codes (each after accepting the socket, checked in this order):

    - 4401: unauthenticated (no valid token, no login session); also on an
      open stream whose token was revoked or expired, whose login session
      ended (logout, password change, expiry) or whose user was deactivated:
      no frame is sent after a check finds it (each frame waits for one), and
      the socket closes within moments of a logout, password change,
      deactivation or revocation (each is told to every process), within
      TURNLOG_CREDENTIAL_CHECK_SECONDS of an expiry (dashboard.live.credentials);
    - 4403: authenticated only by the login cookie, and the Origin header is
      missing or not the site's own (scheme, host and port);
    - 4400: `after` is not exactly one decimal integer >= 0 or -1 (e.g. `abc`,
      `-2`, `1.5`, empty, or given twice), or has more than 4,300 digits
      (as has the page socket's `first`);
    - 4404: no session with this id that the user (or token) may read; also on
      an open stream, within TURNLOG_CREDENTIAL_CHECK_SECONDS of the user
      leaving the session's project;
    - 4503: the database is unreachable as the socket opens; the client
      reconnects a little later with `?after=<last seq it has>`;
    - 4500: the stream failed on the server (a bug); the client reconnects
      with `?after=<last seq it has>`. Also, until the limit is raised, at an
      event whose frame is larger than TURNLOG_WS_MAX_MESSAGE_BYTES (logged;
      the limit holds every event but those docs/api.md names).

    An open stream that loses the database stays open and catches up when it
    is back; one that loses Redis is served by the database poll meanwhile.

    The socket has no channel of its own: the process's hub (dashboard.live.hub)
    holds one group membership and one stream per session, and fans each run
    of events out to every local socket of the session.
    """

    # No channel per socket (an alias with no layer): the hub's entry reads the session's group.
    channel_layer_alias = "turnlog.hub"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._stream: hub.Follower | None = None
        self._pump: asyncio.Task | None = None
        self._hub: hub.Hub | None = None
        self._credential: credentials.Registration | None = None
        self._failed = False

    async def connect(self):
        await self.accept()
        try:
            user, how = await stream.authenticate(self.scope)
        except DATABASE_UNAVAILABLE as error:
            return await close_without_database(self, error)
        if user is None:
            return await self.close(code=CLOSE_UNAUTHENTICATED, reason=self.scope.get("token_refusal") or "authentication required")
        if how == stream.LOGIN_SESSION and not stream.origin_allowed(self.scope):
            return await self.close(code=CLOSE_FORBIDDEN_ORIGIN, reason="origin not allowed")
        self.scope["user"] = user
        await self.connect_stream(access.Actor(user=user, token=self.scope["api_token"] if how == stream.TOKEN else None))

    async def connect_stream(self, actor: access.Actor):
        """After authentication: check `after` and the session (4404 unless `actor` may read it), then start streaming.

        Subclasses with their own authentication (the browser pages) call it
        from their connect() after accepting, and override `_send_events` to
        send other frames.
        """
        try:
            after = stream.parse_after(self.scope.get("query_string", b""))
        except ValueError:
            return await self.close(code=CLOSE_BAD_REQUEST, reason="after must be an integer >= -1")
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        try:
            session = await database_sync_to_async(stream.readable_session)(actor, session_id)
        except DATABASE_UNAVAILABLE as error:
            return await close_without_database(self, error)
        if session is None:
            return await self.close(code=CLOSE_NOT_FOUND, reason="no such session")
        self.credential = self._credential = credentials.register(
            credentials.Registration(
                user_id=actor.user.pk,
                token=actor.token,
                project_id=session.project_id,
                session_key=credentials.login_session_key(self.scope) if actor.token is None else None,
                close=self._close_for_lost_access,
            )
        )

        # The hub's entry is in the session's group before the backlog is read:
        # an event committed in between is then in the backlog or in a run
        # from the entry (or both, and the seq drops the second copy).
        self._hub = hub.hub()
        self._stream = await self._hub.subscribe(
            session, after=after, send=self._send_events, failed=self._stream_failed, notes=self._notes_changed, gone=self._session_gone
        )
        self._pump = asyncio.create_task(self._run_stream(self._stream))

    async def _run_stream(self, events: hub.Follower):
        try:
            await events.run()
        except asyncio.CancelledError:
            raise
        except FrameTooLarge as too_large:
            logger.error("session %s: %s: no stream sends it until the limit is raised", events.session_id, too_large)
            if not self._failed:
                self._failed = True
                await self.close(code=CLOSE_SERVER_ERROR, reason=str(too_large))
        except Exception:
            logger.exception("the event stream of session %s failed", events.session_id)
            await self._stream_failed()

    async def _stream_failed(self) -> None:
        """This socket's stream, or the hub's stream of the session (logged there), failed: 4500, once;
        the client reconnects. The disconnect that follows stops the stream."""
        if not self._failed:
            self._failed = True
            await self.close(code=CLOSE_SERVER_ERROR)

    async def _session_gone(self) -> None:
        """The session was deleted: 4410, and the client stops (reconnecting would be refused 4404)."""
        await self._stop_stream()
        await self.close(code=CLOSE_GONE, reason="the session was deleted")

    async def _send_events(self, wires: list[dict]) -> None:
        texts = [hub.json_text(wire) for wire in wires]
        for wire, text in zip(wires, texts):
            # Daphne would fail a larger message with a traceback of its own (json_text is ASCII: length is size).
            if len(text) > settings.TURNLOG_WS_MAX_MESSAGE_BYTES:
                raise FrameTooLarge(f"event {wire['seq']} is {len(text)} bytes as a frame, above TURNLOG_WS_MAX_MESSAGE_BYTES")
        # The events are in hand: one check of the credential clears all their frames.
        await self.send_cleared(texts)

    # The JSON stream carries events only: notes are read through the API (GET .../notes).
    _notes_changed = None

    async def _close_for_lost_access(self, why: str) -> None:
        """No frame after the token was revoked or expired, the login session ended or the user was deactivated (then 4401),
        or after the user left the session's project (then 4404, as for a session they cannot read)."""
        if self._credential is None:  # the socket ended while it was being checked
            return
        token = self._credential.token
        await self._stop_stream()
        if why == credentials.LOST_CREDENTIAL:
            await self.close(code=CLOSE_UNAUTHENTICATED, reason=await lost_credential_words(token))
        else:
            await self.close(code=CLOSE_NOT_FOUND, reason="no longer a member of the session's project")

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """The stream is one-way: client frames are ignored."""

    async def disconnect(self, code):
        await self._stop_stream()

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            # Also when the server cancels the application without a
            # disconnect (shutdown, a timeout): no pump or watch may outlive it.
            await self._stop_stream()

    async def _stop_stream(self) -> None:
        """Idempotent: stop the pump, stop having the token checked, leave the hub (its entry ends with its last socket)."""
        credential, self._credential = self._credential, None
        if credential is not None:
            credentials.unregister(credential)
        pump, self._pump = self._pump, None
        follower, self._stream = self._stream, None
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        if follower is not None:
            await self._hub.unsubscribe(follower)


async def lost_credential_words(token) -> str:
    """The close reason of a stream whose credential stopped authenticating: what became of its token."""
    if token is None:  # a login's socket
        return "the login ended: logged out, password changed, session expired or user deactivated"
    try:
        return await database_sync_to_async(access.token_refusal)(pk=token.pk)
    except DATABASE_UNAVAILABLE:  # closing matters more than the words
        return "token revoked or expired, or user deactivated"
