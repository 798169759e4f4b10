"""Publishing: what a commit stored goes to the channel layer after that commit, from this one place.

Every write publishes through the `*_on_commit` functions (session-log.md section 7).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import uuid
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from sessions_app.lib import db_threads, instruments
from sessions_app.log import events as log_events

if TYPE_CHECKING:
    from sessions_app.models import Event

    from .event_rows import StoredEvent

logger = logging.getLogger(__name__)


# The channel-layer group of the session list page.
SESSIONS_GROUP = "sessions"
# The channel-layer group of every process's check of its open streams' credentials (dashboard.live.credentials).
CREDENTIALS_GROUP = "credentials"


def session_group(session_id: str) -> str:
    """The channel-layer group of a session.

    Session ids may hold characters group names may not (":"), so the group
    is named by a digest of the id.
    """
    return "session." + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def publish_events_on_commit(session_id: str, events: Sequence[StoredEvent | Event]) -> None:
    """Publish `events` once the caller's transaction commits (never, if it rolls back)."""
    transaction.on_commit(lambda: publish_events(session_id, events))


def publish_session_changed_on_commit(session_id: str) -> None:
    transaction.on_commit(lambda: publish_session_changed(session_id))


def publish_notes_changed_on_commit(session_id: str, seqs: Sequence[int | None]) -> None:
    """Tell the session's pages, once the caller's transaction commits, that notes at `seqs` changed
    (None: a note on the whole session). Notes are not events: the message carries no seq of the log."""
    change = uuid.uuid4().hex  # one render per change for the pages alike, live.SharedRenders
    message = {"type": "session_notes", "session_id": session_id, "seqs": sorted(set(seqs), key=lambda s: (s is not None, s)), "change": change}
    transaction.on_commit(lambda: _send([(session_group(session_id), message)]))


# The longest a logout (or another end of a credential) waits for the layer to take the message telling it.
CREDENTIALS_SEND_SECONDS = 0.5


def publish_credentials_ended_on_commit() -> None:
    """Tell every process, once the caller's transaction commits, that a credential may have stopped authenticating
    (a login ended, a password changed, a user deactivated, a token revoked): each checks its open streams at once.
    A layer that does not take it within CREDENTIALS_SEND_SECONDS is left: the periodic checks remain."""
    transaction.on_commit(lambda: _send([(CREDENTIALS_GROUP, {"type": "credentials_ended"})], within=CREDENTIALS_SEND_SECONDS))


def publish_events(session_id: str, events: Sequence[StoredEvent | Event]) -> None:
    """Publish a commit's events once each, in seq order, then tell the list.

    One `session_events` message per commit carries all of its events: a
    layer round trip per event costs about 1 ms on Redis, which would cap
    ingest near 1,000 events/s (see docs/performance.md). Best effort: a
    failing layer is logged and never breaks the append; consumers repair
    gaps from the database by seq.
    """
    if not events:
        return
    wires = [log_events.event_to_wire(e) for e in events]  # it reads seq, type, time and data, which both kinds have
    _send([(session_group(session_id), {"type": "session_events", "session_id": session_id, "events": wires}), session_changed(session_id)])


def publish_session_changed(session_id: str) -> None:
    _send([session_changed(session_id)])


def session_changed(session_id: str) -> tuple[str, dict]:
    """One message per commit for the session list (new session, new status, new count)."""
    return SESSIONS_GROUP, {"type": "session_changed", "session_id": session_id}


def _send(messages: list[tuple[str, dict]], *, within: float | None = None) -> None:
    """`within`: the longest the caller's thread waits for the layer (off the event loop); None: as long as it takes."""
    layer = get_channel_layer()
    if layer is None:
        return
    if (loop := db_threads.caller_loop()) is not None:
        # On a database thread: posted to the server's event loop rather than holding up this
        # thread (and the answer) for a round trip through it; a group's messages stay in order.
        try:
            loop.call_soon_threadsafe(_post, layer, messages)
        except RuntimeError:  # the loop closed meanwhile (the server is stopping): the log has the events
            logger.warning("publishing %d messages skipped: the event loop is closed", len(messages))
            instruments.PUBLISH_FAILURES.labels(instruments.STOPPING).inc(len(messages))
        return
    try:
        async_to_sync(_send_all)(layer, messages) if within is None else async_to_sync(_send_all_within)(layer, messages, within)
    except Exception:
        logger.exception("publishing %d messages failed", len(messages))
        instruments.PUBLISH_FAILURES.labels(instruments.ERROR).inc(len(messages))


# Per event loop and group: the posted messages not yet sent. One task per group sends them in
# order while there are some, and groups go concurrently: with one queue for the process, 500
# sessions at 100 commits/s waited seconds in line, a Redis round trip per commit.
_outboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, collections.deque]] = weakref.WeakKeyDictionary()
_sending: set[asyncio.Task] = set()  # the tasks, referenced until done (the loop keeps only weak ones)


def _post(layer, messages: list[tuple[str, dict]]) -> None:
    loop = asyncio.get_running_loop()
    outboxes = _outboxes.setdefault(loop, {})
    group = messages[0][0]
    if (outbox := outboxes.get(group)) is not None:
        outbox.append((layer, messages))
        return
    outbox = outboxes[group] = collections.deque([(layer, messages)])
    task = loop.create_task(_publish_posted(outboxes, group, outbox))
    _sending.add(task)
    task.add_done_callback(_sending.discard)


async def _publish_posted(outboxes: dict, group: str, outbox: collections.deque) -> None:
    try:
        while outbox:
            layer, messages = outbox[0]
            try:
                await _send_all(layer, messages)
            except Exception:
                logger.exception("publishing %d messages failed", len(messages))
                instruments.PUBLISH_FAILURES.labels(instruments.ERROR).inc(len(messages))
            outbox.popleft()
    finally:
        if outboxes.get(group) is outbox:
            del outboxes[group]


async def _send_all_within(layer, messages: list[tuple[str, dict]], seconds: float) -> None:
    try:
        async with asyncio.timeout(seconds):
            await _send_all(layer, messages)
    except TimeoutError:  # a Redis that does not answer (a connect to an unreachable host waits 3 s)
        logger.warning("publishing %d messages gave up after %s s", len(messages), seconds)
        instruments.PUBLISH_FAILURES.labels(instruments.UNREACHABLE).inc(len(messages))


async def _send_all(layer, messages: list[tuple[str, dict]]) -> None:
    for group, message in messages:
        await layer.group_send(group, message)
