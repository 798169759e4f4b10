"""OTLP ingest's writes: spans in, events appended through the one append path (docs/otlp.md).

Each session's spans are planned and stored under that session's lock, in
one transaction, with the same row writing as every append (`appends._store`:
structural columns, call sightings, agent-hour counts, publish on commit).
The planner (sessions_app/otel/mapping/planner.py) decides the events; the
rows of `OtlpTrace` and `OtlpSpan` remember what it needs for the next batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from sessions_app import statements
from sessions_app.errors import SessionExists, SessionNotFound
from sessions_app.models import Event, OtlpSpan, OtlpTrace, Project, Session
from sessions_app.otel.mapping import conventions
from sessions_app.otel.mapping.identity import session_id_for
from sessions_app.otel.mapping.planner import Planner, TraceState, ordered
from sessions_app.otel.mapping.readings import OTHER, Reading
from sessions_app.otel.mapping.spans import Span

from .appends import AGENT_NAME_MAX, _locked_session, _store, create_session


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
    """Append what `spans` say to their sessions in `project` (created as needed), each session atomically.

    `actor` is the bearer's (the door checked it may append in `project`). A
    conversation naming a session of another project refuses its spans;
    so does content no database here could store. Nothing of a refused span
    is written.
    """
    return ingest_readings(actor=actor, project=project, readings=[conventions.read(span) for span in spans], received_at=received_at)


def ingest_readings(*, actor, project: Project, readings: Sequence[Reading], received_at: datetime | None = None) -> IngestResult:
    now = received_at or timezone.now()
    refused: list[SpanRefusal] = []
    settle: dict[str, float] = {}
    by_session, originals = _sessions_of(project, readings)
    existing = dict(Session.objects.filter(pk__in=list(by_session)).values_list("pk", "project_id"))
    for session_id, session_readings in by_session.items():
        if existing.get(session_id, project.pk) != project.pk:
            refused += [_refusal(r, f"its conversation names session {session_id}, which belongs to another project") for r in session_readings]
            continue
        new = session_id not in existing
        try:
            refusals, due = _ingest_session(session_id, project, session_readings, now, new=new, original=originals.get(session_id))
        except _OtherProject:
            refusals = [_refusal(r, f"its conversation names session {session_id}, which belongs to another project") for r in session_readings]
            due = None
        refused += refusals
        if due is not None:
            settle[session_id] = due
    return IngestResult(accepted=len(readings) - len(refused), refused=refused, settle=settle)


def close_settled_turns(*, session_id: str, now: datetime | None = None) -> float | None:
    """Write the turn_end of every finished run of the session quiet for the settle time.

    What the closer calls when a settle time is up, and the worker for the
    ones a restart left behind. Returns the seconds until another turn there
    may close, or None.
    """
    now = now or timezone.now()
    with transaction.atomic():
        try:
            session = _locked_session(session_id)
        except SessionNotFound:
            return None
        rows = {row.trace_id: row for row in OtlpTrace.objects.filter(session=session, closed=False)}
        planner = _planner(session, rows, seen=set(), turn_count=0, now=now)
        planner.close_settled(now=now.timestamp(), settle=settings.TURNLOG_OTLP_SETTLE_SECONDS)
        _write(session, planner, rows, now)
        return planner.settle_due(now=now.timestamp(), settle=settings.TURNLOG_OTLP_SETTLE_SECONDS)


def sessions_to_settle(*, now: datetime | None = None) -> list[str]:
    """Sessions with a finished run quiet for the settle time whose turn is still open (for the worker)."""
    now = now or timezone.now()
    quiet_since = now - timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS)
    rows = OtlpTrace.objects.filter(closed=False, root_arrived=True, last_span_at__lte=quiet_since)
    return sorted(set(rows.values_list("session_id", flat=True)))


class _OtherProject(Exception):
    pass


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


def _created(session_id: str, project: Project, readings: Sequence[Reading], original: str | None, now: datetime) -> Session | None:
    """The new session, created in the caller's transaction (its row is the caller's until it commits);
    None when another batch created it meanwhile (or another project has it: the locked read says)."""
    agent_name = next((r.agent_name for r in readings if r.agent_name), "") or ""
    metadata: dict = {"source": "otlp"}
    if original is not None:
        metadata["otel"] = {"conversation_id": original}
    try:
        return create_session(session_id=session_id, project=project, agent_name=agent_name[:AGENT_NAME_MAX], metadata=metadata, created_at=now)
    except SessionExists:
        return None


def _ingest_session(
    session_id: str, project: Project, readings: Sequence[Reading], now: datetime, *, new: bool, original: str | None
) -> tuple[list[SpanRefusal], float | None]:
    """One session's spans, planned and stored in one transaction (a new session created in it)."""
    trace_ids = {r.trace_id for r in readings}
    with transaction.atomic():
        session = _created(session_id, project, readings, original, now) if new else None
        if session is None:
            session = _locked_session(session_id)
        if session.project_id != project.pk:
            raise _OtherProject(session_id)
        if session.event_count == 0:
            rows, seen, turn_count = {}, set(), 0  # a new session: nothing to read (most sessions of a batch)
        else:
            rows = {row.trace_id: row for row in OtlpTrace.objects.filter(Q(trace_id__in=trace_ids) | Q(closed=False), session=session)}
            seen = set(
                OtlpSpan.objects.filter(session=session, span_id__in={r.span_id for r in readings}).values_list("trace_id", "span_id", "pending")
            )
            turn_count = _turn_count(session) if trace_ids - set(rows) else 0
        planner = _planner(session, rows, seen=seen, turn_count=turn_count, now=now)
        refused = [_refusal(r, reason) for r in ordered(readings) if (reason := planner.take(r)) is not None]
        _write(session, planner, rows, now)
        return refused, planner.settle_due(now=now.timestamp(), settle=settings.TURNLOG_OTLP_SETTLE_SECONDS)


def _turn_count(session: Session) -> int:
    """How many turn_starts the session's log holds (the next turn's number is one more)."""
    latest = OtlpTrace.objects.filter(session=session, turn_seq__isnull=False).order_by("-turn_seq").first()
    events = Event.objects.filter(session=session, type="turn_start")
    if latest is None or latest.state.get("turn_number") is None:
        return events.count()
    return latest.state["turn_number"] + events.filter(seq__gt=latest.turn_seq).count()


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


def _write(session: Session, planner: Planner, rows: dict[str, OtlpTrace], now: datetime) -> None:
    """Store the planned events (the one append path), then the traces' and spans' rows.

    The rows go in as plain statements with the values the ORM would send
    (statements.py), as the events do: bulk_create and bulk_update were a
    sixth of a batch's ingest (docs/benchmarks.md, OTLP ingest)."""
    if planner.events:
        _store(session, planner.events, received_at=now)
    prep = {name: OtlpTrace._meta.get_field(name).get_db_prep_save for name in ("session", "trace_id", *TRACE_FIELDS)}
    new = []
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
            new.append([prep[name](getattr(row, name if name != "session" else "session_id"), connection) for name in ("session", "trace_id", *TRACE_FIELDS)])
    if new:
        statements.execute_many(statements.insert_sql(OtlpTrace, ("session", "trace_id", *TRACE_FIELDS)), new)
    if planner.taken:
        statements.execute_many(statements.insert_sql(OtlpSpan, SPAN_COLUMNS), [(session.id, t, s, p) for t, s, p in planner.taken])
