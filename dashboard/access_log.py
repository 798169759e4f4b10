"""The access log: one line per HTTP request and one per websocket session, to the `turnlog.access` logger.

On only with TURNLOG_LOG_FORMAT=json (settings.LOGGING sets that logger to
INFO); otherwise these wrappers hand the request straight on. They wrap the
whole ASGI application (dashboard/asgi.py), so the append and events lanes,
static files and Django's views are all logged alike; the health probes are
answered before them and are not (a load balancer asks every second).

A request's line: method, path (never the query string; the secret part of a
set-password link masked), status, duration_ms, client (the address the
login throttling counts, dashboard.lockout), session_id when the path names
a session, and who: token name and id, user name, project slug, as noted
while it was served (dashboard.json_logs.note_caller). A socket's line: path,
kind, session_id, who, close code and which side closed, duration_ms, and
the frames sent.
"""

from __future__ import annotations

import logging
import re
import time

from dashboard import json_logs
from dashboard.lockout import address_of
from dashboard.log_filters import without_secrets
from sessions_app.models import SESSION_ID_PATTERN

logger = logging.getLogger(json_logs.ACCESS_LOGGER)

SESSION_ID = SESSION_ID_PATTERN.removeprefix("^").removesuffix("$")
# A session's pages and API paths; its sockets' paths go on past the id (/ws/sessions/live is the list's).
SESSION_IN_PATH = re.compile(rf"^/(?:(?:api/v1/)?sessions/({SESSION_ID})(?:/|$)|ws/(?:v1/)?sessions/({SESSION_ID})/)")
# The websocket streams (dashboard/routing.py), by what they serve.
SOCKET_KINDS = [
    (re.compile(rf"^/ws/v1/sessions/{SESSION_ID}/events$"), "events"),
    (re.compile(r"^/ws/sessions/live$"), "session_list"),
    (re.compile(r"^/ws/calls/live$"), "calls"),
    (re.compile(rf"^/ws/sessions/{SESSION_ID}/live$"), "session_page"),
    (re.compile(rf"^/ws/sessions/{SESSION_ID}/recovery/live$"), "recovery_page"),
]


def common_fields(scope: dict) -> dict:
    """What a line says of any request or socket, from its scope alone."""
    headers = dict(scope.get("headers") or [])
    client = scope.get("client")
    fields = {"path": without_secrets(scope["path"])}
    if address := address_of(client[0] if client else None, headers.get(b"x-forwarded-for", b"").decode("latin1")):
        fields["client"] = address
    if found := SESSION_IN_PATH.match(scope["path"]):
        fields["session_id"] = found.group(1) or found.group(2)
    return fields


def milliseconds_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


class HttpAccessLog:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not logger.isEnabledFor(logging.INFO):
            return await self.inner(scope, receive, send)
        line: dict = {}
        started, status = time.perf_counter(), None

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        failed = True
        try:
            await self.inner({**scope, json_logs.FIELDS: line}, receive, sending)
            failed = False
        finally:
            if status is None and failed:
                status = 500  # Daphne answers an application that raised before answering with a 500
            fields = {"type": "http", "method": scope["method"], **common_fields(scope), "status": status}
            fields.update(line)
            fields["duration_ms"] = milliseconds_since(started)
            logger.info("%s %s %s", scope["method"], fields["path"], status, extra={"fields": fields})


class WebsocketAccessLog:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket" or not logger.isEnabledFor(logging.INFO):
            return await self.inner(scope, receive, send)
        line: dict = {}
        started, frames, closed = time.perf_counter(), 0, None

        async def receiving():
            nonlocal closed
            message = await receive()
            if message["type"] == "websocket.disconnect" and closed is None:
                closed = (message.get("code", 1005), "client")
            return message

        async def sending(message):
            nonlocal frames, closed
            if message["type"] == "websocket.send":
                frames += 1
            elif message["type"] == "websocket.close" and closed is None:
                closed = (message.get("code") or 1000, "server")
            await send(message)

        try:
            await self.inner({**scope, json_logs.FIELDS: line}, receiving, sending)
        finally:
            kind = next((kind for pattern, kind in SOCKET_KINDS if pattern.match(scope["path"])), "other")
            code, by = closed or (None, None)
            fields = {"type": "websocket", "kind": kind, **common_fields(scope), **line}
            fields.update(close_code=code, closed_by=by, duration_ms=milliseconds_since(started), frames_sent=frames)
            logger.info("websocket %s closed %s", fields["path"], code, extra={"fields": fields})
