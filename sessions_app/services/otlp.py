"""OTLP ingest's writes: spans in, events appended through the one append path (docs/internals/otlp.md).

A request's spans are planned and stored in one transaction, each session's
under its lock (taken in id order), with the same row writing as every append (`event_rows.store_events`:
structural columns, call sightings, agent-hour counts, publish on commit).
The planner (sessions_app/otel/planner.py) decides the events; the
rows of `OtlpTrace` and `OtlpSpan` remember what it needs for the next batch.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from sessions_app.lib import statements
from sessions_app.models import Event, OtlpSpan, OtlpTrace, Project, Session
from sessions_app.otel import conventions
from sessions_app.otel.identity import session_id_for
from sessions_app.otel.planner import Planner, TraceState, ordered
from sessions_app.otel.readings import OTHER, Reading
from sessions_app.otel.spans import Span

from .event_rows import AGENT_NAME_MAX, count_for_agents, insert_new_session, locked_session, new_session, store_events


@dataclass(frozen=True)
class SpanRefusal:
    trace_id: str
    span_id: str
    reason: str  # a sentence: what was wrong and where


@dataclass(frozen=True)
class IngestResult:
    accepted: int  # spans taken: stored, or already stored (a repeat)
    refused: list[SpanRefusal] = field(default_factory=list)
    settle: dict[str, float] = field(default_factory=dict)  # session id -> seconds until a turn there may close


def ingest_spans(*, actor, project: Project, spans: Sequence[Span], received_at: datetime | None = None) -> IngestResult:
    """Append what `spans` say to their sessions in `project` (created as needed), atomically.

    `actor` is the bearer's (the door checked it may append in `project`). A
    conversation naming a session of another project refuses its spans;
    so does content no database here could store. Nothing of a refused span
    is written.
    """
    return ingest_readings(actor=actor, project=project, readings=[conventions.read(span) for span in spans], received_at=received_at)


def ingest_readings(*, actor, project: Project, readings: Sequence[Reading], received_at: datetime | None = None) -> IngestResult:
    now = received_at or timezone.now()
    by_session, originals = _sessions_of(project, readings)
    refused: list[SpanRefusal] = []
    settle: dict[str, float] = {}
    if not by_session:
        return IngestResult(accepted=len(readings))
    # One transaction for the whole request: a transaction per session was a fifth of the ingest
    # (its BEGIN, COMMIT and savepoints; docs/performance.md, OTLP ingest).
    with transaction.atomic():
        sessions = _taken_sessions(project, by_session, originals, now)
        prior = _prior_rows([s for s in sessions.values() if s is not None and s.event_count], by_session)
        plans: list[tuple[Session, Planner, dict[str, OtlpTrace]]] = []
        for session_id, session in sessions.items():
            session_readings = by_session[session_id]
            if session is None:
                refused += [_refusal(r, f"its conversation names session {session_id}, which belongs to another project") for r in session_readings]
                continue
            rows, seen = prior.get(session_id, ({}, set()))
            new_traces = {r.trace_id for r in session_readings} - set(rows)
            turn_count = _turn_count(session) if session.event_count and new_traces else 0
            planner = _planner(session, rows, seen=seen, turn_count=turn_count, now=now)
            refused += [_refusal(r, reason) for r in ordered(session_readings) if (reason := planner.take(r)) is not None]
            plans.append((session, planner, rows))
            if (due := planner.settle_due(now=now.timestamp(), settle=settings.TURNLOG_OTLP_SETTLE_SECONDS)) is not None:
                settle[session_id] = due
        _write(plans, now)
    return IngestResult(accepted=len(readings) - len(refused), refused=refused, settle=settle)


def close_settled_turns(*, session_ids: Sequence[str], now: datetime | None = None) -> dict[str, float]:
    """Write the turn_end of every finished run of these sessions quiet for the settle time, in one transaction.

    What the closer calls when settle times are up, and the worker for the
    ones a restart left behind. Returns, per session, the seconds until
    another turn there may close (sessions with none left out).
    """
    now = now or timezone.now()
    again: dict[str, float] = {}
    with transaction.atomic():
        # Locks in id order, as every multi-session write; then every unclosed run of them in one read.
        sessions = [s for session_id in sorted(set(session_ids)) if (s := statements.get_for_update(Session, session_id)) is not None]
        open_runs: dict[str, dict[str, OtlpTrace]] = defaultdict(dict)
        for row in OtlpTrace.objects.filter(session_id__in=[s.id for s in sessions], closed=False):
            open_runs[row.session_id][row.trace_id] = row
        plans = []
        for session in sessions:
            session_id, rows = session.id, open_runs[session.id]
            planner = _planner(session, rows, seen=set(), turn_count=0, now=now)
            planner.close_settled(now=now.timestamp(), settle=settings.TURNLOG_OTLP_SETTLE_SECONDS)
            plans.append((session, planner, rows))
            if (due := planner.settle_due(now=now.timestamp(), settle=settings.TURNLOG_OTLP_SETTLE_SECONDS)) is not None:
                again[session_id] = due
        _write(plans, now)
    return again


def sessions_to_settle(*, now: datetime | None = None) -> list[str]:
    """Sessions with a finished run quiet for the settle time whose turn is still open (for the worker)."""
    now = now or timezone.now()
    quiet_since = now - timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS)
    rows = OtlpTrace.objects.filter(closed=False, root_arrived=True, last_span_at__lte=quiet_since)
    return sorted(set(rows.values_list("session_id", flat=True)))


def _refusal(reading: Reading, reason: str) -> SpanRefusal:
    return SpanRefusal(reading.trace_id, reading.span_id, reason)


def _sessions_of(project: Project, readings: Sequence[Reading]) -> tuple[dict[str, list[Reading]], dict[str, str]]:
    """Each session's readings, and the original conversation ids that had to be mapped.

    A trace goes to its conversation (the first conversation id among its
    spans), else to the session it was bound to before, else to a session
    named after the trace. A trace with nothing but spans of other kinds and
    no session yet is not a run anyone can see: it is skipped.
    """
    by_trace: dict[str, list[Reading]] = defaultdict(list)
    for reading in readings:
        by_trace[reading.trace_id].append(reading)
    unbound = [t for t, rs in by_trace.items() if not any(r.conversation_id for r in rs)]
    bound = dict(
        OtlpTrace.objects.filter(trace_id__in=unbound, session__project=project).values_list("trace_id", "session_id")
    ) if unbound else {}
    by_session: dict[str, list[Reading]] = defaultdict(list)
    originals: dict[str, str] = {}
    for trace_id, trace_readings in by_trace.items():
        conversation = next((r.conversation_id for r in trace_readings if r.conversation_id), None)
        if conversation is None and trace_id in bound:
            by_session[bound[trace_id]] += trace_readings
            continue
        if conversation is None and all(r.role == OTHER for r in trace_readings):
            continue
        session_id, original = session_id_for(conversation or trace_id)
        if original is not None:
            originals[session_id] = original
        by_session[session_id] += trace_readings
    return by_session, originals


def _taken_sessions(
    project: Project, by_session: dict[str, list[Reading]], originals: dict[str, str], now: datetime
) -> dict[str, Session | None]:
    """Each session of the batch, locked or created in the caller's transaction, in id order; None for
    a session of another project.

    One at a time in id order, each either locked (an existing row) or
    inserted: concurrent batches then wait for each other's sessions in the
    same order (on PostgreSQL a row lock and an uncommitted insert are both
    waited for), so they queue rather than deadlock. On SQLite the
    transaction holds the database's write lock from its start.
    """
    sessions: dict[str, Session | None] = {}
    counts: Counter = Counter()
    for session_id in sorted(by_session):
        session = statements.get_for_update(Session, session_id)
        if session is None:
            readings = by_session[session_id]
            agent_name = next((r.agent_name for r in readings if r.agent_name), "") or ""
            metadata: dict = {"source": "otlp"}
            if (original := originals.get(session_id)) is not None:
                metadata["otel"] = {"conversation_id": original}
            new = new_session(session_id=session_id, project=project, agent_name=agent_name[:AGENT_NAME_MAX], metadata=metadata, created_at=now)
            # Taken meanwhile (PostgreSQL: committed by a concurrent batch, which this insert waited for): lock it.
            session = new if insert_new_session(new, agent_counts=counts) else locked_session(session_id)
        sessions[session_id] = session if session.project_id == project.pk else None
    count_for_agents(counts)
    return sessions


def _prior_rows(sessions: Sequence[Session], by_session: dict[str, list[Reading]]) -> dict[str, tuple[dict[str, OtlpTrace], set]]:
    """What the sessions that already hold events remember of their traces: the rows of the batch's
    traces and of every unclosed one, and which of the batch's spans they already took; one query each."""
    if not sessions:
        return {}
    ids = [s.id for s in sessions]
    trace_ids = {r.trace_id for s in sessions for r in by_session[s.id]}
    span_ids = {r.span_id for s in sessions for r in by_session[s.id]}
    prior: dict[str, tuple[dict[str, OtlpTrace], set]] = {session_id: ({}, set()) for session_id in ids}
    for row in OtlpTrace.objects.filter(Q(trace_id__in=trace_ids) | Q(closed=False), session_id__in=ids):
        mine = {r.trace_id for r in by_session[row.session_id]}
        if not row.closed or row.trace_id in mine:
            prior[row.session_id][0][row.trace_id] = row
    for session_id, trace_id, span_id, pending in OtlpSpan.objects.filter(session_id__in=ids, span_id__in=span_ids).values_list(
        "session_id", "trace_id", "span_id", "pending"
    ):
        prior[session_id][1].add((trace_id, span_id, pending))
    return prior


