"""The browsers' live streams: HTML frames of out-of-band swaps for htmx's ws extension.

`SessionPageConsumer` (/ws/sessions/{id}/live?after=N) keeps a session page
current: every committed event re-renders the transcript blocks (or raw rows)
it touched and the page's header and tab bar, with the same partials and the
same inputs as a page load (dashboard.pages.session). The session list's socket
is dashboard.live.session_list's.

The seq logic (backlog, gaps, writes by other processes) is dashboard.live.stream's,
shared with the JSON stream; only the frames differ (dashboard.live.frames renders them).
A note added, edited or deleted reaches the page sockets through the hub too
("session_notes" messages, services.notes publishing on commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import uuid
from collections.abc import Callable
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.utils import timezone

from dashboard import json_logs, outage
from dashboard.live import seen, stream
from dashboard.live.consumers import (
    CLOSE_BAD_REQUEST,
    CLOSE_FORBIDDEN_ORIGIN,
    CLOSE_RENEW,
    CLOSE_UNAUTHENTICATED,
    SessionEventsConsumer,
)
from dashboard.live.frames import render_notes_frame, render_page_frame, render_raw_frame, render_state_frame
from dashboard.live.timeline import render_timeline_frame
from dashboard.outage import DATABASE_UNAVAILABLE
from dashboard.pages import ledger as ledger_panel
from dashboard.pages import notes
from dashboard.pages import session as session_page
from sessions_app import selectors
from sessions_app.lib import db_threads
from sessions_app.lib.params import BadParameter, decimal_int
from sessions_app.selectors import access

logger = logging.getLogger(__name__)

# How often pages re-check statuses that change with time alone (running -> stalled), and headers changed with no event.
STATUS_REFRESH_SECONDS = settings.TURNLOG_PAGE_REFRESH_SECONDS
GONE_TEXT = "Deleted: this session no longer exists"
GONE_FRAME = f'<p class="live-state" id="live-state" aria-live="polite" data-state="closed" hx-swap-oob="true">{GONE_TEXT}</p>'
# Numbers the header changes found by the status checks: a key of their renders, unique in the process.
_header_changes = itertools.count(1)


async def login_user(consumer: AsyncWebsocketConsumer):
    """The logged-in user of a browser socket, or None after closing it (4401 / 4403)."""
    user = consumer.scope.get("user")
    if user is None or not user.is_authenticated:
        await consumer.close(code=CLOSE_UNAUTHENTICATED)
        return None
    json_logs.note_caller(consumer.scope, user=user)
    if not stream.origin_allowed(consumer.scope):
        await consumer.close(code=CLOSE_FORBIDDEN_ORIGIN)
        return None
    return user


def query_params(scope) -> dict[str, str]:
    """The socket's query parameters, the first value of each."""
    return {key: values[0] for key, values in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}


