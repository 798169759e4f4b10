"""The transcript of a session as people read it: blocks of turns, steps and tool cards.

A *block* is a top-level unit: a turn (its turn_start and every event placed
in it) or an event outside any turn. The page renders the latest blocks and
loads earlier ones on demand. A turn is cut into *pages* of TURN_PAGE seqs
(page k holds the turn's events with seq in [turn_seq + k * TURN_PAGE, ...)):
a turn of up to three pages shows them all, a longer one its first page and
its last two, the others as stubs a reader opens one at a time. So a turn of
20,000 events costs a page load what a turn of 120 does, and the live side
(dashboard.live.frames) sends the rows that changed, never a whole turn.

Every block is built from stored events plus indexed lookups (results and
dispatches by call id, compaction ranges, the ledger's owed calls), so the
cost of a page follows what it shows, not the length of the log; those reads
are sessions_app.selectors.transcript's.

What a block is made of: dashboard.pages.blocks. The raw log
(dashboard.pages.raw_log) shadows rows by compactions as the transcript does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from dashboard.pages.blocks import (
    ROLE_OF,
    TURN_PAGE,  # noqa: F401  (callers read the layout of turns from here)
    Block,
    BlockCall,
    Page,
    Row,
    Step,
    ToolCard,
    TurnLayout,
    Value,
    page_number,
    pages_shown,
)
from dashboard.pages import step_usage
from dashboard.pages.fork_spots import fork_spots
from sessions_app import selectors
from sessions_app.lib.wording import json_text
from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import ledger, recovery
from sessions_app.log import receipts as log_receipts
from sessions_app.log.events import Event
from sessions_app.models import LedgerCall, Session, open_turn_labels_of

# A turn and the user message before it are two blocks: a page opens on about six turns.
BLOCKS_PER_PAGE = 12
prep_call_id = LedgerCall._meta.get_field("call_id").get_prep_value  # a stored call id (a long one is its digest)


@dataclass
class Window:
    blocks: list[Block]
    earlier_before: int | None  # pass as ?before= to load earlier blocks; None at the start
    last_seq: int  # the newest seq the page shows: live updates start after it


def latest_window(session: Session, *, before: int | None = None, blocks: int = BLOCKS_PER_PAGE) -> Window:
    """The newest `blocks` blocks (or those before seq `before`)."""
    block_starts = selectors.latest_block_starts(session, before=before, count=blocks + 1)
    if not block_starts:
        return Window(blocks=[], earlier_before=None, last_seq=session.event_count - 1)
    shown = block_starts[:blocks]
    return Window(
        blocks=read_blocks(session, shown),
        earlier_before=shown[-1] if len(block_starts) > blocks else None,
        last_seq=session.event_count - 1,
    )


@dataclass
class Reading:
    """What read_blocks read: the blocks, each turn's layout, and every event it holds (seq order)."""

    blocks: list[Block]
    layouts: dict[int, TurnLayout]
    events: list[Event]
    placement: selectors.Placement


def read_blocks(session: Session, firsts: list[int], *, pages: dict[int, set[int]] | None = None) -> list[Block]:
    """The blocks starting at seqs `firsts`, each turn with the pages a page load shows (or `pages`: turn -> numbers)."""
    return read(session, firsts, pages=pages).blocks


def read(
    session: Session, firsts: list[int], *, pages: dict[int, set[int]] | None = None, layouts: dict[int, TurnLayout] | None = None
) -> Reading:
    """The blocks starting at `firsts` (block starts: turn_starts of their own turn, or events outside every turn;
    with `layouts`, turns laid out so), reading of each turn only its pages shown (or those `pages` names: turn ->
    numbers) and its turn_start."""
    if layouts is not None:
        loose: set[int] = set()
    else:
        starts = selectors.block_start_columns(session, set(firsts))
        firsts = [seq for seq, (type_, turn_seq) in starts.items() if type_ == "turn_start" and turn_seq == seq]
        loose = {seq for seq, (_, turn_seq) in starts.items() if turn_seq is None}
        layouts = {turn: TurnLayout(turn, last) for turn, last in selectors.turn_last_seqs(session, firsts).items()}
    ranges = [(seq, seq) for seq in [*loose, *layouts]]
    for turn, layout in layouts.items():
        for number in sorted(pages[turn] if pages and turn in pages else pages_shown(layout.page_count)):
            first, last = layout.page_range(number)
            ranges.append((first, min(last, layout.last_seq)))
    events, placement = selectors.placed_events_in(session, ranges)
    kept = [e for e in events if (e.seq in loose and placement[e.seq][0] is None) or placement[e.seq][0] in layouts]
    placement = {e.seq: placement[e.seq] for e in kept}
    blocks = Builder(session).build(kept, placement, layouts=layouts, pages=pages)
    return Reading(blocks, layouts, kept, placement)


