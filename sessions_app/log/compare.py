"""Comparing two logs: how long a prefix they share, their continuations side by side by turn, and the
calls each continuation made, matched against each other (a fork against its parent, or any two logs).

Two events are the same when their type and data are (the claimed time is not compared: a fork's own
events are written later than its parent's, whatever they say). Data is compared as JSON with its keys
sorted, so that 1 and 1.0, or true and 1, stay different, and key order (which PostgreSQL's jsonb does
not keep) does not matter.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest

from .calls import name_text
from .events import Event, json_integer
from .ledger import ERROR, NO_RESULT, PENDING, SUPERSEDED
from .recovery import COMPLETED, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN

RAN, MAY_HAVE_RUN, DID_NOT_RUN = "ran", "may have run", "did not run"
# What a call's state (log.ledger) says of whether the tool ran: a real result says it did; a call
# still waiting, never answered or of unknown outcome may have; only tool_not_started says it did not.
HAPPENED = {COMPLETED: RAN, ERROR: RAN, SUPERSEDED: RAN, PENDING: MAY_HAVE_RUN, NO_RESULT: MAY_HAVE_RUN,
            TOOL_OUTCOME_UNKNOWN: MAY_HAVE_RUN, TOOL_NOT_STARTED: DID_NOT_RUN}  # fmt: skip


def canonical(value: object) -> str:
    """A JSON value as one text: equal texts for equal values, whatever the order of their keys."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def event_key(event: Event) -> str:
    return event.type + "\n" + canonical(event.data)


def same_event(a: Event, b: Event) -> bool:
    return a.type == b.type and event_key(a) == event_key(b)


def common_length(left: Sequence[Event], right: Sequence[Event]) -> int:
    """How many leading events of `left` and `right` are the same (for chunks read side by side)."""
    n = 0
    for a, b in zip(left, right):
        if not same_event(a, b):
            break
        n += 1
    return n


