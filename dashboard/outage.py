"""The database being unreachable: which errors mean it, the socket close code that says it,
and the one log of an outage that the middleware, the append lane and the live side share.

Its own module because it belongs to none of them: the middleware answers 503 and closes
new sockets with 4503, the streams wait for the database and catch up; all of them report
to `database_outage`, which logs each outage once however many requests and polls hit it.
"""

from __future__ import annotations

import logging
import time

from django.db import InterfaceError, OperationalError

logger = logging.getLogger(__name__)

# Django wraps the driver's errors, psycopg_pool's PoolTimeout included, in these.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
CLOSE_UNAVAILABLE = 4503  # the database is unreachable as the socket opens (dashboard.live.sessions.consumers lists every close code)


class DatabaseOutage:
    """One warning when the sockets of this process lose the database, one when they have it back."""

    def __init__(self):
        self.since: float | None = None

    def failed(self, error: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            logger.warning("the database is unreachable (%s: %s): streams wait for it", type(error).__name__, error)

    def reached(self) -> None:
        if self.since is not None:
            logger.warning("the database is reachable again after %.0f s", time.monotonic() - self.since)
            self.since = None


database_outage = DatabaseOutage()
