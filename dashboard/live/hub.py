"""The per-process fan-out hub: one subscription per watched session, shared by its local sockets.

Without it every socket of a session had its own group membership, its own
channel-layer copy of each commit, its own seq-ordered stream and its own
database reads for every gap; 100 viewers of a session cost 100 of each.
Now each process (each event loop) has one `Hub`, created lazily, and the
hub one `_Entry` per session some local socket watches. The entry holds:

- one channel of the layer, in the session's group (joined before any of
  its sockets reads its backlog, as a socket's own membership was);
- one task reading that channel into one `stream.SessionStream` (the seq
  logic: gap grace, database repair, the per-process count poll), whose
  cursor starts at the session's event_count;
- its `Follower`s, one per socket (JSON or page alike): each gets every run
  of events the entry's stream sends, and keeps its own cursor.

A `Follower` sends its socket's backlog from the database (its own `after`),
then the entry's runs, dropping what it already sent and reading from the
database any hole between the two (a socket that joined mid-run, a slow
socket whose pending runs overflowed). So each socket still gets every
event with seq > after, exactly once and in seq order, while sockets in
step with the log never touch the database and share the same lists of
events (page sockets then share each frame's render, live.SharedRenders;
JSON sockets share each event's encoded text, `json_text`).

The entry ends (leaves the group, stops its task and its poll) with its
last follower.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable

from channels.layers import get_channel_layer

from dashboard.live import stream
from sessions_app import services
from sessions_app.models import Session

logger = logging.getLogger(__name__)

# Runs of events a follower keeps while its socket is busy; beyond it they are
# dropped and read from the database when it catches up.
FOLLOWER_PENDING = 1000
# Events at most in one frame made of queued runs.
COALESCED_EVENTS = 500
# Encoded JSON frames kept for the sockets that send the same event.
JSON_TEXTS = 4096


class Follower(stream.SessionStream):
    """One socket's view of an entry's stream: its backlog, then the entry's runs, exactly once."""

    def __init__(
        self,
        session: Session,
        *,
        after: int | None,
        send: stream.SendEvents,
        failed: Callable[[], Awaitable[None]],
        notes: Callable[[dict], Awaitable[None]] | None = None,
        gone: Callable[[], Awaitable[None]] | None = None,
    ):
        super().__init__(session, after=after, send=send)
        self.failed = failed  # called when the entry's stream fails (the socket is closed with 4500)
        self.gone = gone or failed  # called when the session was deleted (the socket is closed with 4410)
        self.notes = notes  # called with each "session_notes" message (notes are not events: no seq, no stream)
        self._pending: collections.deque[list[dict]] = collections.deque()
        self._wake = asyncio.Event()
        self._stored_through = -1  # the highest seq the entry has sent (stored, and to be sent here)

    def offer_run(self, wires: list[dict]) -> None:
        """A run of consecutive events from the entry (never blocks, never touches the database)."""
        last = wires[-1]["seq"]
        if last <= self.last_sent:
            return
        self._stored_through = max(self._stored_through, last)
        if len(self._pending) < FOLLOWER_PENDING:
            self._pending.append(wires)
        self._wake.set()

    async def run(self) -> None:
        await self._retrying(self._send_from_db, through=None, reason="backlog")
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                wires = self._pending.popleft()
                # Runs that queued while the socket was busy go out as one frame: a busy process sends
                # (and page sockets render) fewer, larger frames instead of falling further behind.
                while self._pending and self._pending[0][0]["seq"] == wires[-1]["seq"] + 1 and len(wires) < COALESCED_EVENTS:
                    wires = wires + self._pending.popleft()
                if wires[-1]["seq"] <= self.last_sent:
                    continue
                if wires[0]["seq"] > self.last_sent + 1:  # a hole: joined mid-run, or runs were dropped
                    await self._retrying(self._send_from_db, through=wires[0]["seq"] - 1, reason="gap")
                await self._retrying(self._emit, [w for w in wires if w["seq"] > self.last_sent])
            if self._stored_through > self.last_sent:  # the last runs were dropped
                await self._retrying(self._send_from_db, through=self._stored_through, reason="gap")


