"""The JSON API (api.md): the NinjaAPI with its authentication, its body parser, the
error answers and the resources' routers (thin endpoints over services and selectors)."""

from __future__ import annotations

import copy
import functools
import inspect

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser
from ninja.security import HttpBearer, SessionAuth

import sessions_app.converters  # noqa: F401  (registers the session_id path converter the routes use)
from sessions_app import access, db_threads, errors, field_paths
from sessions_app.api import calls, events, forks, notes, recovery, search, sessions, transfer
from sessions_app.api.checks import ApiError, json_object_body
from sessions_app.log import events as log_events
from sessions_app.log import fork as log_fork
from sessions_app.log import values as log_values
from sessions_app.models import ApiToken


class BearerToken(HttpBearer):
    """A token's secret. The lookup runs on a database thread (db_threads): the hot
    endpoints are async views; for the sync ones, django-ninja awaits it through async_to_sync."""

    async def __call__(self, request: HttpRequest):
        return await db_threads.run(super().__call__, request)

    def authenticate(self, request: HttpRequest, token: str):
        row = ApiToken.usable_for(token)
        if row is None:
            # Said in the 401 (on_unauthenticated), unless the login session authenticates instead.
            request.turnlog_token_refusal = access.token_refusal(token)
            return None
        request.user, request.api_token = row.user, row
        row.mark_used()
        return row.user


class BrowserSession(SessionAuth):
    """The Django login session. Its CSRF check applies to a logged-in browser only:
    a request with no credentials at all is unauthenticated (401), not a CSRF failure."""

    def __call__(self, request: HttpRequest):
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)


class StrictJSONParser(Parser):
    """Bodies and query strings as this project accepts them (docs/api.md).

    A body must be a JSON object (values.loads: no NaN, Infinity or float
    overflow, integers exact) holding only storable text, at most
    values.MAX_DEPTH levels deep; query values may not hold NUL.
    """

    def parse_body(self, request: HttpRequest) -> dict:
        # An append checks its events' values itself, after the batch's own
        # validation, so that a batch is refused at its first invalid event
        # whatever the reason.
        checked_later = request.resolver_match.url_name == events.APPEND_URL_NAME
        return json_object_body(request, check=not checked_later)

    def parse_querydict(self, data, list_fields, request: HttpRequest) -> dict:
        for key, items in data.lists():
            for text in (key, *items):
                if problem := log_values.text_problem(text):
                    raise ApiError(422, "invalid_text", f"query parameter {key!r}: {problem}")
        return super().parse_querydict(data, list_fields, request)


class TurnlogAPI(NinjaAPI):
    """A NinjaAPI whose endpoints keep the URLs' order and the operation ids they had
    when they were all functions of one module."""

    def get_openapi_operation_id(self, operation) -> str:
        # The module's name as it was (ninja's default takes the module): clients
        # generated from the document name their methods after these ids.
        return f"sessions_app_api_{operation.view_func.__name__}"

    def _get_bound_routers(self):
        # One path at a time, the paths without a parameter first, else in the order the
        # routers are added: Django tries URL patterns in order, and "import" is a valid
        # session id, so /sessions/import must come before /sessions/{session_id} (and
        # would not, added router by router). The OpenAPI document lists paths in this order.
        one_path_each = []
        for bound in super()._get_bound_routers():
            for path, view in bound.path_operations.items():
                one_path = copy.copy(bound)
                one_path.path_operations = {path: view}
                one_path_each.append(one_path)
        return sorted(one_path_each, key=lambda bound: "{" in bound.prefix + next(iter(bound.path_operations)))


api = TurnlogAPI(
    title="Turnlog API",
    version="1",
    urls_namespace="api-v1",
    description=(
        "Append-only logs of AI-agent sessions. Semantics: docs/session-log.md; contract: docs/api.md"
        " (paths in the project's repository). "
        f"Limits: at most {settings.TURNLOG_MAX_BATCH_EVENTS} events per batch and "
        f"{settings.TURNLOG_MAX_REQUEST_BYTES} bytes per request (413 too_large beyond); "
        f"bodies nest at most {log_values.MAX_DEPTH} levels; text may not hold U+0000 or a lone surrogate."
    ),
    auth=[BearerToken(), BrowserSession()],
    parser=StrictJSONParser(),
)


def error_response(request, status: int, error: str, detail: str, **fields):
    return api.create_response(request, {"detail": detail, "error": error, **fields}, status=status)


@api.exception_handler(ApiError)
def on_api_error(request, exc: ApiError):
    return error_response(request, exc.status, exc.error, exc.detail, **exc.fields)


@api.exception_handler(AuthenticationError)
def on_unauthenticated(request, exc):
    refusal = getattr(request, "turnlog_token_refusal", None)
    lead = f"{refusal}: " if refusal else ""
    return error_response(request, 401, "unauthenticated", f"{lead}send Authorization: Bearer <token> (or log in)")


@api.exception_handler(HttpError)
def on_http_error(request, exc: HttpError):
    # django-ninja wraps whatever the body parser raises in a 400 HttpError.
    if isinstance(exc.__cause__, ApiError | log_values.InvalidJSON | log_values.UnacceptableValue):
        return api.on_exception(request, exc.__cause__)
    return error_response(request, exc.status_code, HTTP_ERROR_CODES.get(exc.status_code, "bad_request"), str(exc))


HTTP_ERROR_CODES = {403: "forbidden", 404: "not_found", 405: "method_not_allowed"}


