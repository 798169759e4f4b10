"""OTLP ingest's writes: spans in, events appended through the one append path (docs/internals/otlp.md).

A request's spans are planned and stored in one transaction, each session's
under its lock (taken in id order), with the same row writing as every append (`event_rows.store_events`:
structural columns, call sightings, agent-hour counts, publish on commit).
The planner (sessions_app/otel/planner.py) decides the events; the
rows of `OtlpTrace` and `OtlpSpan` remember what it needs for the next batch.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from sessions_app.lib import statements
from sessions_app.models import Event, OtlpHeldSpan, OtlpSpan, OtlpTrace, Project, Session
from sessions_app.otel import conventions
from sessions_app.otel.identity import session_id_for
from sessions_app.otel.content import content_problem, without_bytes
from sessions_app.otel.planner import Planner, ordered, other_content
from sessions_app.otel.readings import OTHER, Reading
from sessions_app.otel.readings import as_json as reading_json
from sessions_app.otel.readings import from_json as reading_from_json
from sessions_app.otel.trace_state import TraceState
from sessions_app.otel.spans import Span

from .event_rows import AGENT_NAME_MAX, count_for_agents, insert_new_session, locked_session, new_session, store_events
from .ledger import facts


@dataclass(frozen=True)
class SpanRefusal:
    trace_id: str
    span_id: str
    reason: str  # a sentence: what was wrong and where


@dataclass(frozen=True)
class IngestResult:
    accepted: int  # spans taken: stored, held, or already taken (a repeat)
    refused: list[SpanRefusal] = field(default_factory=list)
    settle: dict[str, float] = field(default_factory=dict)  # session id -> seconds until a turn there may close
    held_due: float | None = None  # seconds until spans held for their conversation may be written (release_held_spans)


def ingest_spans(*, actor, project: Project, spans: Sequence[Span], received_at: datetime | None = None) -> IngestResult:
    """Append what `spans` say to their sessions in `project` (created as needed), atomically.

    `actor` is the bearer's (the door checked it may append in `project`). A
    conversation naming a session of another project refuses its spans;
    so does content no database here could store, and a span whose ids were
    taken before with other content. Nothing of a refused span is written.
    Spans of a trace no span has tied to a conversation yet are held
    (`release_held_spans` writes them when none does).
    """
    return ingest_readings(actor=actor, project=project, readings=[conventions.read(span) for span in spans], received_at=received_at)


def ingest_readings(
    *, actor, project: Project, readings: Sequence[Reading], received_at: datetime | None = None, release: Collection[str] = ()
) -> IngestResult:
    """`ingest_spans` for spans already read; `release`: traces whose held spans are written now, to the
    session named after the trace when no span named another (release_held_spans)."""
    now = received_at or timezone.now()
    settle: dict[str, float] = {}
    if not readings and not release:
        return IngestResult(accepted=0)
    # One transaction for the whole request: a transaction per session was a fifth of the ingest
    # (its BEGIN, COMMIT and savepoints; docs/performance.md, OTLP ingest).
    with transaction.atomic(), facts.policies_read_once():
        route = _route(project, readings, now=now, release=release)
        refused = route.refused
        if route.by_session:
            sessions = _taken_sessions(project, route.by_session, route.originals, now)
            prior = _prior_rows([s for s in sessions.values() if s is not None and s.event_count], route.by_session)
            plans: list[tuple[Session, Planner, dict[str, OtlpTrace]]] = []
            for session_id, session in sessions.items():
                session_readings = route.by_session[session_id]
                if session is None:
                    reason = f"its conversation names session {session_id}, which belongs to another project"
                    refused += [_refusal(r, reason) for r in session_readings if id(r) not in route.released]
                    continue
                rows, seen = prior.get(session_id, ({}, {}))
                new_traces = {r.trace_id for r in session_readings} - set(rows)
                turn_count = _turn_count(session) if session.event_count and new_traces else 0
                planner = _planner(session, rows, seen=seen, turn_count=turn_count, now=now)
                # A held span was checked when it arrived and counted then: what the planner says of it now is told to nobody.
                refused += [_refusal(r, reason) for r in ordered(session_readings) if (reason := planner.take(r)) is not None and id(r) not in route.released]
                plans.append((session, planner, rows))
                if (due := planner.settle_due(now=now.timestamp(), settle=settings.TURNLOG_OTLP_SETTLE_SECONDS)) is not None:
                    settle[session_id] = due
            _write(plans, now)
        _hold(project, route.hold, now)
        if route.released_rows:
            OtlpHeldSpan.objects.filter(pk__in=route.released_rows).delete()
    return IngestResult(accepted=len(readings) - len(refused), refused=refused, settle=settle, held_due=route.held_due)


@dataclass(frozen=True)
class Released:
    traces: int  # traces whose held spans were written (or left out: nothing of them was a run)
    settle: dict[str, float] = field(default_factory=dict)  # as IngestResult's
    held_due: float | None = None  # seconds until the next hold is up; None: nothing is held


def release_held_spans(*, now: datetime | None = None, limit: int = 200, next_due: bool = True) -> Released:
    """Write the held spans of every trace quiet for the settle time (up to `limit` traces, oldest first) to the
    session named after the trace, or to the session a span of it named meanwhile, in one transaction.

    What the closer calls when a hold is up, and the worker for the holds a restart left behind. The
    answer's `held_due` says when the next hold is up (None: nothing held, or `next_due` is False)."""
    now = now or timezone.now()
    quiet_since = now - timedelta(seconds=settings.TURNLOG_OTLP_SETTLE_SECONDS)
    traces = OtlpHeldSpan.objects.values("project_id", "trace_id").annotate(last=Max("received_at"))
    due = list(traces.filter(last__lte=quiet_since).order_by("last", "trace_id")[:limit])
    settle: dict[str, float] = {}
    by_project: dict[int, list[str]] = defaultdict(list)
    for row in due:
        by_project[row["project_id"]].append(row["trace_id"])
    for project in Project.objects.filter(pk__in=by_project).order_by("pk"):
        settle |= ingest_readings(actor=None, project=project, readings=(), received_at=now, release=by_project[project.pk]).settle
    following = traces.order_by("last").values_list("last", flat=True).first() if next_due else None
    held_due = None if following is None else max(0.0, (following - quiet_since).total_seconds())
    return Released(traces=len(due), settle=settle, held_due=held_due)


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


