"""The JSON API (api.md): thin endpoints over services and selectors."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import re
from typing import Any, Literal

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern
from django.views.decorators.csrf import csrf_exempt
from ninja import Field, NinjaAPI, Query, Router, Schema, Status
from pydantic import StrictBool
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser
from ninja.security import HttpBearer, SessionAuth
from pydantic import StrictInt

import sessions_app.converters  # noqa: F401  (registers the session_id path converter the routes use)
from sessions_app import access, db_threads, errors, field_paths, selectors, services
from sessions_app.log import blob as log_blob
from sessions_app.log import events as log_events
from sessions_app.log import fork as log_fork
from sessions_app.log import recovery as log_recovery
from sessions_app.log import values as log_values
from sessions_app.models import SESSION_ID_PATTERN, ApiToken, Session

SESSION_ID_RE = re.compile(SESSION_ID_PATTERN)


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


class ApiError(Exception):
    """A domain error: a status, a machine-readable code, words, extra fields."""

    def __init__(self, status: int, error: str, detail: str, **fields: Any):
        super().__init__(detail)
        self.status, self.error, self.detail, self.fields = status, error, detail, fields


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
        checked_later = request.resolver_match.url_name == APPEND_URL_NAME
        return json_object_body(request, check=not checked_later)

    def parse_querydict(self, data, list_fields, request: HttpRequest) -> dict:
        for key, items in data.lists():
            for text in (key, *items):
                if problem := log_values.text_problem(text):
                    raise ApiError(422, "invalid_text", f"query parameter {key!r}: {problem}")
        return super().parse_querydict(data, list_fields, request)


APPEND_URL_NAME = "append_events"  # the append endpoint's view name (ninja names it after the function)


def json_object_body(request: HttpRequest, *, check: bool = True) -> dict:
    """The request's body as a JSON object (of storable values, with `check`), or the error saying why not."""
    body = log_values.loads_fast(request.body)  # orjson, or values.loads where it would differ
    if not isinstance(body, dict):
        shown = "null" if body is None else type(body).__name__
        raise ApiError(422, "invalid_request", f"the body must be a JSON object, not {shown}")
    if check:
        log_values.check(body)
    return body


class TurnlogAPI(NinjaAPI):
    """A NinjaAPI whose endpoints keep the operation ids they had when they were all functions of one module."""

    def get_openapi_operation_id(self, operation) -> str:
        # The module's name as it was (ninja's default takes the module): clients
        # generated from the document name their methods after these ids.
        return f"sessions_app_api_{operation.view_func.__name__}"


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
    if in_event and request.resolver_match.url_name == APPEND_URL_NAME:
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
    return error_response(request, 409, "stale_plan", str(exc), plan=plan_to_wire(exc.plan, exc.next_seq))


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


# Schemas ---------------------------------------------------------------


class ParentOut(Schema):
    session_id: str
    seed_length: int


class SessionOut(Schema):
    id: str
    project: str = Field(..., description="the slug of the session's project")
    agent_name: str
    metadata: dict
    created_at: str
    last_event_at: str | None = Field(..., description="the time the latest event claims, as the agent sent it; null for an empty log")
    last_activity_at: str = Field(
        ...,
        description="the latest activity by the server's clock (when the latest event was received; else creation): what status and list order use",
    )
    event_count: int
    parent: ParentOut | None
    open_turns: list[int]
    interrupted: bool
    status: str = Field(..., description="running | stalled (open turn, quiet too long) | active (no open turn, written to recently) | recovered | clean")


class SessionIn(Schema):
    id: str | None = Field(None, description="1-128 of A-Z a-z 0-9 . _ : - ; generated when absent")
    agent_name: str | None = Field(None, max_length=services.AGENT_NAME_MAX)
    metadata: dict[str, Any] = Field(default_factory=dict)
    project: str | None = Field(
        None, description="the project's slug; default: the token's project, else the one project where you may create sessions"
    )


class SessionPageOut(Schema):
    items: list[SessionOut]
    next_cursor: str | None


class EventOut(Schema):
    seq: int
    type: str
    time: str
    data: dict[str, Any]


