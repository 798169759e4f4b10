"""Appends: new sessions, and batches of events appended to one (the native API's and the client's writes)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from sessions_app.lib import instruments
from sessions_app.lib.errors import IdempotencyKeyReused, NotGranted, SeqConflict, SessionExists
from sessions_app.log import events as log_events
from sessions_app.models import IdempotentRequest, Project, Session
from sessions_app.selectors import access

from .event_rows import AGENT_NAME_MAX, StoredEvent, count_for_agent, locked_session, new_session, store_events
from .publishing import publish_session_changed_on_commit

__all__ = ["AGENT_NAME_MAX", "AppendResult", "append_events", "create_session"]


@dataclass(frozen=True)
class AppendResult:
    first_seq: int
    next_seq: int
    events: list[StoredEvent]
    # True when an Idempotency-Key matched an earlier request: nothing new was stored.
    replayed: bool = False

    def as_response(self) -> dict:
        return {"first_seq": self.first_seq, "next_seq": self.next_seq}


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
    session = new_session(
        session_id=session_id, agent_name=agent_name, metadata=metadata, project=project, parent=parent,
        seed_length=seed_length, created_at=created_at,
    )
    try:
        with transaction.atomic():
            session.save(force_insert=True)
            count_for_agent(session, at=session.created_at, sessions=1)
    except IntegrityError as exc:
        raise SessionExists(session.id) from exc
    publish_session_changed_on_commit(session.id)
    return session


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
    started = time.perf_counter()
    with transaction.atomic():
        if bearer is None:
            session = locked_session(session_id)
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
        rows = store_events(session, events, received_at=received_at or timezone.now())
        result = AppendResult(first_seq=first_seq, next_seq=session.event_count, events=rows)
        if idempotency_key:
            IdempotentRequest.objects.create(
                session=session, key=idempotency_key, body_sha256=request_sha256, response=result.as_response()
            )
        # Committed when this block ends, or with the caller's transaction when it has one.
        transaction.on_commit(lambda: instruments.count_append(seconds=time.perf_counter() - started, events=len(rows)))
    return result
