"""Forking: which prefix of a log a new session inherits (spec section 5)."""

from collections.abc import Sequence

from .events import Event, is_integer, json_integer, show_json
from .recovery import open_turns
from .structure import place, place_all


class ForkRefused(ValueError):
    """Why a fork was refused: `code` and `fields` as api.md names them, `detail` in plain words."""

    def __init__(self, code: str, fields: dict, detail: str):
        super().__init__(detail)
        self.code = code
        self.fields = fields
        self.detail = detail


def resolve_boundary(boundary: object, count: int) -> int:
    """How many events a fork at `boundary` inherits (its seed_length); never clips."""
    if boundary == "last":
        return count
    if is_integer(boundary) and boundary >= 0:
        if boundary < count:
            return boundary + 1
        last = "the log is empty" if count == 0 else f"its last seq is {count - 1}"
        raise ForkRefused(
            "boundary_out_of_range",
            {"boundary": boundary, "count": count},
            f"boundary {boundary} is past the end of the log: {last}",
        )
    raise ForkRefused(
        "invalid_boundary",
        {"boundary": boundary},
        f'boundary {show_json(boundary)} is neither a seq (an integer >= 0) nor "last"',
    )


def fork_prefix(events: Sequence[Event], boundary: object) -> list[Event]:
    """The events a fork inherits, unchanged (seqs kept: renumbering would move compaction ranges).

    A prefix ending inside an open turn is refused rather than clipped to another boundary.
    """
    seed_length = resolve_boundary(boundary, len(events))
    prefix = list(events[:seed_length])
    if unclosed := open_turns(prefix):
        turn_start = next(event for event in prefix if event.seq == unclosed[0])
        placements = place_all(events)[0]
        closed_at = next(
            (e.seq for e, p in zip(events, placements) if e.type == "turn_end" and p.turn_seq == turn_start.seq), None
        )
        raise open_turn_refusal(seed_length - 1, turn_start, closed_at)
    return prefix


def open_turn_refusal(boundary_seq: int, turn_start: Event, closed_at: int | None) -> ForkRefused:
    """The refusal of a boundary inside the turn `turn_start` opened."""
    detail = inside_turn_reason(boundary_seq, turn_start.seq, turn_start.data.get("turn"), closed_at)
    return ForkRefused("open_turn", {"seq": turn_start.seq}, detail)


def inside_turn_reason(boundary_seq: int, turn_seq: int, turn_number: object, closed_at: int | None) -> str:
    """Why no fork may end at `boundary_seq`, in the words every view uses.

    `closed_at` is the seq of the turn_end that closes that turn later in the
    log (None: still open). Only a turn still open can be recovered; a turn
    that closes later is simply not over at the boundary.
    """
    turn = "a turn" if (number := json_integer(turn_number)) is None else f"turn {number}"
    if closed_at is None:
        return (
            f"seq {boundary_seq} is inside {turn}, opened at seq {turn_seq} and still open;"
            " recover the session first or pick an earlier boundary"
        )
    return (
        f"seq {boundary_seq} is inside {turn}, which opened at seq {turn_seq} and closes"
        f" at seq {closed_at}; a fork must end outside every turn"
    )


def valid_boundaries(events: Sequence[Event], boundary: int) -> tuple[int | None, int | None]:
    """The nearest allowed integer boundaries strictly below and above `boundary`.

    A boundary is allowed when no turn is open after its event. For "last", pass len(events) - 1.
    """
    turn_stack: list[int] = []
    step_stack: list[int] = []
    below = None
    for event in events:
        place(turn_stack, step_stack, event.seq, event.type)
        if turn_stack:
            continue
        if event.seq < boundary:
            below = event.seq
        elif event.seq > boundary:
            return below, event.seq
    return below, None
