"""The server process's clock for finished runs and held spans: it writes a run's turn_end, and the spans
held for a conversation no span named, when the settle time is up.

The endpoint schedules a session when a run's root span arrived; one daemon
thread per process waits for the earliest due session and has
`services.close_settled_turns` close every session then due, in one
transaction, which decides again under each session's lock (a span that
arrived meanwhile restarts the quiet time, and the answer says when to look
again). The write runs on the server's database threads (db_threads.run_append:
on SQLite the one writer thread, where the appends queue, rather than a
second writer waiting for the lock), so its commit publishes through the
server's event loop as an append's does. A restart forgets the schedule:
the recovery worker closes what it left behind (sessions_app/worker.py), so
a server without the worker still closes the turns it saw finish, and the
worker alone closes the rest.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import logging
import threading
import time

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from sessions_app import services
from sessions_app.lib import db_threads

logger = logging.getLogger(__name__)
# After a failed attempt (a database outage), look again this much later.
RETRY_SECONDS = 5.0
# Sessions closed in one transaction at most (SQLite's write lock is held meanwhile).
ROUND_SESSIONS = 200
# How long a round may wait for the server's database threads before it counts as failed.
ROUND_TIMEOUT_SECONDS = 60.0

# What the schedule holds in place of a session id for "spans held for their conversation" (no session id is empty).
HELD_SPANS = ""

_condition = threading.Condition()
_due: list[tuple[float, str]] = []  # (monotonic time, session id), earliest first
_thread: threading.Thread | None = None
_loop: asyncio.AbstractEventLoop | None = None  # the server's event loop, seen when a request scheduled


def schedule(session_id: str, after_seconds: float) -> None:
    """Close the session's finished runs after `after_seconds` (no-op when the closer is off); HELD_SPANS:
    write the held spans then due."""
    global _thread, _loop
    if not settings.TURNLOG_OTLP_CLOSER:
        return
    try:
        _loop = asyncio.get_running_loop()
    except RuntimeError:  # the closer itself, scheduling again
        pass
    with _condition:
        heapq.heappush(_due, (time.monotonic() + max(0.0, after_seconds), session_id))
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="turnlog-otlp-closer", daemon=True)
            _thread.start()
        _condition.notify()


def _next_due() -> list[str]:
    """The sessions due now (at least one; waits for it), each once."""
    with _condition:
        while not (_due and _due[0][0] <= time.monotonic()):
            _condition.wait(timeout=(_due[0][0] - time.monotonic()) if _due else None)
        due: dict[str, None] = {}
        while _due and _due[0][0] <= time.monotonic() and len(due) < ROUND_SESSIONS:
            due[heapq.heappop(_due)[1]] = None
        return list(due)


def _run() -> None:
    while True:
        session_ids = _next_due()
        try:
            again = _close(session_ids)
        except (DatabaseError, concurrent.futures.TimeoutError):
            logger.warning("OTLP closer: the database failed closing runs of %d sessions; trying again in %s s", len(session_ids), RETRY_SECONDS)
            again = dict.fromkeys(session_ids, RETRY_SECONDS)
        except Exception:
            logger.exception("OTLP closer: closing runs of %d sessions failed", len(session_ids))
            again = {}
        for session_id, after_seconds in again.items():
            schedule(session_id, after_seconds)


def _close(session_ids: list[str]) -> dict[str, float]:
    again: dict[str, float] = {}
    if HELD_SPANS in session_ids:
        released = _on_database_thread(services.release_held_spans)
        again |= released.settle
        if released.held_due is not None:
            again[HELD_SPANS] = released.held_due
    if sessions := [s for s in session_ids if s != HELD_SPANS]:
        again |= _on_database_thread(services.close_settled_turns, session_ids=sessions)
    return again


def _on_database_thread(write, **kwargs):
    loop = _loop
    if loop is not None and loop.is_running():
        call = db_threads.run_append(write, **kwargs)
        return asyncio.run_coroutine_threadsafe(call, loop).result(timeout=ROUND_TIMEOUT_SECONDS)
    close_old_connections()  # no server loop (a management command's process): this thread's own connection
    try:
        return write(**kwargs)
    finally:
        close_old_connections()
