"""The fold: what the model sees once compactions are applied (spec section 2)."""

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from .events import SURFACE_TYPES, Event, replace_range

ROLES = {
    "system_message": "system",
    "user_message": "user",
    "assistant_message": "assistant",
    "tool_result": "tool",
}


def _replaced(event: Event) -> tuple[int, int] | None:
    """The range a compaction stands for; only surface events compact."""
    op = event.data.get("surface_op")
    if op is None or op == "append" or event.type not in SURFACE_TYPES:
        return None  # the common case, answered cheaply: the fold runs over whole logs
    return replace_range(event.data)


def position(event: Event) -> int:
    """Where an event sits in the fold: a summary takes the start of the range it replaces."""
    replaced = _replaced(event)
    return replaced[0] if replaced else event.seq


class _Coverage:
    """A union of inclusive integer ranges as sorted disjoint intervals, for O(log n) lookups."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.stops: list[int] = []

    def covers(self, point: int) -> bool:
        i = bisect_right(self.starts, point) - 1
        return i >= 0 and self.stops[i] >= point

    def add(self, start: int, stop: int) -> None:
        first = bisect_left(self.stops, start)  # first interval reaching start
        end = bisect_right(self.starts, stop)  # intervals beginning at or before stop
        if first < end:  # merge the overlapped intervals into one
            start, stop = min(start, self.starts[first]), max(stop, self.stops[end - 1])
        self.starts[first:end] = [start]
        self.stops[first:end] = [stop]


def shadowed_seqs(events: Sequence[Event]) -> set[int]:
    """Seqs of the events some later compaction covers by position; `events` in seq order.

    One reverse pass: when an event is reached, the coverage holds exactly the ranges of the
    compactions appended after it, which is what may shadow it.
    """
    coverage = _Coverage()
    shadowed = set()
    for event in reversed(events):
        replaced = _replaced(event)
        if coverage.covers(replaced[0] if replaced else event.seq):
            shadowed.add(event.seq)
        if replaced:
            coverage.add(*replaced)
    return shadowed


def fold(events: Sequence[Event]) -> list[Event]:
    """The unshadowed surface events, stable-sorted by position; `events` in seq order."""
    shadowed = shadowed_seqs(events)
    visible = [e for e in events if e.type in SURFACE_TYPES and e.seq not in shadowed]
    return sorted(visible, key=position)


def _message(event: Event) -> dict:
    data = event.data
    tool_calls, metadata = data.get("tool_calls"), data.get("metadata")
    return {
        "seq": event.seq,
        "role": ROLES[event.type],
        "content": data.get("content"),
        "tool_calls": [] if tool_calls is None else tool_calls,
        "tool_call_id": data.get("tool_call_id"),
        "name": data.get("name"),
        "metadata": {} if metadata is None else metadata,
        "reasoning_content": data.get("reasoning_content"),
        "created_at": event.time,
    }


def project(events: Sequence[Event]) -> list[dict]:
    """The fold as messages (`source` and `surface_op` are not copied; nothing is filtered)."""
    return [_message(event) for event in fold(events)]
