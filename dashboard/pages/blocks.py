"""What a transcript block is made of, as people read it: values, tool cards, rows, steps, blocks.

The view objects the transcript (dashboard.pages.transcript) builds and the
templates render, with the words they show (a card's state, a tool's
side-effect class, a message's role). Content from agents is untrusted: a
Value is always escaped by the templates.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from dashboard.pages.fork_spots import ForkSpot
from sessions_app.log import calls as log_calls
from sessions_app.log import ledger
from sessions_app.log import recovery
from sessions_app.log import values as log_values
from sessions_app.log.events import Event
from sessions_app.log.policies import LOUD_CLASSES

# Longer text is cut on the server; the full value is one click away.
TRUNCATE_CHARS = 2000

# A card's state is the ledger's word (sessions_app.log.ledger, api.md's rules): the card,
# the ledger panel, the fleet page and GET .../calls say the same one.
COMPLETED, ERROR, PENDING, NO_RESULT, SUPERSEDED = ledger.COMPLETED, ledger.ERROR, ledger.PENDING, ledger.NO_RESULT, ledger.SUPERSEDED
TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN = recovery.TOOL_NOT_STARTED, recovery.TOOL_OUTCOME_UNKNOWN
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


def card_anchor(call_id: str) -> str:
    """The DOM id of a call's card: a digest, as a call id may hold any character (the ledger links to it)."""
    return "call-" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass
class ToolCard:
    """A call at its first sighting, with the ledger's state and the results that decided it."""

    id: str
    name: str | None
    arguments: Value | None
    sighted_seq: int
    dispatch_seqs: list[int]
    results: list[Event]  # every tool_result answering this id, in seq order
    state: str  # one of ledger.STATES
    side_effect: str
    # For a synthetic result: its risk; for an owed call of an open turn: what recovery would say.
    risk: str | None = None
    rule: int | None = None
    real: Event | None = None  # the first real result (completed, error, superseded)
    synthetic: Event | None = None  # recovery's result that decided the state, or the one a real result superseded
    stated_risk: str | None = None  # what a synthetic result's metadata.risk says when it is none of the risks (JSON text)
    patch: Event | None = None  # the dangling-call patch's result that decided it, or the one superseded
    started_at: datetime | None = None
    owed: bool = False  # an open turn owes it a result: recovery would answer it
    notes: list = field(default_factory=list)  # pinned to its first sighting or its results, oldest first
    here: frozenset[int] = frozenset()  # seqs of its results and dispatches in the card's own block (anchored in the card)
    inferred: bool = False  # every dispatch is inferred from the model's request (log.recovery.is_inferred)
    verdicts: list = field(default_factory=list)  # every verdict of the call, oldest first (session-log.md 8.2)
    verdict_form: dict | None = None  # a refused verdict form posted from this card: what was typed, and the error
    checks: object = None  # selectors.CallChecks: its reconciler's check and attempts, when it has a reconciler
    idempotency_key: str | None = None  # as session-log.md section 1 reads it
    receipt: str | None = None  # what the tool policy's receipt pointer finds in the first real result

    @property
    def anchor(self) -> str:
        return card_anchor(self.id)

    @property
    def pending_detail(self) -> str:
        return ("dispatch inferred" if self.inferred else "dispatched") if self.dispatch_seqs else "requested"

    @property
    def shown_seqs(self) -> set[int]:
        return {r.seq for r in (self.real, self.synthetic, self.patch) if r is not None}

    @property
    def other_results(self) -> list[tuple[Event, bool]]:
        """The results the card does not show (a second stand-in, one after the real result), and
        whether each stands in the card's block (then its anchor is in the card)."""
        shown = self.shown_seqs
        return [(r, r.seq in self.here) for r in self.results if r.seq not in shown]

    # The recovery page's words (sessions_app.log.recovery), never the card's own.
    @property
    def risk_headline(self) -> str | None:
        return recovery.RISK_HEADLINES.get(self.risk)

    @property
    def risk_detail(self) -> str | None:
        return recovery.RISK_DETAILS.get(self.risk)

    @property
    def rule_reason(self) -> str | None:
        return recovery.rule_reason(self.rule, inferred=self.inferred) if self.rule is not None else None

    @property
    def side_effect_label(self) -> str:
        return SIDE_EFFECT_LABELS[self.side_effect]

    @property
    def result_value(self) -> Value | None:
        return Value.of(self.real.data.get("content")) if self.real else None

    @property
    def loud(self) -> bool:
        """An unknown outcome of a tool with external effects (or none known), not settled by a verdict: check this first."""
        return self.side_effect in LOUD_CLASSES and self.state == TOOL_OUTCOME_UNKNOWN and self.verdict is None

    @property
    def verdict(self):
        """The current verdict: a person's or a reconciler's finding (it never changes the state)."""
        return self.verdicts[-1] if self.verdicts and self.verdicts[-1].withdrawn_at is None else None


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
    named_again: list[tuple[str, int | None]] = field(default_factory=list)  # (call id, its card's seq): sighted earlier
    notes: list = field(default_factory=list)  # pinned to this event (a card shows its call's own)
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
    """A step's events on one page of its turn: the page where it started (its head), or a later page it
    continues on (`continued_on`: that page's number; its rows only)."""

    start: Event
    number: object
    end: Event | None  # the step_end, wherever it is (the head shows the outcome)
    rows: list[Row]

    interrupted: bool = False  # never closed, in a turn that recovery closed
    continued_on: int | None = None
    end_here: bool = False  # the step_end is on this page: its line closes this container
    bill: object = None  # pricing.Bill of its assistant messages here, with their models and request parameters
    models: list = field(default_factory=list)  # (model, provider or None)
    params: list = field(default_factory=list)  # (name, value) (sessions_app.log.request_params)

    @property
    def outcome(self) -> str | None:
        return self.end.data.get("outcome") if self.end else None

    @property
    def duration(self) -> float | None:
        return (self.end.time - self.start.time).total_seconds() if self.end else None

    @property
    def dom_id(self) -> str:
        if self.continued_on is None:
            return f"seq-{self.start.seq}"
        return f"step-{self.start.seq}-page-{self.continued_on}"

    @property
    def rows_id(self) -> str:
        return f"rows-{self.dom_id}"

    @property
    def first_seq(self) -> int:
        """Where this container begins on its page: the step_start, or a continuation's first row or step_end."""
        if self.continued_on is None:
            return self.start.seq
        return min([*(row.event.seq for row in self.rows), *([self.end.seq] if self.end_here and self.end else [])])


