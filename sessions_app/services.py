"""Writes: every change to the stored logs goes through these functions.

Each runs in one transaction and publishes what it stored only after that
transaction commits (session-log.md section 7).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import uuid
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from sessions_app import access, db_threads, statements
from sessions_app.log import blob as log_blob
from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import recovery as log_recovery
from sessions_app.log import strategy as log_strategy
from sessions_app.log import structure
from sessions_app.log import values as log_values
from sessions_app.errors import (
    IdempotencyKeyReused,
    NotGranted,
    RecoveryFirst,
    SeqConflict,
    SessionExists,
    SessionNotFound,
    StalePlan,
)
from sessions_app.models import (
    REPLACE_BOUND_MAX,
    AgentHour,
    ApiToken,
    AuditEntry,
    AutoRecoveryPolicy,
    CallSighting,
    Event,
    IdempotentRequest,
    Membership,
    Project,
    RecoveryRecord,
    Role,
    Session,
)
from sessions_app.selectors import dangling_patch, fork_point, recovery_plan, recovery_strategies

logger = logging.getLogger(__name__)

CALL_ID_TYPES = frozenset({"tool_call", "tool_result"})
AGENT_NAME_MAX = Session._meta.get_field("agent_name").max_length
TOOL_NAME_MAX = CallSighting._meta.get_field("tool_name").max_length
# The channel-layer group of the session list page.
SESSIONS_GROUP = "sessions"


@dataclass(frozen=True)
class RepairResult:
    appended: list[StoredEvent]
    next_seq: int
    record: RecoveryRecord | None


@dataclass(frozen=True)
class AppendResult:
    first_seq: int
    next_seq: int
    events: list[StoredEvent]
    # True when an Idempotency-Key matched an earlier request: nothing new was stored.
    replayed: bool = False

    def as_response(self) -> dict:
        return {"first_seq": self.first_seq, "next_seq": self.next_seq}


def session_group(session_id: str) -> str:
    """The channel-layer group of a session.

    Session ids may hold characters group names may not (":"), so the group
    is named by a digest of the id.
    """
    return "session." + hashlib.sha256(session_id.encode()).hexdigest()[:40]


def new_session_id() -> str:
    return uuid.uuid4().hex


def create_session(
    *,
    session_id: str | None = None,
    agent_name: str = "",
    metadata: dict | None = None,
    project: Project | None = None,
    parent: Session | None = None,
    seed_length: int = 0,
    created_at: datetime | None = None,
) -> Session:
    """A new empty session in `project` (default: the default project; a fork: its parent's)."""
    # log_values.UnacceptableValue: what PostgreSQL would refuse, SQLite is not given either.
    log_values.check({"agent_name": agent_name, "metadata": metadata or {}})
    now = created_at or timezone.now()
    if project is None:
        project = parent.project if parent is not None else Project.default()
    session = Session(
        id=session_id or new_session_id(),
        project=project,
        agent_name=agent_name or "",
        metadata=metadata or {},
        parent=parent,
        seed_length=seed_length,
        created_at=now,
        last_activity_at=now,
    )
    try:
        with transaction.atomic():
            session.save(force_insert=True)
            _count_for_agent(session, at=now, sessions=1)
    except IntegrityError as exc:
        raise SessionExists(session.id) from exc
    transaction.on_commit(lambda: publish_session_changed(session.id))
    return session


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


AGENT_COUNTS = ("sessions", "turns", "crashed_turns")


def _count_for_agent(session: Session, *, at: datetime, **counts: int) -> None:
    """Add to the agent's counts for the hour of `at` (AgentHour), in the caller's transaction.

    One upsert statement (the same SQL on SQLite and PostgreSQL), so concurrent
    first writers of an hour add up instead of colliding.
    """
    if not any(counts.values()):
        return
    quote = connection.ops.quote_name
    table = quote(AgentHour._meta.db_table)
    hour = AgentHour._meta.get_field("hour").get_db_prep_value(hour_of(at), connection)
    additions = ", ".join(f"{quote(name)} = {table}.{quote(name)} + excluded.{quote(name)}" for name in AGENT_COUNTS)
    statements.execute(
        f"INSERT INTO {table} (project_id, agent_name, hour, {', '.join(map(quote, AGENT_COUNTS))})"
        f" VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (project_id, agent_name, hour) DO UPDATE SET {additions}",
        [session.project_id, session.agent_name, hour, *(counts.get(name, 0) for name in AGENT_COUNTS)],
    )


def append_events(
    *,
    session_id: str,
    events: Sequence[log_events.NewEvent],
    expected_seq: int | None = None,
    idempotency_key: str | None = None,
    request_sha256: str = "",
    bearer: str | None = None,
    received_at: datetime | None = None,
) -> AppendResult:
    """Append a validated batch atomically and publish it after commit.

    `received_at` is when the server received the batch: now, unless a
    command writes history as if received then (seed_demo).

    Seqs are assigned under the session's row lock (select_for_update on
    PostgreSQL; SQLite's IMMEDIATE transactions serialise all writers), so
    concurrent writers get gapless, unique seqs. With `bearer` (an API token's
    secret) the append is that token's: checked in the same read as the lock
    (NotGranted unless it may append there) and its use recorded.
    """
    with transaction.atomic():
        if bearer is None:
            session = _locked_session(session_id)
        else:
            if (granted := access.locked_session_for_token(bearer, session_id, access.APPEND)) is None:
                raise NotGranted(session_id)
            session, token = granted
            token.mark_used()
        if idempotency_key:
            prior = IdempotentRequest.objects.filter(session=session, key=idempotency_key).first()
            if prior is not None:
                if prior.body_sha256 != request_sha256:
                    raise IdempotencyKeyReused(idempotency_key)
                return AppendResult(events=[], replayed=True, **prior.response)
        if expected_seq is not None and expected_seq != session.event_count:
            raise SeqConflict(expected_seq, session.event_count)
        first_seq = session.event_count
        rows = _store(session, events, received_at=received_at or timezone.now())
        result = AppendResult(first_seq=first_seq, next_seq=session.event_count, events=rows)
        if idempotency_key:
            IdempotentRequest.objects.create(
                session=session, key=idempotency_key, body_sha256=request_sha256, response=result.as_response()
            )
    return result


def recover(
    *,
    session_id: str,
    user,
    digest: str | None = None,
    note: str = "",
    context: bool = False,
    abandon: bool = False,
) -> RepairResult:
    """Apply the session's recovery plan, if `digest` (when given) still matches it.

    Plan, check and append happen under the session's lock, so of two people
    confirming one plan exactly one appends; the other gets StalePlan with
    the fresh (empty) plan. A clean session appends nothing. The strategies
    are recomputed under the lock and recorded (section 8.1); `abandon`
    records that the person chose to abandon the turns instead, `context`
    appends the recovery-context system_message right after the plan.
    """
    log_values.check(note, prefix="note")
    with transaction.atomic():
        session = _locked_session(session_id)
        plan = recovery_plan(session)
        return _apply_recovery(session, plan, user=user, digest=digest, note=note, context=context, abandon=abandon)


def recover_automatically(*, session_id: str, policy: AutoRecoveryPolicy, now: datetime | None = None) -> RepairResult | None:
    """The worker's recovery: only a session quiet for the policy's time whose every open turn is restart_turn.

    Everything is decided again under the session's lock (two workers, or a
    person, may have got there first; the agent may have come back). None
    when it is not (or no longer) safe, or the agent is past its hourly
    limit: then the session is flagged "repeated failures" for a person.
    """
    now = now or timezone.now()
    with transaction.atomic():
        # The policy row serialises its agents' automatic recoveries, so the hourly count cannot race.
        policy = AutoRecoveryPolicy.objects.select_for_update().get(pk=policy.pk)
        session = _locked_session(session_id)
        quiet = (now - session.last_activity_at).total_seconds()
        if not policy.enabled or not session.turn_stack or quiet < policy.quiet_seconds:
            return None
        plan = recovery_plan(session)
        turns = recovery_strategies(plan)
        if any(t.strategy != log_strategy.RESTART_TURN for t in turns):
            session.auto_checked_count = session.event_count
            session.save(update_fields=["auto_checked_count"])
            return None
        # An agent is its name within its project: another team's agent of the same name has its own count.
        recent = RecoveryRecord.objects.filter(
            automatic=True, agent_name=session.agent_name, session__project_id=session.project_id, created_at__gt=now - timedelta(hours=1)
        ).count()
        if recent >= policy.max_per_hour:
            if session.repeated_failures_at is None:
                session.repeated_failures_at = now
                session.save(update_fields=["repeated_failures_at"])
                audit(
                    project=session.project_id,
                    actor=None,
                    action=AuditEntry.AUTO_RECOVERY_HELD,
                    target=session.id,
                    detail={"agent_name": session.agent_name, "policy": policy.agent_pattern, "limit": policy.max_per_hour},
                    actor_name=WORKER,
                )
                transaction.on_commit(lambda: publish_session_changed(session.id))
            return None
        return _apply_recovery(session, plan, user=None, digest=None, note="", policy=policy, now=now, turns=turns)


def _apply_recovery(
    session: Session,
    plan: log_recovery.Plan,
    *,
    user,
    digest: str | None,
    note: str,
    context: bool = False,
    abandon: bool = False,
    policy: AutoRecoveryPolicy | None = None,
    now: datetime | None = None,
    turns: list[log_strategy.TurnStrategy] | None = None,
) -> RepairResult:
    turns = recovery_strategies(plan) if turns is None else turns
    extra = []
    if context and plan.repairs:
        extra = [log_recovery.Repair("system_message", log_strategy.context_message(turns, abandoned=abandon), None)]
    recorded = {
        "strategies": [t.as_wire() for t in turns],
        "abandoned": abandon,
        "automatic": policy is not None,
        "policy": policy,
        "turns_closed": len(plan.open_turns),
        "quiet_seconds": ((now or timezone.now()) - session.last_activity_at).total_seconds(),
    }
    result = _apply_repairs(session, plan.repairs, plan, RecoveryRecord.RECOVERY, user, digest, note, extra=extra, recorded=recorded)
    if result.record is not None:
        _count_for_agent(session, at=result.record.created_at, crashed_turns=len(plan.open_turns))
    return result


def patch_dangling_calls(*, session_id: str, user, digest: str | None = None, note: str = "") -> RepairResult:
    """The turn-blind patch (session-log.md section 4), only once no turn is open."""
    log_values.check(note, prefix="note")
    with transaction.atomic():
        session = _locked_session(session_id)
        if session.turn_stack:
            raise RecoveryFirst(session.open_turns)
        repairs = dangling_patch(session)
        return _apply_repairs(session, repairs, None, RecoveryRecord.DANGLING_PATCH, user, digest, note)


def _apply_repairs(session, repairs, plan, kind, user, digest, note, *, extra=(), recorded=None) -> RepairResult:
    """Append the repairs (then `extra`, outside the digest) if the digest still matches; record who did it.

    `user` None is the automatic worker (recorded under its policy).
    """
    current = log_recovery.repairs_digest(session.event_count, repairs)
    if digest is not None and digest != current:
        raise StalePlan(plan or log_recovery.Plan([], list(repairs), []), session.event_count)
    if not repairs:
        return RepairResult(appended=[], next_seq=session.event_count, record=None)
    rows = _store(session, [log_events.NewEvent(r.type, r.data, None) for r in [*repairs, *extra]], received_at=timezone.now())
    recorded = recorded or {}
    if kind == RecoveryRecord.RECOVERY:
        session.recovered_at = timezone.now()
        session.save(update_fields=["recovered_at"])
    policy = recorded.get("policy")
    record = RecoveryRecord.objects.create(
        session=session,
        kind=kind,
        user=user,
        username=user.get_username() if user is not None else f"automatic ({policy.agent_pattern})",
        note=note,
        digest=current,
        first_seq=rows[0].seq,
        last_seq=rows[-1].seq,
        agent_name=session.agent_name,
        context_seq=rows[-1].seq if extra else None,
        **recorded,
    )
    detail = {"first_seq": record.first_seq, "last_seq": record.last_seq, "digest": current, "note": note}
    if kind == RecoveryRecord.RECOVERY:
        detail |= {
            "strategies": record.strategy_names,
            "abandoned": record.abandoned,
            "automatic": record.automatic,
            "context": record.context_seq is not None,  # a recovery note for the agent was appended
        }
        if policy is not None:
            detail["policy"] = policy.agent_pattern
    audit(
        project=session.project_id,
        actor=user,
        action=AuditEntry.RECOVERY if kind == RecoveryRecord.RECOVERY else AuditEntry.DANGLING_PATCH,
        target=session.id,
        detail=detail,
        actor_name=WORKER if policy is not None else "cli",
    )
    return RepairResult(appended=rows, next_seq=session.event_count, record=record)


def fork(*, session_id: str, boundary: object = "last", new_session_id: str | None = None, user=None) -> Session:
    """Copy a prefix of a session into a new one (session-log.md section 5), in the parent's project.

    `user` is who asked (None: a command), for the audit log.
    Refuses with fork.ForkRefused (never clips). The copy keeps each event's
    seq, type, time, data and receive time and is made by the database in one INSERT ...
    SELECT, so its cost does not include a Python object per event.
    """
    with transaction.atomic():
        parent = _locked_session(session_id)
        point = fork_point(parent, boundary)
        child = create_session(
            session_id=new_session_id,
            agent_name=parent.agent_name,
            metadata=parent.metadata,
            parent=parent,
            seed_length=point.seed_length,
        )
        _copy_prefix(parent, child, point.seed_length)
        inherited_last = Event.objects.filter(session=parent, seq=point.seed_length - 1).order_by("seq")
        last, last_received = inherited_last.values_list("time", "received_at").first() or (None, None)
        child.event_count = point.seed_length
        child.step_stack = point.step_stack
        child.stray_turn_ends = [seq for seq in parent.stray_turn_ends if seq < point.seed_length]
        child.last_event_at = last
        child.last_received_at = last_received
        # A new fork is new activity, whatever the age of what it inherited.
        child.last_activity_at = child.created_at
        child.save(update_fields=["event_count", "step_stack", "stray_turn_ends", "last_event_at", "last_received_at", "last_activity_at"])
        audit(
            project=parent.project_id,
            actor=user,
            action=AuditEntry.FORK,
            target=parent.id,
            detail={"fork": child.id, "seed_length": child.seed_length},
        )
    return child


def _copy_prefix(parent: Session, child: Session, seed_length: int) -> None:
    for model, columns in (
        (Event, ["seq", "type", "time", "received_at", "data", "call_id", "turn_seq", "step_seq", "replace_start", "replace_stop"]),
        (CallSighting, ["seq", "call_id", "tool_name"]),
    ):
        table = connection.ops.quote_name(model._meta.db_table)
        names = ", ".join(connection.ops.quote_name(c) for c in columns)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (session_id, {names}) SELECT %s, {names} FROM {table}"
                " WHERE session_id = %s AND seq < %s",
                [child.id, parent.id, seed_length],
            )


