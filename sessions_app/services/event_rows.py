"""The row writing every append shares: new session rows, the session's lock, events stored after its
last one (with their sightings, the ledger's rows and the session's summary), the agents' hourly counts.

The native API's appends, recovery, forks, imports and OTLP ingest all write through these functions,
in their caller's transaction, so locking, structural columns and publish-on-commit exist once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone

from sessions_app.lib import instruments, statements
from sessions_app.lib.errors import SessionNotFound
from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import structure
from sessions_app.log import values as log_values
from sessions_app.models import REPLACE_BOUND_MAX, AgentHour, CallSighting, Event, Project, Session

from . import ledger, usage
from .publishing import publish_events_on_commit, publish_session_changed_on_commit

CALL_ID_TYPES = frozenset({"tool_call", "tool_result"})
AGENT_NAME_MAX = Session._meta.get_field("agent_name").max_length
TOOL_NAME_MAX = CallSighting._meta.get_field("tool_name").max_length


def new_session_id() -> str:
    return uuid.uuid4().hex


def new_session(
    *,
    session_id: str | None,
    agent_name: str,
    metadata: dict | None,
    project: Project | None,
    parent: Session | None = None,
    seed_length: int = 0,
    created_at: datetime | None = None,
) -> Session:
    """The unsaved row of a new session (what create_session inserts)."""
    # log_values.UnacceptableValue: what PostgreSQL would refuse, SQLite is not given either.
    log_values.check({"agent_name": agent_name, "metadata": metadata or {}})
    now = created_at or timezone.now()
    if project is None:
        project = parent.project if parent is not None else Project.default()
    return Session(
        id=session_id or new_session_id(),
        project=project,
        agent_name=agent_name or "",
        metadata=metadata or {},
        parent=parent,
        seed_length=seed_length,
        created_at=now,
        last_activity_at=now,
        retained_from=now,
    )


def insert_new_session(session: Session, *, agent_counts: Counter) -> bool:
    """Insert `session` (from new_session) unless its id is taken; True when it was inserted.

    For a caller that creates several sessions in its own transaction, in id
    order: no savepoint per session, the agent's count added to
    `agent_counts` (count_for_agents), and publishing on commit as
    create_session does. On PostgreSQL a concurrent creator of the same id
    makes this wait for its commit, then find the id taken.
    """
    db = connections[DEFAULT_DB_ALIAS]
    fields = Session._meta.concrete_fields
    sql = statements.insert_sql(Session, tuple(f.name for f in fields)) + f" ON CONFLICT ({db.ops.quote_name(Session._meta.pk.column)}) DO NOTHING"
    if not statements.execute_counted(sql, [f.get_db_prep_save(getattr(session, f.attname), db) for f in fields]):
        return False
    agent_counts[(session.project_id, session.agent_name, hour_of(session.created_at), "sessions")] += 1
    publish_session_changed_on_commit(session.id)
    return True


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


AGENT_COUNTS = ("sessions", "turns", "crashed_turns")


def count_for_agent(session: Session, *, at: datetime, **counts: int) -> None:
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


def count_for_agents(counts: Counter) -> None:
    """Apply counts gathered over a transaction's writes ((project id, agent, hour, count name) -> n),
    one upsert per agent and hour, in key order: transactions that count for several agents take
    their rows in the same order, so on PostgreSQL they queue rather than deadlock."""
    grouped: dict[tuple, Counter] = {}
    for (project_id, agent_name, hour, name), n in counts.items():
        grouped.setdefault((project_id, agent_name, hour), Counter())[name] += n
    for (project_id, agent_name, hour), by_name in sorted(grouped.items(), key=lambda item: item[0]):
        count_for_agent(Session(project_id=project_id, agent_name=agent_name), at=hour, **by_name)


def locked_session(session_id: str) -> Session:
    session = statements.get_for_update(Session, session_id)
    if session is None:
        raise SessionNotFound(session_id)
    return session


def retain_from(session: Session, moment: datetime) -> None:
    """Retention counts from `moment` on, if that is later (a note written, say). The caller holds the
    session's lock inside a transaction, so the sweep, which checks again under that lock, sees it."""
    if moment > session.retained_from:
        session.retained_from = moment
        statements.save_fields(session, ["retained_from"])


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event row as `store_events` inserted it: the columns of `Event`, without a model instance.

    What the callers of `store_events` read (seq, type, time, data, to_log_event) is
    the same as on an `Event`; building 1000 model instances cost more than
    inserting them (docs/performance.md, Ingest).
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


