"""The ledger's reading of events, row by row: the facts each call's row holds, and the state they settle.

Events are read in seq order, as log.recovery's scan reads them, and every fact is
one the scan also records (a sighting, a dispatch, a result and what wrote it, a
turn or step closing); `settle` then applies log.ledger's rules to them. The rows
are model instances the caller loaded (or these functions created) and saves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import ledger
from sessions_app.log import policies as log_policies
from sessions_app.log import receipts as log_receipts
from sessions_app.models import LedgerCall, Session
from sessions_app.selectors.ledger import settle
from sessions_app.selectors.policies import project_policies

TOOL_MAX = LedgerCall._meta.get_field("tool").max_length
PREVIEW_MAX = LedgerCall._meta.get_field("arguments_preview").max_length
_CALL_ID = LedgerCall._meta.get_field("call_id")


def call_key(cid: str) -> str:
    """A call id as the row stores it (an over-long id as its digest, CallIdField).

    A text that fits is itself, checked here: the field's own preparation, per event, cost a
    tenth of a batch's ledger."""
    if type(cid) is str and len(cid) <= _CALL_ID.max_length:
        return cid
    return _CALL_ID.get_prep_value(cid)


def preview(arguments: object) -> str:
    """The arguments, shortened to one line for a row (the whole value is the event's)."""
    if arguments is None:
        return ""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_MAX else text[: PREVIEW_MAX - 1] + "…"


@dataclass
class Book:
    """The rows of one session that a run of events can touch, keyed by stored call id.

    `dispatched_turns`, `closed_turns` and `closed_steps` are what the events read so far
    showed, for rows first sighted after them; `earlier_dispatch(turn_seq)` answers for
    the events before them (the caller's lookup), `earlier_results(key)` the results
    stored before them, `sighted_before(key)` whether an earlier event already sighted it
    (a fork's inherited prefix: those calls are listed under the session that sighted them).
    `inherited` holds a fork's copies of its ancestors' rows (selectors.ledger.as_of its prefix) for the calls
    the run names: the first event that changes one makes it the fork's own row (copy on write).
    """

    session: Session
    rows: dict[str, LedgerCall]
    patch_seqs: Container[int]
    earlier_dispatch: Callable[[int], bool]
    earlier_results: Callable[[str], Sequence]
    sighted_before: Callable[[str], bool]
    inherited: dict[str, LedgerCall] = field(default_factory=dict)
    # (tool, first real result's data) -> the receipt the tool's policy points at (`receipt_reader`).
    receipt_of: Callable[[str | None, object], str | None] = lambda tool, data: None
    created: list[LedgerCall] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    dispatched_turns: set[int] = field(default_factory=set)
    results: dict[str, list] = field(default_factory=dict)  # key -> results read so far
    real_results: dict[str, object] = field(default_factory=dict)  # key -> data of a first real result this run read

    def read(self, event) -> None:
        """One event (anything with seq, type, time, received_at, data, turn_seq, step_seq)."""
        kind = event.type
        if kind == "assistant_message":
            for call in log_events.tool_calls_of(event.data):
                if (cid := log_events.call_id(call)) is not None:
                    self._sight(cid, call, event)
                    self._offer_key(call_key(cid), log_receipts.TOOL_CALLS_ENTRY, call)
        elif kind == "tool_call" and (cid := log_events.call_id(event.data)) is not None:
            self._adopt(call_key(cid))
            if event.turn_seq is not None and event.turn_seq not in self.dispatched_turns:
                # Once per turn: rows sighted after this read it from dispatched_turns (_sight).
                self.dispatched_turns.add(event.turn_seq)
                for key, row in self.rows.items():
                    if row.turn_seq == event.turn_seq and not row.turn_dispatched:
                        row.turn_dispatched = True
                        self.changed.add(key)
            self._sight(cid, event.data, event)
            if (row := self.rows.get(call_key(cid))) is not None and not row.dispatched:
                row.dispatched = True
                self.changed.add(call_key(cid))
            self._offer_key(call_key(cid), log_receipts.TOOL_CALL, event.data)
        elif kind == "tool_result" and (cid := log_events.call_id(event.data)) is not None:
            key = call_key(cid)
            self._adopt(key)
            self.results.setdefault(key, []).append(event)
            if (row := self.rows.get(key)) is not None:
                self._add_result(key, row, event)
                self.changed.add(key)
                self._offer_key(key, log_receipts.TOOL_RESULT, event.data)
        elif kind == "turn_end" and event.turn_seq is not None and self._may_hold("turn_seq", event.turn_seq):
            for key, row in self.rows.items():
                if row.turn_seq == event.turn_seq and row.turn_open:
                    row.turn_open = False
                    self.changed.add(key)
        elif kind == "step_end" and event.step_seq is not None and self._may_hold("step_seq", event.step_seq):
            for key, row in self.rows.items():
                if row.step_seq == event.step_seq and not row.step_closed:
                    row.step_closed = True
                    self.changed.add(key)

    def _adopt(self, key: str) -> None:
        """An inherited call an event of the fork's own changes: from now on the fork's own row."""
        if key not in self.rows and (row := self.inherited.pop(key, None)) is not None:
            self.rows[key] = row
            self.created.append(row)
            self._held["turn_seq"].add(row.turn_seq)
            self._held["step_seq"].add(row.step_seq)

    def __post_init__(self) -> None:
        # The turns and steps the rows are in: a turn or step ends once, and most end holding no row of
        # the book; walking every row for each end cost most of a batch's reading.
        self._held = {"turn_seq": {row.turn_seq for row in self.rows.values()}, "step_seq": {row.step_seq for row in self.rows.values()}}

    def _may_hold(self, name: str, value: int) -> bool:
        return value in self._held[name]

    def _sight(self, cid: str, call: Mapping, event) -> None:
        key = call_key(cid)
        if key in self.rows or self.sighted_before(key):
            return
        name = log_calls.call_name(call)
        tool = log_events.tool_name(name)
        session = self.session
        row = _new_row(
            session_id=session.id, project_id=session.project_id, agent_name=session.agent_name, call_id=key,
            tool=tool[:TOOL_MAX] if tool is not None else None, arguments_preview=preview(log_calls.call_arguments(call)),
            seq=event.seq, time=event.time, sighted_at=event.received_at or event.time,
            turn_seq=event.turn_seq, step_seq=event.step_seq, turn_open=event.turn_seq is not None,
            dispatched=event.type == "tool_call",
            turn_dispatched=event.turn_seq is not None
            and (event.turn_seq in self.dispatched_turns or self.earlier_dispatch(event.turn_seq)),
        )
        self.rows[key] = row
        for result in [*self.earlier_results(key), *self.results.get(key, ())]:
            self._add_result(key, row, result)
            self._offer_key(key, log_receipts.TOOL_RESULT, result.data)
        self._held["turn_seq"].add(row.turn_seq)
        self._held["step_seq"].add(row.step_seq)
        self.created.append(row)

    def _add_result(self, key: str, row: LedgerCall, result) -> None:
        if add_result(row, result, self.patch_seqs):
            self.real_results[key] = result.data

    def _offer_key(self, key: str, kind: str, mapping: object) -> None:
        """The idempotency key `mapping` holds replaces the row's when read from a better place (log.receipts)."""
        if (row := self.rows.get(key)) is None:
            return
        for rank, text in log_receipts.key_sources(kind, mapping):
            held = None if row.idempotency_key is None else (row.idempotency_key_rank, row.idempotency_key)
            if log_receipts.better(held, (rank, text)):
                row.idempotency_key, row.idempotency_key_rank = text, rank
                self.changed.add(key)

    def settle_all(self) -> tuple[list[LedgerCall], list[LedgerCall]]:
        """(rows to insert, rows to update), each settled (and holding the receipt of a first real result read)."""
        for key, data in self.real_results.items():
            if (row := self.rows.get(key)) is not None and row.real_seq is not None:
                row.receipt = self.receipt_of(row.tool, data)
        created_keys = {row.call_id for row in self.created}
        for row in self.created:
            settle(row)
        updated = []
        for key in self.changed - created_keys:
            settle(self.rows[key])
            updated.append(self.rows[key])
        return self.created, updated


