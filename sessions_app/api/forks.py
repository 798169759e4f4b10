"""Forks over HTTP: a new session from a prefix of another's log."""

from __future__ import annotations

from ninja import Router, Status

from sessions_app import services
from sessions_app.api.checks import checked_session_id
from sessions_app.api.schemas import BODY_ERRORS, ErrorOut, ForkIn, SessionOut
from sessions_app.api.sessions import session_to_wire
from sessions_app.selectors import access

router = Router(tags=["forks"])


@router.post("/sessions/{session_id:session_id}/fork", response={201: SessionOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, **BODY_ERRORS})
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
