"""Keeping the call ledger current: after each stored run of events, after a dangling-call patch, and rebuilt from a log.

Each runs in its caller's transaction, under the session's lock, so the rows
change with the events they read. The queries are indexed and bounded by what
the run names: the rows of the calls, turns and steps it touches; for calls it
sights first, their earlier results and whether their turn already dispatched.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from operator import attrgetter

from django.db import transaction
from django.db.models import F, Q

from sessions_app.lib import statements
from sessions_app.log import events as log_events
from sessions_app.models import CallSighting, Event, LedgerCall, Session, Verdict
from sessions_app.selectors.calls import patch_seqs as _patch_seqs
from sessions_app.selectors.ledger import inherited_rows

from .facts import Book, add_result, call_key, receipt_reader, settle

SETTLED_FIELDS = ["settled_state", "result_seq", "owed_risk"]
FACT_FIELDS = [
    "turn_open", "dispatched", "turn_dispatched", "step_closed", "real_seq", "real_error",
    "standin_seq", "synthetic_seq", "synthetic_risk", "patch_seq", *SETTLED_FIELDS,
    "idempotency_key", "idempotency_key_rank", "receipt",
]  # fmt: skip
SIGHTING_TYPES = frozenset({"assistant_message", "tool_call"})
TOUCHING_TYPES = SIGHTING_TYPES | {"tool_result", "turn_end", "step_end"}


def track_events(session: Session, events: Sequence) -> None:
    """Read a run of events just stored after the session's earlier ones (services.event_rows.store_events).

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
    rows = _rows(session.id, keys, turns, steps)
    book = _book(session, rows, first=first, unknown=keys - rows.keys())
    for e in events:
        book.read(e)
    _save(book)


# Up to this many calls, turns and steps a run touches, each is read by its own statement compiled
# once (statements.rows): a single append's few lookups cost what the ORM spent building one query.
FEW = 6
COLUMNS = tuple(f.attname for f in LedgerCall._meta.concrete_fields)


def _rows(session_id: str, keys: set[str], turns: set[int], steps: set[int]) -> dict[str, LedgerCall]:
    """The session's rows of these calls, turns and steps, by stored call id."""
    if len(keys) + len(turns) + len(steps) > FEW:
        # The session in each alternative, so that each reads its own index (the session's whole ledger otherwise).
        touched = Q(session_id=session_id, call_id__in=keys) | Q(session_id=session_id, turn_seq__in=turns) | Q(session_id=session_id, step_seq__in=steps)
        return {row.call_id: row for row in LedgerCall.objects.filter(touched)}
    found = []
    for name, values in (("call_id", keys), ("turn_seq", turns), ("step_seq", steps)):
        for value in values:
            found += statements.rows(
                f"ledger-by-{name}", lambda sid, v, name=name: LedgerCall.objects.filter(**{"session_id": sid, name: v}).values_list(*COLUMNS),
                [session_id, value], bound=[value, session_id] if name == "call_id" else [session_id, value],  # Q sorts them by name
            )  # fmt: skip
    return {row.call_id: row for row in (LedgerCall(*values) for values in found)}


@dataclass(frozen=True, slots=True)
class _Result:
    """A tool_result stored before the run, as log.ledger reads one."""

    seq: int
    data: dict


def _earlier_results(session_id: str, unknown: set[str], first: int) -> dict[str, list[_Result]]:
    """The results stored before seq `first` for calls the run may sight first (a result may come before its call)."""
    found: list[tuple] = []
    if len(unknown) > FEW:
        # `seq + 0`: the bound kept out of the index choice, so that the call ids' index is read (SQLite
        # took the (session, seq) range instead: every earlier event of the session, on each append).
        results = Event.objects.filter(session_id=session_id, call_id__in=unknown, type="tool_result")
        found = list(results.alias(before=F("seq") + 0).filter(before__lt=first).values_list("call_id", "seq", "data"))
    else:
        for key in unknown:
            found += statements.rows(
                "ledger-earlier-results",
                lambda sid, key, first: Event.objects.filter(session_id=sid, call_id=key, type="tool_result", seq__lt=first).values_list("call_id", "seq", "data"),
                [session_id, key, first], bound=[key, first, session_id, "tool_result"],
            )  # fmt: skip
    earlier: dict[str, list[_Result]] = {}
    for key, seq, data in sorted(found, key=lambda row: row[1]):
        earlier.setdefault(key, []).append(_Result(seq, data))
    return earlier


