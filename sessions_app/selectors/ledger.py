"""One session's calls read from the call ledger's rows (api.md, "Calls, notes and search"): the cost follows
the calls read, not the log.

`session_calls` (selectors.calls) states every call from one scan of the whole log;
this reads the same rows (the same CallRow, the same state) from the ledger table.
A fork holds rows only for the calls its own events sighted first or changed (the
ledger copies an inherited call's row on write); the others are its ancestors' rows
of calls first sighted below its seed_length (recursively for forks of forks, the
nearest session's row winning), read as the fork's prefix shows them (`as_of`).
The side-effect class is read through the tool policies as they are now, the
notes are the session's, and a state that follows the status follows this
session's (the rule of selectors.fleet_calls.state_expression, in Python).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import Q

from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import ledger
from sessions_app.log.policies import LOUD_CLASSES
from sessions_app.log.receipts import RESULT
from sessions_app.log.recovery import TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, side_effect_class
from sessions_app.models import Event, LedgerCall, Session
from sessions_app.selectors.calls import CHECKED_CLASSES, CallRow
from sessions_app.selectors.notes import notes_by_seq
from sessions_app.selectors.policies import project_policies
from sessions_app.selectors.verdicts import current_verdicts

# The states a person may have to check: every one of them is listed, however long the session.
STATES_TO_CHECK = frozenset({TOOL_OUTCOME_UNKNOWN, ledger.SUPERSEDED, ledger.PENDING})
CHUNK = 200  # rows read at a time, newest first
SCAN = 5000  # at most this many rows of other classes are passed over looking for the latest (then: incomplete)
IN_BATCH = 500  # values per IN (...) list: SQLite's variable limit


@dataclass(frozen=True)
class SessionLedger:
    rows: list[CallRow]  # in order of first sighting
    complete: bool  # every call of the classes asked is in `rows`
    to_check: int = 0  # how many calls of the classes asked are to check (all of them in `rows` unless capped)


@dataclass(frozen=True)
class _Level:
    """A session whose rows this session reads: itself (boundary None), or an ancestor below `boundary`."""

    session_id: str
    boundary: int | None


def settle(row: LedgerCall) -> None:
    """log.ledger's rules on the row's facts: the state the session's status cannot change, else None,
    the deciding result, and the risk the plan's table gives the call while an open turn owes it."""
    state, result_seq = None, None
    if row.real_seq is not None:  # rules 1 and 2
        superseded = row.standin_seq is not None and row.standin_seq < row.real_seq
        state = ledger.SUPERSEDED if superseded else (ledger.ERROR if row.real_error else ledger.COMPLETED)
        result_seq = row.real_seq
    elif row.synthetic_seq is not None:  # rule 3
        state, result_seq = row.synthetic_risk, row.synthetic_seq
    elif row.patch_seq is not None:  # rule 4
        state, result_seq = ledger.NO_RESULT, row.patch_seq
    elif row.turn_seq is not None and not row.turn_open:  # rule 7
        state = ledger.NO_RESULT
    row.settled_state, row.result_seq = state, result_seq
    row.owed_risk = None
    if state is None and row.turn_seq is not None:  # rule 5: the risk table (log.recovery._classify)
        if row.dispatched:
            row.owed_risk = TOOL_OUTCOME_UNKNOWN
        elif row.turn_dispatched or (row.step_seq is not None and row.step_closed):
            row.owed_risk = TOOL_NOT_STARTED
        else:
            row.owed_risk = TOOL_OUTCOME_UNKNOWN