def import_blob(*, blob: object, session_id: str | None = None, project: Project | None = None) -> tuple[Session, list[str]]:
    """Create a session in `project` (default: the default project) from a version 1 or 2 blob; seqs are reassigned.

    A parent is kept only when it is in the same project (a link across
    projects would show one team's session to another)."""
    loaded = log_blob.read_blob(blob, now=timezone.now())
    warnings = list(loaded.warnings)
    exported = loaded.extra.get("session") if isinstance(loaded.extra.get("session"), dict) else {}
    agent_name = exported.get("agent_name") or (blob.get("agent_name") if isinstance(blob, dict) else None) or ""
    if not isinstance(agent_name, str) or len(agent_name) > AGENT_NAME_MAX:
        warnings.append(f"agent_name {log_events.show_json(agent_name)} is not a text of at most {AGENT_NAME_MAX} characters; imported without it")
        agent_name = ""
    project = project or Project.default()
    parent, seed_length = _importable_parent(loaded.extra.get("parent") or exported.get("parent"), project, warnings)
    with transaction.atomic():
        session = create_session(
            session_id=session_id, agent_name=agent_name, project=project, parent=parent, seed_length=seed_length
        )
        _store(session, loaded.events, received_at=None)  # the server never received these as they happened
    return session, warnings


