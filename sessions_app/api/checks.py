"""What endpoints check in a request before they act on it, and ApiError, the
refusal they raise (a status, a code and words; app.py answers it)."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest

from sessions_app.log import values as log_values
from sessions_app.models import SESSION_ID_PATTERN, Session
from sessions_app.selectors import access

SESSION_ID_RE = re.compile(SESSION_ID_PATTERN)


class ApiError(Exception):
    """A domain error: a status, a machine-readable code, words, extra fields."""

    def __init__(self, status: int, error: str, detail: str, **fields: Any):
        super().__init__(detail)
        self.status, self.error, self.detail, self.fields = status, error, detail, fields


def json_object_body(request: HttpRequest, *, check: bool = True) -> dict:
    """The request's body as a JSON object (of storable values, with `check`), or the error saying why not."""
    body = log_values.loads_fast(request.body)  # orjson, or values.loads where it would differ
    if not isinstance(body, dict):
        shown = "null" if body is None else type(body).__name__
        raise ApiError(422, "invalid_request", f"the body must be a JSON object, not {shown}")
    if check:
        log_values.check(body)
    return body


def checked_session_id(value: str) -> str:
    if not SESSION_ID_RE.fullmatch(value):
        raise ApiError(422, "invalid_session_id", f"session id {value!r} must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
    return value


def readable(request, session_id: str, *, related: bool = True) -> Session:
    return access.session_for(access.actor_of(request), session_id, access.READ, related=related)