class EventIn(Schema):
    """One event to append (documentation of AppendIn.events' items)."""

    type: Literal[tuple(sorted(log_events.EVENT_TYPES))] = Field(..., description="one of the event types of docs/session-log.md")
    data: dict[str, Any]
    time: str | None = Field(None, description="ISO 8601 with a UTC offset or Z; default: the append time")


class AppendIn(Schema):
    # Items stay untyped here so that the core's validation names the index
    # and reason of a bad event (422 invalid_event) instead of pydantic.
    events: list[Any] = Field(
        ..., description="Events to append, all or nothing", json_schema_extra={"items": EventIn.model_json_schema()}
    )
    expected_seq: StrictInt | None = None


class AppendOut(Schema):
    first_seq: int
    next_seq: int


class EventsOut(Schema):
    events: list[EventOut]
    next_seq: int


class MessageOut(Schema):
    # Every field but seq, role and created_at is the event's data as accepted
    # (session-log.md section 1 allows e.g. a single-object tool_calls or an integer id).
    seq: int
    role: str
    content: Any = None
    tool_calls: Any = Field(..., description="as stored: usually a list; [] when absent or null")
    tool_call_id: Any = None
    name: Any = None
    metadata: Any = None
    reasoning_content: Any = None
    created_at: str


class MessagesOut(Schema):
    messages: list[MessageOut]


class ImportOut(Schema):
    session: SessionOut
    warnings: list[str]


class ErrorOut(Schema):
    detail: str
    error: str | None = None


class InvalidJsonOut(Schema):
    detail: str = Field(..., description="what is wrong and at which line and column")
    error: Literal["invalid_json"]


class RepairOut(Schema):
    type: str
    data: dict[str, Any]


CALL_NAME_DESCRIPTION = (
    "the call's name (session-log.md section 1): its `name` when a string, integer or boolean (kept as sent),"
    " else its `function`'s `name` (OpenAI's chat shape); null when neither"
)


class OwedCallOut(Schema):
    id: str = Field(..., description="the call id as section 1 reads it (an integer id as its decimal string)")
    name: Any = Field(None, description=CALL_NAME_DESCRIPTION)
    arguments: Any = Field(
        None, description="its `arguments`, else its `function`'s `arguments`; a JSON text that is valid JSON is given parsed"
    )
    turn_seq: int
    step_seq: int | None
    sighted_seq: int
    risk: str
    rule: int
    evidence: list[int]
    side_effect: str


class StrategyCallOut(Schema):
    id: str
    name: Any = Field(None, description=CALL_NAME_DESCRIPTION)
    seq: int = Field(..., description="where the call was first sighted")
    class_: Literal["external_effect", "unknown"] = Field(..., alias="class")
    state: Literal["completed", "tool_not_started", "tool_outcome_unknown"]


class StrategyOut(Schema):
    turn_seq: int
    strategy: Literal["manual_check", "resume_after_effects", "restart_turn"]
    calls: list[StrategyCallOut] = Field(
        ..., description="every call of the turn whose tool's class is external_effect or unknown"
    )


class PlanOut(Schema):
    interrupted: bool
    open_turns: list[int]
    next_seq: int
    repairs: list[RepairOut]
    warnings: list[str]
    digest: str
    owed_calls: list[OwedCallOut] = Field(
        ..., description="Why each tool_result repair has its risk: the rule, its evidence seqs, the tool's side-effect class"
    )
    strategies: list[StrategyOut] = Field(
        ...,
        description="What to do next, per open turn, innermost first (session-log.md section 8.1); outside the digest",
    )


class RepairIn(Schema):
    digest: str | None = None
    note: str = ""


class RecoverIn(RepairIn):
    context: StrictBool = Field(
        False, description="also append one recovery-context system_message after the plan (listed in `appended`)"
    )
    abandon: StrictBool = Field(False, description="record that the turns were abandoned instead of the recommended strategy")


class RepairAppliedOut(Schema):
    appended: list[EventOut]
    next_seq: int


