"""`POST /otlp/v1/traces`: OpenTelemetry trace exports in (docs/guide/otlp.md, "Endpoint").

A thin door. It checks the bearer token (the token's project receives the
spans; the token needs the `append` scope there), decodes the body
(mapping/decode, pure, off the event loop), hands the spans to
`services.ingest_spans` and has the otlp_closer close the turns that may close.

Every answer is OTLP/HTTP's, in the request's encoding (protobuf or JSON; JSON
when the request's Content-Type is neither): 200 with an
ExportTraceServiceResponse whose partial_success counts and explains the spans
left out, whether the decoder or the service refused them; an error status
with a google.rpc.Status saying why. Exporters retry 429, 502, 503 and 504 and
drop the batch on any other error, so a malformed body or span is a 4xx or a
partial success, never a 5xx. A database that cannot be reached raises through
to dashboard's middleware: 503 with Retry-After, which exporters retry.

Bearer tokens only: a login session's cookie is not read, which is also why
CSRF does not apply (csrf_exempt).
"""

from __future__ import annotations

import asyncio

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from sessions_app import services
from sessions_app.api import otlp_closer
from sessions_app.lib import db_threads, instruments
from sessions_app.lib.bearer import bearer_secret
from sessions_app.models import ApiToken
from sessions_app.otel import decode
from sessions_app.selectors import access

# google.rpc.Code of each error status (OTLP/HTTP's Status body carries one).
GRPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 405: 12, 413: 8, 415: 3}  # INVALID_ARGUMENT, UNAUTHENTICATED, ...
BEARER_HINT = "send Authorization: Bearer <token> (OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>)"


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@csrf_exempt
async def traces(request: HttpRequest) -> HttpResponse:
    encoding = answer_encoding(request)
    received_at = timezone.now()
    try:
        if request.method != "POST":
            raise Refused(405, f"{request.method} is not served at {request.path}; export traces with POST")
        actor, project = await db_threads.run(authorize, request_bearer(request))
        request.api_token = actor.token  # as the API's authentication leaves it: the access log names the token
        decoded = await asyncio.to_thread(decode_body, request)
    except Refused as refused:
        return error(encoding, refused.status, refused.message)
    refused = list(decoded.refused)
    if decoded.spans:
        ingested = await db_threads.run_append(
            services.ingest_spans, actor=actor, project=project, spans=decoded.spans, received_at=received_at
        )
        refused += ingested.refused
        for session_id, after_seconds in ingested.settle.items():
            otlp_closer.schedule(session_id, after_seconds)
        if ingested.held_due is not None:
            otlp_closer.schedule(otlp_closer.HELD_SPANS, ingested.held_due)
    total = len(decoded.spans) + len(decoded.refused)
    # Counted here, not in the service: the decoder's refusals never reach it.
    instruments.count_spans(accepted=total - len(refused), rejected=len(refused))
    body = decode.response_body(encoding, rejected=len(refused), message=decode.refusals_message(refused, total))
    return HttpResponse(body, content_type=decode.CONTENT_TYPES[encoding])


@csrf_exempt
def not_found(request: HttpRequest, *args, **kwargs) -> HttpResponse:
    """Any other path under /otlp/: an exporter of metrics or logs pointed here (OTEL_EXPORTER_OTLP_ENDPOINT)."""
    return error(answer_encoding(request), 404, f"nothing is served at {request.path}: Turnlog receives traces only, at /otlp/v1/traces")


def authorize(secret: str | None) -> tuple[access.Actor, object]:
    """The actor and project of a usable bearer token that may append in its project (on a database thread)."""
    token = ApiToken.usable_for(secret) if secret else None
    if token is None:
        raise Refused(401, f"{access.token_refusal(secret)}: {BEARER_HINT}" if secret else BEARER_HINT)
    token.mark_used()
    actor = access.Actor(user=token.user, token=token)
    if token.project_id is None:
        raise Refused(403, "this token belongs to no project: spans go to the bearer token's project, so use a project token with the 'append' scope")
    if not actor.can(token.project_id, access.APPEND):
        access.audit_denied(actor, project_id=token.project_id, target=f"project {token.project.slug}", capability=access.APPEND)
        raise Refused(403, access.refusal(actor, access.APPEND, project=token.project))
    return actor, token.project


def decode_body(request: HttpRequest) -> decode.Decoded:
    limit = settings.TURNLOG_OTLP_MAX_BODY_BYTES
    try:
        decode.encoding_of(request.content_type)  # a wrong Content-Type is told before the size
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > limit:
            raise decode.TooLarge(f"the body is {declared} bytes; the limit is {limit}")
        # Read here, not through request.body: that one applies Django's limit for the API's JSON
        # (DATA_UPLOAD_MAX_MEMORY_SIZE), this endpoint has its own.
        body = request.read(limit + 1)
        return decode.decode(
            body,
            content_type=request.content_type,
            content_encoding=request.headers.get("Content-Encoding"),
            max_bytes=limit,
        )
    except decode.UnsupportedMediaType as error:
        raise Refused(415, error.reason) from None
    except decode.TooLarge as error:
        raise Refused(413, error.reason) from None
    except decode.DecodeError as error:
        raise Refused(400, error.reason) from None


def request_bearer(request: HttpRequest) -> str | None:
    return bearer_secret(request.headers.get("Authorization"))


def answer_encoding(request: HttpRequest) -> str:
    try:
        return decode.encoding_of(request.content_type)
    except decode.UnsupportedMediaType:
        return decode.JSON


def error(encoding: str, status: int, message: str) -> HttpResponse:
    body = decode.status_body(encoding, code=GRPC_CODES[status], message=message)
    response = HttpResponse(body, status=status, content_type=decode.CONTENT_TYPES[encoding])
    if status == 405:
        response["Allow"] = "POST"
    return response