def shadowed_by(event: Event, replaces: list[tuple[int, int, int]]) -> int | None:
    """The latest summary whose range covers the event's position (session-log.md section 2)."""
    replaced = log_events.replace_range(event.data) if event.type in ROLE_OF else None
    position = replaced[0] if replaced else event.seq
    covering = [seq for seq, start, stop in replaces if seq > event.seq and start <= position <= stop]
    return max(covering) if covering else None


def seqs_covered(first: int, last: int, replaces: list[tuple[int, int, int]]) -> bool:
    """Whether every seq from `first` to `last` is covered by a later summary (a page not read: its events' positions
    are their seqs, but for a summary among them, whose own range starts no later)."""
    position = first
    while position <= last:
        reach = [stop for seq, start, stop in replaces if seq > position and start <= position <= stop]
        if not reach:
            return False
        position = max(reach) + 1
    return True


def block_key(seq: int, turn_seq: int | None) -> str:
    return f"turn-{turn_seq}" if turn_seq is not None else f"event-{seq}"


@dataclass(frozen=True)
class Owed:
    """A call an open turn owes a result: what recovery would answer (log.recovery's risk table, as the ledger holds it)."""

    risk: str
    rule: int


class Builder:
    """Groups events into blocks, turns into pages and steps, and pairs every call with its results."""

    def __init__(self, session: Session):
        self.session = session

    def build(
        self,
        events: list[Event],
        placement: dict[int, tuple[int | None, int | None]],
        *,
        layouts: dict[int, TurnLayout] | None = None,
        pages: dict[int, set[int]] | None = None,
    ) -> list[Block]:
        if not events:
            return []
        layouts = dict(layouts or {})
        for event in events:  # a turn read whole (a test's, the recovery page's) lays itself out
            turn_seq = placement[event.seq][0]
            if turn_seq is not None and turn_seq not in layouts:
                layouts[turn_seq] = TurnLayout(turn_seq, max(e.seq for e in events if placement[e.seq][0] == turn_seq))
        self.layouts = layouts
        self.block_of = {e.seq: block_key(e.seq, placement[e.seq][0]) for e in events}
        self.placement = placement
        self.lookups(events)
        # The header's labels of the open turns, from their turn_starts when this read them all.
        starts = {e.seq: e.data for e in events if e.seq in self.session.turn_stack}
        if starts and len(starts) == len(self.session.turn_stack) and "open_turn_labels" not in vars(self.session):
            self.session.open_turn_labels = open_turn_labels_of(self.session.open_turns, starts)
        step_starts = self.step_starts(events)
        blocks: dict[str, Block] = {}
        containers: dict[tuple[int, int], Step] = {}  # (step_seq, page number) -> its container there
        ends: dict[int, Event] = {}
        hidden_by: dict[str, set[int | None]] = defaultdict(set)
        for event in events:
            turn_seq, step_seq = placement[event.seq]
            block = self.block_for(blocks, event, turn_seq, pages)
            hidden_by[block.key].add(shadowed_by(event, self.replaces))
            if event.type != "turn_end" and not is_synthetic(event):
                block.last_real = event
            page = block.pages[page_number(turn_seq, event.seq)] if block.pages else None
            parts = page.parts if page is not None else block.parts
            if event.type == "turn_start" and turn_seq == event.seq:
                block.turn_start = event
                block.open = event.seq in self.session.turn_stack
            elif event.type == "turn_end" and turn_seq is not None:
                block.turn_end = event
            elif event.type == "step_start":
                step = Step(start=event, number=event.data.get("step"), end=None, rows=[])
                containers[(event.seq, page.number if page else -1)] = step
                parts.append(step)
            elif event.type == "step_end" and self.step_of(step_seq, step_starts, block):
                ends[step_seq] = event
                self.container(containers, parts, page, step_starts[step_seq]).end_here = True
            elif (row := self.row(event)) is not None:
                if self.step_of(step_seq, step_starts, block):
                    self.container(containers, parts, page, step_starts[step_seq]).rows.append(row)
                else:
                    parts.append(row)
                if row.summary_of and (home := self.block_of.get(row.summary_of[0])) in blocks:
                    blocks[home].summaries.append(row)
                    row.shown_in_place = True
        ends |= selectors.step_ends(self.session, {s for s, _ in containers} - ends.keys() - set(self.session.step_stack))
        for key, summaries in hidden_by.items():
            block = blocks[key]
            unread = [page for page in block.pages if not page.shown]
            if None not in summaries and all(seqs_covered(p.first_seq, p.last_seq, self.replaces) for p in unread):
                block.compacted_by = max(summaries)
        for (step_seq, _), step in containers.items():
            step.end = ends.get(step_seq)
            step.interrupted = step.end is None and blocks[block_key(step.start.seq, placement[step.start.seq][0])].recovered
        for block in blocks.values():
            self.count_steps(block, events)
            if block.recovered and block.pages and not all(page.shown for page in block.pages):
                block.last_real = self.last_real_event(block)
        spots = fork_spots(self.session, {e.seq: (e.type, placement[e.seq][0]) for e in events}, known=events)
        for event in events:
            blocks[self.block_of[event.seq]].fork_spots[event.seq] = spots[event.seq]
        step_usage.bill_blocks(self.session, blocks.values())
        return sorted(blocks.values(), key=lambda b: b.first_seq)

    def block_for(self, blocks: dict[str, Block], event: Event, turn_seq: int | None, pages: dict[int, set[int]] | None) -> Block:
        key = self.block_of[event.seq]
        if key not in blocks:
            first = turn_seq if turn_seq is not None else event.seq
            block = blocks[key] = Block(key=key, first_seq=first, inherited=first < self.session.seed_length)
            if turn_seq is not None:
                layout = self.layouts[turn_seq]
                shown = pages[turn_seq] if pages and turn_seq in pages else pages_shown(layout.page_count)
                block.pages = [Page(turn_seq, n, *layout.page_range(n), shown=n in shown) for n in range(layout.page_count)]
        return blocks[key]

    def step_starts(self, events: list[Event]) -> dict[int, Event]:
        """The step_start of every step an event read belongs to: those read, and those of steps begun on an earlier page."""
        read = {e.seq: e for e in events if e.type == "step_start"}
        wanted = {self.placement[e.seq][1] for e in events} - read.keys() - {None}
        found = selectors.placed_events_at(self.session, wanted) if wanted else ([], {})
        for event in found[0]:
            if event.type == "step_start":
                read[event.seq] = event
                self.placement.setdefault(event.seq, found[1][event.seq])
        return read

    def step_of(self, step_seq: int | None, step_starts: dict[int, Event], block: Block) -> bool:
        """Whether the event's step is one of its own block's (steps are not reset at turn boundaries)."""
        if step_seq is None or step_seq not in step_starts:
            return False
        return block_key(step_seq, self.placement[step_seq][0]) == block.key

    def container(self, containers: dict[tuple[int, int], Step], parts: list, page: Page | None, start: Event) -> Step:
        """The step's container on this page: where it started, or its continuation (made at its first event here)."""
        number = page.number if page else -1
        if (start.seq, number) not in containers:
            step = Step(start=start, number=start.data.get("step"), end=None, rows=[], continued_on=number)
            containers[(start.seq, number)] = step
            parts.append(step)
        return containers[(start.seq, number)]

    def count_steps(self, block: Block, events: list[Event]) -> None:
        if not block.turn_start:
            return
        if all(page.shown for page in block.pages):
            block.steps = sum(e.type == "step_start" and self.block_of[e.seq] == block.key for e in events)
        else:
            block.steps = lambda: selectors.steps_in_turn(self.session, block.first_seq)

    def last_real_event(self, block: Block) -> Event | None:
        """A recovered turn's last event before recovery's repairs, which may fill its last pages."""
        return selectors.last_event_of_turn(self.session, block.first_seq, lambda e: e.type != "turn_end" and not is_synthetic(e))

    def lookups(self, events: list[Event]) -> None:
        """Everything outside the window that the window's rows need, by index."""
        session = self.session
        named = {log_events.call_id(call) for e in events if e.type == "assistant_message" for call in log_events.tool_calls_of(e.data)}
        named |= {log_events.call_id(e.data) for e in events if e.type in ("tool_result", "tool_call")}
        named -= {None}
        calls = selectors.call_lookups(session, named)
        self.results: dict[str, list[Event]] = defaultdict(list)
        self.dispatches: dict[str, list[Event]] = defaultdict(list)
        for event in calls.events:
            target = self.results if event.type == "tool_result" else self.dispatches
            target[log_events.call_id(event.data)].append(event)
        # A call's card stands where it was first sighted (an assistant message or a tool_call event), as the
        # ledger's rows do; a result or a later sighting elsewhere points at it.
        self.sighted_at = {
            cid: min([*calls.sightings.get(cid, ()), *(d.seq for d in self.dispatches.get(cid, ()))]) for cid in calls.ids
            if calls.sightings.get(cid) or self.dispatches.get(cid)
        }  # fmt: skip
        # The blocks of the sightings, dispatches and results not read with the window (a card's page not shown).
        mentioned = {seq for seqs in calls.sightings.values() for seq in seqs} | {e.seq for e in calls.events}
        self.turn_at = selectors.turns_of(session, mentioned - self.block_of.keys())
        self.replaces = selectors.compactions(session)
        block_calls = [c for e in events if e.type == "assistant_message" for c in log_calls.content_calls(e.data)]
        sighted_names = [log_calls.call_name(d[0].data) for d in self.dispatches.values()]
        sighted_names += [log_calls.call_name(c) for e in events if e.type == "assistant_message" for c in log_events.tool_calls_of(e.data)]
        self.side_effects = selectors.side_effect_classes([*sighted_names, *(c["name"] for c in block_calls)], project_id=session.project_id)
        self.pointers = selectors.receipt_pointers(sighted_names, project_id=session.project_id)
        # What recovery would answer for the calls of open turns, as the call ledger holds it.
        owed = selectors.owed_calls(session, named) if session.turn_stack and named else {}
        self.owed = {cid: Owed(risk, rule) for cid, (risk, rule) in owed.items()}
        self.status = session.status
        # Which results dangling-call patches wrote: only storage knows (log.ledger's docstring).
        self.patch_seqs = selectors.patch_seqs(session) if self.results else set()
        self.notes_at = selectors.notes_by_seq(session)
        self.verdicts = selectors.verdicts_of_calls(session, {prep_call_id(cid) for cid in named}) if named else {}
        self.checks = selectors.session_checks(session, named)

    def row(self, event: Event) -> Row | None:
        data = event.data
        row = Row(event=event, inherited=event.seq < self.session.seed_length, shadowed_by=shadowed_by(event, self.replaces))
        if event.type in ROLE_OF:
            row.role = ROLE_OF[event.type]
            row.content = Value.of(data.get("content"))
            row.reasoning = Value.of(data.get("reasoning_content"))
            row.summary_of = log_events.replace_range(data)
        if event.type == "assistant_message":
            for call in log_events.tool_calls_of(data):
                if (cid := log_events.call_id(call)) is None:
                    continue
                if self.sighted_at.get(cid) == event.seq and all(card.id != cid for card in row.cards):
                    row.cards.append(self.card(event, call))
                elif all(card.id != cid for card in row.cards):
                    row.named_again.append((cid, self.sighted_at.get(cid)))
            row.block_calls = [self.block_call(call) for call in log_calls.content_calls(data)]
        elif event.type in ("tool_result", "tool_call"):
            cid = log_events.call_id(data)
            card_seq = self.sighted_at.get(cid)
            if event.type == "tool_call" and card_seq == event.seq:
                row.cards = [self.card(event, data)]  # a call known first (or only) from its dispatch
                return row
            if card_seq is not None and self.same_block(card_seq, event.seq):
                return None  # the call's card, in this same block, shows it
            row.answers, row.card_seq = cid, card_seq
        row.notes = self.notes_at.get(event.seq, [])
        return row

    def same_block(self, seq: int, other: int) -> bool:
        """Whether two events stand in one block, read or not: a call's card on a page not shown still shows its result."""
        return self.block_at(seq) == self.block_at(other)

    def block_at(self, seq: int) -> str:
        return self.block_of.get(seq) or block_key(seq, self.turn_at.get(seq))

    def block_call(self, call: dict) -> BlockCall:
        side_effect = self.side_effects.get(log_events.tool_name(call["name"]), "unknown")
        return BlockCall(call["kind"], call["id"], call["name"], Value.of(call["arguments"]), side_effect)

    def card(self, event: Event, call: dict) -> ToolCard:
        """The call's card at its first sighting `event`, in the state log.ledger gives it."""
        cid = log_events.call_id(call)
        results = self.results.get(cid, [])
        dispatches = self.dispatches.get(cid, [])
        owed = self.owed.get(cid)
        state, result_seq = ledger.decide(
            results,
            turn_seq=self.placement[event.seq][0],
            owed_risk=owed.risk if owed else None,
            patch_seqs=self.patch_seqs,
            running=self.status == selectors.RUNNING,
            active=self.status == selectors.ACTIVE,
        )
        # How long it has run goes by the server's clock where known: an agent's may be years off.
        started = dispatches[0] if dispatches else event
        card = ToolCard(
            id=cid,
            name=log_calls.call_name(call),
            arguments=Value.of(log_calls.call_arguments(call)),
            sighted_seq=event.seq,
            dispatch_seqs=[d.seq for d in dispatches],
            inferred=bool(dispatches) and all(recovery.is_inferred(d.data) for d in dispatches),
            results=results,
            state=state,
            side_effect=self.side_effects.get(log_events.tool_name(log_calls.call_name(call)), "unknown"),
            started_at=started.received_at or started.time,
            here=frozenset(e.seq for e in [*results, *dispatches] if self.same_block(event.seq, e.seq)),
        )
        by_seq = {r.seq: r for r in results}
        kind = {r.seq: ledger.result_kind(r, self.patch_seqs) for r in results}
        if state == ledger.SUPERSEDED:
            card.real = by_seq[result_seq]
            stand_in = next(r for r in results if kind[r.seq] != ledger.REAL)
            if kind[stand_in.seq] == ledger.SYNTHETIC:
                card.synthetic, card.risk = stand_in, ledger.carried_risk(stand_in)
            else:
                card.patch = stand_in
        elif result_seq is not None and kind[result_seq] == ledger.REAL:
            card.real = by_seq[result_seq]
        elif result_seq is not None and kind[result_seq] == ledger.SYNTHETIC:
            card.synthetic, card.risk = by_seq[result_seq], state
            said = (card.synthetic.data.get("metadata") or {}).get("risk")
            if said not in ledger.RISKS:  # read as an unknown outcome (the ledger's rule 3); what it said is shown
                card.stated_risk = json_text(said)
        elif result_seq is not None:
            card.patch = by_seq[result_seq]
        elif owed is not None:
            card.risk, card.rule, card.owed = owed.risk, owed.rule, True
        sighting = log_receipts.TOOL_CALL if event.type == "tool_call" else log_receipts.TOOL_CALLS_ENTRY
        places = [(sighting, call), *((log_receipts.TOOL_CALL, d.data) for d in dispatches), *((log_receipts.TOOL_RESULT, r.data) for r in results)]
        if (key := log_receipts.idempotency_key(places)) is not None:
            card.idempotency_key = key[1]
        if card.real is not None:
            card.receipt = log_receipts.receipt(card.real.data, self.pointers.get(log_events.tool_name(card.name), ""))
        seqs = [event.seq, *card.dispatch_seqs, *(r.seq for r in results)]  # as selectors.session_calls reads a call's notes
        card.notes = sorted((n for seq in dict.fromkeys(seqs) for n in self.notes_at.get(seq, ())), key=lambda n: (n.created_at, n.pk))
        card.verdicts = self.verdicts.get(prep_call_id(cid), [])
        card.checks = self.checks.for_call(cid, card.name)
        return card