_ROW_FIELDS = [f.attname for f in LedgerCall._meta.concrete_fields]
_ROW_DEFAULTS = {f.attname: f.get_default() for f in LedgerCall._meta.concrete_fields}  # all scalars


def _new_row(**values) -> LedgerCall:
    """`LedgerCall(**values)` built from positional values, as the ORM builds the rows it reads:
    half the time of the keyword path, which was a tenth of a batch's ledger."""
    if unknown := values.keys() - _ROW_DEFAULTS.keys():
        raise TypeError(f"LedgerCall has no fields {sorted(unknown)}")
    values = _ROW_DEFAULTS | values
    return LedgerCall(*[values[name] for name in _ROW_FIELDS])


def add_result(row: LedgerCall, result, patch_seqs: Container[int]) -> bool:
    """A tool_result for the row's call, read after every earlier one (results come in seq order).

    True when it is the call's first real result (the one its receipt is read from)."""
    kind = ledger.result_kind(result, patch_seqs)
    if kind == ledger.REAL:
        if row.real_seq is None:
            row.real_seq, row.real_error = result.seq, ledger.is_error(result)
            return True
        return False
    if row.standin_seq is None:
        row.standin_seq = result.seq
    if kind == ledger.SYNTHETIC and row.synthetic_seq is None:
        row.synthetic_seq, row.synthetic_risk = result.seq, ledger.carried_risk(result)
    elif kind == ledger.PATCH and row.patch_seq is None:
        row.patch_seq = result.seq
    return False


# Each project's policies, read once for a whole write (policies_read_once); None outside one.
_read_in_write: ContextVar[dict | None] = ContextVar("policies_read_in_write", default=None)


@contextmanager
def policies_read_once():
    """Within the block, each project's policies are read once, however many sessions the write touches
    (an OTLP request stores hundreds: a read per session was a seventh of its ingest). For one transaction,
    in which no policy changes."""
    token = _read_in_write.set({})
    try:
        yield
    finally:
        _read_in_write.reset(token)


def receipt_reader(project_id: int | None) -> Callable[[str | None, object], str | None]:
    """(tool, result data) -> the receipt the tool's effective policy in the project points at. The
    policies are read once, when a first real result first asks (one run of events, one sweep batch)."""
    policies: list | None = None

    def receipt_of(tool: str | None, data: object) -> str | None:
        nonlocal policies
        if tool is None:
            return None
        if policies is None:
            read = _read_in_write.get()
            if read is None:
                policies = project_policies(project_id)
            elif (policies := read.get(project_id)) is None:
                policies = read[project_id] = project_policies(project_id)
        policy = log_policies.matching(tool, policies)
        return log_receipts.receipt(data, policy.receipt_pointer) if policy is not None else None

    return receipt_of
