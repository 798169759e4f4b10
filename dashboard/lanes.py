"""The API's fast lanes: ASGI apps in front of Django for its two hottest requests, answered as Django would.

- `AppendLane`: `POST /api/v1/sessions/{id}/events`. Single-event appends are
  what most agent runtimes send, and under Daphne Django's handler and
  django-ninja cost more than the append itself (about 6 ms of a 9.6 ms
  request, docs/performance.md: per-request cost). It serves the common case,
  a bearer-token request whose batch is stored: the body read once, the same
  checks (sessions_app.api.events.prepare_append), the token's access checked
  in the append's own locked read.
- `EventsLane`: `GET /api/v1/sessions/{id}/events`, what clients poll and
  readers of many sessions repeat: with a usable bearer token that may read
  the session and a plain `since` / `limit`, the page is answered here
  (docs/performance.md, "OTLP ingest": Django's handler and its middleware's
  thread hops were most of such a read).

Both answer through the response hooks of the same security middleware as
every other response. Anything else goes to Django unchanged (an append with
its body replayed): a request the middleware would refuse (a disallowed Host
or user agent, the HTTPS redirect), no token or another kind of credentials,
a refused token, a bad body or query, a refused batch, no access, a sequence
conflict. The lanes store nothing and audit nothing in those cases (a refusal
rolls the append's transaction back), so Django answers them exactly as it
would have, with its error codes, audit entries and logs. A database that
cannot be reached gets the middleware's 503.
"""
from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.core.signals import setting_changed
from django.http import HttpResponse, JsonResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware

from dashboard import json_logs
from dashboard import middleware as dashboard_middleware
from dashboard.outage import DATABASE_UNAVAILABLE
from sessions_app import selectors, services
from sessions_app.api.events import EVENTS_PAGE_DEFAULT, EVENTS_PAGE_MAX, PreparedAppend, events_answer, prepare_append
from sessions_app.lib import db_threads, errors
from sessions_app.lib.bearer import bearer_secret
from sessions_app.lib.params import decimal_int
from sessions_app.log import values as log_values
from sessions_app.models import SESSION_ID_PATTERN, ApiToken, hash_token
from sessions_app.selectors import access

# Tokens whose names the append lane keeps for the access log (all forgotten past this many).
CALLERS_KEPT = 1024
PATH = re.compile("/api/v1/sessions/(" + SESSION_ID_PATTERN.removeprefix("^").removesuffix("$") + ")/events")
BODY_KEYS = frozenset({"events", "expected_seq"})
# Refusals Django answers: each is raised before the append writes or rolls its transaction back.
REFUSED = (errors.NotGranted, errors.SessionNotFound, errors.SeqConflict, errors.IdempotencyKeyReused)


class Refused(Exception):
    """Not this lane's request after all: Django answers it."""


def _no_response(request):  # the middleware below are only asked for their response hooks
    raise AssertionError("unreachable")


class Lane:
    """What the lanes share: the middleware hooks a bearer request goes through, and answering."""

    def __init__(self, inner: Callable[..., Awaitable[None]]):
        self.inner = inner
        # The hooks of settings.MIDDLEWARE that can refuse a bearer request (the HTTPS redirect; the
        # Host and user-agent checks) or change its answer, innermost first. Sessions, CSRF, messages and
        # auth do neither for it; tests/dashboard/test_append_lane.py and test_events_lane.py compare the lanes' answers with Django's.
        security, common = SecurityMiddleware(_no_response), dashboard_middleware.CommonMiddleware(_no_response)
        self.request_hooks = (security.process_request, common.process_request)
        self.response_hooks = (
            XFrameOptionsMiddleware(_no_response).process_response,
            common.process_response,
            dashboard_middleware.CSPMiddleware(_no_response).process_response,
            security.process_response,
        )
        self.unavailable = dashboard_middleware.DatabaseUnavailableMiddleware(_no_response)

    def request(self, scope) -> ASGIRequest | None:
        """The request, when the middleware would let it through to a view; None for Django to answer."""
        try:
            request = ASGIRequest(scope, None)  # the body is read here, not through the request
            if any(hook(request) is not None for hook in self.request_hooks):
                return None
        except Exception:  # a disallowed host or user agent, an undecodable path: Django's 400 or 403
            return None
        return request

    async def respond(self, request: ASGIRequest, response: HttpResponse, send) -> None:
        for hook in self.response_hooks:
            response = hook(request, response)
        await send({"type": "http.response.start", "status": response.status_code, "headers": encoded_headers(response)})
        await send({"type": "http.response.body", "body": response.content})


