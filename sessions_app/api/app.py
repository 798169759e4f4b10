"""The JSON API (api.md): the NinjaAPI with its authentication, its body parser, its error answers
(errors.py) and the resources' routers (thin endpoints over services and selectors)."""

from __future__ import annotations

import copy
import functools
import inspect

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.parser import Parser
from ninja.security import HttpBearer, SessionAuth

import sessions_app.api.converters  # noqa: F401  (registers the session_id path converter the routes use)
from sessions_app.api import calls, errors, events, forks, notes, prices, recovery, search, sessions, tools, transfer, verdicts
from sessions_app.api.checks import ApiError, json_object_body
from sessions_app.lib import db_threads
from sessions_app.lib.bearer import bearer_secret
from sessions_app.log import values as log_values
from sessions_app.models import ApiToken
from sessions_app.selectors import access


class BearerToken(HttpBearer):
    """A token's secret. The lookup runs on a database thread (db_threads): the hot
    endpoints are async views; for the sync ones, django-ninja awaits it through async_to_sync."""

    async def __call__(self, request: HttpRequest):
        return await db_threads.run(self.authenticate_header, request)

    def authenticate_header(self, request: HttpRequest):
        token = bearer_secret(request.headers.get(self.header))
        return None if token is None else self.authenticate(request, token)

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
        if request.method == "DELETE" and not request.body:
            return {}  # a DELETE's body is optional (withdrawing a verdict: its reason)
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


errors.register(api)


@csrf_exempt
def not_found(request, *args, **kwargs):
    """Any path under /api/ that no endpoint serves (a %2F in a session id included)."""
    return JsonResponse({"detail": f"no API endpoint at {request.path}", "error": "not_found"}, status=404)


# In the order their paths are listed (after those without a parameter: TurnlogAPI).
api.add_router("/", sessions.router)
api.add_router("/", events.router)
api.add_router("/", transfer.router)
api.add_router("/", recovery.router)
api.add_router("/", forks.router)
api.add_router("/", notes.router)
api.add_router("/", calls.router)
api.add_router("/", search.router)
api.add_router("/", tools.router)
api.add_router("/", verdicts.router)
api.add_router("/", prices.router)


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
