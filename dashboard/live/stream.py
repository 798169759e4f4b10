"""Live event streams of one session, shared by the websocket consumers.

`SessionStream` turns three unreliable inputs into the contract of api.md
("Websocket streams"): every event with seq > after, each exactly once, in
seq order, for as long as the socket is open.

- the database: the backlog, and any gap;
- channel-layer messages (`session_events`, one per commit, published by
  `services.append_events` after commit): best effort, may be lost,
  duplicated or reordered;
- the per-process `_Watcher`: one indexed query every `POLL_INTERVAL`
  seconds for the `event_count` of all the sessions this process streams
  (one stream per session: dashboard.live.hub's),
  which catches writes this process's layer never heard of (another process
  with the in-memory layer, a management command, a restarted Redis).

Correctness comes from the seq alone: the stream knows the last seq it sent,
drops anything at or below it, and reads every gap from the database before
sending anything after it. The database is authoritative: a layer message is
sent as it came only when it is exactly the next seq.

When the database is unreachable a stream waits and retries (the socket
stays open, and catches up when the database is back); `dashboard.outage`
logs each outage once, however many streams and polls hit it.

The module also holds the websocket authentication helpers (bearer token,
login session, Origin check for cookie-authenticated sockets).
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.middleware.csrf import CsrfViewMiddleware

from dashboard import json_logs, outage
from dashboard.outage import DATABASE_UNAVAILABLE
from sessions_app import selectors
from sessions_app.lib import instruments
from sessions_app.lib.bearer import bearer_secret
from sessions_app.lib.errors import SessionNotFound
from sessions_app.lib.params import decimal_int
from sessions_app.log import events as log_events
from sessions_app.models import ApiToken, Session
from sessions_app.selectors import access

logger = logging.getLogger(__name__)

# Seconds between two checks of the watched sessions' event counts. Read at
# every tick, so tests may shorten it (before the socket connects).
POLL_INTERVAL = 1.5
# Seconds a layer event past a gap waits for the missing ones before the database is read.
GAP_GRACE = 0.25
# Events read from the database (and handed to `send`) at a time.
PAGE_SIZE = 500
# Pending layer messages per stream; beyond it they are dropped (and repaired
# from the database like any lost message).
INBOX_LIMIT = 5000
# Session ids per count query of the watcher: one query per interval for all the
# sessions a process streams (SQLite >= 3.32 takes 32,766 parameters, PostgreSQL 65,535).
POLL_CHUNK = 10_000
# Seconds before a stream reads the unreachable database again (doubling up to the cap).
DB_RETRY_FIRST, DB_RETRY_CAP = 0.5, 5.0

SendEvents = Callable[[list[dict]], Awaitable[None]]


# Authentication ---------------------------------------------------------


def header(scope, name: bytes) -> str | None:
    """The first value of a request header (name in lower case), or None."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def bearer_token(scope) -> str | None:
    return bearer_secret(header(scope, b"authorization"))


TOKEN, LOGIN_SESSION = "token", "login_session"


async def authenticate(scope) -> tuple[object | None, str | None]:
    """(user, how): how is TOKEN or LOGIN_SESSION; (None, None) when neither holds.

    As for the API, a valid bearer token comes first, then the login session
    (scope["user"], set by channels' AuthMiddlewareStack); a token's row is
    left in scope["api_token"] for access.Actor. The caller must
    still check the Origin of a LOGIN_SESSION socket (`origin_allowed`).
    """
    token = bearer_token(scope)
    if token:
        row = await database_sync_to_async(ApiToken.usable_for)(token)
        if row is not None:
            await database_sync_to_async(row.mark_used)()
            scope["api_token"] = row
            json_logs.note_caller(scope, token=row)
            return row.user, TOKEN
        # The close reason says why (revoked, expired ...) if no login session authenticates instead.
        scope["token_refusal"] = await database_sync_to_async(access.token_refusal)(token)
    user = scope.get("user")
    if user is not None and user.is_authenticated:
        json_logs.note_caller(scope, user=user)
        return user, LOGIN_SESSION
    return None, None


def origin_allowed(scope) -> bool:
    """Whether the socket's Origin is the page's own, as Django's CSRF check judges a POST's Origin.

    The origin the socket was opened on (scheme, host and port as the
    request was made: https for wss; behind a proxy as the proxy reports
    them, SECURE_PROXY_SSL_HEADER and USE_X_FORWARDED_HOST), a host of
    ALLOWED_HOSTS, or one of CSRF_TRUSTED_ORIGINS. A missing Origin is not
    allowed (a cross-site page's socket carries the visitor's cookie).
    """
    if not header(scope, b"origin"):
        return False
    # The handshake as the POST Django's CsrfViewMiddleware checks: same headers and server, scheme http(s).
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    request = ASGIRequest({**scope, "type": "http", "method": "POST", "scheme": scheme, "query_string": b""}, io.BytesIO())
    try:
        return CsrfViewMiddleware(lambda request: None)._origin_verified(request)
    except (KeyError, ValueError):  # no Host header and no server address (only in-process test clients)
        return False


