"""Sessions over HTTP: creating one, listing those you may read, reading one."""

from __future__ import annotations

from typing import Literal

from ninja import Query, Router, Status

from sessions_app import selectors, services
from sessions_app.api.checks import ApiError, checked_session_id, readable
from sessions_app.api.schemas import BODY_ERRORS, ErrorOut, SessionIn, SessionOut, SessionPageOut
from sessions_app.lib import db_threads
from sessions_app.log import events as log_events
from sessions_app.log import pricing
from sessions_app.models import Session
from sessions_app.selectors import access
from sessions_app.selectors import usage as usage_reads

router = Router(tags=["sessions"])


def session_to_wire(session: Session, bill: pricing.Bill | None = None) -> dict:
    """The Session object; `bill` its usage when the caller read a page's at once (selectors.usage.session_bills)."""
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
        "usage": (bill or usage_reads.session_bill(session)).as_api(),
    }


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
    sort: Literal["cost", "-cost", "tokens", "-tokens", "duration", "-duration"] | None = Query(
        None, description="by cost, tokens (input + output) or duration; '-' for the largest first; ties newest activity first"
    ),
    model: str | None = Query(None, description="only sessions that used this model"),
):
    """The sessions of every project you may read, newest activity first (or by `sort`)."""
    projects = access.actor_of(request).project_ids(access.READ)
    if project is not None:
        projects = list(access.projects(access.actor_of(request)).filter(slug=project, pk__in=projects).values_list("pk", flat=True))
    try:
        page = selectors.list_sessions(
            interrupted=interrupted, status=status, q=q, projects=projects, limit=limit, cursor=cursor, sort=sort,
            narrow=selectors.SessionFilter(model=model or ""),
        )  # fmt: skip
    except selectors.InvalidCursor as exc:
        raise ApiError(422, "invalid_cursor", str(exc)) from None
    bills = usage_reads.session_bills(page.items)
    return {"items": [session_to_wire(s, bills[s.pk]) for s in page.items], "next_cursor": page.next_cursor}


# An async view, as the append and events endpoints are: it sends its database work,
# access check included, to a database thread in one call (db_threads says why).
@router.get("/sessions/{session_id:session_id}", response={200: SessionOut, 403: ErrorOut, 404: ErrorOut})
async def get_session(request, session_id: str):
    return await db_threads.run(lambda: session_to_wire(readable(request, session_id)))
