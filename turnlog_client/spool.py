"""The writer's durable spool: a local append-only file of one session's events, so none is lost or sent twice.

With a spool, every event the writer accepts is written to the file before
`add` returns (an `os.write`: it survives the process being killed, as the
kernel keeps it), and every batch is fixed there, with its Idempotency-Key,
and fsynced before it is sent for the first time. After an answer the
delivery is recorded. A writer that opens the same file later (after a
SIGKILL, say) sends the undelivered batches again, in order, with their own
keys: a batch the server stored before the crash (killed between the answer
and its record) is answered again from the key and stored nothing twice.
Events written but never cut into a batch were never sent; they form new
batches with new keys.

A spool can start without the server (Client.writer, when it cannot be
reached). The session's creation then waits in the file and is sent first.
The session's count is 0 when the writer made the id (no one else knows it)
or the creation made the session. For a session the writer was given, which
may hold events, it is unknown until a batch is delivered: the first
undelivered batch is sent without `expected_seq` (its answer's `next_seq` is
the count), on every attempt, so its key still settles a retry; the batches
after it carry `expected_seq` as always. A creation answered
`session_exists` is done too (an earlier attempt whose answer was lost, or a
session that was there).

The file holds one JSON record per line:

    {"spool": 2, "session": ID, "next_seq": N or null, "create": {...} or null}
                                                  first line: the seq after the last delivered batch (null:
                                                  not known yet), and the session's creation still to send
    {"event": {...}}                              an event, as it will be sent
    {"cut": KEY, "count": N}                      the oldest N loose events form the batch KEY
    {"created": true, "next_seq": N or null}      the creation was answered (N = 0: it made the session)
    {"sent": KEY, "next_seq": N}                  the batch KEY was stored (or replayed)

A version 1 file (no `create`, `next_seq` always a number) reads as it
always did; a client that knows only version 1 refuses a version 2 file
rather than misread it. Records that decide how a later batch is sent (a cut, the creation's
answer) are fsynced before anything is sent after them.

A torn last line (the process died while writing it) is dropped: an event
whose `add` never returned, or a cut that was never sent (cuts are fsynced
before sending). Another process holding the same spool is refused (flock).
Once everything is delivered and the writer closes, the file is removed.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from turnlog_client.errors import SpoolError

VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: what clients before the creation record wrote
COMPACT_BYTES = 1 << 20  # rewrite the file without its delivered batches past this size
EVENT_PREFIX = b'{"event":'


@dataclasses.dataclass
class SpooledBatch:
    key: str
    events: list[bytes]


class Spool:
    """One session's spool file, held by this process until `close`. Not thread-safe: the writer holds its lock."""

    def __init__(self, path: Path, lock_fd: int):
        self.path = path
        self._lock_fd = lock_fd
        self._fd: int | None = None
        self.session_id: str | None = None  # None: nothing to resume (a fresh file, or all delivered)
        self.next_seq: int | None = None  # the session's count after the last delivered batch; None: not known yet
        self.create: dict[str, Any] | None = None  # the session's creation, still to send (create_session's fields)
        self.batches: list[SpooledBatch] = []  # cut and not delivered, oldest first
        self.loose: list[bytes] = []  # written, not cut

    @classmethod
    def open(cls, path: str | os.PathLike[str], session_id: str | None) -> Spool:
        """The spool at `path`, locked for this process, with what an earlier run left undelivered."""
        path = Path(path)
        lock_fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock_fd)
            raise SpoolError(f"{path} is in use by another process (its lock {path}.lock is held)") from None
        spool = cls(path, lock_fd)
        try:
            spool._load()
            if spool.session_id is not None and not spool.holds_undelivered():
                spool.session_id = spool.next_seq = None  # all delivered: the server knows better than the file
            if session_id is not None and spool.session_id not in (None, session_id):
                raise SpoolError(f"{path} holds undelivered events of session {spool.session_id!r}, not {session_id!r}")
            if spool.session_id is not None:
                spool._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            spool.close(remove=False)
            raise
        return spool

    @property
    def closed(self) -> bool:
        return self._lock_fd < 0

    def holds_undelivered(self) -> bool:
        """Events, or the session's creation, the server does not have yet."""
        return bool(self.batches or self.loose or self.create is not None)

    def start(self, session_id: str, next_seq: int | None, *, create: Mapping[str, Any] | None = None) -> None:
        """Begin a fresh file for `session_id`, whose next seq is `next_seq` (None: unknown until a batch is
        delivered), with the session's creation (`create`) to send first when the server has not made it."""
        self.session_id, self.next_seq = session_id, next_seq
        self.create = None if create is None else dict(create)
        self._rewrite()

    def created(self, next_seq: int | None) -> None:
        """The creation was answered: `next_seq` 0 when it made the session, None when the session was there."""
        if self.create is None:
            raise SpoolError(f"{self.path}: no creation of session {self.session_id} to record")
        self.create = None
        if next_seq is not None:
            self.next_seq = next_seq
        self._write(self._record({"created": True, "next_seq": next_seq}))
        if self._fd is not None:
            os.fsync(self._fd)  # a batch sent after it carries expected_seq 0: a lost record would change its body

    def add(self, event: bytes) -> None:
        self.loose.append(event)
        self._write(EVENT_PREFIX + event + b"}\n")

    def cut(self, key: str, count: int) -> None:
        """The oldest `count` loose events become the batch `key`: on disk (fsynced) before it is ever sent."""
        batch, self.loose = SpooledBatch(key, self.loose[:count]), self.loose[count:]
        self.batches.append(batch)
        self._write(self._record({"cut": key, "count": count}))
        if self._fd is not None:
            os.fsync(self._fd)

    def delivered(self, key: str, next_seq: int) -> None:
        """The oldest batch was stored: `next_seq` is the session's count after it."""
        if not self.batches or self.batches[0].key != key:
            raise SpoolError(f"{self.path}: batch {key} is not the oldest undelivered one")
        self.batches.pop(0)
        self.next_seq = next_seq
        self._write(self._record({"sent": key, "next_seq": next_seq}))
        if not self.batches and self._fd is not None and os.fstat(self._fd).st_size > COMPACT_BYTES:
            self._rewrite()

    def close(self, *, remove: bool) -> None:
        """Release the file; `remove` deletes it (everything delivered: nothing for a next run)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if remove and self.path.exists():
            self.path.unlink()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    @staticmethod
    def _record(value: object) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode() + b"\n"

    def _write(self, line: bytes) -> None:
        if self._fd is None:
            raise SpoolError(f"{self.path} is closed")
        view = memoryview(line)
        while view:  # os.write may write less than asked
            view = view[os.write(self._fd, view):]

    def _rewrite(self) -> None:
        """Replace the file, atomically, by one holding only what is undelivered."""
        lines = [self._record({"spool": VERSION, "session": self.session_id, "next_seq": self.next_seq, "create": self.create})]
        for batch in self.batches:
            lines += [EVENT_PREFIX + e + b"}\n" for e in batch.events] + [self._record({"cut": batch.key, "count": len(batch.events)})]
        lines += [EVENT_PREFIX + e + b"}\n" for e in self.loose]
        temporary = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            content = memoryview(b"".join(lines))
            while content:
                content = content[os.write(fd, content):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a power loss
        finally:
            os.close(directory)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)

    def _load(self) -> None:
        if not self.path.exists():
            return
        raw = self.path.read_bytes()
        end = raw.rfind(b"\n") + 1  # a torn last line was never acknowledged: drop it
        if end != len(raw):
            with open(self.path, "r+b") as file:
                file.truncate(end)
        lines = raw[:end].splitlines()
        if not lines:
            return
        try:
            header = json.loads(lines[0])
            self.session_id, self.next_seq, self.create = header["session"], header["next_seq"], header.get("create")
            assert header["spool"] in READABLE_VERSIONS
        except (ValueError, KeyError, TypeError, AssertionError, AttributeError):
            raise SpoolError(f"{self.path} is not a spool of version {' or '.join(map(str, READABLE_VERSIONS))}") from None
        for number, line in enumerate(lines[1:], 2):
            if line.startswith(EVENT_PREFIX) and line.endswith(b"}"):
                self.loose.append(line[len(EVENT_PREFIX) : -1])  # the very bytes it was sent as
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise SpoolError(f"{self.path}, line {number}: not a spool record") from None
            if "cut" in record:
                count = record["count"]
                self.batches.append(SpooledBatch(record["cut"], self.loose[:count]))
                self.loose = self.loose[count:]
            elif "created" in record:
                self.create = None
                if record["next_seq"] is not None:
                    self.next_seq = record["next_seq"]
            elif "sent" in record:
                if not self.batches or self.batches[0].key != record["sent"]:
                    raise SpoolError(f"{self.path}, line {number}: delivery of {record['sent']} out of order")
                self.batches.pop(0)
                self.next_seq = record["next_seq"]
