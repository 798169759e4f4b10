from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log.recovery import open_turns
from sessions_app.log.structure import Placement, place, place_all

from .strategies import events_of, logs


def placements_of(types: list[str]) -> list[tuple[int | None, int | None]]:
    placements, _, _ = place_all(events_of([(type, {}) for type in types]))
    return [(p.turn_seq, p.step_seq) for p in placements]


def test_a_healthy_turn_places_every_event_in_its_turn_and_step():
    types = ["user_message", "turn_start", "step_start", "assistant_message", "tool_result",
             "step_end", "step_start", "assistant_message", "step_end", "turn_end", "user_message"]  # fmt: skip
    assert placements_of(types) == [
        (None, None), (1, None), (1, 2), (1, 2), (1, 2),
        (1, 2), (1, 6), (1, 6), (1, 6), (1, None), (None, None),
    ]  # fmt: skip


def test_stray_ends_are_ignored():
    assert placements_of(["turn_end", "step_end", "user_message"]) == [(None, None)] * 3


def test_the_step_stack_survives_turn_boundaries():
    # turn 1 crashed inside step 2; its step stays on the stack for the next turn
    types = ["turn_start", "step_start", "turn_start", "step_start", "step_end", "tool_call"]
    assert placements_of(types) == [(0, None), (0, 1), (2, 1), (2, 3), (2, 3), (2, 1)]


def test_place_mutates_the_stacks_it_is_given():
    turn_stack, step_stack = [4], []
    assert place(turn_stack, step_stack, 9, "step_start") == Placement(4, 9)
    assert (turn_stack, step_stack) == ([4], [9])
    assert place(turn_stack, step_stack, 10, "turn_end") == Placement(4, 9)
    assert (turn_stack, step_stack) == ([], [9])


@given(logs(), st.lists(st.integers(1, 8), max_size=8))
def test_incremental_placement_in_chunks_equals_one_pass(events, chunk_sizes):
    whole, final_turns, final_steps = place_all(events)
    turn_stack: list[int] = []
    step_stack: list[int] = []
    incremental, start = [], 0
    for size in [*chunk_sizes, len(events)]:  # the last chunk takes whatever is left
        chunk = events[start : start + size]
        incremental += [place(turn_stack, step_stack, e.seq, e.type) for e in chunk]
        start += len(chunk)
    assert incremental == whole
    assert (turn_stack, step_stack) == (final_turns, final_steps)
    assert final_turns[::-1] == open_turns(events)
