"""Calls over HTTP: a session's tool calls, each with its state, its tool's class and its notes."""

from __future__ import annotations

from ninja import Query, Router

from sessions_app import selectors
from sessions_app.api.checks import readable
from sessions_app.api.notes import note_to_wire
from sessions_app.api.schemas import CallsOut, ErrorOut
from sessions_app.log import events as log_events

router = Router(tags=["calls"])


def call_to_wire(row: selectors.CallRow) -> dict:
    call, session = row.call, row.session
    return {
        "session_id": session.id,
        "project": session.project.slug,
        "agent_name": session.agent_name,
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "class": row.side_effect,
        "state": call.state,
        "seq": call.seq,
        "result_seq": call.result_seq,
        "turn_seq": call.turn_seq,
        "time": log_events.format_time(row.time),
        "notes": [note_to_wire(note) for note in row.notes],
    }


@router.get("/sessions/{session_id:session_id}/calls", response={200: CallsOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut}, by_alias=True)
def list_calls(request, session_id: str, all: bool = Query(False, description="every class; default: external_effect and unknown only")):  # noqa: A002
    """The session's tool calls in order of first sighting, each as the ledger states it."""
    session = readable(request, session_id)
    return {"calls": [call_to_wire(row) for row in selectors.session_calls(session, all_classes=all)]}
