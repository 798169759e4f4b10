"""The transcript of a session as people read it: blocks of turns, steps and tool cards.

A *block* is a top-level unit: a turn (its turn_start and every event placed
in it) or an event outside any turn. The page renders the latest blocks and
loads earlier ones on demand; a live frame re-renders exactly the blocks an
event touched. Every block is built from stored events plus indexed lookups
(results and dispatches by call id, compaction ranges), so the cost of a
page does not grow with the length of the log.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from sessions_app import selectors
from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import fork as log_fork
from sessions_app.log import recovery
from sessions_app.log import strategy as log_strategy
from sessions_app.log import values as log_values
from sessions_app.log.events import Event
from sessions_app.models import CallSighting
from sessions_app.models import Event as EventRow
from sessions_app.models import Session
from sessions_app.models import open_turn_labels_of
from sessions_app.wording import json_text

# A turn and the user message before it are two blocks: a page opens on about six turns.
BLOCKS_PER_PAGE = 12
# Longer text is cut on the server; the full value is one click away.
TRUNCATE_CHARS = 2000

# A call with no result is pending (IN_FLIGHT) while its session may still
# answer it: it reads "dispatched" (a tool_call exists) or "requested".
# Once its session has stalled it reads as the recovery plan classifies it,
# and a call nothing will answer (its turn closed) has NO_RESULT.
COMPLETED, ERROR, IN_FLIGHT, NO_RESULT = "completed", "error", "in_flight", "no_result"
NOT_STARTED, OUTCOME_UNKNOWN, SUPERSEDED = "not_started", "outcome_unknown", "superseded"
STATE_LABELS = {
    COMPLETED: "completed",
    ERROR: "error",
    NO_RESULT: "no result",
    NOT_STARTED: "not started",
    OUTCOME_UNKNOWN: "outcome unknown",
    SUPERSEDED: "superseded",
}
RISK_STATES = {recovery.TOOL_NOT_STARTED: NOT_STARTED, recovery.TOOL_OUTCOME_UNKNOWN: OUTCOME_UNKNOWN}
SIDE_EFFECT_LABELS = {
    "external_effect": "external effect",
    "idempotent": "idempotent",
    "read_only": "read-only",
    "unknown": "side effects unknown",
}
ROLE_OF = {"system_message": "system", "user_message": "user", "assistant_message": "assistant", "tool_result": "tool"}


@dataclass
class Value:
    """A piece of untrusted content prepared for display (always escaped by templates)."""

    text: str
    is_json: bool
    truncated: bool
    full_length: int

    @classmethod
    def of(cls, value: object) -> Value | None:
        if value is None:
            return None
        is_json = not isinstance(value, str) or looks_like_json(value)
        text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, default=str)
        return cls(text=cut_at_word(text, TRUNCATE_CHARS), is_json=is_json, truncated=len(text) > TRUNCATE_CHARS, full_length=len(text))


def cut_at_word(text: str, limit: int) -> str:
    """At most `limit` characters of text, ending at a word boundary: a cut word reads as another
    word. Only a single word longer than half the limit is cut inside itself."""
    if len(text) <= limit:
        return text
    if text[limit].isspace():
        return text[:limit].rstrip()
    head = text[:limit]
    last_space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    return head[:last_space].rstrip() if last_space > limit // 2 else head


def looks_like_json(text: str) -> bool:
    """Tool output that is JSON text reads better in a monospace block (shown as given).

    Read as the log reads JSON (log_values.loads): text nested past the reader's
    recursion limit, NaN or 1e400 is refused there with a ValueError, not a RecursionError.
    """
    stripped = text.strip()
    if not stripped[:1] in ("{", "[") or len(stripped) > 200_000:
        return False
    try:
        log_values.loads(stripped)
    except ValueError:
        return False
    return True


@dataclass
class ToolCard:
    id: str
    name: str | None
    arguments: Value | None
    sighted_seq: int
    dispatch_seqs: list[int]
    results: list[Event]  # every tool_result answering this id, in seq order
    state: str
    side_effect: str
    # For a synthetic result: its risk; for an owed call of an open turn: what recovery would say.
    risk: str | None = None
    rule: int | None = None
    synthetic: Event | None = None
    real: Event | None = None
    started_at: datetime | None = None
    owed: bool = False  # an open turn owes it a result: recovery would answer it

    @property
    def state_label(self) -> str:
        if self.state == IN_FLIGHT:
            return "dispatched" if self.dispatch_seqs else "requested"
        return STATE_LABELS[self.state]

    # The recovery page's words (sessions_app.log.recovery), never the card's own.
    @property
    def risk_headline(self) -> str | None:
        return recovery.RISK_HEADLINES.get(self.risk)

    @property
    def risk_detail(self) -> str | None:
        return recovery.RISK_DETAILS.get(self.risk)

    @property
    def rule_reason(self) -> str | None:
        return recovery.RULE_REASONS.get(self.rule)

    @property
    def side_effect_label(self) -> str:
        return SIDE_EFFECT_LABELS[self.side_effect]

    @property
    def result_value(self) -> Value | None:
        return Value.of(self.real.data.get("content")) if self.real else None

    @property
    def loud(self) -> bool:
        """An unknown outcome of a tool with external effects: check this first."""
        return self.side_effect == "external_effect" and self.risk == recovery.TOOL_OUTCOME_UNKNOWN and self.state != SUPERSEDED


@dataclass
class BlockCall:
    """A call written as a content block (log.calls.content_calls): shown with its tool's class,
    never paired with results (recovery does not track these shapes)."""

    kind: str  # "tool_use" or "function_call"
    id: str | None
    name: object
    arguments: Value | None
    side_effect: str

    @property
    def side_effect_label(self) -> str:
        return SIDE_EFFECT_LABELS[self.side_effect]

    @property
    def shape(self) -> str:
        return {log_calls.TOOL_USE: "Anthropic tool_use block", log_calls.FUNCTION_CALL: "OpenAI Responses function_call item"}[self.kind]


@dataclass
class Row:
    """One event as a transcript row: a message, a tool card's anchor, or a marker."""

    event: Event
    role: str | None = None
    content: Value | None = None
    reasoning: Value | None = None
    cards: list[ToolCard] = field(default_factory=list)
    block_calls: list[BlockCall] = field(default_factory=list)  # calls written as content blocks
    shadowed_by: int | None = None  # seq of the compaction summary hiding it
    summary_of: tuple[int, int] | None = None  # the range a compaction summary stands for
    # A summary shown in its place (in the block where its range begins) rather than here.
    shown_in_place: bool = False
    answers: str | None = None  # a tool result or dispatch shown apart from its card: the call id
    card_seq: int | None = None  # where that call's card is
    inherited: bool = False

    @property
    def kind(self) -> str:
        return "message" if self.role else self.event.type

    @property
    def shown_name(self) -> object:
        """The name beside the row's kind: a message's `name`, a dispatch's tool (in either call shape)."""
        data = self.event.data
        return log_calls.call_name(data) if self.event.type == "tool_call" else data.get("name")