class AppendLane(Lane):
    def __init__(self, inner: Callable[..., Awaitable[None]]):
        super().__init__(inner)
        # A stored batch's 201 headers, per request scheme: the hooks above depend on the settings and
        # on whether the request is secure, and building them (the CSP header above all) cost a fifth
        # of a single append. Worked out by the hooks themselves on the first 201, again after a settings change.
        self.created_headers: dict[bool, list[tuple[bytes, bytes]]] = {}
        setting_changed.connect(self.forget_headers)
        # Who each token is, for the access log (json_logs.note_caller), by the token's hash: the append's
        # own check reads no names, so they are read once per token and process, and only when logged.
        self.callers: dict[str, ApiToken] = {}

    def forget_headers(self, **kwargs) -> None:
        self.created_headers.clear()

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope.get("root_path")
            or (match := PATH.fullmatch(scope["path"])) is None
        ):
            return await self.inner(scope, receive, send)
        messages, body = await read_body(receive, limit=settings.TURNLOG_MAX_REQUEST_BYTES)
        if body is not None and (request := self.request(scope)) is not None and (token := bearer_token(request)):
            if (prepared := self.prepared(request, body)) is not None:
                try:
                    answer = await self.append(request, token, match.group(1), prepared)
                except Refused:
                    pass
                else:
                    if isinstance(answer, services.AppendResult):
                        return await self.created(request, answer, send)
                    return await self.respond(request, answer, send)
        return await self.inner(scope, replay(messages, receive), send)

    def prepared(self, request: ASGIRequest, body: bytes) -> PreparedAppend | None:
        """The batch when this lane can take it; None for Django to answer."""
        try:
            payload = log_values.loads_fast(body)
        except ValueError:
            return None
        if not isinstance(payload, dict) or not BODY_KEYS.issuperset(payload) or not isinstance(payload.get("events"), list):
            return None
        expected_seq = payload.get("expected_seq")
        if expected_seq is not None and type(expected_seq) is not int:  # StrictInt, as AppendIn reads it
            return None
        try:
            return prepare_append(payload["events"], expected_seq, request.headers.get("Idempotency-Key"))
        except Exception:  # a refused batch (pure checks, nothing stored): Django says why
            return None

    async def append(self, request: ASGIRequest, token: str, session_id: str, prepared: PreparedAppend) -> services.AppendResult | HttpResponse:
        def store():
            try:
                return prepared.store(session_id, bearer=token)
            except REFUSED:
                raise Refused from None

        try:
            result = await db_threads.run_append(store)
        except DATABASE_UNAVAILABLE as error:
            return self.unavailable.process_exception(request, error)
        if json_logs.FIELDS in request.scope:
            await self.note_caller(request, token)
        return result

    async def note_caller(self, request: ASGIRequest, secret: str) -> None:
        """Name the stored batch's token in the access log line; read after the append's own
        transaction (which may hold others' batches), and only the first time in this process."""
        key = hash_token(secret)
        if (token := self.callers.get(key)) is None:
            try:
                token = await db_threads.run(ApiToken.usable_for, secret)
            except DATABASE_UNAVAILABLE:  # the batch is stored all the same: its line names nobody
                return
            if token is None:  # revoked since
                return
            if len(self.callers) >= CALLERS_KEPT:
                self.callers.clear()
            self.callers[key] = token
        json_logs.note_caller(request.scope, token=token)

    async def created(self, request: ASGIRequest, result: services.AppendResult, send) -> None:
        body = json.dumps(result.as_response()).encode()  # JsonResponse's text of it
        secure = request.is_secure()
        if (headers := self.created_headers.get(secure)) is None:
            # As django-ninja sends it, through the hooks; only its Content-Length varies.
            response = JsonResponse(result.as_response(), status=201, content_type="application/json; charset=utf-8")
            for hook in self.response_hooks:
                response = hook(request, response)
            headers = self.created_headers[secure] = encoded_headers(response)
        length = str(len(body)).encode("latin1")
        headers = [(name, length if name == b"Content-Length" else value) for name, value in headers]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": body})


