"""Keeping the call ledger current: after each stored run of events, after a dangling-call patch, and rebuilt from a log.

Each runs in its caller's transaction, under the session's lock, so the rows
change with the events they read. The queries are indexed and bounded by what
the run names: the rows of the calls, turns and steps it touches; for calls it
sights first, their earlier results and whether their turn already dispatched.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.db.models import Q

from sessions_app import statements

from sessions_app.log import events as log_events
from sessions_app.models import CallSighting, Event, LedgerCall, Session
from sessions_app.selectors.calls import patch_seqs as _patch_seqs

from .facts import Book, add_result, call_key, settle

SETTLED_FIELDS = ["settled_state", "result_seq", "owed_risk"]
FACT_FIELDS = [
    "turn_open", "dispatched", "turn_dispatched", "step_closed", "real_seq", "real_error",
    "standin_seq", "synthetic_seq", "synthetic_risk", "patch_seq", *SETTLED_FIELDS,
]  # fmt: skip
SIGHTING_TYPES = frozenset({"assistant_message", "tool_call"})
TOUCHING_TYPES = SIGHTING_TYPES | {"tool_result", "turn_end", "step_end"}


def track_events(session: Session, events: Sequence) -> None:
    """Read a run of events just stored after the session's earlier ones (services.appends._store).

    Every result is read as its data says (real or synthetic): which results a
    dangling-call patch wrote is recorded after them (`track_patch`).
    """
    if not any(e.type in TOUCHING_TYPES for e in events):
        return
    first = events[0].seq
    keys, turns, steps = set(), set(), set()
    for e in events:
        if e.type == "assistant_message":
            keys.update(call_key(cid) for call in log_events.tool_calls_of(e.data) if (cid := log_events.call_id(call)) is not None)
        elif e.type in ("tool_call", "tool_result") and (cid := log_events.call_id(e.data)) is not None:
            keys.add(call_key(cid))
            if e.type == "tool_call" and e.turn_seq is not None:
                turns.add(e.turn_seq)
        elif e.type == "turn_end" and e.turn_seq is not None:
            turns.add(e.turn_seq)
        elif e.type == "step_end" and e.step_seq is not None:
            steps.add(e.step_seq)
    touched = Q(call_id__in=keys) | Q(turn_seq__in=turns) | Q(step_seq__in=steps)
    rows = {row.call_id: row for row in LedgerCall.objects.filter(Q(session_id=session.id) & touched)}
    book = _book(session, rows, first=first, unknown=keys - rows.keys())
    for e in events:
        book.read(e)
    _save(book)


def _book(session: Session, rows: dict, *, first: int, unknown: set[str]) -> Book:
    """A Book whose lookups read what was stored before `first`, for the calls the run may sight first."""
    prior = Event.objects.filter(session_id=session.id, seq__lt=first)
    earlier: dict[str, list] = {}
    sighted: set[str] = set()
    if unknown and first > 0:
        for result in prior.filter(call_id__in=unknown, type="tool_result").order_by("seq"):
            earlier.setdefault(result.call_id, []).append(result)
        if session.seed_length:  # a fork: its inherited prefix may have sighted them (listed under its parent)
            sighted = set(CallSighting.objects.filter(session_id=session.id, call_id__in=unknown, seq__lt=first).values_list("call_id", flat=True))
            sighted |= set(prior.filter(call_id__in=unknown, type="tool_call").values_list("call_id", flat=True))
    patch_seqs: set[int] = set()
    if earlier:  # results stored before their call's first sighting may be a patch's
        patch_seqs = _patch_seqs(session)
    dispatched: dict[int, bool] = {}

    def earlier_dispatch(turn_seq: int) -> bool:
        if turn_seq not in dispatched:
            dispatched[turn_seq] = prior.filter(turn_seq=turn_seq, type="tool_call", call_id__isnull=False).exists()
        return dispatched[turn_seq]

    return Book(
        session=session, rows=rows, patch_seqs=patch_seqs, earlier_dispatch=earlier_dispatch,
        earlier_results=lambda key: earlier.get(key, ()), sighted_before=sighted.__contains__,
    )


def _save(book: Book) -> None:
    created, updated = book.settle_all()
    if created:
        LedgerCall.objects.bulk_create(created)
    if updated:
        LedgerCall.objects.bulk_update(updated, FACT_FIELDS)


def track_patch(session: Session, *, first_seq: int, last_seq: int) -> None:
    """The results at first_seq..last_seq were a dangling-call patch's (its RecoveryRecord): stand-ins, not real.

    `track_events` read them as real (a patch writes `metadata: {}`); a patch answers only calls
    nothing visible answered, so where one was read as a call's first real result there was none before it.
    """
    rows = list(LedgerCall.objects.filter(session_id=session.id, real_seq__gte=first_seq, real_seq__lte=last_seq))
    for row in rows:
        patch = row.real_seq
        row.real_seq, row.real_error = None, False
        row.standin_seq = patch if row.standin_seq is None else min(row.standin_seq, patch)
        row.patch_seq = patch if row.patch_seq is None else row.patch_seq
        settle(row)
    if rows:
        LedgerCall.objects.bulk_update(rows, FACT_FIELDS)


def rebuild(session: Session) -> int:
    """The session's rows recomputed from its whole log (stored before the ledger, or to repair); the number of rows.

    A fork keeps only the calls its own events sighted first. The caller holds the session's lock.
    """
    book = Book(
        session=session, rows={}, patch_seqs=_patch_seqs(session), earlier_dispatch=lambda turn_seq: False,
        earlier_results=lambda key: (), sighted_before=lambda key: False,
    )
    for event in Event.objects.filter(session=session).order_by("seq").iterator(chunk_size=2000):
        book.read(event)
    created, _ = book.settle_all()
    kept = [row for row in created if row.seq >= session.seed_length]
    stored = {row.call_id: row.pk for row in LedgerCall.objects.filter(session_id=session.id).only("id", "call_id")}
    for row in kept:
        row.pk = stored.get(row.call_id)
    LedgerCall.objects.bulk_create([row for row in kept if row.pk is None])
    if existing := [row for row in kept if row.pk is not None]:
        LedgerCall.objects.bulk_update(existing, ["tool", "arguments_preview", "seq", "time", "sighted_at", "turn_seq", "step_seq", *FACT_FIELDS])
    return len(kept)



def rebuild_session(session_id: str) -> int | None:
    """`rebuild` under the session's lock, in its own transaction; None when there is no such session."""
    with transaction.atomic():
        session = statements.get_for_update(Session, session_id)
        return None if session is None else rebuild(session)