def _book(session: Session, rows: dict, *, first: int, unknown: set[str]) -> Book:
    """A Book whose lookups read what was stored before `first`, for the calls the run may sight first."""
    earlier = _earlier_results(session.id, unknown, first) if unknown and first > 0 else {}
    sighted: set[str] = set()
    inherited: dict = {}
    if unknown and session.seed_length and first > 0:  # a fork: its inherited prefix may have sighted them (listed under its parent)
        prior = Event.objects.filter(session_id=session.id, seq__lt=first)
        sighted = set(CallSighting.objects.filter(session_id=session.id, call_id__in=unknown, seq__lt=first).values_list("call_id", flat=True))
        sighted |= set(prior.filter(call_id__in=unknown, type="tool_call").values_list("call_id", flat=True))
        inherited = inherited_rows(session, sighted)  # the fork's own row once one of its events changes them
    patch_seqs = _patch_seqs(session) if earlier else set()  # results stored before their call's first sighting may be a patch's
    dispatched: dict[int, bool] = {}

    def earlier_dispatch(turn_seq: int) -> bool:
        if turn_seq >= first:  # the turn opened in this run: what it dispatched, the run shows
            return False
        if turn_seq not in dispatched:
            dispatched[turn_seq] = bool(statements.rows(
                "ledger-turn-dispatched",
                lambda sid, turn, first: Event.objects.filter(session_id=sid, turn_seq=turn, type="tool_call", call_id__isnull=False, seq__lt=first).values_list("seq")[:1],
                [session.id, turn_seq, first], bound=[first, session.id, turn_seq, "tool_call"],
            ))  # fmt: skip
        return dispatched[turn_seq]

    return Book(
        session=session, rows=rows, patch_seqs=patch_seqs, earlier_dispatch=earlier_dispatch,
        earlier_results=lambda key: earlier.get(key, ()), sighted_before=sighted.__contains__, inherited=inherited,
        receipt_of=receipt_reader(session.project_id),
    )


INSERTED = COLUMNS[1:]  # all but the id
_inserted_values, _fact_values = attrgetter(*INSERTED), attrgetter(*FACT_FIELDS)
# Of the inserted columns, those whose values need adapting (every other value is what the field would send).
_DATETIME_AT = [at for at, name in enumerate(INSERTED) if LedgerCall._meta.get_field(name).get_internal_type() == "DateTimeField"]


def _save(book: Book) -> None:
    """The settled rows in one statement per kind: an append's ledger is written as its events are
    (the fields' get_db_prep_save per value cost a tenth of a batch's append)."""
    created, updated = book.settle_all()
    if created:
        adapt_time = statements.datetime_adapter()
        values = []
        for row in created:
            row_values = list(_inserted_values(row))
            for at in _DATETIME_AT:
                row_values[at] = adapt_time(row_values[at])
            values.append(row_values)
        statements.execute_many(statements.insert_sql(LedgerCall, [LedgerCall._meta.get_field(name).name for name in INSERTED]), values)
    if updated:
        statements.execute_many(statements.update_sql(LedgerCall, FACT_FIELDS), [(*_fact_values(row), row.pk) for row in updated])


