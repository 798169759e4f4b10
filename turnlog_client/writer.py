"""`Writer`: one session's events, sent in order, in batches, each stored exactly once.

The rules that make "exactly once" hold:

- A batch is fixed when it is cut: its events (encoded once, sent byte for
  byte), its Idempotency-Key (random, never reused) and, once it is the next
  to send, its `expected_seq` (the count the previous batch left). Every
  attempt sends that same request. A writer that does not know the count
  (started from a spool while the server was away, for a session that may
  hold events) sends its first batch without `expected_seq` and learns the
  count from the answer; the key still makes its retries safe.
- One batch is in flight at a time, so the batches' seqs follow each other.
- No answer (a timeout, a broken connection), 429, 503 and other 5xx: the
  same request again, after a backoff that honours Retry-After. If the
  server had committed it, the key makes it answer the first answer again
  and store nothing (the server checks the key before `expected_seq`).
- `409 seq_conflict` on an attempt with that key therefore proves the batch
  was not stored and that someone else wrote to the session (a recovery,
  another writer): the writer stops and raises SeqConflict; it never sends
  the batch again under a new key to get around it.
- Any other refusal (401, 403, 404, 413, 422) is final too: the writer
  stops, keeps the batch, and raises the error from `add`, `flush` and
  `close`.

The batching: a batch is cut when `batch_size` events or `max_batch_bytes`
are waiting, when the oldest has waited `flush_interval` seconds, on
`flush()`, and on `close()` (also run at interpreter exit for writers not
closed). A background thread sends. With a spool (turnlog_client.spool) the
events survive the process and a server that cannot be reached; a writer
that started without the server creates the session first (a `session_exists`
answer means it is there: done too).

Thread-safe: several threads may add events (an agent's parallel tools).
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import datetime
import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from turnlog_client import endpoints
from turnlog_client.errors import FlushTimeout, SessionExists, TurnlogError, retryable
from turnlog_client.retry import Backoff
from turnlog_client.types import EVENT_TYPES

if TYPE_CHECKING:
    from turnlog_client.client import Client
    from turnlog_client.spool import Spool

logger = logging.getLogger("turnlog_client")
MAX_BATCH_BYTES = 4 << 20  # half of the 8 MiB request the API promises to accept
_DEFAULT: Any = object()


@dataclasses.dataclass
class Batch:
    key: str
    events: list[bytes]
    expected_seq: int | None = None  # set when it becomes the next to send, then never changed (None: count unknown)
    fixed: bool = False  # expected_seq is set


CREATION = "creation"  # the thread's job when the session's creation waits (a spool started without the server)


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def encode_event(event_type: str, data: Mapping[str, Any], time: str | None) -> bytes:
    """The event as it will be sent, checked for what would refuse its whole batch."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"{event_type!r} is not an event type (one of {', '.join(sorted(EVENT_TYPES))})")
    if not isinstance(data, Mapping):
        raise TypeError(f"an event's data is an object (a mapping), not {type(data).__name__}")
    try:
        return json.dumps(
            {"type": event_type, "data": dict(data), "time": time or utc_now()}, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode()
    except UnicodeEncodeError as error:  # a lone surrogate: the API refuses it (invalid_text)
        raise ValueError(f"{event_type} data holds text that is not valid Unicode: {error}") from None


class Writer:
    """Sends the events of `session_id` (whose log holds `next_seq` events now) through `client`.

    `next_seq` None: the count is not known (see the module's docstring).
    `create` (create_session's fields): the session is to be created first.

    Public API (turnlog_client.session builds the turn and step structure on it):

    - `add(type, data, time=None)`: queue one event (`time` defaults to now, UTC).
    - `flush(timeout=...)`: return once every event added before is stored;
      raises FlushTimeout after `flush_timeout` seconds (the events stay
      queued and are still sent). With a spool it also returns, without
      error, while the server cannot be reached: the events are on disk.
    - `close(timeout=...)`: flush and stop. Without a spool, events that could
      not be delivered raise FlushTimeout (they are lost with the process);
      with one they stay in it for the next writer of that spool.
    - `next_seq`, `pending`, `failure`, `session_id`.
    """

    def __init__(
        self, client: Client, session_id: str, *, next_seq: int | None, create: Mapping[str, Any] | None = None,
        spool: Spool | None = None, batch_size: int = 100,
        max_batch_bytes: int = MAX_BATCH_BYTES, flush_interval: float = 1.0, flush_timeout: float | None = 30.0,
        backoff: Backoff = Backoff(),
    ):  # fmt: skip
        if batch_size < 1 or flush_interval <= 0:
            raise ValueError("batch_size must be at least 1 and flush_interval above 0")
        self.client, self.session_id = client, session_id
        self.batch_size, self.max_batch_bytes = batch_size, max_batch_bytes
        self.flush_interval, self.flush_timeout, self.backoff = flush_interval, flush_timeout, backoff
        self._spool = spool
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._buffer: list[bytes] = []
        self._buffer_bytes = 0
        self._buffer_since = 0.0  # monotonic time the oldest buffered event was added
        self._outbox: collections.deque[Batch] = collections.deque()
        self._next_seq = next_seq  # the session's count after the last delivered batch (None: not known yet)
        self._create = None if create is None else dict(create)  # the session's creation, not answered yet
        self._cut = self._delivered = 0  # events cut into batches / delivered, since this writer began
        self._failure: BaseException | None = None  # a final refusal: the writer stops
        self._trouble: BaseException | None = None  # the latest retryable failure of the batch in flight
        self._closed = self._stop = False
        if spool is not None:  # what an earlier run left: first in line, with its own keys
            with self._lock:
                for spooled in spool.batches:
                    self._outbox.append(Batch(spooled.key, spooled.events))
                    self._cut += len(spooled.events)
                for event in spool.loose:
                    self._buffer_event(event)
        self._thread = threading.Thread(target=self._run, name=f"turnlog-writer-{session_id}", daemon=True)
        self._thread.start()
        _open_writers.add(self)

    @property
    def next_seq(self) -> int | None:
        """The seq the next event to be delivered will get (the log's count after the last delivered batch);
        None until a batch is delivered, for a writer started without the server on a session it did not make."""
        with self._lock:
            return self._next_seq

    @property
    def pending(self) -> int:
        """Events added and not yet delivered."""
        with self._lock:
            return len(self._buffer) + sum(len(b.events) for b in self._outbox)

    @property
    def failure(self) -> BaseException | None:
        """The final refusal that stopped the writer, if any."""
        return self._failure

    def unsent(self) -> tuple[int | None, list[dict[str, Any]]]:
        """(next_seq, the events not yet delivered, oldest first): together with the server's log, the whole log."""
        with self._lock:
            events = [e for batch in self._outbox for e in batch.events] + self._buffer
            return self._next_seq, [json.loads(e) for e in events]

    def add(self, event_type: str, data: Mapping[str, Any], time: str | None = None) -> None:
        """Queue one event. Raises the writer's failure, if it has stopped, and ValueError for an event the API would refuse."""
        encoded = encode_event(event_type, data, time)
        with self._lock:
            self._check_usable()
            if self._spool is not None:
                self._spool.add(encoded)
            self._buffer_event(encoded)
            if len(self._buffer) >= self.batch_size or self._buffer_bytes >= self.max_batch_bytes:
                self._cut_buffer()

    def flush(self, timeout: float | None = _DEFAULT) -> None:
        """Return once every event added so far is stored (or, with a spool, safe on disk while the server is away)."""
        timeout = self.flush_timeout if timeout is _DEFAULT else timeout
        with self._lock:
            self._check_usable()
            self._cut_buffer()
            self._wait_delivered(self._cut, timeout, spooled_is_enough=True)

    def close(self, timeout: float | None = _DEFAULT) -> None:
        """Deliver what is queued (within `timeout`, default `flush_timeout`) and stop the sending thread.

        Raises the writer's failure, or FlushTimeout when events could not be
        delivered and there is no spool to keep them.
        """
        timeout = self.flush_timeout if timeout is _DEFAULT else timeout
        error: BaseException | None = None
        with self._lock:
            if self._closed:
                return
            self._closed = True
            _open_writers.discard(self)
            try:
                if self._failure is not None:
                    raise self._failure
                self._cut_buffer()
                self._wait_delivered(self._cut, timeout, spooled_is_enough=False)
            except FlushTimeout as exc:
                if self._spool is None:
                    error = exc
                else:
                    creation = " and its creation" if self._create is not None else ""
                    logger.warning(
                        "turnlog: %d events of %s%s stay in the spool %s", self._cut - self._delivered, self.session_id, creation, self._spool.path
                    )  # fmt: skip
            except BaseException as exc:
                error = exc
            self._stop = True
            self._changed.notify_all()
        self._thread.join(timeout=self.client.timeout + 1)
        with self._lock:
            if self._spool is not None:
                self._spool.close(remove=not self._outbox and not self._buffer and self._create is None and not self._thread.is_alive())
        if error is not None:
            raise error

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Everything below runs with self._lock held, but _run and _send.

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise TurnlogError(f"the writer of session {self.session_id} is closed")

    def _buffer_event(self, encoded: bytes) -> None:
        if not self._buffer:
            self._buffer_since = time.monotonic()
            self._changed.notify_all()  # the thread sleeps without a deadline while nothing waits
        self._buffer.append(encoded)
        self._buffer_bytes += len(encoded)

    def _cut_buffer(self) -> None:
        """Cut every buffered event into batches (at most batch_size events and about max_batch_bytes each)."""
        while self._buffer:
            count, size = 0, 0
            while count < min(self.batch_size, len(self._buffer)) and (count == 0 or size + len(self._buffer[count]) <= self.max_batch_bytes):
                size += len(self._buffer[count])
                count += 1
            batch = Batch(uuid.uuid4().hex, self._buffer[:count])
            if self._spool is not None:
                self._spool.cut(batch.key, count)  # on disk before it can be sent
            del self._buffer[:count]
            self._buffer_bytes -= size
            self._outbox.append(batch)
            self._cut += count
        self._changed.notify_all()

    def _wait_delivered(self, target: int, timeout: float | None, *, spooled_is_enough: bool) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._delivered < target or self._create is not None:
            if self._failure is not None:
                raise self._failure
            if spooled_is_enough and self._spool is not None and self._trouble is not None:
                return  # the server is away; the spool holds the events and the thread sends them when it is back
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                what = f"{target - self._delivered} events of session {self.session_id}" + (" (and its creation)" if self._create is not None else "")
                raise FlushTimeout(f"{what} not delivered within {timeout} s", self._trouble)
            self._changed.wait(remaining)

    def _next_job(self) -> Batch | str | None:
        """The creation or the batch to send now, waiting for one; None when the writer stops."""
        while not self._stop:
            if self._buffer and time.monotonic() - self._buffer_since >= self.flush_interval:
                self._cut_buffer()
            if self._create is not None and self._failure is None:
                return CREATION  # before any batch: the session must exist for its events
            if self._outbox and self._failure is None:
                batch = self._outbox[0]
                if not batch.fixed:
                    batch.expected_seq, batch.fixed = self._next_seq, True
                return batch
            wait = self._buffer_since + self.flush_interval - time.monotonic() if self._buffer else None
            self._changed.wait(None if wait is None else max(wait, 0.001))
        return None

    def _run(self) -> None:
        attempt = 0
        while True:
            with self._lock:
                job = self._next_job()
            if job is None:
                return
            try:
                answer = self._send(job) if isinstance(job, Batch) else self._create_session()
            except Exception as error:
                with self._lock:
                    if not retryable(error):
                        self._failure = error
                        self._changed.notify_all()
                        continue
                    self._trouble = error
                    self._changed.notify_all()
                    self._changed.wait_for(lambda: self._stop, timeout=self.backoff.delay(attempt, getattr(error, "retry_after", None)))
                attempt += 1
                continue
            attempt = 0
            with self._lock:
                if isinstance(job, Batch):
                    self._sent(job, answer)
                else:
                    self._created(answer)
                self._trouble = None
                self._changed.notify_all()

    def _send(self, batch: Batch) -> dict[str, Any]:
        assert batch.fixed
        result = self.client.send(endpoints.append_encoded(self.session_id, batch.events, batch.expected_seq, batch.key))
        # The server's promise for expected_seq; anything else is a bug worth stopping for.
        if batch.expected_seq is not None and result["first_seq"] != batch.expected_seq:
            raise TurnlogError(f"batch {batch.key} was stored at seq {result['first_seq']}, not {batch.expected_seq}")
        return result

    def _create_session(self) -> int | None:
        """Send the creation: 0 (the count) when it made the session, None when the session was there already
        (made by an earlier attempt whose answer was lost, or by someone else, with events or not)."""
        assert self._create is not None
        try:
            self.client.create_session(self.session_id, **self._create)
        except SessionExists:
            return None
        return 0

    def _created(self, next_seq: int | None) -> None:
        self._create = None
        if next_seq is not None:
            self._next_seq = next_seq  # nothing of this writer was sent before the creation: the log is empty
        if self._spool is not None and not self._spool.closed:
            self._spool.created(next_seq)

    def _sent(self, batch: Batch, result: dict[str, Any]) -> None:
        self._outbox.popleft()
        self._next_seq = result["next_seq"]
        self._delivered += len(batch.events)
        if self._spool is not None and not self._spool.closed:
            self._spool.delivered(batch.key, self._next_seq)


_open_writers: weakref.WeakSet[Writer] = weakref.WeakSet()


@atexit.register
def _close_open_writers() -> None:
    """Flush on exit: writers still open when the interpreter ends deliver what they hold (or leave it in their spool)."""
    for writer in list(_open_writers):
        try:
            writer.close()
        except Exception as error:
            logger.error("turnlog: could not deliver the last events of session %s: %s", writer.session_id, error)