def _turn_count(session: Session) -> int:
    """How many turn_starts the session's log holds (the next turn's number is one more).

    The latest run's turn number plus the turn_starts written after it (by another writer), else
    all of them; statements compiled once per connection (most batches ask it of dozens of sessions)."""
    latest = statements.rows("otlp_latest_turn", _latest_turn, [session.id])
    if latest and (number := latest[0][1].get("turn_number")) is not None:
        counted = statements.rows("otlp_turn_starts_after", _turns_after, [session.id, "turn_start", latest[0][0]])
    else:
        number, counted = 0, statements.rows("otlp_turn_starts", _turns, [session.id, "turn_start"])
    return number + (counted[0][0] if counted else 0)  # grouped by session: no row for none


def _latest_turn(session_id: str):
    return OtlpTrace.objects.filter(session_id=session_id).filter(turn_seq__isnull=False).order_by("-turn_seq").values_list("turn_seq", "state")[:1]


def _turns(session_id: str, type_: str):
    return Event.objects.filter(session_id=session_id).filter(type=type_).values("session_id").annotate(n=Count("id")).values_list("n")


def _turns_after(session_id: str, type_: str, seq: int):
    return _turns(session_id, type_).filter(seq__gt=seq)


def _planner(session: Session, rows: dict[str, OtlpTrace], *, seen, turn_count: int, now: datetime) -> Planner:
    traces = {trace_id: TraceState.from_json(row.state) for trace_id, row in rows.items()}
    latest = max(traces.values(), key=lambda t: t.turn_seq or -1, default=None)
    return Planner(
        next_seq=session.event_count,
        turn_stack=session.turn_stack,
        step_stack=session.step_stack,
        turn_count=turn_count,
        traces=traces,
        seen=seen,
        system_digest=latest.system_digest if latest else None,
        received=now.timestamp(),
    )


