"""Which turn and step each event belongs to, computed as the recovery scan pairs them (section 4).

Storage can keep the two stacks and place each appended event without rescanning the log.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from .events import Event


@dataclass(frozen=True)
class Placement:
    turn_seq: int | None  # seq of the turn_start this event belongs to (None: outside any turn)
    step_seq: int | None  # seq of the step_start this event belongs to (None: outside any step)


def place(turn_stack: list[int], step_stack: list[int], seq: int, type: str) -> Placement:
    """Place one event and update the stacks (seqs, newest last) exactly as the recovery scan does.

    Stacks pair by structure, not by the numbers in data; a stray turn_end or step_end is ignored,
    and the step stack is not reset at turn boundaries.
    """
    if type == "turn_start":
        turn_stack.append(seq)
        return Placement(seq, _top(step_stack))
    if type == "turn_end":
        return Placement(turn_stack.pop() if turn_stack else None, _top(step_stack))
    if type == "step_start":
        step_stack.append(seq)
        return Placement(_top(turn_stack), seq)
    if type == "step_end":
        return Placement(_top(turn_stack), step_stack.pop() if step_stack else None)
    return Placement(_top(turn_stack), _top(step_stack))


def place_all(events: Iterable[Event]) -> tuple[list[Placement], list[int], list[int]]:
    """Placements of a whole log from empty stacks, with the final turn and step stacks."""
    turn_stack: list[int] = []
    step_stack: list[int] = []
    placements = [place(turn_stack, step_stack, event.seq, event.type) for event in events]
    return placements, turn_stack, step_stack


def _top(stack: list[int]) -> int | None:
    return stack[-1] if stack else None