class RenewedSocket:
    """A browser socket closed with 4012 after TURNLOG_SOCKET_RENEW_SECONDS: the page
    reconnects from its cursor before any proxy or Daphne timeout (--websocket_timeout)
    can end live updates silently."""

    _expiry: asyncio.TimerHandle | None = None

    def renew_later(self) -> None:
        self._expiry = asyncio.get_running_loop().call_later(
            settings.TURNLOG_SOCKET_RENEW_SECONDS, lambda: asyncio.ensure_future(self.close(code=CLOSE_RENEW))
        )

    def cancel_renewal(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()


class SessionPageConsumer(RenewedSocket, SessionEventsConsumer):
    """HTML frames for one session page; the browser's cursor is `after`."""

    _status_watch: asyncio.Task | None = None

    async def connect(self):
        await self.accept()
        if await login_user(self) is None:
            return
        query = query_params(self.scope)
        # The raw log view follows the log too; `first` is the first seq its page shows.
        try:
            first = decimal_int(query.get("first", ""), name="first")
            # The timeline tab (of the whole session, or of one turn) follows the log as a whole drawing.
            self.timeline, self.turn = query.get("view") == "timeline", decimal_int(query.get("turn", ""), name="turn")
            seen_at = seen.read(query)
        except (BadParameter, seen.BadSeenAt) as bad:
            return await self.close(code=CLOSE_BAD_REQUEST, reason=str(bad)[:120])
        self.raw_from = (first or 0) if query.get("view") == "raw" else None
        self.all_calls = ledger_panel.wants_all(query.get("calls"))  # the ledger panel's switch, as the page shows it
        # What the page's header shows (its data-state): a socket opened after it changed sets it right.
        self.page_state = query.get("state", "")[:200] or None
        actor = access.Actor(user=self.scope["user"])
        joined_at = timezone.now()
        await self.connect_stream(actor)
        # Frames are shared by viewers with the same rights (fork controls show only to those who may fork).
        self.can_fork = self._stream is not None and actor.can(self._stream.project_id, access.FORK)
        # The notes' controls: viewers share frames, admins share theirs, a member's own notes are theirs to change.
        self.note_rights = notes.note_rights(actor, self._stream.project_id) if self._stream is not None else None
        if self._stream is not None:
            self._status_watch = asyncio.create_task(self.refresh_status(self._stream.session_id))
            if seen_at is not None:
                await self._catch_up(seen_at, joined_at)
        self.renew_later()

    async def _catch_up(self, seen_at, joined_at) -> None:
        """Notes, verdicts and reconciler attempts changed between the page's read and this join, sent as their
        live messages would have been; then the page's instant moves to the join. (Events catch up by `after`.)"""
        stream_ = self._stream
        try:
            seqs = await database_sync_to_async(selectors.annotated_seqs_since)(
                session_id=stream_.session_id, project_id=stream_.project_id, since=seen_at
            )
        except DATABASE_UNAVAILABLE as error:  # the instant stays: the next connect catches up
            outage.database_outage.failed(error)
            return
        if seqs:
            await self._notes_changed({"seqs": seqs, "change": uuid.uuid4().hex})
        if self._stream is not None:  # still open
            await self.send(text_data=seen.marker(joined_at))

    async def _send_events(self, wires: list[dict]) -> None:
        session_id, shown_through = self._stream.session_id, wires[0]["seq"] - 1
        if self.timeline:
            render = functools.partial(render_timeline_frame, session_id, wires, self.turn, self.can_fork)
            key = ("timeline", session_id, self.turn, self.can_fork, wires[0]["seq"], wires[-1]["seq"])
            return await self.send_messages(await shared_frames.get(key, render))
        if self.raw_from is None:
            render = functools.partial(render_page_frame, session_id, wires, shown_through, self.can_fork, self.all_calls, self.note_rights)
        else:
            render = functools.partial(
                render_raw_frame, session_id, wires, shown_through, self.raw_from, self.can_fork, self.all_calls, self.note_rights
            )
        # Everything a frame depends on, so viewers in step share one render.
        key = (session_id, self.raw_from, self.can_fork, self.all_calls, self.note_rights.key, wires[0]["seq"], wires[-1]["seq"])
        await self.send_messages(await shared_frames.get(key, render))

    async def send_messages(self, messages: list[str]) -> None:
        """A frame's messages, in order (dashboard.live.frames.pack), after one check of the socket's login for them all."""
        await self.send_cleared(messages)

    async def _notes_changed(self, message: dict) -> None:
        """A note was added, edited or deleted: its place (card, row, the session's notes) and the ledger panel
        re-rendered, as a reload shows them."""
        seqs = message.get("seqs") if isinstance(message.get("seqs"), list) else []
        render = functools.partial(render_notes_frame, self._stream.session_id, seqs, self.raw_from is None, self.can_fork, self.all_calls, self.note_rights)
        key = ("notes", message.get("change"), self.raw_from is None, self.can_fork, self.all_calls, self.note_rights.key)
        try:
            frame = await shared_frames.get(key, render)
        except DATABASE_UNAVAILABLE as error:  # the notes show at the next reload; events repair themselves, notes do not
            outage.database_outage.failed(error)
            return
        if self._stream is not None:  # still open
            await self.send_messages(frame)

    async def refresh_status(self, session_id: str):
        """The header changes with no event (a running session turns stalled with silence alone, a
        fork is made of it): it is re-sent when that happens.

        One check per session per process (`shared_status`), whatever the number of its page
        sockets; one render per change for the sockets with the same view and rights.
        """
        changes = shared_status.follow(session_id, self.page_state)
        tab = session_page.TRANSCRIPT if self.raw_from is None else session_page.RAW
        try:
            while True:
                change, follows = await changes.get()
                with_blocks = follows and tab == session_page.TRANSCRIPT
                render = functools.partial(render_state_frame, session_id, self.can_fork, tab, with_blocks, self.all_calls, follows, self.note_rights)
                key = ("state", session_id, change, follows, tab, self.can_fork, self.all_calls, self.note_rights.key)
                if self.timeline:  # an open turn's bar reads stalled, or running again
                    render, key = functools.partial(render_timeline_frame, session_id, None, self.turn, self.can_fork), ("timeline-state", session_id, change, self.turn, self.can_fork)
                await self.send_messages(await shared_frames.get(key, render))
        finally:
            shared_status.unfollow(session_id, changes)

    async def disconnect(self, code):
        self.cancel_renewal()
        await super().disconnect(code)

    async def _session_gone(self) -> None:
        """Say so on the page before closing 4410 (turnlog.js words the close the same)."""
        await self.send(text_data=GONE_FRAME)
        await super()._session_gone()

    async def _stop_stream(self) -> None:
        task, self._status_watch = self._status_watch, None
        await stop_task(task)
        await super()._stop_stream()


class SharedRenders:
    """Frames rendered once per process for every page socket that needs the same one.

    Viewers of a session in step with the log need the same frame for each
    commit; rendering it for each of them (~10 ms a frame) made the CPU, not
    the sockets, the limit of how many browsers one process could serve. The
    first socket starts the render and the others await it; a frame is kept
    for `keep_seconds`, long enough for every socket to ask, and a failed
    render is not kept.
    """

    def __init__(self, keep_seconds: float = 10.0):
        self.keep_seconds = keep_seconds
        self._renders: dict[tuple, asyncio.Future] = {}

    async def get(self, key: tuple, render: Callable[[], str]) -> str:
        future = self._renders.get(key)
        if future is None:
            # On the database threads, which keep their SQLite connection and give PostgreSQL pool
            # connections back after each call: channels' sync thread opened a new connection per render.
            future = asyncio.ensure_future(db_threads.run(render))
            self._renders[key] = future
            future.add_done_callback(lambda done: self._forget_later(key, done))
        # A viewer that goes away must not cancel the render the others await.
        return await asyncio.shield(future)

    def _forget_later(self, key: tuple, done: asyncio.Future) -> None:
        if done.cancelled() or done.exception() is not None:
            self._forget(key, done)
        else:
            asyncio.get_running_loop().call_later(self.keep_seconds, self._forget, key, done)

    def _forget(self, key: tuple, future: asyncio.Future) -> None:
        if self._renders.get(key) is future:
            del self._renders[key]

    def __len__(self) -> int:
        return len(self._renders)


shared_frames = SharedRenders()


class SharedStatus:
    """One check per watched session per process of what its header shows that no event changes.

    Each page socket `follow`s its session with the state its page shows (the
    header's data-state, sent by the page as `state`) and gets a queue of
    changes; one task per session reads `session_page.header_fingerprint` at
    once when a socket joins, then every STATUS_REFRESH_SECONDS, and tells each
    socket whose page shows another state: the round's number, and whether
    the blocks must follow too (the sockets share a render of
    `render_state_frame` per round, view and rights). So a page whose session
    changed between its load and its socket (or while it reconnected) is set
    right as well. Without the database a round is skipped (the streams wait for it anyway).
    """

    def __init__(self):
        # session id -> (each follower's queue and the state its page shows, the check, its wake-up)
        self._sessions: dict[str, tuple[dict[asyncio.Queue, str | None], asyncio.Task, asyncio.Event]] = {}

    def follow(self, session_id: str, shown: str | None = None) -> asyncio.Queue:
        changes: asyncio.Queue = asyncio.Queue()
        watched = self._sessions.get(session_id)
        if watched is None or watched[1].done() or watched[1].get_loop() is not asyncio.get_running_loop():
            wake = asyncio.Event()
            watched = self._sessions[session_id] = ({}, asyncio.create_task(self._check(session_id, wake)), wake)
        watched[0][changes] = shown
        watched[2].set()
        return changes

    def unfollow(self, session_id: str, changes: asyncio.Queue) -> None:
        watched = self._sessions.get(session_id)
        if watched is None or changes not in watched[0]:
            return
        del watched[0][changes]
        if not watched[0]:
            del self._sessions[session_id]
            watched[1].cancel()

    async def _check(self, session_id: str, wake: asyncio.Event) -> None:
        while True:
            wake.clear()
            try:
                current = await database_sync_to_async(session_page.header_fingerprint)(session_id)
                watched = self._sessions.get(session_id)
                number = next(_header_changes)
                for changes, shown in list(watched[0].items()) if watched is not None else ():
                    if shown is not None and shown != current:
                        changes.put_nowait((number, session_page.blocks_follow(session_page.status_in(shown), session_page.status_in(current))))
                    watched[0][changes] = current
            except DATABASE_UNAVAILABLE as error:
                outage.database_outage.failed(error)
            except ObjectDoesNotExist:
                return  # deleted: its sockets are told by their stream (4410)
            except Exception:
                logger.exception("checking the status of session %s failed", session_id)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), STATUS_REFRESH_SECONDS)

    def __len__(self) -> int:
        return len(self._sessions)


shared_status = SharedStatus()


async def stop_task(task: asyncio.Task | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