def track_patch(session: Session, *, seqs: Collection[int]) -> None:
    """The results at `seqs` were dangling-call patches' (a RecoveryRecord's range, or those an import
    carried over): stand-ins, not real. `track_events` read them as real (a patch writes `metadata: {}`),
    so the calls they answer read all their results again, knowing."""
    seqs = set(seqs)
    answered = Event.objects.filter(session_id=session.id, seq__in=seqs, type="tool_result", call_id__isnull=False)
    keys = set(answered.values_list("call_id", flat=True))
    rows = {row.call_id: row for row in LedgerCall.objects.filter(session_id=session.id, call_id__in=keys)}
    copied = inherited_rows(session, keys - rows.keys()) if session.seed_length else {}  # a fork's patch of inherited calls
    rows.update(copied)
    if not rows:
        return
    patches = _patch_seqs(session) | seqs
    for row in rows.values():
        row.real_seq, row.real_error, row.standin_seq = None, False, None
        row.synthetic_seq, row.synthetic_risk, row.patch_seq = None, "", None
    results = Event.objects.filter(session_id=session.id, call_id__in=rows.keys(), type="tool_result").order_by("seq")
    receipt_of, real = receipt_reader(session.project_id), {}
    for key, seq, data in results.values_list("call_id", "seq", "data"):
        if add_result(rows[key], _Result(seq, data), patches):
            real[key] = data
    for key, row in rows.items():
        row.receipt = receipt_of(row.tool, real[key]) if key in real else None  # a patch's content is no receipt
        settle(row)
    LedgerCall.objects.bulk_create([row for row in rows.values() if row.pk is None])
    if stored := [row for row in rows.values() if row.pk is not None]:
        LedgerCall.objects.bulk_update(stored, FACT_FIELDS)


def rebuild(session: Session) -> int:
    """The session's rows recomputed from its whole log (stored before the ledger, or to repair); the number of rows.

    A fork keeps the calls its own events sighted first or changed (a dispatch or a result of an
    inherited call). The caller holds the session's lock.
    """
    book = Book(
        session=session, rows={}, patch_seqs=_patch_seqs(session), earlier_dispatch=lambda turn_seq: False,
        earlier_results=lambda key: (), sighted_before=lambda key: False, receipt_of=receipt_reader(session.project_id),
    )
    changed_by_own: set[str] = set()
    for event in Event.objects.filter(session=session).order_by("seq").iterator(chunk_size=2000):
        book.read(event)
        if event.seq >= session.seed_length and event.type in ("tool_call", "tool_result") and (cid := log_events.call_id(event.data)) is not None:
            changed_by_own.add(call_key(cid))
    created, _ = book.settle_all()
    kept = [row for row in created if row.seq >= session.seed_length or row.call_id in changed_by_own]
    stored = {row.call_id: row.pk for row in LedgerCall.objects.filter(session_id=session.id).only("id", "call_id")}
    for row in kept:
        row.pk = stored.get(row.call_id)
    LedgerCall.objects.bulk_create([row for row in kept if row.pk is None])
    if existing := [row for row in kept if row.pk is not None]:
        LedgerCall.objects.bulk_update(existing, ["tool", "arguments_preview", "seq", "time", "sighted_at", "turn_seq", "step_seq", *FACT_FIELDS])
    _copy_verdicts(session)
    return len(kept)


def _copy_verdicts(session: Session) -> None:
    """The rows' copy of the current verdicts (which live beside the log, in their own table)."""
    current = {v.call_id: v for v in Verdict.objects.filter(session=session, withdrawn_at__isnull=True)}
    LedgerCall.objects.filter(session=session).exclude(call_id__in=current).exclude(verdict=None).update(verdict=None, verdict_ref=None)
    for call_id, verdict in current.items():
        LedgerCall.objects.filter(session=session, call_id=call_id).update(verdict=verdict.outcome, verdict_ref=verdict.external_ref or None)



def rebuild_session(session_id: str) -> int | None:
    """`rebuild` under the session's lock, in its own transaction; None when there is no such session."""
    with transaction.atomic():
        session = statements.get_for_update(Session, session_id)
        return None if session is None else rebuild(session)