def plan_to_wire(plan, next_seq: int) -> dict:
    owed = [r.call for r in plan.repairs if r.call is not None]
    side_effects = selectors.side_effect_classes(call.name for call in owed)
    return {
        "interrupted": plan.interrupted,
        "open_turns": plan.open_turns,
        "next_seq": next_seq,
        "repairs": [{"type": r.type, "data": r.data} for r in plan.repairs],
        "warnings": plan.warnings,
        "digest": plan.digest(next_seq),
        "owed_calls": [
            {**dataclasses.asdict(call), "evidence": list(call.evidence), "side_effect": side_effects[log_events.tool_name(call.name)]}
            for call in owed
        ],
        "strategies": [turn.as_wire() for turn in selectors.recovery_strategies(plan)],
    }


def session_to_wire(session: Session) -> dict:
    return {
        "id": session.id,
        "project": session.project.slug,
        "agent_name": session.agent_name,
        "metadata": session.metadata,
        "created_at": log_events.format_time(session.created_at),
        "last_event_at": log_events.format_time(session.last_event_at) if session.last_event_at else None,
        "last_activity_at": log_events.format_time(session.last_activity_at),
        "event_count": session.event_count,
        "parent": session.parent_ref,
        "open_turns": session.open_turns,
        "interrupted": session.interrupted,
        "status": session.status,
    }


def checked_session_id(value: str) -> str:
    if not SESSION_ID_RE.fullmatch(value):
        raise ApiError(422, "invalid_session_id", f"session id {value!r} must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
    return value


ERRORS = {403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}
BODY_ERRORS = {400: InvalidJsonOut, 413: ErrorOut, 422: ErrorOut}  # any endpoint reading a JSON body
router = Router(tags=["sessions"])


@router.post("/sessions", response={201: SessionOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, **BODY_ERRORS})
def create_session(request, payload: SessionIn):
    """A new session. Ids are unique across projects: an id taken in any project answers 409 session_exists."""
    project = access.project_for(access.actor_of(request), payload.project, access.APPEND)
    session = services.create_session(
        session_id=checked_session_id(payload.id) if payload.id is not None else None,
        agent_name=payload.agent_name or "",
        metadata=payload.metadata,
        project=project,
    )
    return Status(201, session_to_wire(session))


@router.get("/sessions", response={200: SessionPageOut, 422: ErrorOut})
def list_sessions(
    request,
    interrupted: bool | None = None,
    status: Literal["running", "stalled", "active", "recovered", "clean"] | None = None,
    q: str = "",
    project: str | None = Query(None, description="only this project's sessions (its slug)"),
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = None,
):
    """The sessions of every project you may read, newest activity first."""
    projects = access.actor_of(request).project_ids(access.READ)
    if project is not None:
        projects = list(access.projects(access.actor_of(request)).filter(slug=project, pk__in=projects).values_list("pk", flat=True))
    try:
        page = selectors.list_sessions(interrupted=interrupted, status=status, q=q, projects=projects, limit=limit, cursor=cursor)
    except selectors.InvalidCursor as exc:
        raise ApiError(422, "invalid_cursor", str(exc)) from None
    return {"items": [session_to_wire(s) for s in page.items], "next_cursor": page.next_cursor}


# Registered before /sessions/{session_id} so that URL does not swallow it.
IMPORT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object", "description": "A version 1 or 2 blob"}}},
    }
}


@router.post(
    "/sessions/import",
    response={201: ImportOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, **BODY_ERRORS},
    openapi_extra=IMPORT_BODY,
)
def import_session(request, id: str | None = None, project: str | None = None):
    """Create a session from a blob. Seqs are reassigned; dropped events are listed in warnings."""
    into = access.project_for(access.actor_of(request), project, access.APPEND)
    blob = json_object_body(request)
    try:
        session, warnings = services.import_blob(blob=blob, session_id=checked_session_id(id) if id else None, project=into)
    except log_blob.UnsupportedVersion as exc:
        raise ApiError(422, "unsupported_version", str(exc)) from None
    return Status(201, {"session": session_to_wire(session), "warnings": warnings})


def readable(request, session_id: str) -> Session:
    return access.session_for(access.actor_of(request), session_id, access.READ)


# The append, events and session endpoints are async views: each sends its database
# work, access check included, to a database thread in one call (db_threads says why).


