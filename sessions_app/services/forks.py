"""Forks: a new session from a prefix of another (session-log.md section 5)."""

from __future__ import annotations

from django.db import connection, transaction

from sessions_app.lib import instruments
from sessions_app.models import AuditEntry, CallSighting, Event, Session
from sessions_app.selectors import fork_point, patch_seqs

from . import usage
from .appends import create_session
from .audit_log import audit
from .event_rows import locked_session


def fork(*, session_id: str, boundary: object = "last", new_session_id: str | None = None, user=None) -> Session:
    """Copy a prefix of a session into a new one (session-log.md section 5), in the parent's project.

    `user` is who asked (None: a command), for the audit log.
    Refuses with fork.ForkRefused (never clips). The copy keeps each event's
    seq, type, time, data and receive time and is made by the database in one INSERT ...
    SELECT, so its cost does not include a Python object per event.
    """
    with transaction.atomic():
        parent = locked_session(session_id)
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
        child.search_indexed_seq = point.seed_length  # the prefix is the parent's to answer
        child.step_stack = point.step_stack
        child.stray_turn_ends = [seq for seq in parent.stray_turn_ends if seq < point.seed_length]
        # The copied patch results stay the patch's (a patch writes metadata {}: storage alone knows).
        child.carried_patch_seqs = sorted(seq for seq in patch_seqs(parent) if seq < point.seed_length)
        child.last_event_at = last
        child.last_received_at = last_received
        child.first_received_at = parent.first_received_at if point.seed_length else None
        if child.first_received_at is not None and last_received is not None:
            child.duration_ms = max(0, int((last_received - child.first_received_at).total_seconds() * 1000))
        # A new fork is new activity, whatever the age of what it inherited.
        child.last_activity_at = child.created_at
        child.save(
            update_fields=[
                "event_count", "search_indexed_seq", "step_stack", "stray_turn_ends", "carried_patch_seqs",
                "last_event_at", "last_received_at", "last_activity_at", "first_received_at", "duration_ms",
            ]
        )  # fmt: skip
        usage.copy_prefix(parent, child)
        audit(
            project=parent.project_id,
            actor=user,
            action=AuditEntry.FORK,
            target=parent.id,
            detail={"fork": child.id, "seed_length": child.seed_length},
        )
        transaction.on_commit(instruments.FORKS.inc)
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
