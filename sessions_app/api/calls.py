"""Calls over HTTP: a session's tool calls, and the calls to check across the fleet, each with its state, its tool's class and its notes."""

from __future__ import annotations

from typing import Literal

from ninja import Query, Router

from sessions_app import selectors
from sessions_app.api.checks import ApiError, readable
from sessions_app.api.notes import note_to_wire
from sessions_app.api.schemas import CALL_STATES, CallPageOut, CallsOut, ErrorOut
from sessions_app.log import events as log_events
from sessions_app.selectors import access
from sessions_app.services.verdict_transfer import verdict_to_wire

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
        "idempotency_key": row.idempotency_key,
        "receipt": row.receipt,
        "verdict": verdict_to_wire(row.verdict) if row.verdict is not None else None,
    }


@router.get("/sessions/{session_id:session_id}/calls", response={200: CallsOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut}, by_alias=True)
def list_calls(request, session_id: str, all: bool = Query(False, description="every class; default: external_effect and unknown only")):  # noqa: A002
    """The session's tool calls in order of first sighting, each as the ledger states it (read from its table)."""
    session = readable(request, session_id)
    return {"calls": [call_to_wire(row) for row in selectors.session_ledger(session, all_classes=all).rows]}


@router.get("/calls", response={200: CallPageOut, 422: ErrorOut}, by_alias=True)
def list_fleet_calls(
    request,
    state: list[CALL_STATES] = Query(None, description="repeatable; default: tool_outcome_unknown, superseded, and pending past the stall window"),
    class_: list[Literal["read_only", "idempotent", "external_effect", "unknown"]] = Query(None, alias="class", description="repeatable"),
    agent: str = Query("", description="the agent's name, exactly"),
    tool: str = Query("", description="the tool's name, exactly"),
    project: str | None = Query(None, description="only this project's calls (its slug)"),
    tag: str = Query("", description="calls with a note carrying this tag"),
    ref: str = Query("", description="calls whose receipt, idempotency key or current verdict's external_ref is exactly this (every state unless `state` is given)"),
    since: str | None = Query(None, description="first sighted at or after (ISO 8601 with a UTC offset or Z)"),
    until: str | None = Query(None, description="first sighted before (ISO 8601 with a UTC offset or Z)"),
    limit: int = Query(50, ge=1, le=200),
    cursor: str | None = None,
    settled: Literal["true", "false", "any"] | None = Query(None, description="true: calls with a current verdict; any: both; default: those without"),
):
    """The calls of every project you may read, newest first sighting first."""
    for field, text in (("agent", agent), ("tool", tool), ("tag", tag), ("ref", ref)):
        if "\x00" in text:  # no stored text holds NUL (log.values refuses it)
            raise ApiError(422, "invalid_request", f"{field}: NUL is not allowed", field=field)
    moments = {field: _moment(field, value) for field, value in (("since", since), ("until", until))}
    projects = access.actor_of(request).project_ids(access.READ)
    if project is not None:
        projects = list(access.projects(access.actor_of(request)).filter(slug=project, pk__in=projects).values_list("pk", flat=True))
    try:
        page = selectors.fleet_calls(
            projects=projects, states=frozenset(state) if state else None, classes=frozenset(class_ or ()),
            agent=agent, tool=tool, tag=tag, ref=ref, limit=limit, cursor=cursor, **moments,
            settled={"true": True, "false": False, "any": None}[settled or ("any" if ref else "false")],
        )
    except selectors.InvalidCursor as exc:
        raise ApiError(422, "invalid_cursor", str(exc), field="cursor") from None
    return {"items": [call_to_wire(row) for row in page.items], "next_cursor": page.next_cursor}


def _moment(field: str, value: str | None):
    if value is None:
        return None
    try:
        return log_events.coerce_time(value)
    except ValueError:
        raise ApiError(422, "invalid_request", f"{field}: not an ISO 8601 time with a UTC offset or Z", field=field) from None