@router.get("/sessions/{session_id:session_id}", response={200: SessionOut, 403: ErrorOut, 404: ErrorOut})
async def get_session(request, session_id: str):
    return await db_threads.run(lambda: session_to_wire(readable(request, session_id)))


@router.post("/sessions/{session_id:session_id}/events", response={201: AppendOut, **ERRORS, **BODY_ERRORS})
async def append_events(request, session_id: str, payload: AppendIn):
    """Append a batch, all or nothing. Send `Idempotency-Key` to retry safely."""
    prepared = prepare_append(payload.events, payload.expected_seq, request.headers.get("Idempotency-Key"))

    def append():
        access.session_for(access.actor_of(request), session_id, access.APPEND)
        return prepared.store(session_id)

    return Status(201, (await db_threads.run_append(append)).as_response())


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedAppend:
    """A batch checked as far as it can be without the database (the append lane shares it)."""

    events: list[log_events.NewEvent]
    expected_seq: int | None
    idempotency_key: str | None
    request_sha256: str

    def store(self, session_id: str, *, bearer: str | None = None) -> services.AppendResult:
        return services.append_events(
            session_id=session_id,
            events=self.events,
            expected_seq=self.expected_seq,
            idempotency_key=self.idempotency_key,
            request_sha256=self.request_sha256,
            bearer=bearer,
        )


def prepare_append(items: list, expected_seq: int | None, idempotency_key: str | None) -> PreparedAppend:
    """The batch validated by the core, or the ApiError / InvalidEvent saying why not."""
    if not items:
        raise ApiError(422, "empty_batch", "the batch holds no events; send at least one")
    limit = settings.TURNLOG_MAX_BATCH_EVENTS
    if len(items) > limit:
        raise ApiError(413, "too_large", f"the batch holds {len(items)} events; the limit is {limit}")
    # One quick pass over the whole list (the body's level 2) usually shows that no value
    # anywhere in it is unstorable; only otherwise are they checked event by event, in
    # the core's order of reasons, so the answer is the same either way.
    storable = log_values.surely_storable(items, level=log_events.DATA_LEVEL - 2)
    events = log_events.validate_batch(items, values_checked=storable)  # data's text and depth included
    if not storable:
        # Whatever else the items hold (their data was checked just above, once).
        log_values.check({"events": [{k: v for k, v in item.items() if k != "data"} for item in items]})
    key = idempotency_key or None
    if key is not None and len(key) > 255:
        raise ApiError(422, "invalid_idempotency_key", "Idempotency-Key must be at most 255 characters")
    if key is not None and (problem := log_values.text_problem(key)):
        raise ApiError(422, "invalid_text", f"Idempotency-Key header: {problem}")
    digest = body_digest(items, expected_seq) if key else ""
    return PreparedAppend(events, expected_seq, key, digest)