@dataclass
class Step:
    start: Event
    number: object
    end: Event | None
    rows: list[Row]

    interrupted: bool = False  # never closed, in a turn that recovery closed

    @property
    def outcome(self) -> str | None:
        return self.end.data.get("outcome") if self.end else None

    @property
    def duration(self) -> float | None:
        return (self.end.time - self.start.time).total_seconds() if self.end else None


@dataclass
class Block:
    key: str  # DOM id: "turn-<seq>" or "event-<seq>"
    first_seq: int
    turn_start: Event | None = None
    turn_end: Event | None = None
    parts: list[Row | Step] = field(default_factory=list)
    open: bool = False
    inherited: bool = False
    # Compaction: the summary that hides every event of this block, and the
    # summaries whose range begins here (shown in their place, as the model sees them).
    compacted_by: int | None = None
    summaries: list[Row] = field(default_factory=list)
    last_real: Event | None = None  # the turn's last event other than its turn_end and recovery's repairs
    fork_spots: dict[int, ForkSpot] = field(default_factory=dict)  # by seq: may a fork end at that event

    @property
    def number(self) -> object:
        return self.turn_start.data.get("turn") if self.turn_start else None

    @property
    def reason(self) -> str | None:
        return self.turn_end.data.get("reason") if self.turn_end else None

    @property
    def recovered(self) -> bool:
        """Closed by recovery (only recovery writes reason interrupted, session-log.md section 3)."""
        return self.reason == "interrupted"

    @property
    def duration(self) -> float | None:
        """Start to end of a turn that closed by itself (a recovered one: see interrupted_after)."""
        if self.turn_start and self.turn_end and not self.recovered:
            return (self.turn_end.time - self.turn_start.time).total_seconds()
        return None

    @property
    def interrupted_after(self) -> float | None:
        """A recovered turn: from its start to its last real event, the time the agent was alive in it."""
        if self.turn_start and self.recovered:
            return ((self.last_real or self.turn_start).time - self.turn_start.time).total_seconds()
        return None

    @property
    def recovered_later(self) -> float | None:
        """A recovered turn: from its last real event to the recovery's turn_end."""
        if self.turn_start and self.recovered:
            return (self.turn_end.time - (self.last_real or self.turn_start).time).total_seconds()
        return None

    @property
    def step_count(self) -> int:
        return sum(isinstance(part, Step) for part in self.parts)

    @property
    def cards(self) -> list[ToolCard]:
        rows = [p for part in self.parts for p in (part.rows if isinstance(part, Step) else [part])]
        return [card for row in rows for card in row.cards]


