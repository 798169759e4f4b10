"""The ledger panel at the top of a session page: "did that side effect happen?" at a glance.

One row per call whose tool is classed external_effect or has no policy (the
switch, ?calls=all, shows every call), as GET /api/v1/sessions/{id}/calls states
them (selectors.session_ledger: the same rows, read from the call ledger), so the
panel, the cards and the API say the same word. The calls to check (an unknown
outcome, pending, superseded) come first, however old: up to CHECK_ROWS of them,
unknown outcomes of external effects (and of tools without a policy) first; then the latest ROWS others, in
order of first sighting, with a link to all of them (the API).

The page load renders `sessions/_ledger.html` from `panel_context`. A live frame
sends the panel's head, the rows of the calls its events name, and the panel's
order: each row's id and version (a digest of what it shows). The page's script
puts the rows in that order, drops those no longer listed, and fetches
(`rows_asked`) any it lacks or holds in another version: a row whose state
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
from sessions_app.log.policies import LOUD_CLASSES
from sessions_app.log.recovery import TOOL_OUTCOME_UNKNOWN
from sessions_app.models import LedgerCall, Session

ALL = "all"  # the switch's value: ?calls=all
ARGUMENTS_CHARS = 80  # key arguments, shortened: the card has them in full
# A page's cost follows what it shows (docs/performance.md, the session page of 100,000 events): up to CHECK_ROWS
# calls to check and the latest ROWS others; GET /api/v1/sessions/{id}/calls lists them all.
ROWS = 50
CHECK_ROWS = 50


def row_id(key: str) -> str:
    """The DOM id of a call's row, from its ledger key (a digest of an id too long for the column)."""
    return "ledger-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class LedgerRow:
    row: selectors.CallRow
    arguments: str  # shortened
    turn_number: object | None  # the `turn` its turn_start gave, None outside every turn
    dom_id: str
    version: str

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
        return self.row.side_effect in LOUD_CLASSES and self.call.state == TOOL_OUTCOME_UNKNOWN and self.row.verdict is None

    @property
    def to_check(self) -> bool:
        return self.call.state in selectors.STATES_TO_CHECK


@dataclass(frozen=True)
class Ledger:
    rows: list[LedgerRow]  # those rendered: all of `order`'s for a page load, those a frame sends for one
    all_calls: bool
    complete: bool  # every call of the classes shown is here (else: some of those to check and the latest)
    to_check: int  # the calls to check, shown or not
    order: list[tuple[str, str]]  # every row's (dom id, version), in the panel's order
    checks_shown: int

    @property
    def order_text(self) -> str:
        """The rows' ids and versions, in order: what a live frame's script arranges the panel by."""
        return " ".join(f"{dom_id}:{version}" for dom_id, version in self.order)

    @property
    def count(self) -> int:
        return len(self.order)

    @property
    def checks_not_shown(self) -> int:
        return self.to_check - self.checks_shown


def wants_all(value: str | None) -> bool:
    return value == ALL