TRACE_FIELDS = ("turn_seq", "root_arrived", "closed", "last_span_at", "state")
SPAN_COLUMNS = ("session", "trace_id", "span_id", "pending")


def _write(plans: Sequence[tuple[Session, Planner, dict[str, OtlpTrace]]], now: datetime) -> None:
    """Store each session's planned events (the one append path), then the traces' and spans' rows of all.

    The rows go in as plain statements with the values the ORM would send
    (statements.py), as the events do: bulk_create and bulk_update were a
    sixth of a batch's ingest (docs/performance.md, OTLP ingest)."""
    counts: Counter = Counter()
    prep = {name: OtlpTrace._meta.get_field(name).get_db_prep_save for name in ("session", "trace_id", *TRACE_FIELDS)}
    new_traces, new_spans = [], []
    for session, planner, rows in plans:
        if planner.events:
            store_events(session, planner.events, received_at=now, agent_counts=counts)
        for trace_id in planner.touched:
            trace = planner.traces[trace_id]
            row = rows.get(trace_id) or OtlpTrace(session=session, trace_id=trace_id)
            row.turn_seq = trace.turn_seq
            row.root_arrived = trace.root_arrived
            row.closed = trace.closed
            row.last_span_at = datetime.fromtimestamp(trace.last_seen, tz=now.tzinfo) if trace.last_seen else now
            row.state = trace.as_json()
            if row.pk:
                statements.save_fields(row, TRACE_FIELDS)
            else:
                new_traces.append([prep[name](getattr(row, name if name != "session" else "session_id"), connection) for name in ("session", "trace_id", *TRACE_FIELDS)])
        new_spans += [(session.id, t, s, p) for t, s, p in planner.taken]
    count_for_agents(counts)
    if new_traces:
        statements.execute_many(statements.insert_sql(OtlpTrace, ("session", "trace_id", *TRACE_FIELDS)), new_traces)
    if new_spans:
        statements.execute_many(statements.insert_sql(OtlpSpan, SPAN_COLUMNS), new_spans)