@api.exception_handler(log_values.InvalidJSON)
def on_invalid_json(request, exc):
    return error_response(request, 400, "invalid_json", str(exc))


@api.exception_handler(log_values.UnacceptableValue)
def on_unacceptable_value(request, exc: log_values.UnacceptableValue):
    parts = exc.problem.parts
    in_event = len(parts) > 1 and parts[0] == "events" and isinstance(parts[1], int)
    if in_event and request.resolver_match.url_name == events.APPEND_URL_NAME:
        # Inside an appended event: the batch's own code, naming the event (as the core does).
        return error_response(request, 422, "invalid_event", exc.detail, index=parts[1], reason="invalid_data")
    error = {"text": "invalid_text", "depth": "too_deep"}.get(exc.problem.kind)
    if error is None:  # a number JSON cannot hold
        return error_response(request, 400, "invalid_json", exc.detail)
    return error_response(request, 422, error, exc.detail)


@csrf_exempt
def not_found(request, *args, **kwargs):
    """Any path under /api/ that no endpoint serves (a %2F in a session id included)."""
    return JsonResponse({"detail": f"no API endpoint at {request.path}", "error": "not_found"}, status=404)


@api.exception_handler(errors.SessionNotFound)
def on_not_found(request, exc):
    return error_response(request, 404, "not_found", str(exc))


@api.exception_handler(errors.NoteNotFound)
def on_note_not_found(request, exc):
    return error_response(request, 404, "not_found", str(exc))


@api.exception_handler(errors.InvalidNote)
def on_invalid_note(request, exc: errors.InvalidNote):
    return error_response(request, 422, "invalid_note", exc.detail, field=exc.field, reason=exc.reason)


@api.exception_handler(access.Forbidden)
def on_forbidden(request, exc: access.Forbidden):
    return error_response(request, 403, "forbidden", exc.detail)


@api.exception_handler(access.ProjectNotFound)
def on_project_not_found(request, exc):
    return error_response(request, 404, "not_found", str(exc))


@api.exception_handler(access.ProjectRequired)
def on_project_required(request, exc):
    return error_response(request, 422, "project_required", str(exc))


@api.exception_handler(errors.SessionExists)
def on_exists(request, exc):
    return error_response(request, 409, "session_exists", str(exc))


@api.exception_handler(errors.SeqConflict)
def on_seq_conflict(request, exc):
    return error_response(request, 409, "seq_conflict", str(exc), next_seq=exc.next_seq)


@api.exception_handler(errors.IdempotencyKeyReused)
def on_key_reused(request, exc):
    return error_response(request, 409, "idempotency_key_reused", str(exc))


@api.exception_handler(errors.StalePlan)
def on_stale_plan(request, exc: errors.StalePlan):
    return error_response(request, 409, "stale_plan", str(exc), plan=recovery.plan_to_wire(exc.plan, exc.next_seq))


@api.exception_handler(errors.RecoveryFirst)
def on_recovery_first(request, exc):
    return error_response(request, 409, "recovery_first", str(exc))


@api.exception_handler(log_fork.ForkRefused)
def on_fork_refused(request, exc: log_fork.ForkRefused):
    return error_response(request, 422, exc.code, exc.detail, **exc.fields)


@api.exception_handler(log_events.InvalidEvent)
def on_invalid_event(request, exc):
    return error_response(request, 422, "invalid_event", exc.detail, index=exc.index, reason=exc.reason)


@api.exception_handler(RequestDataTooBig)
def on_too_big(request, exc):
    limit = settings.TURNLOG_MAX_REQUEST_BYTES
    return error_response(request, 413, "too_large", f"the request body is over the limit of {limit} bytes")


@api.exception_handler(NinjaValidationError)
def on_validation_error(request, exc: NinjaValidationError):
    # Located as the client sent it (`events[0].data`), not by ninja's parameters (`body.payload.events`).
    errors = [{**error, "loc": field_paths.client_loc(error.get("loc", ()))} for error in exc.errors]
    problems = "; ".join(f"{field_paths.dotted(error['loc'])}: {error.get('msg', 'invalid')}" for error in errors)
    return error_response(request, 422, "invalid_request", problems or "the request is invalid", errors=errors)


# In the order their paths are listed (after those without a parameter: TurnlogAPI).
api.add_router("/", sessions.router)
api.add_router("/", events.router)
api.add_router("/", transfer.router)
api.add_router("/", recovery.router)
api.add_router("/", forks.router)
api.add_router("/", notes.router)
api.add_router("/", calls.router)
api.add_router("/", search.router)


def _json_method_not_allowed(view):
    """django-ninja answers a method an endpoint does not serve in plain text; the contract wants JSON."""

    def in_json(request, response):
        if response.status_code != 405 or response.get("Content-Type", "").startswith("application/json"):
            return response
        allowed = response.get("Allow", "")
        detail = f"{request.method} is not served at {request.path}; allowed: {allowed}"
        refused = JsonResponse({"detail": detail, "error": "method_not_allowed"}, status=405)
        refused["Allow"] = allowed
        return refused

    if inspect.iscoroutinefunction(view):

        @functools.wraps(view)
        async def answer_async(request, *args, **kwargs):
            return in_json(request, await view(request, *args, **kwargs))

        return answer_async

    @functools.wraps(view)
    def answer(request, *args, **kwargs):
        return in_json(request, view(request, *args, **kwargs))

    return answer


def urls():
    """api.urls for dashboard/urls.py, with JSON 405 answers."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback = _json_method_not_allowed(pattern.callback)
    return patterns, app_name, namespace