def _importable_parent(parent_ref: object, project: Project, warnings: list[str]) -> tuple[Session | None, int]:
    if not isinstance(parent_ref, dict) or not parent_ref.get("session_id"):
        return None, 0
    parent = Session.objects.filter(pk=str(parent_ref["session_id"]), project=project).first()
    seed_length = parent_ref.get("seed_length")
    if parent is None:
        warnings.append(f"parent session {parent_ref['session_id']!r} does not exist in this project; imported without a parent")
        return None, 0
    if not log_events.is_integer(seed_length) or not 0 <= seed_length <= parent.event_count:
        warnings.append(
            f"parent seed_length {log_events.show_json(seed_length)} is not an integer from 0 to the parent's"
            f" {parent.event_count} events; imported without a parent"
        )
        return None, 0
    return parent, seed_length


def _locked_session(session_id: str) -> Session:
    session = statements.get_for_update(Session, session_id)
    if session is None:
        raise SessionNotFound(session_id)
    return session


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event row as `_store` inserted it: the columns of `Event`, without a model instance.

    What the callers of `_store` read (seq, type, time, data, to_log_event) is
    the same as on an `Event`; building 1000 model instances cost more than
    inserting them (docs/benchmarks.md, Ingest).
    """

    session_id: str
    seq: int
    type: str
    time: datetime
    received_at: datetime | None
    data: dict
    call_id: str | None
    turn_seq: int | None
    step_seq: int | None
    replace_start: int | None
    replace_stop: int | None

    def to_log_event(self) -> log_events.Event:
        return log_events.Event(seq=self.seq, type=self.type, time=self.time, data=self.data, received_at=self.received_at)


# The columns `_store` writes, in the order of StoredEvent's fields (all but the id).
EVENT_COLUMNS = ("session", "seq", "type", "time", "received_at", "data", "call_id", "turn_seq", "step_seq", "replace_start", "replace_stop")
SIGHTING_COLUMNS = ("session", "seq", "call_id", "tool_name")


def _store(session: Session, events: Sequence[log_events.NewEvent], *, received_at: datetime | None) -> list[StoredEvent]:
    """Insert events after the session's last one and update its summary.

    `received_at` is when the server received them, the session's activity
    time from now on; None for an import, whose events the server never
    received as they happened: its activity is their claimed last time, never
    later than now, and its turns count in their claimed hours.

    The caller holds the session's lock inside a transaction. The rows go in
    as plain tuples through the driver's executemany, with the values the
    ORM would send (the same column adaptations), so they read back exactly
    as `Event.objects.bulk_create` stored them.
    """
    now = timezone.now()
    turn_stack = list(session.turn_stack)
    step_stack = list(session.step_stack)
    rows = []
    strays = list(session.stray_turn_ends)
    prep_call_id = Event._meta.get_field("call_id").get_prep_value
    for seq, new in enumerate(events, start=session.event_count):
        placement = structure.place(turn_stack, step_stack, seq, new.type)
        if new.type == "turn_end" and placement.turn_seq is None:
            strays.append(seq)
        replaced = log_events.replace_range(new.data)
        rows.append(
            StoredEvent(
                session.id,
                seq,
                new.type,
                new.time or now,
                received_at,
                new.data,
                prep_call_id(log_events.call_id(new.data)) if new.type in CALL_ID_TYPES else None,
                placement.turn_seq,
                placement.step_seq,
                min(replaced[0], REPLACE_BOUND_MAX) if replaced else None,
                min(replaced[1], REPLACE_BOUND_MAX) if replaced else None,
            )
        )
    if not rows:
        return rows
    adapt_time = _sqlite_utc_text if _stores_utc_text() else connection.ops.adapt_datetimefield_value
    adapt_json = connection.ops.adapt_json_value
    received = None if received_at is None else adapt_time(received_at)
    statements.execute_many(
        statements.insert_sql(Event, EVENT_COLUMNS),
        [
            (
                r.session_id, r.seq, r.type, adapt_time(r.time), received, adapt_json(r.data, None),
                r.call_id, r.turn_seq, r.step_seq, r.replace_start, r.replace_stop,
            )
            for r in rows
        ],
    )
    sightings = list(_sightings(session, rows))
    if sightings:
        statements.execute_many(statements.insert_sql(CallSighting, SIGHTING_COLUMNS), sightings)
    session.event_count += len(rows)
    session.turn_stack = turn_stack
    session.step_stack = step_stack
    session.interrupted = bool(turn_stack)
    session.stray_turn_ends = strays
    session.last_event_at = rows[-1].time
    session.last_received_at = received_at
    session.last_activity_at = received_at or min(rows[-1].time, now)
    fields = ["event_count", "turn_stack", "step_stack", "interrupted", "stray_turn_ends", "last_event_at", "last_received_at", "last_activity_at"]
    if not turn_stack and session.repeated_failures_at is not None:
        session.repeated_failures_at = None  # the crash it flagged is closed (recovered, or by the agent itself)
        fields.append("repeated_failures_at")
    statements.save_fields(session, fields)
    # Turns count in the hour they started: received, or for an import's old turns their own claimed hours.
    for hour, turns in Counter(hour_of(received_at or row.time) for row in rows if row.type == "turn_start").items():
        _count_for_agent(session, at=hour, turns=turns)
    transaction.on_commit(lambda: publish_events(session.id, rows))
    return rows


def _stores_utc_text() -> bool:
    """SQLite storing aware datetimes as naive UTC text (Django's adaptation, with USE_TZ and a UTC connection)."""
    return connection.vendor == "sqlite" and settings.USE_TZ and connection.timezone_name == "UTC"


def _sqlite_utc_text(moment: datetime) -> str:
    """What SQLite's adapt_datetimefield_value makes of an aware datetime, without its per-call checks."""
    if moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat(" ")


def _sightings(session: Session, rows: Sequence[StoredEvent]):
    """One (session_id, seq, call_id, tool_name) row per distinct call id an assistant message names
    (the name as log.calls reads it, in either call shape)."""
    prep_call_id = CallSighting._meta.get_field("call_id").get_prep_value
    for row in rows:
        if row.type != "assistant_message":
            continue
        for cid, name in log_calls.sighting_names(row.data).items():
            yield (session.id, row.seq, prep_call_id(cid), name[:TOOL_NAME_MAX])


def publish_events(session_id: str, events: Sequence[StoredEvent | Event]) -> None:
    """Publish a commit's events once each, in seq order, then tell the list.

    One `session_events` message per commit carries all of its events: a
    layer round trip per event costs about 1 ms on Redis, which would cap
    ingest near 1,000 events/s (see docs/benchmarks.md). Best effort: a
    failing layer is logged and never breaks the append; consumers repair
    gaps from the database by seq.
    """
    if not events:
        return
    wires = [log_events.event_to_wire(e) for e in events]  # it reads seq, type, time and data, which both kinds have
    _send([(session_group(session_id), {"type": "session_events", "session_id": session_id, "events": wires}), session_changed(session_id)])


def publish_session_changed(session_id: str) -> None:
    _send([session_changed(session_id)])


def session_changed(session_id: str) -> tuple[str, dict]:
    """One message per commit for the session list (new session, new status, new count)."""
    return SESSIONS_GROUP, {"type": "session_changed", "session_id": session_id}


def _send(messages: list[tuple[str, dict]]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if (loop := db_threads.caller_loop()) is not None:
        # On a database thread: posted to the server's event loop rather than holding up this
        # thread (and the answer) for a round trip through it; a group's messages stay in order.
        try:
            loop.call_soon_threadsafe(_post, layer, messages)
        except RuntimeError:  # the loop closed meanwhile (the server is stopping): the log has the events
            logger.warning("publishing %d messages skipped: the event loop is closed", len(messages))
        return
    try:
        async_to_sync(_send_all)(layer, messages)
    except Exception:
        logger.exception("publishing %d messages failed", len(messages))


# Per event loop and group: the posted messages not yet sent. One task per group sends them in
# order while there are some, and groups go concurrently: with one queue for the process, 500
# sessions at 100 commits/s waited seconds in line, a Redis round trip per commit.
_outboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, collections.deque]] = weakref.WeakKeyDictionary()
_sending: set[asyncio.Task] = set()  # the tasks, referenced until done (the loop keeps only weak ones)


