"""The ledger panel at the top of a session page: "did that side effect happen?" at a glance.

One row per call whose tool is classed external_effect or has no policy (the
switch, ?calls=all, shows every call), as GET /api/v1/sessions/{id}/calls states
them (selectors.session_ledger: the same rows, read from the call ledger), so the
panel, the cards and the API say the same word. The calls to check (an unknown
outcome, pending, superseded) come first, however old: up to CHECK_ROWS of them,
unknown outcomes of external effects first; then the latest ROWS others, in
order of first sighting, with a link to all of them (the API).

The page load renders `sessions/_ledger.html` from `panel_context`. A live frame
sends the panel's head, the rows of the calls its events name, and the panel's
order: each row's id and version (a digest of what it shows). The page's script
puts the rows in that order, drops those no longer listed, and fetches
(`ledger_rows`) any it lacks or holds in another version: a row whose state
follows the session's status, or one that a change elsewhere brought into the window.
"""

from __future__ import annotations

import hashlib
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
# A page's cost follows what it shows (docs/benchmarks.md, the session page of 100,000 events): up to CHECK_ROWS
# calls to check and the latest ROWS others; GET /api/v1/sessions/{id}/calls lists them all.
ROWS = 50
CHECK_ROWS = 50


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

    @property
    def dom_id(self) -> str:
        return "ledger-" + self.anchor

    @property
    def version(self) -> str:
        """A digest of everything the row shows: the page fetches a row whose version it does not hold."""
        notes = [(n.pk, n.text, tuple(n.tags), n.author_name) for n in self.row.notes]
        shown = (self.call.state, self.call.result_seq, self.call.name, self.arguments, self.turn_number, self.row.side_effect, str(self.row.time), notes)
        return hashlib.sha256(repr(shown).encode("utf-8", "surrogatepass")).hexdigest()[:12]


@dataclass(frozen=True)
class Ledger:
    rows: list[LedgerRow]
    all_calls: bool
    complete: bool  # every call of the classes shown is here (else: some of those to check and the latest)
    to_check: int  # the calls to check, shown or not

    @property
    def order(self) -> str:
        """The rows' ids and versions, in order: what a live frame's script arranges the panel by."""
        return " ".join(f"{row.dom_id}:{row.version}" for row in self.rows)

    @property
    def checks_not_shown(self) -> int:
        return self.to_check - sum(row.to_check for row in self.rows)


def wants_all(value: str | None) -> bool:
    return value == ALL


def ledger_of(session: Session, *, all_calls: bool) -> Ledger:
    found = selectors.session_ledger(session, all_classes=all_calls, latest=ROWS, check=CHECK_ROWS)
    shown = found.rows
    turns = {r.call.turn_seq for r in shown} - {None}
    numbers = {seq: data.get("turn") if isinstance(data, dict) else None for seq, data in selectors.turn_start_data(session, turns)} if turns else {}
    rows = [LedgerRow(r, short_arguments(r.call.arguments), numbers.get(r.call.turn_seq)) for r in shown]
    # stable: unknown outcomes of external effects, then the other calls to check, then the rest, each in order of first sighting
    rows.sort(key=lambda r: (not r.check_first, not r.to_check))
    return Ledger(rows=rows, all_calls=all_calls, complete=found.complete, to_check=found.to_check)


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
    """The whole panel as an out-of-band swap."""
    context = panel_context(session, all_calls=all_calls, tab=tab, note_rights=note_rights)
    return render_to_string("sessions/_ledger.html", {**context, "swap_oob": True}).strip()


def panel_changes(
    session: Session, *, all_calls: bool, tab: str, note_rights: NoteRights, calls: set[str] = frozenset(), notes: bool = False
) -> list[str]:
    """A live frame's pieces of the panel: its head, the rows of `calls` it shows, its order (the page fetches what
    else changed), and with `notes` the notes on the whole session."""
    context = panel_context(session, all_calls=all_calls, tab=tab, note_rights=note_rights)
    ledger = context["ledger"]
    pieces = [render_to_string("sessions/_ledger.html#head", {**context, "swap_oob": True}).strip()]
    rows = [entry for entry in ledger.rows if entry.call.call_id in calls]
    if rows:
        pieces.append(rows_swap(context, rows))
    pieces.append(render_to_string("sessions/_ledger.html#order", {**context, "swap_oob": True}).strip())
    if notes:
        pieces.append(render_to_string("sessions/_ledger.html#session-notes", {**context, "swap_oob": True}).strip())
    return pieces


def rows_swap(context: dict, rows: list[LedgerRow]) -> str:
    """`rows` appended to the panel's table (the page's script puts them in order, replacing those it held)."""
    html = "".join(render_to_string("sessions/_ledger.html#row", {**context, "entry": entry}).strip() for entry in rows)
    return f'<tbody hx-swap-oob="beforeend:#ledger-rows">{html}</tbody>'


def rows_asked(session: Session, *, all_calls: bool, tab: str, note_rights: NoteRights, ids: set[str]) -> str:
    """The rows the page asked for by id (those it lacks, or holds in another version), and the panel's order now."""
    context = panel_context(session, all_calls=all_calls, tab=tab, note_rights=note_rights)
    rows = [entry for entry in context["ledger"].rows if entry.dom_id in ids]
    order = render_to_string("sessions/_ledger.html#order", {**context, "swap_oob": True}).strip()
    return (rows_swap(context, rows) if rows else "") + order


def touched_by(events: list[log_events.Event]) -> bool:
    """Whether new events can change a row: a call sighted or answered, or a turn opened or closed (rules 5-7)."""
    return any(
        e.type in ("tool_call", "tool_result", "turn_start", "turn_end") or (e.type == "assistant_message" and log_events.tool_calls_of(e.data))
        for e in events
    )


def calls_named(events: list[log_events.Event]) -> set[str]:
    """The calls new events sight, dispatch or answer: their rows are sent with the frame."""
    named = {log_events.call_id(call) for e in events if e.type == "assistant_message" for call in log_events.tool_calls_of(e.data)}
    named |= {log_events.call_id(e.data) for e in events if e.type in ("tool_call", "tool_result")}
    return named - {None}