@dataclass
class Window:
    blocks: list[Block]
    earlier_before: int | None  # pass as ?before= to load earlier blocks; None at the start
    last_seq: int  # the newest seq the page shows: live updates start after it


def latest_window(session: Session, *, before: int | None = None, blocks: int = BLOCKS_PER_PAGE) -> Window:
    """The newest `blocks` blocks (or those before seq `before`)."""
    block_starts = latest_block_starts(session, before=before, count=blocks + 1)
    if not block_starts:
        return Window(blocks=[], earlier_before=None, last_seq=session.event_count - 1)
    first = block_starts[: blocks][-1]
    window = EventRow.objects.filter(session=session, seq__gte=first)
    if before is not None:
        window = window.filter(seq__lt=before)
    built = Builder(session).build(*selectors.placed_log_events(window.order_by("seq")))
    return Window(
        blocks=built,
        earlier_before=first if len(block_starts) > blocks else None,
        last_seq=session.event_count - 1,
    )


def latest_block_starts(session: Session, *, before: int | None, count: int) -> list[int]:
    """Seqs of the last `count` block starts before `before`, newest first.

    Read backwards in growing seq ranges of the unique (session, seq) index,
    a few small columns at a time, so the cost follows the blocks shown, not
    the length of the log.
    """
    end = session.event_count if before is None else min(before, session.event_count)
    starts: list[int] = []
    span = 256
    while end > 0 and len(starts) < count:
        low = max(end - span, 0)
        rows = EventRow.objects.filter(session=session, seq__gte=low, seq__lt=end).order_by("-seq")
        starts += [seq for seq, type_, turn_seq in rows.values_list("seq", "type", "turn_seq") if turn_seq is None or (type_ == "turn_start" and turn_seq == seq)]
        end, span = low, span * 2
    return starts[:count]


def blocks_touched(session: Session, events: list[Event]) -> list[Block]:
    """The whole blocks that new `events` changed, re-read from storage, in seq order.

    A tool_result also touches the block where its call was made, so a late
    result updates that card.
    """
    seqs = [e.seq for e in events]
    placed = dict(EventRow.objects.filter(session=session, seq__in=seqs).values_list("seq", "turn_seq"))
    call_ids = {log_events.call_id(e.data) for e in events if e.type == "tool_result"} - {None}
    sighted = CallSighting.objects.filter(session=session, call_id__in=call_ids).values_list("seq", flat=True)
    for seq, turn_seq in EventRow.objects.filter(session=session, seq__in=list(sighted)).values_list("seq", "turn_seq"):
        placed[seq] = turn_seq
    for start, stop in {r for e in events if e.type in ROLE_OF and (r := log_events.replace_range(e.data))}:
        # A new summary changes the blocks of the range it compacts.
        placed.update(EventRow.objects.filter(session=session, seq__gte=start, seq__lte=stop).values_list("seq", "turn_seq"))
    turns = {t for t in placed.values() if t is not None}
    loose = {seq for seq, t in placed.items() if t is None}
    # Two index lookups (by turn, by seq), merged here: an OR would scan the log.
    # A turn_start is in its own turn (turn_seq = seq): only events outside any turn need a second lookup.
    in_turns, in_turns_placed = selectors.placed_log_events(EventRow.objects.filter(session=session, turn_seq__in=turns))
    own, own_placed = selectors.placed_log_events(EventRow.objects.filter(session=session, seq__in=loose)) if loose else ([], {})
    events = {e.seq: e for e in [*in_turns, *own]}
    return Builder(session).build(sorted(events.values(), key=lambda e: e.seq), {**in_turns_placed, **own_placed})