def as_of(row: LedgerCall, boundary: int, session: Session) -> LedgerCall:
    """A new, unsaved row of `session` (a fork inheriting `boundary` events) holding `row`'s facts as its
    first `boundary` events show them: the results from seq `boundary` on are the ancestor's, not its own.

    Each result fact is the first of its kind, so one at or past the boundary means none before it.
    A fork's prefix ends outside every turn (log.fork), so the turn facts are already final.
    """
    copy = LedgerCall(**{f.attname: getattr(row, f.attname) for f in LedgerCall._meta.concrete_fields})
    copy.pk, copy.session_id, copy.project_id, copy.agent_name = None, session.id, session.project_id, session.agent_name
    results_before = (copy.real_seq is not None and copy.real_seq < boundary) or (copy.standin_seq is not None and copy.standin_seq < boundary)
    if copy.real_seq is not None and copy.real_seq >= boundary:
        copy.real_seq, copy.real_error, copy.receipt = None, False, None
    if copy.idempotency_key_rank == RESULT and not results_before:  # read from a result the prefix does not hold
        copy.idempotency_key, copy.idempotency_key_rank = None, None
    if copy.standin_seq is not None and copy.standin_seq >= boundary:
        copy.standin_seq = None
    if copy.synthetic_seq is not None and copy.synthetic_seq >= boundary:
        copy.synthetic_seq, copy.synthetic_risk = None, ""
    if copy.patch_seq is not None and copy.patch_seq >= boundary:
        copy.patch_seq = None
    copy.verdict = copy.verdict_ref = None  # verdicts are each session's own (the fork records its own)
    settle(copy)
    return copy


def row_state(row: LedgerCall, status: str) -> str:
    """The call's state: settled, or by the session's status (selectors.fleet_calls.state_expression)."""
    if row.settled_state is not None:
        return row.settled_state
    if row.turn_seq is not None:  # rule 5
        return ledger.PENDING if status == "running" else row.owed_risk
    return ledger.PENDING if status in ("running", "active") else ledger.NO_RESULT  # rule 6


def levels_of(session: Session) -> list[_Level]:
    """The session, then each ancestor with the boundary below which this session inherited its calls."""
    levels = [_Level(session.id, None)]
    parent_id, boundary = session.parent_id, session.seed_length
    while parent_id is not None and boundary > 0:
        levels.append(_Level(parent_id, boundary))
        found = Session.objects.filter(pk=parent_id).values_list("parent_id", "seed_length").first()
        if found is None:
            break
        parent_id, boundary = found[0], min(boundary, found[1])
    return levels


def inherited_rows(session: Session, keys: set[str]) -> dict[str, LedgerCall]:
    """For a fork: the calls among `keys` (stored call ids) its prefix sighted, as new unsaved rows of its
    own holding the nearest ancestor's facts as of the prefix (sessions_app.services.ledger copies them on write)."""
    found: dict[str, LedgerCall] = {}
    wanted = set(keys)
    for level in levels_of(session)[1:]:
        if not wanted:
            break
        for row in LedgerCall.objects.filter(session_id=level.session_id, call_id__in=wanted, seq__lt=level.boundary):
            found[row.call_id] = as_of(row, level.boundary, session)
            wanted.discard(row.call_id)
    return found


@dataclass(frozen=True)
class LedgerWindow:
    """The call ledger's rows a list shows (session_ledger's choice), before any event is read for them."""

    rows: list[LedgerCall]  # in order of first sighting
    complete: bool
    to_check: int
    status: str
    policies: list

    def state(self, row: LedgerCall) -> str:
        return row_state(row, self.status)

    def side_effect(self, row: LedgerCall) -> str:
        return side_effect_class(row.tool, self.policies)


def session_ledger(session: Session, *, all_classes: bool, latest: int | None = None, check: int | None = None) -> SessionLedger:
    """The session's calls (external_effect and unknown only, unless `all_classes`) as session_calls states
    them. With `latest`: every call whose state is one to check (with `check`, the first `check` of them,
    unknown outcomes of external effects first, then in order of first sighting), and the `latest` newest others."""
    window = ledger_window(session, all_classes=all_classes, latest=latest, check=check)
    rows = call_rows(session, window.rows, window.status, all_classes, window.policies)
    return SessionLedger(rows=rows, complete=window.complete, to_check=window.to_check)


