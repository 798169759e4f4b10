"""Sessions in and out as blobs (session-log.md section 6): import and export."""

from __future__ import annotations

from typing import Any

from ninja import Router, Status

from sessions_app import selectors, services
from sessions_app.api.checks import ApiError, checked_session_id, json_object_body, readable
from sessions_app.api.notes import note_to_wire
from sessions_app.api.schemas import BODY_ERRORS, ErrorOut, ImportOut
from sessions_app.api.sessions import session_to_wire
from sessions_app.log import blob as log_blob
from sessions_app.selectors import access
from sessions_app.selectors.verdicts import session_verdicts
from sessions_app.services.verdict_transfer import verdict_to_blob

router = Router(tags=["sessions"])
# The blob is read as sent (json_object_body), not through a Schema: the document says what it is.
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
    """Create a session from a blob. Seqs are reassigned (notes on events follow them); what was dropped is listed in warnings."""
    into = access.project_for(access.actor_of(request), project, access.APPEND)
    blob = json_object_body(request)
    try:
        session, warnings = services.import_blob(blob=blob, session_id=checked_session_id(id) if id else None, project=into)
    except log_blob.UnsupportedVersion as exc:
        raise ApiError(422, "unsupported_version", str(exc)) from None
    return Status(201, {"session": session_to_wire(session), "warnings": warnings})


@router.get("/sessions/{session_id:session_id}/export", response={200: dict[str, Any], 403: ErrorOut, 404: ErrorOut})
def export_session(request, session_id: str):
    """A version 2 blob (session-log.md section 6) plus the session, its parent, its notes, its patch results' seqs and its verdicts."""
    session = readable(request, session_id)
    extra = {
        "session": {"id": session.id, "agent_name": session.agent_name or None, "parent": session.parent_ref},
        "notes": [note_to_wire(note) for note in selectors.session_notes(session)],
        log_blob.PATCH_SEQS_KEY: sorted(selectors.patch_seqs(session)),
        "verdicts": [verdict_to_blob(v) for v in session_verdicts(session)],
    }
    return log_blob.write_blob(selectors.session_log(session), agent_name=session.agent_name or None, extra=extra)