def _post(layer, messages: list[tuple[str, dict]]) -> None:
    loop = asyncio.get_running_loop()
    outboxes = _outboxes.setdefault(loop, {})
    group = messages[0][0]
    if (outbox := outboxes.get(group)) is not None:
        outbox.append((layer, messages))
        return
    outbox = outboxes[group] = collections.deque([(layer, messages)])
    task = loop.create_task(_publish_posted(outboxes, group, outbox))
    _sending.add(task)
    task.add_done_callback(_sending.discard)


async def _publish_posted(outboxes: dict, group: str, outbox: collections.deque) -> None:
    try:
        while outbox:
            layer, messages = outbox[0]
            try:
                await _send_all(layer, messages)
            except Exception:
                logger.exception("publishing %d messages failed", len(messages))
            outbox.popleft()
    finally:
        if outboxes.get(group) is outbox:
            del outboxes[group]


async def _send_all(layer, messages: list[tuple[str, dict]]) -> None:
    for group, message in messages:
        await layer.group_send(group, message)


# Access: tokens, memberships and the audit log ------------------------------


WORKER = "worker"  # the actor name of the automatic recovery worker


def audit(
    *, project: Project | int | None, actor, action: str, target: str = "", detail: dict | None = None, actor_name: str = "cli"
) -> AuditEntry:
    """One audit entry; `actor` None means a management command ("cli") or, named so, the worker."""
    return AuditEntry.objects.create(
        project_id=project.pk if isinstance(project, Project) else project,
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=actor.get_username() if actor is not None and actor.is_authenticated else actor_name,
        action=action,
        target=target,
        detail=detail or {},
    )


