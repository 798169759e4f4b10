"""The session page's live frames: out-of-band swaps rendered with the page's own partials and inputs.

A frame for new events (transcript rows or raw rows, ledger rows, the header
and tab bar, the cursor), one for a change no event carries (the status), and
one for a note added, edited or deleted. Each takes what a reload of the page
takes (dashboard.pages.session, ledger_panel, notes), so a page kept
open reads as a fresh load of it.

A frame carries what changed, never a whole open turn: a new event is one
row appended where a reload shows it (its turn's page, its step), a result
re-renders its call's card, a step_end its step, and a page of a long turn
that leaves the shown tail becomes the stub a reload shows
(dashboard.pages.transcript's pages). Only a change that re-reads a whole
block (its turn closing, a summary compacting it, a new block) sends the
block, as a shell and then its parts one at a time. A frame is a list of such
pieces, packed into websocket messages of at most FRAME_BYTES (a piece larger
alone goes alone); the cursor is the last message's end, so a frame cut
short is sent again whole after a reconnect (turnlog.js makes appends idempotent).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.template.loader import render_to_string

from dashboard.pages import ledger as ledger_panel
from dashboard.pages import notes, raw_log, transcript
from dashboard.pages import session as session_page
from dashboard.pages.blocks import Block, Page, Row, Step
from sessions_app import selectors
from sessions_app.log import events as log_events
from sessions_app.log.events import Event
from sessions_app.models import Session

# A message's budget: a frame is split into messages of at most this many bytes (UTF-8).
FRAME_BYTES = 64 * 1024
DETAIL = "sessions/detail.html"


def pack(pieces: Iterable[str], *, last: str = "", limit: int = FRAME_BYTES) -> list[str]:
    """The pieces joined into messages of at most `limit` bytes, in order (a piece over the limit is a message
    of its own); `last` ends the last message."""
    messages: list[str] = []
    current: list[str] = []
    size = 0
    for piece in [*pieces, last]:
        if not piece:
            continue
        length = len(piece.encode())
        if current and size + length > limit:
            messages.append("".join(current))
            current, size = [], 0
        current.append(piece)
        size += length
    if current:
        messages.append("".join(current))
    return messages


def appended(target: str, pieces: list[str], *, limit: int = FRAME_BYTES // 2) -> list[str]:
    """`pieces` appended into the element `#target`, as few swaps as fit `limit` bytes each."""
    out: list[str] = []
    group: list[str] = []
    size = 0
    for piece in pieces:
        if group and size + len(piece.encode()) > limit:
            out.append(f'<div hx-swap-oob="beforeend:#{target}">{"".join(group)}</div>')
            group, size = [], 0
        group.append(piece)
        size += len(piece.encode())
    if group:
        out.append(f'<div hx-swap-oob="beforeend:#{target}">{"".join(group)}</div>')
    return out


class Renderer:
    """The page's partials, each rendered with the inputs a reload gives them."""

    def __init__(self, context: dict):
        self.context = context

    def render(self, partial: str, **values) -> str:
        return render_to_string(f"{DETAIL}#{partial}", {**self.context, **values}).strip()

    def block(self, block: Block, *, new: bool) -> list[str]:
        """A whole block: its shell (new: appended to the transcript; else replacing it), then its pages and parts."""
        if not block.pages:  # an event outside every turn: small
            html = self.render("block", block=block, oob=None if new else "true")
            return [f'<div hx-swap-oob="beforeend:#blocks">{html}</div>' if new else html]
        shell = self.render("block", block=block, oob=None if new else "true", shell=True)
        pieces = [f'<div hx-swap-oob="beforeend:#blocks">{shell}</div>' if new else shell]
        pieces += appended(block.pages_id, [self.render("page", block=block, page=page, shell=True) for page in block.pages])
        for page in block.pages:
            if page.shown:
                pieces += self.parts(block, page.dom_id, page.parts)
        return pieces

    def parts(self, block: Block, target: str, parts: list[Row | Step]) -> list[str]:
        """Parts appended into `target`, a step as its container then its rows."""
        pieces: list[str] = []
        rows: list[str] = []
        for part in parts:
            if isinstance(part, Step):
                pieces += appended(target, rows)
                rows = []
                pieces += self.step(block, part, target=target)
            else:
                rows.append(self.render("row", block=block, row=part))
        return pieces + appended(target, rows)

    def step(self, block: Block, step: Step, *, target: str | None) -> list[str]:
        """A step's container (appended into `target`, or replacing itself), then its rows."""
        shell = self.render("step", block=block, step=step, shell=True, step_oob=target is None)
        pieces = appended(target, [shell]) if target is not None else [shell]
        return pieces + appended(step.rows_id, [self.render("row", block=block, row=row) for row in step.rows])

    def page_stub(self, block: Block, page: Page) -> str:
        return self.render("page", block=block, page=page, page_oob=True)