def ledger_window(session: Session, *, all_classes: bool, latest: int | None = None, check: int | None = None) -> LedgerWindow:
    """The rows session_ledger states, chosen from the call ledger's columns alone."""
    levels = levels_of(session)
    overridden = _overridden(levels)
    status = session.status
    policies = project_policies(session.project_id)

    def of_class(row: LedgerCall) -> bool:
        return all_classes or side_effect_class(row.tool, policies) in CHECKED_CLASSES

    def read(level: _Level, k: int, rows) -> Iterator[LedgerCall]:
        for row in rows:
            if row.call_id not in overridden[k] and of_class(row):
                yield row if level.boundary is None else as_of(row, level.boundary, session)

    if latest is None:
        chosen = [row for k, level in enumerate(levels) for row in read(level, k, _scope(level))]
        return LedgerWindow(sorted(chosen, key=lambda r: r.seq), True, sum(row_state(r, status) in STATES_TO_CHECK for r in chosen), status, policies)
    chosen_by_key: dict[str, LedgerCall] = {}
    for k, level in enumerate(levels):
        for condition in _may_need_checking(level):
            for row in read(level, k, _scope(level).filter(condition)):
                if row_state(row, status) in STATES_TO_CHECK:
                    chosen_by_key[row.call_id] = row
    to_check = len(chosen_by_key)
    skipped = set()
    if check is not None and to_check > check:
        def loud_first(row: LedgerCall) -> tuple:
            loud = side_effect_class(row.tool, policies) in LOUD_CLASSES and row_state(row, status) == TOOL_OUTCOME_UNKNOWN
            return (not loud, row.seq)

        ordered = sorted(chosen_by_key.values(), key=loud_first)
        skipped = {row.call_id for row in ordered[check:]}
        chosen_by_key = {row.call_id: row for row in ordered[:check]}
    # The page's worth first (the rows to check among them are passed over): most sessions' latest calls are of the classes asked.
    first = min(latest + 1 + len(chosen_by_key) + len(skipped), CHUNK)
    newest = heapq.merge(*(_newest(level, overridden[k], session, first) for k, level in enumerate(levels)), key=lambda r: -r.seq)
    complete, taken, passed = True, 0, 0
    for row in newest:
        if row.call_id in chosen_by_key or row.call_id in skipped:
            continue
        if not of_class(row):
            passed += 1
            if passed > SCAN:
                complete = False
                break
            continue
        if taken == latest:
            complete = False
            break
        chosen_by_key[row.call_id] = row
        taken += 1
    rows = sorted(chosen_by_key.values(), key=lambda r: r.seq)
    return LedgerWindow(rows, complete and not skipped, to_check, status, policies)


def answer_seqs(session: Session, keys: list[str]) -> dict[str, list[int]]:
    """Stored call id -> the seqs of its dispatches and results (where notes on the call may be pinned)."""
    touched: dict[str, list[int]] = {}
    answers = Event.objects.filter(session=session, type__in=("tool_call", "tool_result"), call_id__isnull=False)
    batches = [answers] if len(keys) > IN_BATCH else [answers.filter(call_id__in=keys)]  # many: one read of them all
    for batch in batches:
        for key, seq in batch.values_list("call_id", "seq"):
            touched.setdefault(key, []).append(seq)
    return touched


def _scope(level: _Level):
    rows = LedgerCall.objects.filter(session_id=level.session_id)
    return rows if level.boundary is None else rows.filter(seq__lt=level.boundary)


def _may_need_checking(level: _Level) -> list[Q]:
    """Rows whose state may be one to check: unsettled, settled so, or (an ancestor's) answered past the boundary,
    found from its results there by the (session, seq) index. Each its own query: an OR of them would read all
    the session's rows, not ranges of its indexes."""
    found = [Q(settled_state__isnull=True), Q(settled_state__in=STATES_TO_CHECK)]
    if level.boundary is not None:
        later = Event.objects.filter(session_id=level.session_id, seq__gte=level.boundary, type="tool_result", call_id__isnull=False)
        keys = sorted(set(later.values_list("call_id", flat=True)))
        settled = Q(settled_state__isnull=False) & ~Q(settled_state__in=STATES_TO_CHECK)
        found += [settled & Q(call_id__in=keys[i : i + IN_BATCH]) for i in range(0, len(keys), IN_BATCH)]
    return found


