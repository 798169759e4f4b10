"""A session's log over HTTP: appending a batch, reading events, the fold as messages."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from django.conf import settings
from django.http import HttpResponse
from ninja import Query, Router, Status

from sessions_app import selectors, services
from sessions_app.api.checks import ApiError, readable
from sessions_app.api.rendering import json_answer
from sessions_app.api.schemas import BODY_ERRORS, ERRORS, AppendIn, AppendOut, ErrorOut, EventsOut, MessagesOut
from sessions_app.lib import db_threads
from sessions_app.log import events as log_events
from sessions_app.log import values as log_values
from sessions_app.selectors import access

router = Router(tags=["sessions"])
APPEND_URL_NAME = "append_events"  # the append endpoint's view name (ninja names it after the function)


# The append and events endpoints are async views: each sends its database work,
# access check included, to a database thread in one call (db_threads says why).


@router.post("/sessions/{session_id:session_id}/events", response={201: AppendOut, **ERRORS, **BODY_ERRORS})
async def append_events(request, session_id: str, payload: AppendIn):
    """Append a batch, all or nothing. Send `Idempotency-Key` to retry safely."""
    prepared = prepare_append(payload.events, payload.expected_seq, request.headers.get("Idempotency-Key"))

    def append():
        access.session_for(access.actor_of(request), session_id, access.APPEND, related=False)
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


EVENTS_PAGE_DEFAULT, EVENTS_PAGE_MAX = 500, 5000


@router.get("/sessions/{session_id:session_id}/events", response={200: EventsOut, **ERRORS})
async def list_events(request, session_id: str, since: int = 0, limit: int = Query(EVENTS_PAGE_DEFAULT, ge=1, le=EVENTS_PAGE_MAX)):
    """Events with seq >= since, oldest first. Page with since = last seq + 1."""
    if since < 0:
        raise ApiError(422, "invalid_since", f"since must be 0 or more, got {since}")
    return await db_threads.run(events_page, request, session_id, since=since, limit=limit)


def events_page(request, session_id: str, *, since: int, limit: int) -> HttpResponse:
    return events_answer(readable(request, session_id, related=False), since=since, limit=limit)


def events_answer(session, *, since: int, limit: int) -> HttpResponse:
    """The page's answer for a session the caller may read (dashboard.lanes.EventsLane answers it too)."""
    # Any since past the end answers nothing; bounded so the database's integers hold it.
    events = selectors.wire_events_since(session, since=min(since, session.event_count), limit=limit)
    # next_seq is the event_count read with the session; a row committed
    # after that read is left for the next page so the answer stays gapless.
    events = [e for e in events if e["seq"] < session.event_count]
    return json_answer({"events": events, "next_seq": session.event_count})


@router.get("/sessions/{session_id:session_id}/messages", response={200: MessagesOut, 403: ErrorOut, 404: ErrorOut})
def list_messages(request, session_id: str):
    """The fold: what the model sees (compactions applied)."""
    messages = selectors.session_messages(readable(request, session_id))
    return {"messages": [{**m, "created_at": log_events.format_time(m["created_at"])} for m in messages]}