def new_events(session: Session, first: int, last: int) -> tuple[list[Event], selectors.Placement]:
    """The frame's events as stored: PostgreSQL's jsonb orders an object's keys its own way, and a row must read as a
    reload shows it."""
    return selectors.placed_events_in(session, [(first, last)])


def render_page_frame(
    session_id: str, wires: list[dict], shown_through: int, can_fork: bool, all_calls: bool = False, note_rights: notes.NoteRights | None = None
) -> list[str]:
    """The messages for new events: the rows they add, the cards, steps and heads they change, the pages of long
    turns that leave the shown tail, whole blocks only when new or re-read (closed, compacted); the ledger's rows."""
    session = session_page.page_session(session_id)
    events, placement = new_events(session, wires[0]["seq"], wires[-1]["seq"])
    context = {**session_page.header_context(session, can_fork=can_fork, tab=session_page.TRANSCRIPT), "note_rights": note_rights, "highlight": range(0)}
    out = Renderer(context)
    starts = {e.seq: (placement[e.seq][0] if placement[e.seq][0] is not None else e.seq) for e in events}
    new_blocks = {start for start in starts.values() if start > shown_through}
    closed = {placement[e.seq][0] for e in events if e.type == "turn_end" and placement[e.seq][0] is not None}
    whole = {start for start in starts.values() if start <= shown_through and start in closed} | compacted_blocks(session, events, shown_through)
    # A step outside every turn is a block of its own: its step_end, another, changes its head.
    whole |= loose_steps_ended(session, [placement[e.seq][1] for e in events if e.type == "step_end"], shown_through)
    pieces: list[str] = []
    rendered_cards: set[str] = set()
    if reread := sorted(whole | new_blocks):
        for block in transcript.read_blocks(session, reread):
            pieces += out.block(block, new=block.first_seq in new_blocks)
            rendered_cards |= {card.id for card in block.cards}
    answered = {cid for e in events if (cid := event_call_id(e)) is not None}
    for turn in sorted({start for start in starts.values() if start <= shown_through} - whole):
        turn_pieces, cards = turn_changes(out, session, turn, [e for e in events if starts[e.seq] == turn], shown_through, answered)
        pieces += turn_pieces
        rendered_cards |= cards
    pieces += card_changes(out, session, answered - rendered_cards, shown_through)
    if ledger_panel.touched_by(events):
        pieces += ledger_panel.panel_changes(
            session, all_calls=all_calls, tab=session_page.TRANSCRIPT, note_rights=note_rights, calls=ledger_panel.calls_named(events)
        )
    return pack(pieces, last=frame_end(context, wires))


def compacted_blocks(session: Session, events: list[Event], shown_through: int) -> set[int]:
    """The blocks shown before this frame whose events a new summary compacts: they are read again whole."""
    ranges = [r for e in events if e.type in log_events.SURFACE_TYPES and (r := log_events.replace_range(e.data))]
    if not ranges:
        return set()
    starts = set()
    for start, stop in ranges:
        if start <= min(stop, shown_through):
            starts |= selectors.block_starts_in(session, start, min(stop, shown_through))
    return {start for start in starts if start <= shown_through}