def _overridden(levels: list[_Level]) -> list[set[str]]:
    """For each level, the calls a nearer session holds its own row of (the fork's copies, few)."""
    out: list[set[str]] = [set()]
    for k, level in enumerate(levels[1:], 1):
        keys: set[str] = set()
        for nearer in levels[:k]:
            keys |= set(LedgerCall.objects.filter(session_id=nearer.session_id, seq__lt=level.boundary).values_list("call_id", flat=True))
        out.append(keys)
    return out


def _newest(level: _Level, overridden: set[str], session: Session, size: int) -> Iterator[LedgerCall]:
    """The level's rows newest first by the (session, seq) index: `size` rows, then CHUNK at a time."""
    rows = _scope(level).order_by("-seq", "-id")
    after = Q()
    while True:
        chunk = list(rows.filter(after)[:size])
        for row in chunk:
            if row.call_id not in overridden:
                yield row if level.boundary is None else as_of(row, level.boundary, session)
        if len(chunk) < size:
            return
        last, size = chunk[-1], CHUNK
        after = Q(seq__lt=last.seq) | Q(seq=last.seq, id__lt=last.id)


def call_rows(
    session: Session, rows: list[LedgerCall], status: str, all_classes: bool, policies: list, *,
    answers: dict[str, list[int]] | None = None, notes_at: dict | None = None,
) -> list[CallRow]:  # fmt: skip
    """The rows as CallRows in order of first sighting, as session_calls builds them: name and arguments from the
    first-sighting event (the session's own copy of it), the class by name, notes at the sighting, dispatches, results.
    A caller that read the calls' `answers` (answer_seqs) and the session's `notes_at` (notes_by_seq) passes them."""
    if not rows:
        return []
    sightings: dict[int, tuple] = {}
    seqs = sorted({row.seq for row in rows})
    for i in range(0, len(seqs), IN_BATCH):
        found = Event.objects.filter(session=session, seq__in=seqs[i : i + IN_BATCH]).values_list("seq", "type", "data", "time")
        sightings.update({seq: (type_, data, time) for seq, type_, data, time in found})
    touched = answer_seqs(session, sorted({row.call_id for row in rows})) if answers is None else answers  # stored call id -> seqs
    notes_at = notes_by_seq(session) if notes_at is None else notes_at
    verdicts = current_verdicts(session) if any(row.verdict for row in rows) else {}
    placed = []
    for row in rows:
        type_, data, time = sightings[row.seq]
        call, position = _sighted_call(type_, data, row.call_id)
        name = log_calls.call_name(call)
        side_effect = side_effect_class(log_events.tool_name(name), policies)
        if not all_classes and side_effect not in CHECKED_CLASSES:
            continue
        state = ledger.CallState(
            log_events.call_id(call), name, log_calls.call_arguments(call), row.seq, row.turn_seq, row_state(row, status), row.result_seq
        )
        seqs_of = dict.fromkeys([row.seq, *sorted(touched.get(row.call_id, ()))])
        notes = sorted((n for seq in seqs_of for n in notes_at.get(seq, ())), key=lambda n: (n.created_at, n.pk))
        verdict = verdicts.get(row.call_id)
        placed.append(((row.seq, position), CallRow(session=session, call=state, side_effect=side_effect, time=time, notes=notes, verdict=verdict,
                                                    idempotency_key=row.idempotency_key, receipt=row.receipt)))
    return [row for _, row in sorted(placed, key=lambda item: item[0])]


def _sighted_call(type_: str, data: dict, key: str) -> tuple[dict, int]:
    """The call as its first-sighting event holds it (a tool_call event's data, or the assistant message's
    first entry naming it) and its place there: the calls of one message are sighted in their order."""
    if type_ == "tool_call":
        return data, 0
    prep = LedgerCall._meta.get_field("call_id").get_prep_value
    for i, call in enumerate(log_events.tool_calls_of(data)):
        if (cid := log_events.call_id(call)) is not None and prep(cid) == key:
            return call, i
    return {}, 0