def body_digest(events: list, expected_seq: int | None) -> str:
    canonical = json.dumps({"events": events, "expected_seq": expected_seq}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@router.get("/sessions/{session_id:session_id}/events", response={200: EventsOut, **ERRORS})
async def list_events(request, session_id: str, since: int = 0, limit: int = Query(500, ge=1, le=5000)):
    """Events with seq >= since, oldest first. Page with since = last seq + 1."""
    if since < 0:
        raise ApiError(422, "invalid_since", f"since must be 0 or more, got {since}")
    return await db_threads.run(events_page, request, session_id, since=since, limit=limit)


def events_page(request, session_id: str, *, since: int, limit: int) -> dict:
    session = readable(request, session_id)
    # Any since past the end answers nothing; bounded so the database's integers hold it.
    events = selectors.events_since(session, since=min(since, session.event_count), limit=limit)
    # next_seq is the event_count read with the session; a row committed
    # after that read is left for the next page so the answer stays gapless.
    events = [e for e in events if e.seq < session.event_count]
    return {"events": [log_events.event_to_wire(e) for e in events], "next_seq": session.event_count}


@router.get("/sessions/{session_id:session_id}/messages", response={200: MessagesOut, 403: ErrorOut, 404: ErrorOut})
def list_messages(request, session_id: str):
    """The fold: what the model sees (compactions applied)."""
    messages = selectors.session_messages(readable(request, session_id))
    return {"messages": [{**m, "created_at": log_events.format_time(m["created_at"])} for m in messages]}


@router.get("/sessions/{session_id:session_id}/export", response={200: dict[str, Any], 403: ErrorOut, 404: ErrorOut})
def export_session(request, session_id: str):
    """A version 2 blob (session-log.md section 6) plus the session and its parent."""
    session = readable(request, session_id)
    extra = {"session": {"id": session.id, "agent_name": session.agent_name or None, "parent": session.parent_ref}}
    return log_blob.write_blob(selectors.session_log(session), agent_name=session.agent_name or None, extra=extra)


@router.get(
    "/sessions/{session_id:session_id}/recovery-plan", response={200: PlanOut, 403: ErrorOut, 404: ErrorOut}, tags=["recovery"], by_alias=True
)
def get_recovery_plan(request, session_id: str):
    """What recovery would append now, and why; confirm it with its digest."""
    session = readable(request, session_id)
    return plan_to_wire(selectors.recovery_plan(session), session.event_count)


class DanglingPatchOut(Schema):
    blocked_by_open_turns: list[int]
    next_seq: int
    repairs: list[RepairOut]
    digest: str


@router.get("/sessions/{session_id:session_id}/dangling-calls", response={200: DanglingPatchOut, 403: ErrorOut, 404: ErrorOut}, tags=["recovery"])
def get_dangling_calls(request, session_id: str):
    """What the turn-blind patch would append (only applicable once no turn is open)."""
    session = readable(request, session_id)
    repairs = selectors.dangling_patch(session)
    return {
        "blocked_by_open_turns": session.open_turns,
        "next_seq": session.event_count,
        "repairs": [{"type": r.type, "data": r.data} for r in repairs],
        "digest": log_recovery.repairs_digest(session.event_count, repairs),
    }


@router.post(
    "/sessions/{session_id:session_id}/recover",
    response={200: RepairAppliedOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, **BODY_ERRORS},
    tags=["recovery"],
)
def recover_session(request, session_id: str, payload: RecoverIn):
    """Append the recovery plan; with `digest`, only if it is still the plan previewed. Needs the operator role (and a token's `recover` scope).

    Without `context` it appends exactly the plan; with it, one recovery-context system_message follows.
    """
    access.session_for(access.actor_of(request), session_id, access.RECOVER)
    return applied(
        services.recover(
            session_id=session_id,
            user=request.user,
            digest=payload.digest,
            note=payload.note,
            context=payload.context,
            abandon=payload.abandon,
        )
    )


@router.post(
    "/sessions/{session_id:session_id}/patch-dangling-calls",
    response={200: RepairAppliedOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, **BODY_ERRORS},
    tags=["recovery"],
)
def patch_dangling_calls(request, session_id: str, payload: RepairIn):
    """The turn-blind patch for calls outside turns; refused (409 recovery_first) while a turn is open. Needs the operator role."""
    access.session_for(access.actor_of(request), session_id, access.RECOVER)
    return applied(
        services.patch_dangling_calls(session_id=session_id, user=request.user, digest=payload.digest, note=payload.note)
    )


def applied(result: services.RepairResult) -> dict:
    return {"appended": [log_events.event_to_wire(e.to_log_event()) for e in result.appended], "next_seq": result.next_seq}


class ForkIn(Schema):
    boundary: Any = Field("last", description='The seq of the last event to inherit (inclusive), or "last"')
    id: str | None = Field(None, description="The new session's id; generated when absent")


@router.post("/sessions/{session_id:session_id}/fork", response={201: SessionOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, **BODY_ERRORS}, tags=["forks"])
def fork_session(request, session_id: str, payload: ForkIn):
    """Copy the log up to `boundary` into a new session of the same project; refused inside an open turn."""
    access.session_for(access.actor_of(request), session_id, access.FORK)
    child = services.fork(
        user=request.user,
        session_id=session_id,
        boundary=payload.boundary,
        new_session_id=checked_session_id(payload.id) if payload.id is not None else None,
    )
    return Status(201, session_to_wire(child))


api.add_router("/", router)


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