def open_turn_blocks(session: Session) -> list[Block]:
    """The blocks of the session's open turns, re-read from storage."""
    starts = selectors.to_log_events(EventRow.objects.filter(session=session, seq__in=session.turn_stack))
    return blocks_touched(session, starts) if starts else []


def compactions(session: Session) -> list[tuple[int, int, int]]:
    """(seq, start, stop) of every compaction summary of the session (indexed; few)."""
    rows = EventRow.objects.filter(session=session, replace_start__isnull=False)
    return list(rows.values_list("seq", "replace_start", "replace_stop"))


def shadowed_by(event: Event, replaces: list[tuple[int, int, int]]) -> int | None:
    """The latest summary whose range covers the event's position (session-log.md section 2)."""
    replaced = log_events.replace_range(event.data) if event.type in ROLE_OF else None
    position = replaced[0] if replaced else event.seq
    covering = [seq for seq, start, stop in replaces if seq > event.seq and start <= position <= stop]
    return max(covering) if covering else None


@dataclass(frozen=True)
class ForkSpot:
    """Whether a fork may end at an event: only outside every turn (session-log.md section 5)."""

    seq: int
    turn_seq: int | None = None  # the innermost turn still open after the event; None: a fork may end here
    turn_number: object = None
    closed_at: int | None = None  # the turn_end closing that turn; None: still open

    @property
    def allowed(self) -> bool:
        return self.turn_seq is None

    @property
    def reason(self) -> str:
        return log_fork.inside_turn_reason(self.seq, self.turn_seq, self.turn_number, self.closed_at) + "."


def fork_spots(session: Session, placed: dict[int, tuple[str, int | None]], *, known: list[Event] = ()) -> dict[int, ForkSpot]:
    """Where a fork may end, for events placed as {seq: (type, turn_seq)}.

    An event outside any turn is a boundary, and so is a turn_end closing an
    outermost turn; anything else is inside a turn, named with where it
    closes. Reads the structural columns of the turns concerned, not the log,
    and only for the turns whose start or end the `known` events (those of
    `placed` already read) do not settle: a live frame holds its whole turn.
    """
    inside = {seq: turn for seq, (type_, turn) in placed.items() if turn is not None and type_ != "turn_end"}
    closing = {seq: turn for seq, (type_, turn) in placed.items() if turn is not None and type_ == "turn_end"}
    enclosing = enclosing_turns(session, set(closing.values()))
    inside |= {seq: enclosing[turn] for seq, turn in closing.items() if turn in enclosing}
    turns = set(inside.values())
    known_starts = {e.seq: e.data for e in known if e.seq in turns}
    # An open turn has no turn_end yet; a closed one's is known when it was read.
    closed_at: dict[int, int] = {closing[e.seq]: e.seq for e in known if e.seq in closing}
    settled = {turn for turn in turns if turn in closed_at or turn in session.turn_stack}
    starts = known_starts.items()
    if unread := turns - known_starts.keys():
        starts = [*starts, *EventRow.objects.filter(session=session, seq__in=unread).values_list("seq", "data")]
    numbers = {seq: data.get("turn") for seq, data in starts if isinstance(data, dict)}
    if unsettled := turns - settled:
        closed_at |= dict(EventRow.objects.filter(session=session, type="turn_end", turn_seq__in=unsettled).values_list("turn_seq", "seq"))
    return {
        seq: ForkSpot(seq, inside[seq], numbers.get(inside[seq]), closed_at.get(inside[seq])) if seq in inside else ForkSpot(seq)
        for seq in placed
    }