def loose_steps_ended(session: Session, steps: list[int | None], shown_through: int) -> set[int]:
    earlier = {s for s in steps if s is not None and s <= shown_through}
    return {s for s, turn in selectors.turns_of(session, earlier).items() if turn is None}


def turn_changes(
    out: Renderer, session: Session, turn: int, events: list[Event], shown_through: int, answered: set[str]
) -> tuple[list[str], set[str]]:
    """A turn shown before this frame got `events` (none closing it): its head, the rows they add where a reload shows
    them, steps they close re-rendered, pages past the shown tail stubbed, the cards of its calls `answered` by
    new events; and the ids of the cards rendered."""
    now = transcript.TurnLayout(turn, selectors.turn_last_seqs(session, [turn])[turn])
    before = transcript.TurnLayout(turn, selectors.last_seq_of_turn(session, turn, before=shown_through + 1))
    shown_before, shown_now = transcript.pages_shown(before.page_count), transcript.pages_shown(now.page_count)
    # Only the pages the events change: theirs, and those where the steps they close began.
    ended = {e.seq: e for e in events if e.type == "step_end"}
    changed = {transcript.page_number(turn, e.seq) for e in events}
    changed |= {transcript.page_number(turn, s) for s in selectors.steps_closed_by(session, list(ended))}
    # A dispatch, or a step closing, changes what recovery would say of the turn's unanswered calls (rules 1 to 3).
    owed_move = any(e.type in ("tool_call", "step_end") for e in events)
    if owed_move:
        changed = shown_now
    [block] = transcript.read(session, [turn], pages={turn: changed & shown_now}, layouts={turn: now}).blocks
    ended_steps = {step.start.seq for page in block.pages for step in page.parts if isinstance(step, Step) and step.end and step.end.seq in ended}
    # The head changes with a step started (its count); its badge with the status (the state frames), its end with the turn's.
    # A message's usage changes the turn's tokens and cost, and its step's.
    pieces = [out.render("turn-head", block=block, head_oob=True)] if any(e.type in ("step_start", "assistant_message") for e in events) else []
    pieces += [out.page_stub(block, block.pages[number]) for number in sorted(shown_before - shown_now)]
    cards: set[str] = set()
    new_pages = []
    for page in block.pages[before.page_count :]:
        new_pages.append(out.render("page", block=block, page=page, shell=True))
        if page.shown:
            pieces += appended(block.pages_id, new_pages)
            new_pages = []
            pieces += out.parts(block, page.dom_id, page.parts)
            cards |= {card.id for part in page.parts for row in rows_of(part) for card in row.cards}
    pieces += appended(block.pages_id, new_pages)
    for number in sorted(shown_before & shown_now):
        page = block.pages[number]
        loose_rows = []
        for part in page.parts:
            if isinstance(part, Step):
                pieces += appended(page.dom_id, loose_rows)
                loose_rows = []
                if part.first_seq > shown_through:
                    pieces += out.step(block, part, target=page.dom_id)
                elif part.start.seq in ended_steps:
                    pieces += out.step(block, part, target=None)
                else:
                    if any(r.event.seq > shown_through and r.event.type == "assistant_message" for r in part.rows):
                        pieces.append(out.render("step-head", block=block, step=part, step_head_oob=True))
                    pieces += appended(part.rows_id, [out.render("row", block=block, row=row) for row in part.rows if row.event.seq > shown_through])
                    continue
                cards |= {card.id for row in part.rows for card in row.cards}
            elif part.event.seq > shown_through:
                loose_rows.append(out.render("row", block=block, row=part))
                cards |= {card.id for card in part.cards}
        pieces += appended(page.dom_id, loose_rows)
    for page in block.pages:  # cards that stood before and whose calls new events answered, dispatched or made owed otherwise
        if page.shown and page.number in shown_before:
            earlier = [card for part in page.parts for row in rows_of(part) if row.event.seq <= shown_through for card in row.cards]
            for card in earlier:
                if (card.id in answered or (owed_move and card.owed)) and card.id not in cards:
                    pieces.append(out.render("tool-card", block=block, card=card, card_oob=True))
                    cards.add(card.id)
    return pieces, cards


