"""The transcript of a session as people read it: blocks of turns, steps and tool cards.

A *block* is a top-level unit: a turn (its turn_start and every event placed
in it) or an event outside any turn. The page renders the latest blocks and
loads earlier ones on demand; a live frame re-renders exactly the blocks an
event touched. Every block is built from stored events plus indexed lookups
(results and dispatches by call id, compaction ranges), so the cost of a
page does not grow with the length of the log; those reads are
sessions_app.selectors.transcript's.

What a block is made of: dashboard.pages.blocks. The raw log
(dashboard.pages.raw_log) shadows rows by compactions as the transcript does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from dashboard.pages.blocks import (
    ROLE_OF,
    Block,
    BlockCall,
    Row,
    Step,
    ToolCard,
    Value,
)
from dashboard.pages.fork_spots import fork_spots
from sessions_app import selectors
from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import ledger, recovery
from sessions_app.log.events import Event
from sessions_app.models import Session
from sessions_app.models import open_turn_labels_of
from sessions_app.wording import json_text

# A turn and the user message before it are two blocks: a page opens on about six turns.
BLOCKS_PER_PAGE = 12


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
    first = block_starts[: blocks][-1]
    built = Builder(session).build(*selectors.placed_events_from(session, first, before=before))
    return Window(
        blocks=built,
        earlier_before=first if len(block_starts) > blocks else None,
        last_seq=session.event_count - 1,
    )


def blocks_touched(session: Session, events: list[Event]) -> list[Block]:
    """The whole blocks that new `events` changed, re-read from storage, in seq order.

    A tool_result also touches the block where its call was made, so a late
    result updates that card.
    """
    return Builder(session).build(*selectors.events_of_blocks_touched(session, events))


def open_turn_blocks(session: Session) -> list[Block]:
    """The blocks of the session's open turns, re-read from storage."""
    starts = selectors.turn_starts_at(session, session.turn_stack)
    return blocks_touched(session, starts) if starts else []


def shadowed_by(event: Event, replaces: list[tuple[int, int, int]]) -> int | None:
    """The latest summary whose range covers the event's position (session-log.md section 2)."""
    replaced = log_events.replace_range(event.data) if event.type in ROLE_OF else None
    position = replaced[0] if replaced else event.seq
    covering = [seq for seq, start, stop in replaces if seq > event.seq and start <= position <= stop]
    return max(covering) if covering else None


def block_key(seq: int, turn_seq: int | None) -> str:
    return f"turn-{turn_seq}" if turn_seq is not None else f"event-{seq}"


