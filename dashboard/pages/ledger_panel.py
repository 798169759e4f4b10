"""The ledger panel at the top of a session page: "did that side effect happen?" at a glance.

One row per call whose tool is classed external_effect or has no policy (the
switch, ?calls=all, shows every call), as GET /api/v1/sessions/{id}/calls states
them (selectors.session_ledger: the same rows, read from the call ledger), so the
panel, the cards and the API say the same word. Every call to check (an unknown
outcome, pending, superseded) is listed, however long the session, and comes
first; then the latest ROWS others, in order of first sighting, with a link to
all of them (the API). The page load and every live frame
render `sessions/_ledger.html` from `panel_context`, the same inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.template.loader import render_to_string

from dashboard.pages.blocks import SIDE_EFFECT_LABELS, card_anchor, cut_at_word
from dashboard.pages.notes import NoteRights
from sessions_app import selectors
from sessions_app.log import events as log_events
from sessions_app.log import ledger
from sessions_app.log.recovery import TOOL_OUTCOME_UNKNOWN
from sessions_app.models import Session


ALL = "all"  # the switch's value: ?calls=all
ARGUMENTS_CHARS = 80  # key arguments, shortened: the card has them in full
# A page's cost follows what it shows (docs/benchmarks.md, the session page of 100,000 events): besides every
# call to check, the latest ROWS others; GET /api/v1/sessions/{id}/calls lists them all.
ROWS = 50


@dataclass(frozen=True)
class LedgerRow:
    row: selectors.CallRow
    arguments: str  # shortened
    turn_number: object | None  # the `turn` its turn_start gave, None outside every turn

    @property
    def call(self) -> ledger.CallState:
        return self.row.call

    @property
    def anchor(self) -> str:
        return card_anchor(self.call.call_id)

    @property
    def side_effect_label(self) -> str:
        return SIDE_EFFECT_LABELS[self.row.side_effect]

    @property
    def check_first(self) -> bool:
        return self.row.side_effect == "external_effect" and self.call.state == TOOL_OUTCOME_UNKNOWN

    @property
    def to_check(self) -> bool:
        return self.call.state in selectors.STATES_TO_CHECK


@dataclass(frozen=True)
class Ledger:
    rows: list[LedgerRow]
    all_calls: bool
    complete: bool  # every call of the classes shown is here (else: those to check and the latest)


def wants_all(value: str | None) -> bool:
    return value == ALL


def ledger_of(session: Session, *, all_calls: bool) -> Ledger:
    found = selectors.session_ledger(session, all_classes=all_calls, latest=ROWS)
    shown = found.rows
    turns = {r.call.turn_seq for r in shown} - {None}
    numbers = {seq: data.get("turn") if isinstance(data, dict) else None for seq, data in selectors.turn_start_data(session, turns)} if turns else {}
    rows = [LedgerRow(r, short_arguments(r.call.arguments), numbers.get(r.call.turn_seq)) for r in shown]
    # stable: unknown outcomes of external effects, then the other calls to check, then the rest, each in order of first sighting
    rows.sort(key=lambda r: (not r.check_first, not r.to_check))
    return Ledger(rows=rows, all_calls=all_calls, complete=found.complete)


def short_arguments(arguments: object) -> str:
    """The arguments on one line, `key=value` for an object's keys, cut at a word past ARGUMENTS_CHARS."""
    if arguments is None:
        return ""
    if isinstance(arguments, dict):
        text = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False, default=str)}" for key, value in arguments.items())
    else:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= ARGUMENTS_CHARS else cut_at_word(text, ARGUMENTS_CHARS) + "…"


def panel_context(session: Session, *, all_calls: bool, tab: str, note_rights: NoteRights) -> dict:
    """What _ledger.html reads, for a page load and a live frame alike (the notes on the whole session with it)."""
    return {
        "session": session,
        "ledger": ledger_of(session, all_calls=all_calls),
        "session_notes": [note for note in selectors.session_notes(session) if note.seq is None],
        "tab": tab,
        "note_rights": note_rights,
    }


def panel_swap(session: Session, *, all_calls: bool, tab: str, note_rights: NoteRights) -> str:
    """The panel as an out-of-band swap for a live frame."""
    context = panel_context(session, all_calls=all_calls, tab=tab, note_rights=note_rights)
    return render_to_string("sessions/_ledger.html", {**context, "swap_oob": True}).strip()


def touched_by(events: list[log_events.Event]) -> bool:
    """Whether new events can change a row: a call sighted or answered, or a turn opened or closed (rules 5-7)."""
    return any(
        e.type in ("tool_call", "tool_result", "turn_start", "turn_end") or (e.type == "assistant_message" and log_events.tool_calls_of(e.data))
        for e in events
    )