def rows_of(part: Row | Step) -> list[Row]:
    return part.rows if isinstance(part, Step) else [part]


def card_changes(out: Renderer, session: Session, ids: set[str], shown_through: int) -> list[str]:
    """The cards of earlier calls (`ids`) that new results or dispatches answer, each re-rendered where a reload shows it."""
    return [out.render("tool-card", block=block, card=card, card_oob=True) for block, card in shown_cards(session, ids, shown_through)]


def shown_cards(session: Session, ids: set[str], shown_through: int) -> list[tuple[Block, object]]:
    """(block, card) of each call among `ids` whose card a reload shows and stood on the page before seq
    `shown_through` + 1: each read with its dispatches and results, on its page of its turn."""
    if not ids:
        return []
    calls = selectors.call_lookups(session, ids)
    sighted = {cid: min([*calls.sightings.get(cid, ()), *(e.seq for e in calls.events if e.type == "tool_call" and log_events.call_id(e.data) == cid)], default=None) for cid in ids}
    sighted = {cid: seq for cid, seq in sighted.items() if seq is not None and seq <= shown_through}
    if not sighted:
        return []
    turns = selectors.turns_of(session, sighted.values())
    layouts = {t: transcript.TurnLayout(t, last) for t, last in selectors.turn_last_seqs(session, {t for t in turns.values() if t is not None}).items()}
    found = []
    for cid, seq in sighted.items():
        turn = turns.get(seq)
        if turn is None:
            seqs = {seq}
        else:
            shown = transcript.pages_shown(layouts[turn].page_count)
            if transcript.page_number(turn, seq) not in shown:
                continue  # on a stub: it shows when opened
            # Its dispatches and results on the pages a reload reads: their anchors and fork controls, as a reload has them.
            answers = {e.seq for e in calls.events if log_events.call_id(e.data) == cid}
            seqs = {seq} | {s for s, t in selectors.turns_of(session, answers).items() if t == turn and transcript.page_number(turn, s) in shown}
        events, placement = selectors.placed_events_at(session, seqs)
        pages = {turn: transcript.pages_shown(layouts[turn].page_count)} if turn is not None else None
        for block in transcript.Builder(session).build(events, placement, layouts=layouts, pages=pages):
            found += [(block, card) for card in block.cards if card.id == cid]
    return found


def render_raw_frame(
    session_id: str,
    wires: list[dict],
    shown_through: int,
    first_shown: int,
    can_fork: bool,
    all_calls: bool = False,
    note_rights: notes.NoteRights | None = None,
) -> list[str]:
    """Out-of-band swaps for the raw log: new rows appended, rows whose badge or fork label
    the new events changed (a summary shadowing them, their turn closing) replaced."""
    session = session_page.page_session(session_id)
    # Read back rather than taken from the wires: PostgreSQL's jsonb orders an object's keys its own
    # way, and a row must read as a reload shows it.
    events = selectors.events_since(session, since=wires[0]["seq"], limit=len(wires))
    context = session_page.header_context(session, can_fork=can_fork, tab=session_page.RAW)
    new_rows, changed = raw_log.raw_frame_rows(session, events, first_shown=first_shown, shown_through=shown_through)
    pieces = [render_to_string(f"{DETAIL}#raw-row", {**context, "entry": row, "oob": True}).strip() for row in changed]
    pieces += appended("raw-rows", [render_to_string(f"{DETAIL}#raw-row", {**context, "entry": row}).strip() for row in new_rows])
    if ledger_panel.touched_by(events):
        pieces += ledger_panel.panel_changes(
            session, all_calls=all_calls, tab=session_page.RAW, note_rights=note_rights, calls=ledger_panel.calls_named(events)
        )
    return pack(pieces, last=frame_end(context, wires))


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
) -> list[str]:
    """The header after it changed with no event (a status turning stalled with silence alone, a fork
    of this session, a flag); `with_blocks`, also the cards that read by the status, and the heads of the
    open turns: unanswered calls read as pending while the session may still answer them, and as
    recovery classifies them (or as no_result) once it cannot."""
    session = session_page.page_session(session_id)
    context = {**session_page.header_context(session, can_fork=can_fork, tab=tab), "note_rights": note_rights, "highlight": range(0)}
    out = Renderer(context)
    pieces = []
    for block in session_page.status_blocks(session) if with_blocks else []:
        if block.open:
            pieces.append(out.render("turn-head", block=block, head_oob=True))
        pieces += [out.render("tool-card", block=block, card=card, card_oob=True) for card in block.cards if not card.results]
    if with_ledger:  # its rows read pending while the session may still answer them, as the cards do (the page fetches them)
        pieces += ledger_panel.panel_changes(session, all_calls=all_calls, tab=tab, note_rights=note_rights)
    return pack(pieces, last=session_page.header_swaps(context))