class _Entry:
    """One watched session of the process: its group membership, its stream, its followers."""

    def __init__(self, hub: Hub, session: Session):
        self.hub = hub
        self.session_id = session.id
        self.followers: dict[Follower, None] = {}  # in joining order
        # Events up to the count read with the session are every follower's own backlog.
        self.stream = stream.SessionStream(session, after=session.event_count - 1, send=self._fan_out)
        self.joined: asyncio.Future = hub.loop.create_future()
        self.channel: str | None = None
        self.task = hub.loop.create_task(self._run(), name=f"turnlog-hub-{session.id[:40]}")

    async def _fan_out(self, wires: list[dict]) -> None:
        for follower in list(self.followers):
            follower.offer_run(wires)

    async def _run(self) -> None:
        layer, reader, group = self.hub.layer, None, services.session_group(self.session_id)
        try:
            if layer is not None:
                self.channel = await layer.new_channel()
                await layer.group_add(group, self.channel)
                reader = asyncio.create_task(self._read(layer, self.channel))
            stream.watch(self.stream)
            if not self.joined.done():
                self.joined.set_result(True)
            await self.stream.run()
        except asyncio.CancelledError:
            raise
        except stream.SessionGone:
            self.hub._forget(self)
            followers, self.followers = list(self.followers), {}
            await asyncio.gather(*(f.gone() for f in followers), return_exceptions=True)
        except Exception:
            logger.exception("the event stream of session %s failed", self.session_id)
            self.hub._forget(self)
            followers, self.followers = list(self.followers), {}
            await asyncio.gather(*(f.failed() for f in followers), return_exceptions=True)
        finally:
            if not self.joined.done():
                self.joined.cancel()
            stream.unwatch(self.stream)
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
            if self.channel is not None:
                try:
                    await layer.group_discard(group, self.channel)
                except Exception:  # the layer is down: the group entry expires on its own
                    logger.warning("leaving group %s failed", group, exc_info=True)

    async def _read(self, layer, channel: str) -> None:
        """The session's layer messages (one per commit; best effort: the stream checks each seq)."""
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # a layer failure the layer does not ride out itself: the poll serves meanwhile
                logger.warning("reading the layer for session %s failed", self.session_id, exc_info=True)
                await asyncio.sleep(stream.DB_RETRY_CAP)
                continue
            if message.get("session_id", self.session_id) != self.session_id:
                continue
            if message.get("type") == "session_notes":
                self._tell_notes(message)
                continue
            if message.get("type") != "session_events":
                continue
            events = message.get("events")
            for wire in events if isinstance(events, list) else ():
                self.stream.offer_event(wire)

    def _tell_notes(self, message: dict) -> None:
        for follower in list(self.followers):
            if follower.notes is not None:
                task = self.hub.loop.create_task(follower.notes(message))
                _telling.add(task)
                task.add_done_callback(_telling.discard)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class Hub:
    """The process's watched sessions (one per event loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.layer = get_channel_layer()
        self.entries: dict[str, _Entry] = {}

    async def subscribe(self, session: Session, *, after: int | None, send: stream.SendEvents, failed, notes=None, gone=None) -> Follower:
        """A follower of the session, its entry in the group already; the caller runs `follower.run()`."""
        entry = self.entries.get(session.id)
        if entry is None:
            entry = self.entries[session.id] = _Entry(self, session)
        follower = Follower(session, after=after, send=send, failed=failed, notes=notes, gone=gone)
        entry.followers[follower] = None
        try:
            await asyncio.shield(entry.joined)
        except BaseException:
            await self.unsubscribe(follower)
            raise
        return follower

    async def unsubscribe(self, follower: Follower) -> None:
        """Idempotent; the entry ends with its last follower."""
        entry = self.entries.get(follower.session_id)
        if entry is None or follower not in entry.followers:
            return
        entry.followers.pop(follower, None)
        if not entry.followers:
            self._forget(entry)
            await entry.stop()

    def _forget(self, entry: _Entry) -> None:
        if self.entries.get(entry.session_id) is entry:
            del self.entries[entry.session_id]


_hub: Hub | None = None
_telling: set[asyncio.Task] = set()  # notes callbacks running, referenced until done (the loop keeps only weak ones)


def hub() -> Hub:
    """The hub of the running event loop (a new one for a new loop, e.g. each test's, or a new layer)."""
    global _hub
    loop = asyncio.get_running_loop()
    if _hub is None or _hub.loop is not loop or (not _hub.entries and _hub.layer is not get_channel_layer()):
        _hub = Hub(loop)
    return _hub


def hub_sessions() -> dict[str, int]:
    """Session id -> local followers of the current hub (for tests and diagnostics)."""
    return {sid: len(entry.followers) for sid, entry in _hub.entries.items()} if _hub is not None else {}


def followers_of(session_id: str) -> list[Follower]:
    """The current hub's followers of a session, in joining order (for tests and diagnostics)."""
    entry = _hub.entries.get(session_id) if _hub is not None else None
    return list(entry.followers) if entry is not None else []


_texts: collections.OrderedDict[int, tuple[dict, str]] = collections.OrderedDict()


def json_text(wire: dict) -> str:
    """The JSON frame of an event, encoded once for all the sockets sending this same wire object."""
    key = id(wire)
    hit = _texts.get(key)
    if hit is not None and hit[0] is wire:  # held here, so its id is not reused meanwhile
        return hit[1]
    text = json.dumps({"type": "session_event", "event": wire})
    _texts[key] = (wire, text)
    if len(_texts) > JSON_TEXTS:
        _texts.popitem(last=False)
    return text