class InvalidScopes(ValueError):
    pass


def issue_token(
    *,
    user,
    project: Project | None,
    scopes,
    name: str = "",
    expires_at: datetime | None = None,
    created_by=None,
) -> tuple[ApiToken, str]:
    """A new token for `user` in `project` (None: site-level, `metrics` only); returns it and its only copy.

    The scopes must be ones the user's role there allows (InvalidScopes otherwise).
    """
    scopes = {str(scope) for scope in scopes}  # Scope members as their names, so refusals read 'recover'
    if not scopes:
        raise InvalidScopes("a token needs at least one scope")
    if project is None:
        if not scopes <= access.SITE_SCOPES:
            raise InvalidScopes(f"a site-level token may only carry {sorted(access.SITE_SCOPES)}")
        if not user.is_superuser:
            raise InvalidScopes("only a superuser may hold a site-level (metrics) token")
    else:
        if not scopes <= access.PROJECT_SCOPES:
            raise InvalidScopes(f"a project token's scopes are among {sorted(access.PROJECT_SCOPES)}")
        allowed = access.Actor(user=user).capabilities(project.pk)
        if not scopes <= allowed:
            held = access.Actor(user=user).roles().get(project.pk)
            raise InvalidScopes(
                f"{user.get_username()} is {'a ' + held if held else 'not a member'} of {project.slug}"
                f" and may not use the scopes {sorted(scopes - allowed)}"
            )
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidScopes("the expiry must be in the future")
    with transaction.atomic():
        row, secret = ApiToken.issue(
            user, project=project, scopes=scopes, name=name, expires_at=expires_at, created_by=created_by
        )
        audit(
            project=project,
            actor=created_by,
            action=AuditEntry.TOKEN_CREATED,
            target=row.prefix,
            detail={"user": user.get_username(), "scopes": row.scopes, "name": name,
                    "expires_at": log_events.format_time(expires_at) if expires_at else None},
        )
    return row, secret


