"""The server process's clock for finished runs: it writes their turn_end when the settle time is up.

The endpoint schedules a session when a run's root span arrived; one daemon
thread per process waits for the earliest due session and calls
`services.close_settled_turns`, which decides again under the session's lock
(a span that arrived meanwhile restarts the quiet time, and the answer says
when to look again). A restart forgets the schedule: the recovery worker
closes what it left behind (sessions_app/worker.py), so a server without the
worker still closes the turns it saw finish, and the worker alone closes
the rest.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from sessions_app import services

logger = logging.getLogger(__name__)
# After a failed attempt (a database outage), look again this much later.
RETRY_SECONDS = 5.0

_condition = threading.Condition()
_due: list[tuple[float, str]] = []  # (monotonic time, session id), earliest first
_thread: threading.Thread | None = None


def schedule(session_id: str, after_seconds: float) -> None:
    """Close the session's finished runs after `after_seconds` (no-op when the closer is off)."""
    global _thread
    if not settings.TURNLOG_OTLP_CLOSER:
        return
    with _condition:
        heapq.heappush(_due, (time.monotonic() + max(0.0, after_seconds), session_id))
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="turnlog-otlp-closer", daemon=True)
            _thread.start()
        _condition.notify()


def _next_due() -> str:
    with _condition:
        while True:
            if _due and _due[0][0] <= time.monotonic():
                session_id = heapq.heappop(_due)[1]
                # The same session scheduled again meanwhile is looked at in this one call.
                while _due and _due[0][1] == session_id and _due[0][0] <= time.monotonic():
                    heapq.heappop(_due)
                return session_id
            _condition.wait(timeout=(_due[0][0] - time.monotonic()) if _due else None)


def _run() -> None:
    while True:
        session_id = _next_due()
        close_old_connections()
        try:
            again = services.close_settled_turns(session_id=session_id)
        except DatabaseError:
            logger.warning("OTLP closer: the database failed closing runs of %s; trying again in %s s", session_id, RETRY_SECONDS)
            again = RETRY_SECONDS
        except Exception:
            logger.exception("OTLP closer: closing runs of %s failed", session_id)
            again = None
        finally:
            close_old_connections()
        if again is not None:
            schedule(session_id, again)