# `after=-1` asks for every event with seq > -1, all of them: the same as no `after`.
FROM_THE_START = "-1"


def parse_after(query_string: bytes) -> int | None:
    """The `after` query parameter: None when absent or -1 (every event); ValueError unless it is one
    decimal integer >= 0, or -1."""
    values = parse_qs(query_string.decode("latin-1"), keep_blank_values=True).get("after")
    if values is None or values == [FROM_THE_START]:
        return None
    after = decimal_int(values[0], name="after") if len(values) == 1 else None
    if after is None:
        raise ValueError(f"after must be one integer >= -1, got {values!r}")
    return after


def readable_session(actor: access.Actor, session_id: str) -> Session | None:
    """The session if the actor may read it; None when it does not exist or they may not (as the API's 404)."""
    try:
        return access.session_for(actor, session_id, access.READ)
    except (SessionNotFound, access.Forbidden):
        return None


# Streams ------------------------------------------------------------------


def read_page(session: Session, since: int, limit: int) -> list[dict]:
    return [log_events.event_to_wire(e) for e in selectors.events_since(session, since=since, limit=limit)]


class SessionGone(Exception):
    """The streamed session was deleted (sessions_app/services/retention): its stream ends, and its sockets close 4410."""


class SessionStream:
    """Sends one session's events with seq > after through `send`, exactly once, in order.

    `send` receives a non-empty list of wire events (consecutive seqs). The
    owner calls `offer_event` for every layer message, `watch(stream)` to be
    polled, and runs `run()` in a task after joining the session's group
    (joining first is what makes the backlog and the live part meet).
    """

    def __init__(self, session: Session, *, after: int | None, send: SendEvents):
        self.session = session
        self.session_id = session.id
        self.project_id = session.project_id
        self.last_sent = -1 if after is None else after
        self._send = send
        self._inbox: asyncio.Queue = asyncio.Queue(maxsize=INBOX_LIMIT)
        self._wanted = -1  # the highest seq the watcher knows is overdue
        self._previous_count: int | None = None  # the event_count the watcher saw a tick ago
        self._poll_queued = False

    # Inputs (never block, never touch the database) ---------------------

    def offer_event(self, wire: object) -> None:
        """A layer message's event; a stale or malformed one is dropped."""
        if not isinstance(wire, dict):
            return
        seq = wire.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq <= self.last_sent:
            return
        self._put(("event", wire))

    def offer_count(self, event_count: int) -> None:
        """The watcher read the session's event_count: fetch what the layer never brought.

        Only events already stored at the previous tick count: the layer
        gets one interval to deliver an event before the database is asked,
        so a busy session does not send every viewer to the database on
        every tick.
        """
        stored_a_tick_ago, self._previous_count = self._previous_count, event_count
        overdue = min(event_count, stored_a_tick_ago if stored_a_tick_ago is not None else 0) - 1
        if overdue <= self.last_sent:
            return
        self._wanted = max(self._wanted, overdue)
        if not self._poll_queued and self._put(("poll", None)):
            self._poll_queued = True

    def offer_gone(self) -> None:
        """The watcher found the session deleted: the pump ends with SessionGone."""
        self._put(("gone", None))

    def _put(self, item) -> bool:
        try:
            self._inbox.put_nowait(item)
            return True
        except asyncio.QueueFull:
            return False

    # The pump -------------------------------------------------------------

    async def run(self) -> None:
        """The backlog (paged), then the live events, until cancelled.

        A layer message past a gap waits up to GAP_GRACE for the missing ones
        (concurrent writers' commits often publish out of order); then the
        database, which has every committed event, fills the gap.
        """
        await self._retrying(self._send_from_db, through=None, reason="backlog")
        loop = asyncio.get_running_loop()
        early: dict[int, dict] = {}  # layer events past a gap, by seq
        deadline = None
        while True:
            try:
                wait = None if deadline is None else max(deadline - loop.time(), 0)
                kind, value = await asyncio.wait_for(self._inbox.get(), wait)
            except asyncio.TimeoutError:
                kind, value = "gap", None
            if kind == "gone":
                raise SessionGone(self.session_id)
            if kind == "event":
                early[value["seq"]] = value
            elif kind == "poll":
                self._poll_queued = False
                await self._retrying(self._send_from_db, through=self._wanted, reason="poll")
            else:
                await self._retrying(self._send_from_db, through=max(early), reason="gap")
            await self._retrying(self._emit, [early[seq] for seq in sorted(early) if seq > self.last_sent])
            early = {seq: wire for seq, wire in early.items() if seq > self.last_sent}
            deadline = (deadline or loop.time() + GAP_GRACE) if early else None

    async def _retrying(self, step: Callable[..., Awaitable], *args, **kwargs):
        """`step` (a read, or a send that renders from the database), again until the database answers.

        A failed step leaves last_sent at the last event it did send, so
        trying it again neither loses nor repeats one; layer messages wait in
        the inbox meanwhile, and the socket stays open.
        """
        delay = DB_RETRY_FIRST
        while True:
            try:
                result = await step(*args, **kwargs)
            except DATABASE_UNAVAILABLE as error:
                outage.database_outage.failed(error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, DB_RETRY_CAP)
            else:
                outage.database_outage.reached()
                return result

    async def _send_from_db(self, *, through: int | None, reason: str) -> None:
        """Send the stored events after last_sent, up to seq `through` (None: all), page by page.

        `reason` (backlog, gap, poll) labels the catch-up in the metrics when it found events."""
        start = self.last_sent
        try:
            while through is None or self.last_sent < through:
                limit = PAGE_SIZE if through is None else min(PAGE_SIZE, through - self.last_sent)
                page = await database_sync_to_async(read_page)(self.session, self.last_sent + 1, limit)
                sent = await self._emit(page)
                if len(page) < limit or sent < len(page):
                    return
        finally:
            if self.last_sent > start:
                instruments.STREAM_CATCH_UPS.labels(reason).inc()

    async def _emit(self, wires: list[dict]) -> int:
        """Send the run of wires that continues last_sent without a hole; returns how many."""
        run = []
        for wire in wires:
            if wire["seq"] != self.last_sent + 1 + len(run):
                break
            run.append(wire)
        if run:
            await self._send(run)
            self.last_sent = run[-1]["seq"]
        return len(run)