def revoke_token(*, token: ApiToken, by=None) -> bool:
    """Revoke a token at once (API answers 401; open streams close within TURNLOG_CREDENTIAL_CHECK_SECONDS).

    False when it was already revoked.
    """
    with transaction.atomic():
        changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if changed:
            audit(
                project=token.project_id,
                actor=by,
                action=AuditEntry.TOKEN_REVOKED,
                target=token.prefix,
                detail={"user": token.user.get_username(), "name": token.name},
            )
    token.refresh_from_db(fields=["revoked_at"])
    return bool(changed)


class LastAdmin(ValueError):
    """Removing or lowering the project's only admin would leave nobody to manage it."""


def set_membership(*, project: Project, user, role: str | None, by=None) -> Membership | None:
    """Add a member, change their role, or (role None) remove them; audited. Their tokens stay bounded by the new role.

    LastAdmin when that would leave the project without an admin member.
    """
    with transaction.atomic():
        # The admins are locked too, so two admins demoting each other at once cannot leave none.
        admins = list(Membership.objects.select_for_update().filter(project=project, role=Role.ADMIN).values_list("user_id", flat=True))
        current = Membership.objects.select_for_update().filter(project=project, user=user).first()
        target = user.get_username()
        if current is not None and current.role == Role.ADMIN and role != Role.ADMIN and admins == [user.pk]:
            raise LastAdmin(f"{target} is the only admin of {project.slug}: make someone else an admin first")
        if role is None:
            if current is not None:
                current.delete()
                audit(project=project, actor=by, action=AuditEntry.MEMBER_REMOVED, target=target, detail={"role": current.role})
            return None
        if current is None:
            current = Membership.objects.create(project=project, user=user, role=role)
            audit(project=project, actor=by, action=AuditEntry.MEMBER_ADDED, target=target, detail={"role": role})
        elif current.role != role:
            before, current.role = current.role, role
            current.save(update_fields=["role"])
            audit(project=project, actor=by, action=AuditEntry.MEMBER_CHANGED, target=target, detail={"from": before, "to": role})
        return current
