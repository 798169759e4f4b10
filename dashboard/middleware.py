"""Middleware: event-loop versions of Django's, and the 503 for a database that is down.

Under ASGI, Django runs each hook of a sync middleware (process_request,
process_view, process_response) in a worker thread: with the stack below, about
fifteen thread hops per request (~0.15 ms each on this machine, 2 ms in all)
before any view runs. The hooks of the middleware wrapped here never touch the
database, so `in_event_loop` runs them in the event loop instead; stored messages,
which may read or write the login session, go to a thread only when there are some.
(Security, sessions, CSRF and clickjacking stay as Django ships them: settings.py says why.)

A request that cannot reach the database gets a 503 with Retry-After, not a 500.

The pool's health check (settings: CONN_HEALTH_CHECKS) already replaces a
connection the server dropped; what is left is a database that is down or
saturated (the pool's timeout). That is the service being unavailable, not a
bug: the client is told to retry, in JSON under /api/ (api.md's error shape)
and as plain text for the pages. One warning line per request, no traceback.
"""

from __future__ import annotations

import logging

from asgiref.sync import sync_to_async
from csp import middleware as csp_middleware
from django.contrib.auth import middleware as auth_middleware
from django.contrib.messages import middleware as messages_middleware
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpResponse, JsonResponse
from django.middleware import common
from django.utils.deprecation import MiddlewareMixin
from django.utils.functional import SimpleLazyObject, empty

from dashboard import json_logs, outage
from dashboard.outage import CLOSE_UNAVAILABLE, DATABASE_UNAVAILABLE
from dashboard.pages import refusals
from sessions_app.lib.params import BadParameter

logger = logging.getLogger(__name__)

# Seconds a client should wait before retrying (a restart or failover takes a few).
RETRY_AFTER_SECONDS = 5


def in_event_loop(middleware: type[MiddlewareMixin]) -> type[MiddlewareMixin]:
    """`middleware` with its hooks run in the event loop when the request is served async
    (sync requests, as under the test client, run it unchanged)."""

    class InEventLoop(middleware):
        async def __acall__(self, request):
            response = self.process_request(request) if hasattr(self, "process_request") else None
            response = response or await self.get_response(request)
            if not hasattr(self, "process_response"):
                return response
            if self.response_needs_database(request):
                return await sync_to_async(self.process_response)(request, response)
            return self.process_response(request, response)

        def response_needs_database(self, request) -> bool:
            return False

    if hasattr(middleware, "process_view"):
        # A coroutine function, so that Django's handler calls it as it is.
        async def process_view(self, request, view, args, kwargs):
            return middleware.process_view(self, request, view, args, kwargs)

        InEventLoop.process_view = process_view

    InEventLoop.__name__ = InEventLoop.__qualname__ = middleware.__name__
    InEventLoop.__doc__ = f"{middleware.__module__}.{middleware.__name__}, its hooks run in the event loop."
    return InEventLoop


CSPMiddleware = in_event_loop(csp_middleware.CSPMiddleware)
CommonMiddleware = in_event_loop(common.CommonMiddleware)
AuthenticationMiddleware = in_event_loop(auth_middleware.AuthenticationMiddleware)  # request.user stays lazy


class MessageMiddleware(in_event_loop(messages_middleware.MessageMiddleware)):
    def response_needs_database(self, request) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)  # may read or write the login session


class AccessLogCaller(MiddlewareMixin):
    """Who made the request, for its access log line (dashboard/access_log.py), as the view found out:
    the API's token (with its user and project), else a login whose user was read; a project page's slug."""

    def process_response(self, request, response):
        scope = getattr(request, "scope", None)  # only ASGI requests have one (not the test client's)
        if scope is not None and json_logs.FIELDS in scope:
            user = request.__dict__.get("user")  # the API's token authentication sets it; else Django's lazy user
            if isinstance(user, SimpleLazyObject):
                user = None if user._wrapped is empty else user._wrapped  # never read here: that would query
            json_logs.note_caller(scope, user=user or getattr(request, "_acached_user", None), token=getattr(request, "api_token", None))
            match = request.resolver_match
            json_logs.note(scope, project=match.kwargs.get("slug") if match is not None else None)
        return response


AccessLogCallerMiddleware = in_event_loop(AccessLogCaller)


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


class BadParameterMiddleware(MiddlewareMixin):
    """A numeric parameter too long to read (sessions_app.lib.params) is the client's error: a 400 naming it."""

    def process_exception(self, request, exception):
        if not isinstance(exception, BadParameter):
            return None
        return refusals.bad_request(request, parameter=exception.name, detail=str(exception))


class WebsocketDatabaseGuard:
    """ASGI middleware around the websocket stack: a socket opened while the database is
    unreachable is accepted and closed with 4503 at once (api.md), the client reconnects later.

    Two ways it would otherwise fail. Channels' AuthMiddleware reads the login session and
    user before any consumer runs, so without the database it raises before the accept, and
    the handshake was dropped. And on PostgreSQL a database call waits for a connection from
    the pool for its whole timeout (TURNLOG_DB_POOL_TIMEOUT, 20 s; longer than Daphne waits
    for an accept): so the pool is asked first, for at most SOCKET_DATABASE_WAIT_SECONDS.
    The consumers handle the database errors of their own calls (close 4503).
    """

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        unreachable = await sync_to_async(pool_unreachable, thread_sensitive=False)()
        if unreachable is not None:
            outage.database_outage.failed(unreachable)
            return await close_unavailable(receive, send)
        accepted = received = False

        async def tracked_receive():
            nonlocal received
            message = await receive()
            received = True
            return message

        async def tracked_send(message):
            nonlocal accepted
            accepted = accepted or message["type"] in {"websocket.accept", "websocket.send", "websocket.close"}
            await send(message)

        try:
            return await self.inner(scope, tracked_receive, tracked_send)
        except DATABASE_UNAVAILABLE as error:
            if accepted:  # a consumer's own failure: Daphne closes the socket (1011)
                raise
            outage.database_outage.failed(error)
            await close_unavailable(receive, send, connected=received)


# Seconds a socket waits for a connection of the database pool before it is closed with 4503.
SOCKET_DATABASE_WAIT_SECONDS = 1.0


def pool_unreachable() -> BaseException | None:
    """Why the database's connection pool gives no connection within SOCKET_DATABASE_WAIT_SECONDS
    (down, or every connection busy that long), else None; always None without a pool."""
    pool = getattr(connections[DEFAULT_DB_ALIAS], "pool", None)
    if pool is None:  # SQLite, or persistent connections: a connection fails at once by itself
        return None
    try:
        pool.open()  # as Django does before its first getconn; nothing once open
        pool.putconn(pool.getconn(timeout=SOCKET_DATABASE_WAIT_SECONDS))
    except Exception as error:  # psycopg_pool.PoolTimeout, or a connection that failed its check
        return error
    return None


async def close_unavailable(receive, send, *, connected: bool = False) -> None:
    """Accept the socket and close it with 4503 (an application may close only an accepted socket with a code)."""
    if not connected:
        await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": CLOSE_UNAVAILABLE, "reason": "database unavailable"})