@dataclass
class _Route:
    """Where a request's readings go: each session's readings, those held for their conversation, those released."""

    by_session: dict[str, list[Reading]] = field(default_factory=lambda: defaultdict(list))
    originals: dict[str, str] = field(default_factory=dict)  # session id -> the conversation id it was made from
    refused: list[SpanRefusal] = field(default_factory=list)
    hold: list[Reading] = field(default_factory=list)
    released_rows: list[int] = field(default_factory=list)  # held rows written (or left out) now
    released: set[int] = field(default_factory=set)  # id() of the held readings written now: told to nobody again
    held_due: float | None = None

    def due(self, seconds: float) -> None:
        self.held_due = max(0.0, seconds if self.held_due is None else min(self.held_due, seconds))


def _route(project: Project, readings: Sequence[Reading], *, now: datetime, release: Collection[str]) -> _Route:
    """Each trace's session: the one its spans were written to before (a span is one span site-wide,
    whatever conversation it names the second time); else its conversation (the first conversation
    id among its spans, held ones included); else, when the trace is being released or there is no
    settle time, the session named after the trace. Otherwise its spans are
    held: a later span may still name the conversation (Google ADK names it on its model and agent
    spans, which end after its tool spans). A trace with nothing but spans of other kinds and nothing
    held is not a run anyone can see: it is skipped.

    The held rows are locked before the traces' sessions are read: a release and a batch naming the
    conversation then never both write them.
    """
    route = _Route()
    by_trace: dict[str, list[Reading]] = defaultdict(list)
    for reading in readings:
        by_trace[reading.trace_id].append(reading)
    trace_ids = [*by_trace, *(t for t in release if t not in by_trace)]
    held: dict[str, list[tuple[int, datetime, Reading]]] = defaultdict(list)
    for pk, trace_id, received_at, data in (
        OtlpHeldSpan.objects.select_for_update().filter(project=project, trace_id__in=trace_ids).order_by("pk")
        .values_list("pk", "trace_id", "received_at", "reading")
    ):
        held[trace_id].append((pk, received_at, reading_from_json(bytes(data))))
    bound: dict[str, tuple[str, int]] = {}
    for trace_id, session_id, project_id in (
        OtlpTrace.objects.filter(trace_id__in=trace_ids).order_by("pk").values_list("trace_id", "session_id", "session__project_id")
    ):
        bound.setdefault(trace_id, (session_id, project_id))
    settle_seconds = settings.TURNLOG_OTLP_SETTLE_SECONDS
    quiet_since = now - timedelta(seconds=settle_seconds)
    for trace_id in trace_ids:
        arrived = by_trace.get(trace_id, [])
        kept = held.get(trace_id, [])
        kept_readings = [r for _, _, r in kept]
        conversation = next((r.conversation_id for r in (*kept_readings, *arrived) if r.conversation_id), None)
        if trace_id in bound:
            session_id, owner = bound[trace_id]
            if owner != project.pk:
                reason = f"its trace is a run of session {session_id}, which belongs to another project"
                route.refused += [_refusal(r, reason) for r in arrived]
                route.released_rows += [pk for pk, _, _ in kept]
                continue
        elif conversation is None and not _may_write_unnamed(arrived, kept, release=trace_id in release, quiet_since=quiet_since):
            if arrived and (kept or any(r.role != OTHER for r in arrived)):
                _hold_arrived(route, arrived, kept_readings)
                route.due(settle_seconds)
            elif kept:
                route.due((max(at for _, at, _ in kept) - quiet_since).total_seconds())
            continue
        route.released_rows += [pk for pk, _, _ in kept]
        route.released.update(id(r) for r in kept_readings)
        if trace_id in bound:
            session_id = bound[trace_id][0]
        elif all(r.role == OTHER for r in (*kept_readings, *arrived)):
            continue
        else:
            session_id, original = session_id_for(conversation or trace_id)
            if original is not None:
                route.originals[session_id] = original
        route.by_session[session_id] += [*kept_readings, *arrived]
    return route


