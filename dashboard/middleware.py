"""A request that cannot reach the database gets a 503 with Retry-After, not a 500.

The pool's health check (settings: CONN_HEALTH_CHECKS) already replaces a
connection the server dropped; what is left is a database that is down or
saturated (the pool's timeout). That is the service being unavailable, not a
bug: the client is told to retry, in JSON under /api/ (api.md's error shape)
and as plain text for the pages. One warning line per request, no traceback.
"""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin

logger = logging.getLogger(__name__)

# Seconds a client should wait before retrying (a restart or failover takes a few).
RETRY_AFTER_SECONDS = 5
# Django wraps the driver's errors, psycopg_pool's PoolTimeout included, in these.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)


class DatabaseUnavailableMiddleware(MiddlewareMixin):
    def process_exception(self, request, exception):
        if not isinstance(exception, DATABASE_UNAVAILABLE):
            return None
        logger.warning("%s %s: the database is unavailable (%s: %s)", request.method, request.path, type(exception).__name__, exception)
        detail = f"The database could not be reached; retry in {RETRY_AFTER_SECONDS} s."
        if request.path.startswith("/api/"):
            response = JsonResponse({"detail": detail, "error": "database_unavailable"}, status=503)
        else:
            response = HttpResponse(f"Service unavailable. {detail}\n", status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response


class WebsocketDatabaseGuard:
    """ASGI middleware around the websocket stack: channels' AuthMiddleware reads the login
    session and user before any consumer runs, so without the database it raises, and Daphne
    logs a traceback for every reconnect attempt.

    Such a socket is refused at the handshake instead (a browser sees 1006 and htmx retries
    with its backoff); the consumers handle their own database errors (close 4503).
    """

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        accepted = False

        async def tracked_send(message):
            nonlocal accepted
            accepted = accepted or message["type"] in {"websocket.accept", "websocket.send", "websocket.close"}
            await send(message)

        try:
            return await self.inner(scope, receive, tracked_send)
        except DATABASE_UNAVAILABLE as error:
            if accepted:  # a consumer's own failure: Daphne closes the socket (1011)
                raise
            from dashboard.stream import database_outage  # (dashboard.stream imports this module)

            database_outage.failed(error)
            await send({"type": "websocket.close"})  # before the accept: the handshake is refused