# Turns ----------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A piece of a continuation: one outermost turn with the events outside every turn just before it
    (the user message that asked for it), or what follows the last turn that closed."""

    label: str
    events: tuple[Event, ...]


def turn_segments(events: Sequence[Event], *, open_turns: int = 0) -> list[Segment]:
    """`events` (a continuation, in seq order) cut after each turn_end that closes an outermost turn.

    `open_turns` is how many turns are open where the continuation starts (it may start inside one).
    Turns pair as the recovery scan pairs them (log.structure): a turn_end with no turn open is ignored.
    """
    segments: list[Segment] = []
    depth, current, label = open_turns, [], "the turn already open" if open_turns else None
    for event in events:
        current.append(event)
        if event.type == "turn_start":
            if depth == 0 and label is None:
                label = _turn_label(event)
            depth += 1
        elif event.type == "turn_end" and depth > 0:
            depth -= 1
            if depth == 0:
                segments.append(Segment(label or "a turn", tuple(current)))
                current, label = [], None
    if current:
        segments.append(Segment(label or "outside every turn", tuple(current)))
    return segments


def _turn_label(turn_start: Event) -> str:
    number = json_integer(turn_start.data.get("turn"))
    return f"turn {number}" if number is not None else f"the turn at seq {turn_start.seq}"


@dataclass(frozen=True)
class Row:
    """Two events side by side (None: nothing on that side here); `same` when both are the same event."""

    left: Event | None
    right: Event | None
    same: bool


@dataclass(frozen=True)
class TurnPair:
    """The n-th segment of each continuation, side by side, event rows aligned where they agree."""

    left: Segment | None
    right: Segment | None
    rows: tuple[Row, ...]


def align_rows(left: Sequence[Event], right: Sequence[Event]) -> list[Row]:
    """The two runs of events as rows: the same events opposite each other, the others beside what they
    replaced or opposite nothing (difflib's matching blocks on each event's type and data)."""
    keys_left, keys_right = [event_key(e) for e in left], [event_key(e) for e in right]
    rows: list[Row] = []
    matcher = difflib.SequenceMatcher(None, keys_left, keys_right, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows += [Row(a, b, True) for a, b in zip(left[i1:i2], right[j1:j2])]
        else:
            rows += [Row(a, b, False) for a, b in zip_longest(left[i1:i2], right[j1:j2])]
    return rows


def align_turns(left: Sequence[Event], right: Sequence[Event], *, open_turns: int = 0) -> list[TurnPair]:
    """The continuations' segments paired in order (first turn with first turn), each pair's rows aligned."""
    pairs = []
    for a, b in zip_longest(turn_segments(left, open_turns=open_turns), turn_segments(right, open_turns=open_turns)):
        pairs.append(TurnPair(a, b, tuple(align_rows(a.events if a else (), b.events if b else ()))))
    return pairs


# Effects --------------------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    """A call a continuation made, with its state as the ledger reads it (log.ledger's rules)."""

    seq: int  # first sighting
    call_id: str
    name: object  # as log.calls.call_name reads it
    arguments: object  # as log.calls.call_arguments reads them (a JSON text parsed)
    state: str
    side_effect: str = "unknown"

    @property
    def tool(self) -> str:
        return name_text(self.name)

    @property
    def happened(self) -> str:
        return HAPPENED.get(self.state, MAY_HAVE_RUN)

    def key(self) -> tuple[str, str]:
        """Calls match when they name the same tool with the same arguments."""
        return self.tool, canonical(self.arguments)


@dataclass(frozen=True)
class EffectRow:
    left: Effect | None
    right: Effect | None

    @property
    def in_both(self) -> bool:
        """Both continuations made this call, and neither is known not to have run."""
        return self.left is not None and self.right is not None and DID_NOT_RUN not in (self.left.happened, self.right.happened)

    @property
    def ran_in_both(self) -> bool:
        return self.in_both and self.left.happened == RAN and self.right.happened == RAN

    def repeat_note(self, left_name: str, right_name: str) -> str | None:
        """"charge_card ran in the parent and again in the fork", or what may have happened; None when not in both."""
        if not self.in_both:
            return None
        tool = self.left.tool or "(unnamed tool)"
        if self.ran_in_both:
            return f"{tool} ran in {left_name} and again in {right_name}"
        return f"{tool} may have run in both: {self.left.happened} in {left_name}, {self.right.happened} in {right_name}"


def match_effects(left: Sequence[Effect], right: Sequence[Effect]) -> list[EffectRow]:
    """Each side's calls in order, a call matched with the first unmatched one of the other side naming the
    same tool with the same arguments; a call of one side alone stands where it came in its side's order."""
    waiting: dict[tuple[str, str], list[int]] = {}
    for j, effect in enumerate(right):
        waiting.setdefault(effect.key(), []).append(j)
    partner = {i: slots.pop(0) for i, effect in enumerate(left) if (slots := waiting.get(effect.key()))}
    matched = set(partner.values())
    rows: list[EffectRow] = []
    k = 0  # the other side's calls before k are placed
    for i, effect in enumerate(left):
        if i not in partner:
            rows.append(EffectRow(effect, None))
            continue
        rows += [EffectRow(None, right[j]) for j in range(k, partner[i]) if j not in matched]  # lone ones made before it
        k = max(k, partner[i] + 1)
        rows.append(EffectRow(effect, right[partner[i]]))
    rows += [EffectRow(None, right[j]) for j in range(k, len(right)) if j not in matched]
    return rows


# The comparison ---------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    prefix: int  # events 0 .. prefix-1 are the same in both
    turns: list[TurnPair]  # the continuations from seq `prefix` on
    effects: list[EffectRow]
    # The event of each side at seq `prefix` when the logs part there (None: that log ends at the prefix);
    # both None when they do not part there (both end: identical, or a reader stopped comparing).
    first_left: Event | None
    first_right: Event | None
    parted: bool

    @property
    def identical(self) -> bool:
        return not self.parted and not self.turns


def compare(prefix: int, left: Sequence[Event], right: Sequence[Event], *, open_turns: int = 0,
            left_effects: Sequence[Effect] = (), right_effects: Sequence[Effect] = ()) -> Comparison:  # fmt: skip
    """Two continuations from seq `prefix` on (each may be cut short by its reader), `open_turns` being how
    many turns are open at the prefix, and the calls each made there."""
    parted = bool(left or right) and not (left and right and same_event(left[0], right[0]))
    return Comparison(
        prefix=prefix,
        turns=align_turns(left, right, open_turns=open_turns),
        effects=match_effects(left_effects, right_effects),
        first_left=left[0] if parted and left else None,
        first_right=right[0] if parted and right else None,
        parted=parted,
    )
