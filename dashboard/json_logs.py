"""Structured logs (TURNLOG_LOG_FORMAT=json, settings.LOGGING): one JSON object per line, and what a
request's or a socket's line says about who made it.

dashboard/access_log.py writes one line per HTTP request and one per websocket
session to the `turnlog.access` logger, and puts a dict of its line's fields
in the ASGI scope (`FIELDS`). Whoever learns who the caller is adds to it with
`note_caller`: the middleware once the view has run, the append lane, the
sockets' authentication. A scope without that dict (the access log is off)
makes them no-ops. Only names go in a line: never a token's secret, a cookie,
a header or a query string.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import orjson

ACCESS_LOGGER = "turnlog.access"
FIELDS = "turnlog.access_fields"  # the scope's key of the fields of its access log line


class JsonFormatter(logging.Formatter):
    """One orjson line per record: time (UTC), level, logger, message, the record's `fields`
    (extra={"fields": {...}}), and a traceback as text under `exception` (no line breaks in the output)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


def note(scope: dict, **fields) -> None:
    """Add `fields` (those not None) to the access log line of the request or socket of `scope`, if one is kept."""
    line = scope.get(FIELDS)
    if line is not None:
        line.update({name: value for name, value in fields.items() if value is not None})


def note_caller(scope: dict, *, user=None, token=None) -> None:
    """Who made the request: a token's name and id, its user's name and its project's slug (all loaded
    with the token by ApiToken.usable_for), else the logged-in user's name. Never queries."""
    if token is not None:
        project = token.project
        note(scope, token=token.name, token_id=token.pk, user=token.user.username, project=project.slug if project else None)
    elif user is not None and user.is_authenticated:
        note(scope, user=user.get_username())
