"""Following a session over its websocket stream, resuming after every close but a final refusal.

The server sends `{"type": "session_event", "event": Event}` frames: the
backlog after `after`, then each new event once, in seq order (docs/api.md,
"Websocket stream"). After a close, the iterator reconnects with
`after` = the last seq it yielded, so it never skips or repeats an event.
It stops for good on the codes that no retry can change: 4401
(unauthenticated, or the token was revoked or expired), 4404 (no such
session), 4400 (an `after` below -1), 4403, which only a request this
client never makes gets (a login-cookie socket from another origin), and
1009, this client's own close of a frame larger than `max_frame_bytes`
(the same event would come again).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from websockets.asyncio.client import connect as connect_async
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import connect as connect_sync

from turnlog_client.endpoints import stream_url
from turnlog_client.errors import StreamClosed
from turnlog_client.retry import Backoff
from turnlog_client.types import Event

FRAME_TOO_LARGE = 1009  # websockets' close of a message above its max_size
FINAL_CLOSE_CODES = frozenset({4400, 4401, 4403, 4404, FRAME_TOO_LARGE})
# Above the server's default websocket message limit (TURNLOG_WS_MAX_MESSAGE_BYTES, 96 MiB and 64 KiB for its
# default 16 MiB requests): every event such a server accepts fits. A server with larger limits needs more.
MAX_FRAME_BYTES = 128 * 1024 * 1024
RECONNECT = Backoff(initial=0.1, maximum=5.0)


class Cursor:
    """Where a stream is: the last seq yielded, and how many reconnects in a row found nothing new."""

    def __init__(self, after: int | None):
        self.after = after
        self.failures = 0

    def take(self, raw: str | bytes) -> Event | None:
        """The event of a frame, or None for a frame to skip (another type, or a seq already yielded)."""
        frame = json.loads(raw)
        if not isinstance(frame, dict) or frame.get("type") != "session_event":
            return None
        event: Event = frame["event"]
        if self.after is not None and event["seq"] <= self.after:
            return None
        self.after, self.failures = event["seq"], 0
        return event

    def closed(self, code: int | None, reason: str) -> float:
        """Seconds to wait before reconnecting; raises StreamClosed on a final code."""
        if code in FINAL_CLOSE_CODES:
            raise StreamClosed(code, reason)
        delay = RECONNECT.delay(self.failures)
        self.failures += 1
        return delay


def close_of(error: BaseException | None, connection: Any, max_frame_bytes: int | None) -> tuple[int | None, str]:
    if isinstance(error, ConnectionClosed) and error.sent is not None and error.sent.code == FRAME_TOO_LARGE:
        return FRAME_TOO_LARGE, f"a frame was larger than max_frame_bytes ({max_frame_bytes}): stream with a larger one"
    if isinstance(error, ConnectionClosed) and error.rcvd is not None:
        return error.rcvd.code, error.rcvd.reason
    if connection is not None and connection.close_code is not None:
        return connection.close_code, connection.close_reason or ""
    return None, str(error or "")


def follow(
    base_url: str, headers: Mapping[str, str], session_id: str, after: int | None, *, open_timeout: float,
    max_frame_bytes: int | None = MAX_FRAME_BYTES,
) -> Iterator[Event]:  # fmt: skip
    """Every event of the session with seq > `after` (all when None or -1), then each new one, for ever.

    A frame (one event's JSON) larger than `max_frame_bytes` (None: any size) ends it with StreamClosed(1009).
    Closing the generator (or leaving a `for` loop over it) closes the socket.
    """
    cursor = Cursor(after)
    while True:
        connection, error = None, None
        try:
            with connect_sync(
                stream_url(base_url, session_id, cursor.after), additional_headers=dict(headers),
                open_timeout=open_timeout, max_size=max_frame_bytes,
            ) as connection:  # fmt: skip
                for raw in connection:
                    if (event := cursor.take(raw)) is not None:
                        yield event
        except InvalidURI:
            raise
        except (ConnectionClosed, InvalidHandshake, OSError, TimeoutError) as exc:
            error = exc
        time.sleep(cursor.closed(*close_of(error, connection, max_frame_bytes)))


async def follow_async(
    base_url: str, headers: Mapping[str, str], session_id: str, after: int | None, *, open_timeout: float,
    max_frame_bytes: int | None = MAX_FRAME_BYTES,
) -> AsyncIterator[Event]:  # fmt: skip
    """`follow` for asyncio: an async iterator with the same resumption."""
    cursor = Cursor(after)
    while True:
        connection, error = None, None
        try:
            async with connect_async(
                stream_url(base_url, session_id, cursor.after), additional_headers=dict(headers),
                open_timeout=open_timeout, max_size=max_frame_bytes,
            ) as connection:  # fmt: skip
                async for raw in connection:
                    if (event := cursor.take(raw)) is not None:
                        yield event
        except InvalidURI:
            raise
        except (ConnectionClosed, InvalidHandshake, OSError, TimeoutError) as exc:
            error = exc
        await asyncio.sleep(cursor.closed(*close_of(error, connection, max_frame_bytes)))
