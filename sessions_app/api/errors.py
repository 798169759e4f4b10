"""The API's error answers: one table from each refused exception to its status, its code and its
words (api.md, "Errors"), with the few answers that depend on the request written out below it.

Every answer has the shape `{"detail": ..., "error": ..., **fields}`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from sessions_app.api import events, recovery
from sessions_app.api.checks import ApiError
from sessions_app.lib import errors, field_paths
from sessions_app.log import events as log_events
from sessions_app.log import fork as log_fork
from sessions_app.log import values as log_values
from sessions_app.selectors import access

Fields = Callable[[Any], dict]


def no_fields(exc) -> dict:
    return {}


@dataclass(frozen=True)
class Refusal:
    """How one exception is answered: `status` and `error` are fixed, or read off the exception."""

    status: int | Callable[[Any], int]
    error: str | Callable[[Any], str]
    detail: Callable[[Any], str] = str
    fields: Fields = field(default=no_fields)

    def answer(self, exc) -> tuple[int, str, str, dict]:
        status = self.status(exc) if callable(self.status) else self.status
        error = self.error(exc) if callable(self.error) else self.error
        return status, error, self.detail(exc), self.fields(exc)


DETAIL = attrgetter("detail")

REFUSALS: dict[type[Exception], Refusal] = {
    ApiError: Refusal(attrgetter("status"), attrgetter("error"), DETAIL, attrgetter("fields")),
    log_values.InvalidJSON: Refusal(400, "invalid_json"),
    access.Forbidden: Refusal(403, "forbidden", DETAIL),
    errors.SessionNotFound: Refusal(404, "not_found"),
    errors.NoteNotFound: Refusal(404, "not_found"),
    errors.CallNotFound: Refusal(404, "not_found"),
    errors.VerdictNotFound: Refusal(404, "not_found"),
    errors.PriceNotFound: Refusal(404, "not_found"),
    access.ProjectNotFound: Refusal(404, "not_found"),
    errors.SessionExists: Refusal(409, "session_exists"),
    errors.SeqConflict: Refusal(409, "seq_conflict", fields=lambda exc: {"next_seq": exc.next_seq}),
    errors.IdempotencyKeyReused: Refusal(409, "idempotency_key_reused"),
    errors.NoReconciler: Refusal(409, "no_reconciler"),
    errors.StalePlan: Refusal(409, "stale_plan", fields=lambda exc: {"plan": recovery.plan_to_wire(exc.plan, exc.session)}),
    errors.RecoveryFirst: Refusal(409, "recovery_first"),
    errors.InvalidNote: Refusal(422, "invalid_note", DETAIL, lambda exc: {"field": exc.field, "reason": exc.reason}),
    errors.InvalidVerdict: Refusal(422, "invalid_verdict", DETAIL, lambda exc: {"field": exc.field, "reason": exc.reason}),
    errors.PolicyNotFound: Refusal(404, "not_found"),
    errors.InvalidPolicy: Refusal(422, "invalid_policy", DETAIL, lambda exc: {"field": exc.field, "reason": exc.reason}),
    errors.InvalidPrice: Refusal(422, "invalid_price", DETAIL, lambda exc: {"field": exc.field, "reason": exc.reason}),
    access.ProjectRequired: Refusal(422, "project_required"),
    log_fork.ForkRefused: Refusal(422, attrgetter("code"), DETAIL, attrgetter("fields")),
    log_events.InvalidEvent: Refusal(422, "invalid_event", DETAIL, lambda exc: {"index": exc.index, "reason": exc.reason}),
}

HTTP_ERROR_CODES = {403: "forbidden", 404: "not_found", 405: "method_not_allowed"}


def error_response(api: NinjaAPI, request, status: int, error: str, detail: str, **fields):
    return api.create_response(request, {"detail": detail, "error": error, **fields}, status=status)


def register(api: NinjaAPI) -> None:
    """Give `api` a handler for every exception of the table and the answers below."""
    for exc_class, refusal in REFUSALS.items():
        api.add_exception_handler(exc_class, answer_with(api, refusal))
    for exc_class, answer in REQUEST_DEPENDENT.items():
        api.add_exception_handler(exc_class, lambda request, exc, answer=answer: answer(api, request, exc))


def answer_with(api: NinjaAPI, refusal: Refusal):
    def handler(request, exc):
        status, error, detail, fields = refusal.answer(exc)
        return error_response(api, request, status, error, detail, **fields)

    return handler


def unauthenticated(api, request, exc: AuthenticationError):
    refusal = getattr(request, "turnlog_token_refusal", None)  # set by the bearer check (app.BearerToken)
    lead = f"{refusal}: " if refusal else ""
    return error_response(api, request, 401, "unauthenticated", f"{lead}send Authorization: Bearer <token> (or log in)")


def http_error(api, request, exc: HttpError):
    # django-ninja wraps whatever the body parser raises in a 400 HttpError.
    if isinstance(exc.__cause__, ApiError | log_values.InvalidJSON | log_values.UnacceptableValue):
        return api.on_exception(request, exc.__cause__)
    return error_response(api, request, exc.status_code, HTTP_ERROR_CODES.get(exc.status_code, "bad_request"), str(exc))


def unacceptable_value(api, request, exc: log_values.UnacceptableValue):
    parts = exc.problem.parts
    in_event = len(parts) > 1 and parts[0] == "events" and isinstance(parts[1], int)
    if in_event and request.resolver_match.url_name == events.APPEND_URL_NAME:
        # Inside an appended event: the batch's own code, naming the event (as the core does).
        return error_response(api, request, 422, "invalid_event", exc.detail, index=parts[1], reason="invalid_data")
    error = {"text": "invalid_text", "depth": "too_deep"}.get(exc.problem.kind)
    if error is None:  # a number JSON cannot hold
        return error_response(api, request, 400, "invalid_json", exc.detail)
    return error_response(api, request, 422, error, exc.detail)


def too_large(api, request, exc: RequestDataTooBig):
    limit = settings.TURNLOG_MAX_REQUEST_BYTES
    return error_response(api, request, 413, "too_large", f"the request body is over the limit of {limit} bytes")


def invalid_request(api, request, exc: NinjaValidationError):
    # Located as the client sent it (`events[0].data`), not by ninja's parameters (`body.payload.events`).
    found = [{**error, "loc": field_paths.client_loc(error.get("loc", ()))} for error in exc.errors]
    problems = "; ".join(f"{field_paths.dotted(error['loc'])}: {error.get('msg', 'invalid')}" for error in found)
    return error_response(api, request, 422, "invalid_request", problems or "the request is invalid", errors=found)


REQUEST_DEPENDENT = {
    AuthenticationError: unauthenticated,
    HttpError: http_error,
    log_values.UnacceptableValue: unacceptable_value,
    RequestDataTooBig: too_large,
    NinjaValidationError: invalid_request,
}