class Builder:
    """Groups events into blocks and pairs every call with its results."""

    def __init__(self, session: Session):
        self.session = session

    def build(self, events: list[Event], placement: dict[int, tuple[int | None, int | None]]) -> list[Block]:
        if not events:
            return []
        self.block_of = {e.seq: block_key(e.seq, placement[e.seq][0]) for e in events}
        self.placement = placement
        self.lookups(events)
        # The header's labels of the open turns, from their turn_starts when this read them all.
        starts = {e.seq: e.data for e in events if e.seq in self.session.turn_stack}
        if starts and len(starts) == len(self.session.turn_stack) and "open_turn_labels" not in vars(self.session):
            self.session.open_turn_labels = open_turn_labels_of(self.session.open_turns, starts)
        blocks: dict[str, Block] = {}
        steps: dict[int, Step] = {}
        hidden_by: dict[str, set[int | None]] = defaultdict(set)
        for event in events:
            turn_seq, step_seq = placement[event.seq]
            block = self.block_for(blocks, event, turn_seq)
            hidden_by[block.key].add(shadowed_by(event, self.replaces))
            if event.type != "turn_end" and not is_synthetic(event):
                block.last_real = event
            if event.type == "turn_start" and turn_seq == event.seq:
                block.turn_start = event
                block.open = event.seq in self.session.turn_stack
            elif event.type == "turn_end" and turn_seq is not None:
                block.turn_end = event
            elif event.type == "step_start":
                steps[event.seq] = Step(start=event, number=event.data.get("step"), end=None, rows=[])
                block.parts.append(steps[event.seq])
            elif event.type == "step_end" and step_seq in steps:
                steps[step_seq].end = event
            elif (row := self.row(event)) is not None:
                in_step = step_seq in steps and self.block_of[steps[step_seq].start.seq] == block.key
                (steps[step_seq].rows if in_step else block.parts).append(row)
                if row.summary_of and (home := self.block_of.get(row.summary_of[0])) in blocks:
                    blocks[home].summaries.append(row)
                    row.shown_in_place = True
        for key, summaries in hidden_by.items():
            if None not in summaries:
                blocks[key].compacted_by = max(summaries)
        for step in steps.values():
            step.interrupted = step.end is None and blocks[self.block_of[step.start.seq]].recovered
        spots = fork_spots(self.session, {e.seq: (e.type, placement[e.seq][0]) for e in events}, known=events)
        for event in events:
            blocks[self.block_of[event.seq]].fork_spots[event.seq] = spots[event.seq]
        return sorted(blocks.values(), key=lambda b: b.first_seq)

    def block_for(self, blocks: dict[str, Block], event: Event, turn_seq: int | None) -> Block:
        key = self.block_of[event.seq]
        if key not in blocks:
            first = turn_seq if turn_seq is not None else event.seq
            blocks[key] = Block(key=key, first_seq=first, inherited=first < self.session.seed_length)
        return blocks[key]

    def lookups(self, events: list[Event]) -> None:
        """Everything outside the window that the window's rows need, by index."""
        session = self.session
        named = {log_events.call_id(call) for e in events if e.type == "assistant_message" for call in log_events.tool_calls_of(e.data)}
        named |= {log_events.call_id(e.data) for e in events if e.type in ("tool_result", "tool_call")}
        calls = selectors.call_lookups(session, named - {None})
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
        self.replaces = selectors.compactions(session)
        block_calls = [c for e in events if e.type == "assistant_message" for c in log_calls.content_calls(e.data)]
        sighted_names = [log_calls.call_name(d[0].data) for d in self.dispatches.values()]
        sighted_names += [log_calls.call_name(c) for e in events if e.type == "assistant_message" for c in log_events.tool_calls_of(e.data)]
        self.side_effects = selectors.side_effect_classes([*sighted_names, *(c["name"] for c in block_calls)])
        open_turn_in_view = any(e.type == "turn_start" and e.seq in session.turn_stack for e in events)
        plan = None
        if open_turn_in_view:
            tail = selectors.complete_tail(session, events)
            plan = selectors.recovery_plan(session, tail=tail, placement=self.placement, calls=calls)
        self.owed = {r.call.id: r.call for r in plan.repairs if r.call is not None} if plan else {}
        self.status = session.status
        # Which results dangling-call patches wrote: only storage knows (log.ledger's docstring).
        self.patch_seqs = selectors.patch_seqs(session) if self.results else set()
        self.notes_at = selectors.notes_by_seq(session)

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
            if card_seq is not None and self.block_of.get(card_seq) == self.block_of[event.seq]:
                return None  # the call's card, in this same block, shows it
            row.answers, row.card_seq = cid, card_seq
        row.notes = self.notes_at.get(event.seq, [])
        return row

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
            results=results,
            state=state,
            side_effect=self.side_effects.get(log_events.tool_name(log_calls.call_name(call)), "unknown"),
            started_at=started.received_at or started.time,
            here=frozenset(r.seq for r in results if self.block_of.get(r.seq) == self.block_of[event.seq]),
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
        seqs = [event.seq, *card.dispatch_seqs, *(r.seq for r in results)]  # as selectors.session_calls reads a call's notes
        card.notes = sorted((n for seq in dict.fromkeys(seqs) for n in self.notes_at.get(seq, ())), key=lambda n: (n.created_at, n.pk))
        return card


def is_synthetic(event: Event) -> bool:
    """Written by recovery: its repairs and its context message carry metadata.synthetic = true."""
    return recovery.is_synthetic(event.data)
