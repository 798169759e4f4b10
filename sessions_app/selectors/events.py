"""A session's stored events: read in seq order, as log events, and by call id or open step."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import TextField
from django.db.models.functions import Cast

from sessions_app.lib import statements
from sessions_app.log import events as log_events
from sessions_app.log import fold
from sessions_app.log import values as log_values
from sessions_app.models import CallSighting, Event, Session


def events_since(session: Session, *, since: int = 0, limit: int | None = None) -> list[log_events.Event]:
    """Stored events with seq >= since, oldest first (since is inclusive)."""
    if since < 0:
        raise ValueError(f"since must be 0 or more, got {since}")
    rows = Event.objects.filter(session=session, seq__gte=since).order_by("seq")
    return to_log_events(rows[:limit] if limit is not None else rows)


def wire_events_since(session: Session, *, since: int, limit: int) -> list[dict]:
    """`events_since` as event_to_wire gives them, read as plain rows (no model instance or log event
    per row: GET .../events reads every event it answers, docs/performance.md, "OTLP ingest"), the
    data parsed by orjson where it reads them exactly as json would (values.loads_fast)."""
    rows = statements.rows(f"wire_events_since:{limit}", _wire_rows(limit), [session.id, since])
    return [
        {"seq": seq, "type": type_, "time": log_events.format_time(time), "data": log_values.loads_fast(data.encode())}
        for seq, type_, time, data in rows
    ]


def _wire_rows(limit: int):
    return lambda session_id, since: (
        Event.objects.filter(session_id=session_id).filter(seq__gte=since).order_by("seq")
        .annotate(data_text=Cast("data", TextField())).values_list("seq", "type", "time", "data_text")[:limit]
    )


def session_log(session: Session) -> list[log_events.Event]:
    return events_since(session, since=0)


def session_messages(session: Session) -> list[dict]:
    return fold.project(session_log(session))


@dataclass(frozen=True)
class CallLookups:
    """What the log holds, anywhere, about some call ids: their tool_call and tool_result events
    (in seq order) and the seqs of the assistant messages that named them."""

    ids: frozenset[str]
    events: list[log_events.Event]
    sightings: dict[str, list[int]]  # call id -> seqs, ascending


def call_lookups(session: Session, ids: set[str]) -> CallLookups:
    """Two indexed lookups by call id, whatever the length of the log."""
    # Sorted here, not by the query: ORDER BY seq would lure SQLite's
    # planner onto the (session, seq) index and a scan of the whole log.
    events = sorted(to_log_events(Event.objects.filter(session=session, call_id__in=ids)), key=lambda e: e.seq)
    # Keyed by the ids themselves: the column holds a digest of an id too long for it.
    id_of_column = {CallSighting._meta.get_field("call_id").get_prep_value(cid): cid for cid in ids}
    sightings: dict[str, list[int]] = {}
    for stored, seq in sorted(CallSighting.objects.filter(session=session, call_id__in=ids).values_list("call_id", "seq"), key=lambda r: r[1]):
        sightings.setdefault(id_of_column.get(stored, stored), []).append(seq)
    return CallLookups(ids=frozenset(ids), events=events, sightings=sightings)


def steps_open_at(session: Session, seq: int) -> list[int]:
    """The scan's step stack just before `seq`: steps opened earlier and not yet closed there.

    Each is either still open now (session.step_stack) or closed by a step_end
    at or after `seq` (whose step_seq names it); stacks push in seq order.
    """
    closed_later = Event.objects.filter(session=session, type="step_end", seq__gte=seq, step_seq__lt=seq)
    return sorted({s for s in session.step_stack if s < seq} | set(closed_later.values_list("step_seq", flat=True)))


def to_log_events(rows) -> list[log_events.Event]:
    return [
        log_events.Event(seq=r[0], type=r[1], time=r[2], data=r[3], received_at=r[4])
        for r in rows.values_list("seq", "type", "time", "data", "received_at")
    ]


def placed_log_events(rows) -> tuple[list[log_events.Event], dict[int, tuple[int | None, int | None]]]:
    """The rows as log events, and where each stands: seq -> (turn_seq, step_seq). One query."""
    events, placement = [], {}
    for seq, type_, time, data, received_at, turn_seq, step_seq in rows.values_list(
        "seq", "type", "time", "data", "received_at", "turn_seq", "step_seq"
    ):
        events.append(log_events.Event(seq=seq, type=type_, time=time, data=data, received_at=received_at))
        placement[seq] = (turn_seq, step_seq)
    return events, placement