def is_synthetic(event: Event) -> bool:
    """Written by recovery: its repairs and its context message carry metadata.synthetic = true."""
    return recovery.is_synthetic(event.data)


# Pages opened one at a time ------------------------------------------------


def turn_page(session: Session, turn: int, number: int) -> Block | None:
    """The turn at seq `turn` with page `number` shown too (besides what a page load shows); None when there is no such page."""
    layouts = selectors.turn_last_seqs(session, [turn])
    if turn not in layouts or not 0 <= number < TurnLayout(turn, layouts[turn]).page_count:
        return None
    blocks = read_blocks(session, [turn], pages={turn: pages_shown(TurnLayout(turn, layouts[turn]).page_count) | {number}})
    return blocks[0] if blocks and blocks[0].turn_start else None


def page_holding(session: Session, seq: int) -> tuple[int | None, int | None]:
    """(turn, page number) of the page whose rendering holds the anchor `#seq-N`: a result or a later dispatch is
    shown on its call's card when that stands in the same turn. (None, None) outside every turn."""
    turn = selectors.turns_of(session, {seq}).get(seq)
    if turn is None:
        return None, None
    anchor = selectors.card_seq(session, seq)
    if anchor is not None and selectors.turns_of(session, {anchor}).get(anchor) == turn:
        seq = anchor
    return turn, page_number(turn, seq)