def enclosing_turns(session: Session, turns: set[int], *, steps: int = 4) -> dict[int, int]:
    """For each turn opened at a seq in `turns`, the innermost turn it is nested in (absent: none).

    The stack before a turn is the stack after the event just before it: that
    event's own turn, unless it is a turn_end, after which the stack is the
    one before the turn it closed. So this walks back over closed turns, one
    indexed query a step; the few turns still undecided after `steps` steps
    are decided by the turn_ends after them instead.
    """
    nested: dict[int, int] = {}
    asking = {turn: turn for turn in turns}  # turn -> the turn_start whose predecessor decides it
    for _ in range(steps):
        if not asking:
            return nested
        rows = EventRow.objects.filter(session=session, seq__in={start - 1 for start in asking.values()})
        before = {seq: (type_, turn) for seq, type_, turn in rows.values_list("seq", "type", "turn_seq")}
        walking = {}
        for turn, start in asking.items():
            type_, outer = before.get(start - 1, ("", None))
            if type_ == "turn_end" and outer is not None:
                walking[turn] = outer
            elif outer is not None:
                nested[turn] = outer
        asking = walking
    if asking:
        later_ends = EventRow.objects.filter(session=session, type="turn_end", seq__gt=min(asking), turn_seq__lt=max(asking))
        spans = [*later_ends.values_list("turn_seq", "seq"), *((t, None) for t in session.turn_stack)]
        for turn in asking:
            opened = [start for start, end in spans if start < turn and (end is None or end > turn)]
            if opened:
                nested[turn] = max(opened)
    return nested


# The raw log ----------------------------------------------------------------

RAW_PAGE = 200
RAW_PREVIEW_CHARS = 120
RESHADOW_ROWS = 5000


@dataclass
class RawRow:
    event: Event
    data: Value
    shadowed_by: int | None
    fork: ForkSpot

    @property
    def preview(self) -> str:
        """The start of the data on one line, cut at a word."""
        cut = cut_at_word(self.data.text, RAW_PREVIEW_CHARS)
        return cut if len(cut) == len(self.data.text) else cut + "…"


@dataclass
class RawPage:
    rows: list[RawRow]
    first_seq: int  # of the page (its end when empty)
    earlier_before: int | None  # where the previous page ends; None at the start of the log
    live: bool  # the latest page follows new events


def raw_rows(session: Session, events: list[Event], replaces: list[tuple[int, int, int]]) -> list[RawRow]:
    """The rows of `events`, with their receive times from storage (a live frame's events come from the wire, which has none)."""
    seqs = {e.seq for e in events}
    in_range = EventRow.objects.filter(session=session, seq__gte=min(seqs, default=0), seq__lte=max(seqs, default=-1))
    stored = {seq: (t, turn, received) for seq, t, turn, received in in_range.values_list("seq", "type", "turn_seq", "received_at") if seq in seqs}
    spots = fork_spots(session, {seq: (t, turn) for seq, (t, turn, _) in stored.items()})
    return [
        RawRow(replace(e, received_at=stored[e.seq][2]), Value.of(e.data), shadowed_by(e, replaces), spots[e.seq])
        for e in events
    ]


def raw_page(session: Session, *, before: int | None = None) -> RawPage:
    """RAW_PAGE events ending before `before` (default: the latest ones, which follow the log live)."""
    end = session.event_count if before is None else max(0, min(before, session.event_count))
    start = max(end - RAW_PAGE, 0)
    rows = raw_rows(session, selectors.events_since(session, since=start, limit=end - start), compactions(session))
    return RawPage(rows, start, start if start > 0 else None, live=end == session.event_count)