# The columns `store_events` writes, in the order of StoredEvent's fields (all but the id).
EVENT_COLUMNS = ("session", "seq", "type", "time", "received_at", "data", "call_id", "turn_seq", "step_seq", "replace_start", "replace_stop")
SIGHTING_COLUMNS = ("session", "seq", "call_id", "tool_name")


def store_events(
    session: Session, events: Sequence[log_events.NewEvent], *, received_at: datetime | None, agent_counts: Counter | None = None
) -> list[StoredEvent]:
    """Insert events after the session's last one and update its summary.

    `received_at` is when the server received them, the session's activity
    time from now on (and what retention counts from, Session.retained_from);
    None for an import, whose events the server never received as they
    happened: its activity is their claimed last time, never later than now,
    its retention counts from the import, and its turns count in their
    claimed hours.

    The caller holds the session's lock inside a transaction. A caller that
    writes to several sessions in it passes `agent_counts` and applies them
    once (count_for_agents) rather than counting session by session. The rows go in
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
    adapt_time = statements.datetime_adapter()
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
    sightings = list(sighting_rows(session, rows))
    if sightings:
        statements.execute_many(statements.insert_sql(CallSighting, SIGHTING_COLUMNS), sightings)
    ledger.track_events(session, rows)
    session.event_count += len(rows)
    session.turn_stack = turn_stack
    session.step_stack = step_stack
    session.interrupted = bool(turn_stack)
    session.stray_turn_ends = strays
    session.last_event_at = rows[-1].time
    session.last_received_at = received_at
    session.last_activity_at = received_at or min(rows[-1].time, now)
    fields = ["event_count", "turn_stack", "step_stack", "interrupted", "stray_turn_ends", "last_event_at", "last_received_at", "last_activity_at"]
    fields += timed(session, rows, received_at=received_at)
    fields += usage.track(session, rows, received_at=received_at)
    if received_at is not None and received_at > session.retained_from:
        session.retained_from = received_at  # an import's events (None) were never received: it counts from the import
        fields.append("retained_from")
    if not turn_stack and session.repeated_failures_at is not None:
        session.repeated_failures_at = None  # the crash it flagged is closed (recovered, or by the agent itself)
        fields.append("repeated_failures_at")
    statements.save_fields(session, fields)
    # Turns count in the hour they started: received, or for an import's old turns their own claimed hours.
    for hour, turns in Counter(hour_of(received_at or row.time) for row in rows if row.type == "turn_start").items():
        if agent_counts is None:
            count_for_agent(session, at=hour, turns=turns)
        else:
            agent_counts[(session.project_id, session.agent_name, hour, "turns")] += turns
    publish_events_on_commit(session.id, rows)
    types = Counter(row.type for row in rows)
    transaction.on_commit(lambda: instruments.count_events(types))
    return rows


def timed(session: Session, rows: Sequence[StoredEvent], *, received_at: datetime | None) -> list[str]:
    """The session's duration (api.md: first to last event as the server received them; an import's: as claimed)."""
    changed = ["duration_ms"]
    if session.first_received_at is None:
        session.first_received_at = received_at or rows[0].time
        changed.append("first_received_at")
    last = received_at or rows[-1].time
    session.duration_ms = max(session.duration_ms, int((last - session.first_received_at).total_seconds() * 1000))
    return changed


def sighting_rows(session: Session, rows: Sequence[StoredEvent]):
    """One (session_id, seq, call_id, tool_name) row per distinct call id an assistant message names
    (the name as log.calls reads it, in either call shape)."""
    prep_call_id = CallSighting._meta.get_field("call_id").get_prep_value
    for row in rows:
        if row.type != "assistant_message":
            continue
        for cid, name in log_calls.sighting_names(row.data).items():
            yield (session.id, row.seq, prep_call_id(cid), name[:TOOL_NAME_MAX])