def ledger_of(session: Session, *, all_calls: bool, render: set[str] | None = None) -> Ledger:
    """The panel's rows in order, each with its version (read from the call ledger's columns and the notes), and
    rendered, the rows of the calls `render` names (stored keys; None: all of them)."""
    window = selectors.ledger_window(session, all_classes=all_calls, latest=ROWS, check=CHECK_ROWS)
    answers = selectors.answer_seqs(session, sorted(row.call_id for row in window.rows))
    notes_at = selectors.notes_by_seq(session)
    verdicts = selectors.current_verdicts(session) if any(row.verdict for row in window.rows) else {}

    def version(row) -> str:
        notes = [(n.pk, n.text, tuple(n.tags), n.author_name) for seq in dict.fromkeys([row.seq, *sorted(answers.get(row.call_id, ()))]) for n in notes_at.get(seq, ())]
        verdict = (v.pk, v.outcome, v.evidence, v.external_ref, v.by) if (v := verdicts.get(row.call_id)) is not None else None
        shown = (row.call_id, window.state(row), row.result_seq, window.side_effect(row), notes, verdict, row.idempotency_key, row.receipt)
        return hashlib.sha256(repr(shown).encode("utf-8", "surrogatepass")).hexdigest()[:12]

    def place(row) -> tuple:
        # The calls to check first (unknown outcomes of external effects first); a settled one (a verdict) after them.
        state, open_ = window.state(row), row.verdict is None
        loud = window.side_effect(row) in LOUD_CLASSES and state == TOOL_OUTCOME_UNKNOWN and open_
        return (not loud, not (state in selectors.STATES_TO_CHECK and open_), row.seq, row.call_id)

    ordered = sorted(window.rows, key=place)
    order = [(row_id(row.call_id), version(row)) for row in ordered]
    chosen = [row for row in ordered if render is None or row.call_id in render]
    prep = LedgerCall._meta.get_field("call_id").get_prep_value
    found = selectors.call_rows(session, chosen, window.status, all_calls, window.policies, answers=answers, notes_at=notes_at)
    call_rows = {prep(r.call.call_id): r for r in found}
    turns = {r.call.turn_seq for r in call_rows.values()} - {None}
    numbers = {seq: data.get("turn") if isinstance(data, dict) else None for seq, data in selectors.turn_start_data(session, turns)} if turns else {}
    versions = dict(order)
    rows = [
        LedgerRow(r, short_arguments(r.call.arguments), numbers.get(r.call.turn_seq), row_id(row.call_id), versions[row_id(row.call_id)])
        for row in chosen if (r := call_rows.get(row.call_id)) is not None
    ]  # fmt: skip
    checks_shown = sum(window.state(row) in selectors.STATES_TO_CHECK for row in window.rows)
    return Ledger(rows=rows, all_calls=all_calls, complete=window.complete, to_check=window.to_check, order=order, checks_shown=checks_shown)


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


def panel_context(session: Session, *, all_calls: bool, tab: str, note_rights: NoteRights, render: set[str] | None = None) -> dict:
    """What _ledger.html reads, for a page load and a live frame alike (the notes on the whole session with it)."""
    return {
        "session": session,
        "ledger": ledger_of(session, all_calls=all_calls, render=render),
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
    """A live frame's pieces of the panel: its head, the rows of `calls` (call ids) it shows, its order (the page fetches
    what else changed), and with `notes` the notes on the whole session."""
    prep = LedgerCall._meta.get_field("call_id").get_prep_value
    context = panel_context(session, all_calls=all_calls, tab=tab, note_rights=note_rights, render={prep(cid) for cid in calls})
    pieces = [render_to_string("sessions/_ledger.html#head", {**context, "swap_oob": True}).strip()]
    if context["ledger"].rows:
        pieces.append(rows_swap(context, context["ledger"].rows))
    pieces.append(render_to_string("sessions/_ledger.html#order", {**context, "swap_oob": True}).strip())
    if notes:
        pieces.append(render_to_string("sessions/_ledger.html#session-notes", {**context, "swap_oob": True}).strip())
    return pieces


def rows_swap(context: dict, rows: list[LedgerRow]) -> str:
    """`rows` appended to the panel's table (the page's script puts them in order, replacing those it held)."""
    html = "".join(render_to_string("sessions/_ledger.html#row", {**context, "entry": entry}).strip() for entry in rows)
    return f'<tbody hx-swap-oob="beforeend:#ledger-rows">{html}</tbody>'


def rows_asked(session: Session, *, all_calls: bool, tab: str, note_rights: NoteRights, ids: set[str]) -> str:
    """The rows the page asked for by id (those it lacks, or holds in another version). Not the order: the live frames
    alone send it, in the order of the changes (an answer may arrive after a later frame's order)."""
    window_keys = {row_id(row.call_id): row.call_id for row in selectors.ledger_window(session, all_classes=all_calls, latest=ROWS, check=CHECK_ROWS).rows}
    context = panel_context(session, all_calls=all_calls, tab=tab, note_rights=note_rights, render={window_keys[i] for i in ids if i in window_keys})
    rows = context["ledger"].rows
    return rows_swap(context, rows) if rows else ""


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