# A page's query as this lane takes it: `since` and `limit` at most once each, plain decimal digits
# in their ranges. Anything else (a sign, spaces, another key, a limit out of range) goes to Django,
# which reads it with django-ninja's rules and answers, or refuses, as always.
QUERY_VALUE = re.compile(r"0|[1-9][0-9]{0,17}")


def page_of(query_string: bytes) -> tuple[int, int] | None:
    """(since, limit) of a plain query, or None for Django to read it."""
    found: dict[str, int] = {}
    for pair in query_string.split(b"&") if query_string else []:
        key, equals, value = pair.partition(b"=")
        if not equals or key not in (b"since", b"limit") or key.decode() in found or not QUERY_VALUE.fullmatch(value.decode("latin1")):
            return None
        if key == b"since":
            found["since"] = decimal_int(value.decode("latin1"), name="since")
        else:
            found["limit"] = decimal_int(value.decode("latin1"), name="limit")
    since, limit = found.get("since", 0), found.get("limit", EVENTS_PAGE_DEFAULT)
    return (since, limit) if 1 <= limit <= EVENTS_PAGE_MAX else None


class EventsLane(Lane):
    async def __call__(self, scope, receive, send):
        if (
            scope["type"] != "http"
            or scope["method"] != "GET"
            or scope.get("root_path")
            or (match := PATH.fullmatch(scope["path"])) is None
            or (page := page_of(scope.get("query_string", b""))) is None
        ):
            return await self.inner(scope, receive, send)
        if (request := self.request(scope)) is not None and (token := bearer_token(request)):
            try:
                answer = await self.read(request, token, match.group(1), *page)
            except Refused:
                pass
            else:
                return await self.respond(request, answer, send)
        return await self.inner(scope, receive, send)  # a GET's body is not read here: Django reads it as sent

    async def read(self, request: ASGIRequest, secret: str, session_id: str, since: int, limit: int) -> HttpResponse:
        def page():
            token = ApiToken.usable_for(secret)
            if token is None:
                raise Refused  # Django says why (401)
            try:
                session = selectors.get_session(session_id, related=False)
            except errors.SessionNotFound:
                raise Refused from None
            if not access.Actor(user=token.user, token=token).can(session.project_id, access.READ):
                raise Refused  # Django refuses it and audits the refusal
            token.mark_used()
            json_logs.note_caller(request.scope, token=token)
            return events_answer(session, since=since, limit=limit)

        try:
            return await db_threads.run(page)
        except DATABASE_UNAVAILABLE as error:
            return self.unavailable.process_exception(request, error)


def encoded_headers(response: HttpResponse) -> list[tuple[bytes, bytes]]:
    return [(name.encode("ascii"), value.encode("latin1")) for name, value in response.items()]


def bearer_token(request: ASGIRequest) -> str | None:
    return bearer_secret(request.headers.get("Authorization"))


async def read_body(receive, *, limit: int) -> tuple[list[dict], bytes | None]:
    """The request's messages as received, and its body (None past `limit` bytes: Django answers 413)."""
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":  # the client went away
            return messages, None
        size += len(message.get("body", b""))
        if size > limit:
            return messages, None
        if not message.get("more_body"):
            return messages, b"".join(m.get("body", b"") for m in messages)


def replay(messages: list[dict], receive):
    """`receive` that hands out `messages` first, for Django to read the body again."""
    pending = list(messages)

    async def replaying():
        return pending.pop(0) if pending else await receive()

    return replaying