def raw_frame_rows(session: Session, new_events: list[Event], *, first_shown: int, shown_through: int) -> tuple[list[RawRow], list[RawRow]]:
    """The rows of new_events, and the rows already on a raw page (seqs
    first_shown..shown_through) that a summary among new_events now shadows,
    or whose turn a turn_end among them closes (their fork label names it).

    Only the latest RESHADOW_ROWS rows are checked, whatever `first_shown` a
    client claims; older rows of a page left open for long keep their badge
    until it is reloaded.
    """
    replaces = compactions(session)
    rows = raw_rows(session, new_events, replaces)
    new = {seq: start for seq, start, _ in replaces if seq >= new_events[0].seq}
    ends = [e.seq for e in new_events if e.type == "turn_end"]
    closed = set(EventRow.objects.filter(session=session, seq__in=ends).values_list("turn_seq", flat=True)) - {None} if ends else set()
    # A row's position is its seq, or a summary's own range start (never after its seq).
    since = max(first_shown, min([*new.values(), *closed], default=shown_through + 1), shown_through + 1 - RESHADOW_ROWS)
    if since > shown_through:
        return rows, []
    shown = selectors.events_since(session, since=since, limit=shown_through - since + 1)
    return rows, [row for row in raw_rows(session, shown, replaces) if row.shadowed_by in new or row.fork.turn_seq in closed]


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
        sighted = {
            cid: (event, call)
            for event in events
            if event.type == "assistant_message"
            for call in log_events.tool_calls_of(event.data)
            if (cid := log_events.call_id(call)) is not None
        }
        result_ids = {log_events.call_id(e.data) for e in events if e.type in ("tool_result", "tool_call")} - {None}
        ids = set(sighted) | result_ids
        calls = selectors.call_lookups(session, ids)
        self.results: dict[str, list[Event]] = defaultdict(list)
        self.dispatches: dict[str, list[Event]] = defaultdict(list)
        for event in calls.events:
            target = self.results if event.type == "tool_result" else self.dispatches
            target[log_events.call_id(event.data)].append(event)
        # Where each call was first sighted, so a result elsewhere can point at its card.
        self.sighted_at = {cid: seqs[0] for cid, seqs in calls.sightings.items()}
        self.sighted_in_window = {cid: event.seq for cid, (event, _) in sighted.items()}
        self.replaces = compactions(session)
        block_calls = [c for e in events if e.type == "assistant_message" for c in log_calls.content_calls(e.data)]
        self.side_effects = selectors.side_effect_classes(
            [*(log_calls.call_name(call) for _, call in sighted.values()), *(c["name"] for c in block_calls)]
        )
        open_turn_in_view = any(e.type == "turn_start" and e.seq in session.turn_stack for e in events)
        plan = None
        if open_turn_in_view:
            tail = selectors.complete_tail(session, events)
            plan = selectors.recovery_plan(session, tail=tail, placement=self.placement, calls=calls)
        self.owed = {r.call.id: r.call for r in plan.repairs if r.call is not None} if plan else {}
        self.status = session.status

    def row(self, event: Event) -> Row | None:
        data = event.data
        row = Row(event=event, inherited=event.seq < self.session.seed_length, shadowed_by=shadowed_by(event, self.replaces))
        if event.type in ROLE_OF:
            row.role = ROLE_OF[event.type]
            row.content = Value.of(data.get("content"))
            row.reasoning = Value.of(data.get("reasoning_content"))
            row.summary_of = log_events.replace_range(data)
        if event.type == "assistant_message":
            row.cards = [self.card(event, call) for call in log_events.tool_calls_of(data) if log_events.call_id(call) is not None]
            row.block_calls = [self.block_call(call) for call in log_calls.content_calls(data)]
        elif event.type in ("tool_result", "tool_call"):
            cid = log_events.call_id(data)
            card_seq = self.sighted_in_window.get(cid, self.sighted_at.get(cid))
            if card_seq is not None and self.block_of.get(card_seq) == self.block_of[event.seq]:
                return None  # the call's card, in this same block, shows it
            row.answers, row.card_seq = cid, card_seq
        return row

    def block_call(self, call: dict) -> BlockCall:
        side_effect = self.side_effects.get(log_events.tool_name(call["name"]), "unknown")
        return BlockCall(call["kind"], call["id"], call["name"], Value.of(call["arguments"]), side_effect)

    def card(self, event: Event, call: dict) -> ToolCard:
        cid = log_events.call_id(call)
        results = self.results.get(cid, [])
        synthetic = next((r for r in results if is_synthetic(r)), None)
        real = next((r for r in results if r is not synthetic), None)
        dispatches = self.dispatches.get(cid, [])
        # How long it has run goes by the server's clock where known: an agent's may be years off.
        started = dispatches[0] if dispatches else event
        card = ToolCard(
            id=cid,
            name=log_calls.call_name(call),
            arguments=Value.of(log_calls.call_arguments(call)),
            sighted_seq=event.seq,
            dispatch_seqs=[d.seq for d in dispatches],
            results=results,
            state=IN_FLIGHT,
            side_effect=self.side_effects.get(log_events.tool_name(log_calls.call_name(call)), "unknown"),
            synthetic=synthetic,
            real=real,
            started_at=started.received_at or started.time,
        )
        if synthetic is not None:
            card.risk = json_text((synthetic.data.get("metadata") or {}).get("risk") or "")
            if real is not None and real.seq > synthetic.seq:
                card.state = SUPERSEDED
            else:
                card.state = NOT_STARTED if card.risk == recovery.TOOL_NOT_STARTED else OUTCOME_UNKNOWN
        elif real is not None:
            metadata = real.data.get("metadata")  # any JSON value: the log keeps what the tool sent
            failed = isinstance(metadata, dict) and (metadata.get("is_error") or metadata.get("error"))
            card.state = ERROR if failed else COMPLETED
        elif cid in self.owed:
            owed = self.owed[cid]
            card.risk, card.rule, card.owed = owed.risk, owed.rule, True
            if self.status == selectors.STALLED:
                card.state = RISK_STATES[owed.risk]
        elif self.placement[event.seq][0] is not None or self.status not in (selectors.RUNNING, selectors.ACTIVE):
            card.state = NO_RESULT  # its turn closed without it, or the session went quiet: nothing will answer it
        return card