def _may_write_unnamed(arrived: Sequence[Reading], kept, *, release: bool, quiet_since: datetime) -> bool:
    """Whether a trace no span has tied to a conversation is written now (to the session named after it):
    there is no settle time, or it is being released and has been quiet for the settle time. Not when its
    root arrives: an exporter's batches may still bring a span that names the conversation."""
    if settings.TURNLOG_OTLP_SETTLE_SECONDS <= 0:
        return True
    return release and not arrived and all(at <= quiet_since for _, at, _ in kept)


def _hold_arrived(route: _Route, arrived: Sequence[Reading], kept: Sequence[Reading]) -> None:
    """Hold a trace's new spans: refused now, if ever, as they would be when written (content no database
    stores, the same ids with other content); a repeat of a held span is taken and nothing more."""
    digests = {(r.span_id, r.pending): r.digest for r in kept}
    for reading in arrived:
        key = (reading.span_id, reading.pending)
        if key in digests:
            if not reading.pending and reading.digest and digests[key] and digests[key] != reading.digest:
                route.refused.append(_refusal(reading, other_content(reading)))
            continue
        plain = without_bytes(reading)
        if (problem := content_problem(plain)) is not None:
            route.refused.append(_refusal(reading, problem))
            continue
        digests[key] = reading.digest
        route.hold.append(plain)


def _hold(project: Project, readings: Sequence[Reading], now: datetime) -> None:
    if readings:
        rows = [
            OtlpHeldSpan(project=project, trace_id=r.trace_id, span_id=r.span_id, pending=r.pending, digest=r.digest,
                         received_at=now, reading=reading_json(r))
            for r in readings
        ]
        # A concurrent batch holding the same span: one row is kept, as a repeat is.
        OtlpHeldSpan.objects.bulk_create(rows, ignore_conflicts=True)


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


def _prior_rows(sessions: Sequence[Session], by_session: dict[str, list[Reading]]) -> dict[str, tuple[dict[str, OtlpTrace], dict]]:
    """What the sessions that already hold events remember of their traces: the rows of the batch's
    traces and of every unclosed one, and which of the batch's spans they already took; one query each."""
    if not sessions:
        return {}
    ids = [s.id for s in sessions]
    trace_ids = {r.trace_id for s in sessions for r in by_session[s.id]}
    span_ids = {r.span_id for s in sessions for r in by_session[s.id]}
    prior: dict[str, tuple[dict[str, OtlpTrace], dict]] = {session_id: ({}, {}) for session_id in ids}
    for row in OtlpTrace.objects.filter(Q(trace_id__in=trace_ids) | Q(closed=False), session_id__in=ids):
        mine = {r.trace_id for r in by_session[row.session_id]}
        if not row.closed or row.trace_id in mine:
            prior[row.session_id][0][row.trace_id] = row
    for session_id, trace_id, span_id, pending, digest in OtlpSpan.objects.filter(session_id__in=ids, span_id__in=span_ids).values_list(
        "session_id", "trace_id", "span_id", "pending", "digest"
    ):
        prior[session_id][1][(trace_id, span_id, pending)] = digest
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
SPAN_COLUMNS = ("session", "trace_id", "span_id", "pending", "digest")


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
        new_spans += [(session.id, t, s, p, d) for t, s, p, d in planner.taken]
    count_for_agents(counts)
    if new_traces:
        statements.execute_many(statements.insert_sql(OtlpTrace, ("session", "trace_id", *TRACE_FIELDS)), new_traces)
    if new_spans:
        statements.execute_many(statements.insert_sql(OtlpSpan, SPAN_COLUMNS), new_spans)
