"""The client's exceptions: one class per kind of refusal, each carrying the API's `error` code and `detail`.

Every error answer of the API is a JSON object with a human `detail` and, for
domain errors, a machine `error` code (docs/api.md, "Error codes"). The class
follows the code where one is known, else the status; the whole answer stays
in `body` for the extra fields this module does not name.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any


class TurnlogError(Exception):
    """Anything this client raises on purpose."""


class TransportError(TurnlogError):
    """No answer came back: the connection failed, broke or timed out.

    The request may or may not have reached the server (a timeout after the
    server committed looks the same as one before): only a retry with the
    same `Idempotency-Key` tells them apart.
    """


class ApiError(TurnlogError):
    """The server answered with an error status."""

    def __init__(self, status: int, body: Mapping[str, Any] | None = None, *, text: str = "", retry_after: float | None = None):
        self.status = status
        self.body: dict[str, Any] = dict(body or {})
        self.error: str | None = self.body.get("error") if isinstance(self.body.get("error"), str) else None
        detail = self.body.get("detail")
        # An answer that is not the API's JSON (a proxy's HTML page, say): its first words.
        self.detail: str = detail if isinstance(detail, str) else " ".join(text.split())[:200]
        self.retry_after = retry_after
        code = f" {self.error}" if self.error else ""
        super().__init__(f"HTTP {status}{code}: {self.detail}")


class BadRequest(ApiError):
    """400: the body is not JSON the server accepts (`invalid_json`)."""


class Unauthenticated(ApiError):
    """401: no valid token (unknown, revoked, expired, or its user deactivated)."""


class Forbidden(ApiError):
    """403: the token's role or scopes do not allow this (recovering without `recover`, say)."""


class NotFound(ApiError):
    """404: no such session (or one in a project the token cannot see), project or endpoint."""


class Conflict(ApiError):
    """409: the request contradicts the session's state."""


class SessionExists(Conflict):
    """409 `session_exists`: the id is taken, in some project."""


class SeqConflict(Conflict):
    """409 `seq_conflict`: `expected_seq` was not the session's event count; nothing was stored.

    `next_seq` is the count the server has. Sent with the same `Idempotency-Key`
    as an attempt whose answer was lost, this answer also proves that attempt
    was not stored (the server checks the key before the seq).
    """

    @property
    def next_seq(self) -> int:
        return int(self.body["next_seq"])


class IdempotencyKeyReused(Conflict):
    """409 `idempotency_key_reused`: the key was used on this session with another body."""


class StalePlan(Conflict):
    """409 `stale_plan`: the log changed since the plan with this digest; `plan` is the fresh one."""

    @property
    def plan(self) -> dict[str, Any]:
        return dict(self.body["plan"])


class RecoveryFirst(Conflict):
    """409 `recovery_first`: the dangling-call patch while a turn is open."""


class TooLarge(ApiError):
    """413 `too_large`: too many events in a batch, or too many bytes in a request."""


class Invalid(ApiError):
    """422: the request is well-formed JSON but refused (`invalid_request`, `invalid_session_id`, ...)."""


class InvalidEvent(Invalid):
    """422 `invalid_event`: the batch's event at `index` is refused for `reason`; nothing was stored."""

    @property
    def index(self) -> int:
        return int(self.body["index"])

    @property
    def reason(self) -> str:
        return str(self.body["reason"])


class OpenTurn(Invalid):
    """422 `open_turn`: a fork boundary inside a turn (`seq`, `valid_boundaries` in `body`)."""


class RateLimited(ApiError):
    """429: too many requests; `retry_after` says when to try again."""


class ServerError(ApiError):
    """5xx: the server failed; nothing the client sent was wrong."""


class ServiceUnavailable(ServerError):
    """503 (`database_unavailable`): nothing was stored; try again after `retry_after` seconds."""


class StreamClosed(TurnlogError):
    """The websocket stream was refused for good (4401 unauthenticated, 4404 no such session, ...)."""

    def __init__(self, code: int, reason: str = ""):
        self.code = code
        self.reason = reason
        super().__init__(f"stream closed with {code}" + (f": {reason}" if reason else ""))


class FlushTimeout(TurnlogError):
    """The writer could not deliver its events in time. They are still queued (and in the spool, if any).

    `last_error` is the last failure of the attempts (a TransportError, a 503 ...).
    """

    def __init__(self, message: str, last_error: BaseException | None = None):
        self.last_error = last_error
        super().__init__(message if last_error is None else f"{message}; last error: {last_error}")


class RecoveryNeeded(TurnlogError):
    """`Client.resume` found a history no model would accept as it is: a turn still open (`open_turns`:
    recover first) or calls without a result (`unanswered`: patch the dangling calls first)."""

    def __init__(self, session_id: str, open_turns: list[int], unanswered: list[str], message: str):
        self.session_id = session_id
        self.open_turns = open_turns
        self.unanswered = unanswered
        super().__init__(message)


class SpoolError(TurnlogError):
    """The spool file cannot be used: another process holds it, it belongs to another session, or it is damaged."""


BY_CODE: dict[str, type[ApiError]] = {
    "session_exists": SessionExists,
    "seq_conflict": SeqConflict,
    "idempotency_key_reused": IdempotencyKeyReused,
    "stale_plan": StalePlan,
    "recovery_first": RecoveryFirst,
    "invalid_event": InvalidEvent,
    "open_turn": OpenTurn,
}
BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    422: Invalid,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_for(status: int, body: object, *, text: str = "", retry_after: str | None = None) -> ApiError:
    """The exception for an error answer (`body` is its decoded JSON, or None when it was not JSON)."""
    mapping = body if isinstance(body, Mapping) else None
    code = mapping.get("error") if mapping is not None else None
    cls = BY_CODE.get(code) if isinstance(code, str) else None
    if cls is None:
        cls = BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(status, mapping, text=text, retry_after=parse_retry_after(retry_after))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header: a number of seconds, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retryable(error: BaseException) -> bool:
    """Worth sending again unchanged: no answer, 429, or a server error (5xx)."""
    return isinstance(error, (TransportError, RateLimited, ServerError))