def render_notes_frame(
    session_id: str, seqs: list, transcript_tab: bool, can_fork: bool, all_calls: bool, note_rights: notes.NoteRights | None
) -> list[str]:
    """After a note or a verdict changed: the rows and cards holding the events it is pinned to (a result's note shows on
    its call's card), the ledger panel's head, order (the page fetches the rows whose notes or verdict changed) and notes
    on the whole session, and the header."""
    session = session_page.page_session(session_id)
    tab = session_page.TRANSCRIPT if transcript_tab else session_page.RAW
    context = {**session_page.header_context(session, can_fork=can_fork, tab=tab), "note_rights": note_rights, "highlight": range(0)}
    out = Renderer(context)
    pieces = []
    pinned = [seq for seq in seqs if isinstance(seq, int) and not isinstance(seq, bool)]
    if transcript_tab and pinned:
        pieces += pinned_places(out, session, pinned)
    pieces += ledger_panel.panel_changes(session, all_calls=all_calls, tab=tab, note_rights=note_rights, notes=True)
    # A verdict (published as a change of the call's place) may settle the session's last unknown call: the header says so.
    return pack(pieces, last=session_page.header_swaps(context))


def pinned_places(out: Renderer, session: Session, seqs: list[int]) -> list[str]:
    """The rows of events at `seqs`, or the cards that show them (a call's sighting, dispatch or result)."""
    events, placement = selectors.placed_events_at(session, seqs)
    ids = {cid for e in events if (cid := event_call_id(e)) is not None}
    cards = {card.id: (block, card) for block, card in shown_cards(session, ids, session.event_count)}
    pieces = [out.render("tool-card", block=block, card=card, card_oob=True) for block, card in cards.values()]
    # A result or dispatch in another block than its call's card is a row there too (a row the card shows is not built).
    plain = [e for e in events if event_call_id(e) not in cards or cards[event_call_id(e)][1].sighted_seq != e.seq]
    if plain:
        plain_placement = {e.seq: placement[e.seq] for e in plain}
        turns = {t for t, _ in plain_placement.values() if t is not None}
        layouts = {t: transcript.TurnLayout(t, last) for t, last in selectors.turn_last_seqs(session, turns).items()}
        pages = {t: transcript.pages_shown(layouts[t].page_count) for t in turns}
        for block in transcript.Builder(session).build(plain, plain_placement, layouts=layouts, pages=pages):
            for page in [None, *block.pages]:
                if page is not None and not page.shown:
                    continue  # on a stub: it shows when opened
                for row in block.rows if page is None else [r for part in page.parts for r in rows_of(part)]:
                    if row.event.seq in seqs and (page is not None or not block.pages):
                        pieces.append(out.render("row", block=block, row=row, row_oob=True))
    return pieces


def event_call_id(event: Event) -> str | None:
    if event.type in ("tool_result", "tool_call"):
        return log_events.call_id(event.data)
    return None