# Seqs per page of a turn: a page load shows at most three pages of a turn (120 events).
TURN_PAGE = 40


def page_number(turn_seq: int, seq: int) -> int:
    return (seq - turn_seq) // TURN_PAGE


def pages_shown(count: int) -> set[int]:
    """The pages of a turn of `count` pages that a page load shows: all of three or fewer, else the first and the last two."""
    return set(range(count)) if count <= 3 else {0, count - 2, count - 1}


@dataclass(frozen=True)
class TurnLayout:
    """Where a turn's events are: from its turn_start to `last_seq` (its turn_end, or its latest event)."""

    turn_seq: int
    last_seq: int

    @property
    def page_count(self) -> int:
        return page_number(self.turn_seq, self.last_seq) + 1

    def page_range(self, number: int) -> tuple[int, int]:
        first = self.turn_seq + number * TURN_PAGE
        return first, first + TURN_PAGE - 1


@dataclass
class Page:
    """TURN_PAGE seqs of one turn (dashboard.pages.transcript): shown with its parts, or as a stub to load."""

    turn_seq: int
    number: int
    first_seq: int  # of the page's seq range, not necessarily an event of the turn
    last_seq: int
    parts: list[Row | Step] = field(default_factory=list)
    shown: bool = True

    @property
    def dom_id(self) -> str:
        return f"page-{self.turn_seq}-{self.number}"


@dataclass
class Block:
    key: str  # DOM id: "turn-<seq>" or "event-<seq>"
    first_seq: int
    turn_start: Event | None = None
    turn_end: Event | None = None
    parts: list[Row | Step] = field(default_factory=list)  # outside every turn: the one event (or step_start)
    pages: list[Page] = field(default_factory=list)  # a turn's: each TURN_PAGE seqs, shown or a stub
    open: bool = False
    inherited: bool = False
    # Compaction: the summary that hides every event of this block, and the
    # summaries whose range begins here (shown in their place, as the model sees them).
    compacted_by: int | None = None
    summaries: list[Row] = field(default_factory=list)
    last_real: Event | None = None  # the turn's last event other than its turn_end and recovery's repairs
    steps: int | Callable[[], int] = 0  # a turn's step_starts, on every page (shown or not); a read made when first shown
    fork_spots: dict[int, ForkSpot] = field(default_factory=dict)  # by seq: may a fork end at that event
    bill: object = None  # a turn's pricing.Bill (dashboard.pages.step_usage)

    @property
    def number(self) -> object:
        return self.turn_start.data.get("turn") if self.turn_start else None

    @property
    def plain_end(self) -> bool:
        """A turn_end that says only that the turn completed: it folds into the turn's head."""
        return self.turn_end is not None and self.reason == "complete" and not self.turn_end.data.get("content")

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
        if callable(self.steps):
            self.steps = self.steps()
        return self.steps

    @property
    def all_parts(self) -> list[Row | Step]:
        """The parts shown: the event's outside turns, every shown page's inside one."""
        return [*self.parts, *(part for page in self.pages if page.shown for part in page.parts)]

    @property
    def rows(self) -> list[Row]:
        return [row for part in self.all_parts for row in (part.rows if isinstance(part, Step) else [part])]

    @property
    def cards(self) -> list[ToolCard]:
        return [card for row in self.rows for card in row.cards]

    @property
    def pages_id(self) -> str:
        return f"pages-{self.first_seq}"

    @property
    def page_runs(self) -> list[Page | list[Page]]:
        """The pages in order, each shown one alone and each run of stubs together (rendered in one go)."""
        runs: list[Page | list[Page]] = []
        for page in self.pages:
            if page.shown:
                runs.append(page)
            elif runs and isinstance(runs[-1], list):
                runs[-1].append(page)
            else:
                runs.append([page])
        return runs
