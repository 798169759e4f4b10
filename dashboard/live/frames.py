"""The session page's live frames: out-of-band swaps rendered with the page's own partials and inputs.

A frame for new events (transcript blocks or raw rows, the ledger panel when they
can change a row, the header and tab bar, the cursor), one for a change no event
carries (the status), and one for a note added, edited or deleted. Each takes
what a reload of the page takes (dashboard.pages.session_page, ledger_panel,
notes), so a page kept open reads as a fresh load of it.
"""

from __future__ import annotations

from django.template.loader import render_to_string

from dashboard.pages import ledger_panel, notes, raw_log, session_page, transcript
from sessions_app import selectors
from sessions_app.log import events as log_events


def render_page_frame(
    session_id: str, wires: list[dict], shown_through: int, can_fork: bool, all_calls: bool = False, note_rights: notes.NoteRights | None = None
) -> str:
    """Out-of-band swaps for new events: each touched block replaced, or appended when new, and the
    ledger panel when they can change a row of it."""
    session = session_page.page_session(session_id)
    events = [log_events.event_from_wire(w) for w in wires]
    context = {**session_page.header_context(session, can_fork=can_fork, tab=session_page.TRANSCRIPT), "note_rights": note_rights}
    parts = []
    for block in transcript.blocks_touched(session, events):
        oob = "true" if block.first_seq <= shown_through else None
        html = render_to_string("sessions/detail.html#block", {**context, "block": block, "oob": oob}).strip()
        parts.append(html if oob else f'<div hx-swap-oob="beforeend:#blocks">{html}</div>')
    if ledger_panel.touched_by(events):
        parts.append(ledger_panel.panel_swap(session, all_calls=all_calls, tab=session_page.TRANSCRIPT, note_rights=note_rights))
    return "".join(parts) + frame_end(context, wires)


def render_raw_frame(
    session_id: str,
    wires: list[dict],
    shown_through: int,
    first_shown: int,
    can_fork: bool,
    all_calls: bool = False,
    note_rights: notes.NoteRights | None = None,
) -> str:
    """Out-of-band swaps for the raw log: new rows appended, rows whose badge or fork label
    the new events changed (a summary shadowing them, their turn closing) replaced."""
    session = session_page.page_session(session_id)
    # Read back rather than taken from the wires: PostgreSQL's jsonb orders an object's keys its own
    # way, and a row must read as a reload shows it.
    events = selectors.events_since(session, since=wires[0]["seq"], limit=len(wires))
    context = session_page.header_context(session, can_fork=can_fork, tab=session_page.RAW)
    new_rows, changed = raw_log.raw_frame_rows(session, events, first_shown=first_shown, shown_through=shown_through)
    parts = [render_to_string("sessions/detail.html#raw-row", {**context, "entry": row, "oob": True}).strip() for row in changed]
    rows = "".join(render_to_string("sessions/detail.html#raw-row", {**context, "entry": row}) for row in new_rows)
    parts.append(f'<div hx-swap-oob="beforeend:#raw-rows">{rows}</div>')
    if ledger_panel.touched_by(events):
        parts.append(ledger_panel.panel_swap(session, all_calls=all_calls, tab=session_page.RAW, note_rights=note_rights))
    return "".join(parts) + frame_end(context, wires)


def frame_end(context: dict, wires: list[dict]) -> str:
    """The header and tab bar, then the cursor: last, so a frame cut short is sent again after a reconnect."""
    cursor = f'<span id="live-cursor" data-last-seq="{wires[-1]["seq"]}" hidden hx-swap-oob="true"></span>'
    return session_page.header_swaps(context) + cursor


def render_state_frame(
    session_id: str,
    can_fork: bool,
    tab: str,
    with_blocks: bool,
    all_calls: bool = False,
    with_ledger: bool = False,
    note_rights: notes.NoteRights | None = None,
) -> str:
    """The header after it changed with no event (a status turning stalled with silence alone, a fork
    of this session, a flag); `with_blocks`, also the transcript's latest blocks and open turns: their
    unanswered calls read as pending while the session may still answer them, and as recovery
    classifies them (or as no_result) once it cannot."""
    session = session_page.page_session(session_id)
    context = {**session_page.header_context(session, can_fork=can_fork, tab=tab), "note_rights": note_rights}
    blocks = session_page.status_blocks(session) if with_blocks else []
    swaps = [render_to_string("sessions/detail.html#block", {**context, "block": block, "oob": "true"}).strip() for block in blocks]
    if with_ledger:  # its rows read pending while the session may still answer them, as the cards do
        swaps.append(ledger_panel.panel_swap(session, all_calls=all_calls, tab=tab, note_rights=note_rights))
    return "".join(swaps) + session_page.header_swaps(context)


def render_notes_frame(
    session_id: str, seqs: list, transcript_tab: bool, can_fork: bool, all_calls: bool, note_rights: notes.NoteRights | None
) -> str:
    """After a note changed: the blocks holding the events it is pinned to (a result's note shows on its call's card),
    and the ledger panel with the notes on the whole session."""
    session = session_page.page_session(session_id)
    tab = session_page.TRANSCRIPT if transcript_tab else session_page.RAW
    context = {**session_page.header_context(session, can_fork=can_fork, tab=tab), "note_rights": note_rights}
    parts = []
    pinned = [seq for seq in seqs if isinstance(seq, int) and not isinstance(seq, bool)]
    if transcript_tab and pinned:
        for block in transcript.blocks_touched(session, selectors.events_at(session, pinned)):
            parts.append(render_to_string("sessions/detail.html#block", {**context, "block": block, "oob": "true"}).strip())
    parts.append(ledger_panel.panel_swap(session, all_calls=all_calls, tab=tab, note_rights=note_rights))
    return "".join(parts)