# The per-process watcher ------------------------------------------------


def event_counts(session_ids: Iterable[str]) -> dict[str, int]:
    ids = list(session_ids)
    counts: dict[str, int] = {}
    for start in range(0, len(ids), POLL_CHUNK):
        chunk = ids[start : start + POLL_CHUNK]
        counts.update(selectors.event_counts(chunk))
    return counts


class _Watcher:
    """One task per process (per event loop): polls the counts of every streamed session."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.streams: dict[str, set[SessionStream]] = {}
        self.task: asyncio.Task | None = None

    def add(self, stream: SessionStream) -> None:
        self.streams.setdefault(stream.session_id, set()).add(stream)
        if self.task is None:
            self.task = self.loop.create_task(self._run(), name="turnlog-session-watcher")

    def discard(self, stream: SessionStream) -> None:
        watchers = self.streams.get(stream.session_id)
        if watchers is not None:
            watchers.discard(stream)
            if not watchers:
                del self.streams[stream.session_id]

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done() and not self.loop.is_closed()

    async def _run(self) -> None:
        while self.streams:
            await asyncio.sleep(POLL_INTERVAL)
            if not self.streams:
                return
            try:
                counts = await database_sync_to_async(event_counts)(list(self.streams))
            except DATABASE_UNAVAILABLE as error:
                outage.database_outage.failed(error)
                continue
            except Exception:
                logger.exception("checking the event counts of %d streamed sessions failed", len(self.streams))
                continue
            outage.database_outage.reached()
            for session_id, watchers in list(self.streams.items()):
                count = counts.get(session_id)
                for stream in list(watchers):
                    if count is None:  # deleted (the only way a watched session stops existing)
                        stream.offer_gone()
                    else:
                        stream.offer_count(count)


_watcher: _Watcher | None = None


def watch(stream: SessionStream) -> None:
    """Have the process's watcher poll this stream's session (call from the event loop)."""
    global _watcher
    loop = asyncio.get_running_loop()
    if _watcher is None or _watcher.loop is not loop or (_watcher.task is not None and not _watcher.alive):
        _watcher = _Watcher(loop)
    _watcher.add(stream)


def unwatch(stream: SessionStream) -> None:
    """Stop polling for this stream; the watcher task ends with its last stream."""
    global _watcher
    watcher = _watcher
    if watcher is None:
        return
    watcher.discard(stream)
    if not watcher.streams:
        if watcher.task is not None and not watcher.loop.is_closed():
            watcher.task.cancel()
        _watcher = None


def watched_sessions() -> set[str]:
    """The session ids the current watcher polls (for tests and diagnostics)."""
    return set(_watcher.streams) if _watcher is not None else set()