def is_synthetic(event: Event) -> bool:
    """Written by recovery: its repairs and its context message carry metadata.synthetic = true."""
    return recovery.is_synthetic(event.data)


SIDE_EFFECT_RANK = {"external_effect": 0, "unknown": 1, "idempotent": 2, "read_only": 3}


@dataclass
class OwedCallView:
    call: recovery.OwedCall
    side_effect: str
    arguments: Value | None
    reason: str
    evidence: list[tuple[int, str]]  # (seq, what it shows)

    @property
    def loud(self) -> bool:
        return self.side_effect == "external_effect" and self.call.risk == recovery.TOOL_OUTCOME_UNKNOWN

    @property
    def side_effect_label(self) -> str:
        return SIDE_EFFECT_LABELS[self.side_effect]

    @property
    def risk_headline(self) -> str:
        return recovery.RISK_HEADLINES[self.call.risk]


@dataclass
class OpenTurnView:
    turn_start: Event
    quiet_seconds: float  # since the session's last event
    may_be_running: bool  # that silence is shorter than the stall threshold

    @property
    def number(self) -> object:
        return self.turn_start.data.get("turn")

    @property
    def label(self) -> str:
        return recovery.open_turn_label(self.number, self.turn_start.seq)


def innermost_strategy(session: Session) -> log_strategy.TurnStrategy | None:
    """The session header's recommendation: the innermost open turn's strategy (stalled sessions only)."""
    if not session.turn_stack:
        return None
    turns = selectors.recovery_strategies(selectors.recovery_plan(session))
    return turns[0] if turns else None


@dataclass
class RecoveryPreview:
    open_turns: list[OpenTurnView]
    owed: list[OwedCallView]  # what a person must check first comes first
    appended: list[Row]  # the exact events confirming appends, as transcript rows
    strategies: list[log_strategy.TurnStrategy] = field(default_factory=list)  # innermost open turn first


def recovery_preview(session: Session, plan: recovery.Plan) -> RecoveryPreview:
    now = timezone.now()
    starts = {e.seq: e for e in selectors.to_log_events(EventRow.objects.filter(session=session, seq__in=plan.open_turns))}
    quiet = (now - session.last_activity_at).total_seconds()
    open_turns = [
        OpenTurnView(turn_start=starts[seq], quiet_seconds=quiet, may_be_running=quiet < settings.TURNLOG_STALL_SECONDS)
        for seq in plan.open_turns
    ]
    calls = [r.call for r in plan.repairs if r.call is not None]
    side_effects = selectors.side_effect_classes(c.name for c in calls)
    owed = [
        OwedCallView(
            call=call,
            side_effect=side_effects[log_events.tool_name(call.name)],
            arguments=Value.of(call.arguments),
            reason=recovery.RULE_REASONS[call.rule],
            evidence=evidence_of(call),
        )
        for call in calls
    ]
    owed.sort(key=lambda v: (v.call.risk != recovery.TOOL_OUTCOME_UNKNOWN, SIDE_EFFECT_RANK[v.side_effect]))
    appended = [
        Row(
            event=Event(session.event_count + i, repair.type, now, repair.data),
            role="tool" if repair.type == "tool_result" else None,
            content=Value.of(repair.data.get("content")),
            answers=repair.data.get("tool_call_id"),
            card_seq=repair.call.sighted_seq if repair.call else None,
        )
        for i, repair in enumerate(plan.repairs)
    ]
    return RecoveryPreview(open_turns=open_turns, owed=owed, appended=appended, strategies=selectors.recovery_strategies(plan))


def evidence_of(call: recovery.OwedCall) -> list[tuple[int, str]]:
    label = {
        1: "tool_call: this call was dispatched",
        2: "tool_call of another call in this turn",
        3: "step_end: the call's step closed",
    }.get(call.rule)
    return [(call.sighted_seq, "where the model asked for the call")] + [(seq, label) for seq in call.evidence]
