"""Comparing two logs (log.compare): the shared prefix, continuations aligned by turn, calls matched across them."""

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log import compare
from sessions_app.log.compare import Effect, common_length, match_effects, same_event, turn_segments
from sessions_app.log.events import Event
from sessions_app.log.structure import place_all
from tests.sessions_app.log.strategies import T0, events_of, logs, message


def effect(seq, name, arguments, state="completed", call_id=None):
    return Effect(seq, call_id or f"c{seq}", name, arguments, state)


def test_events_are_the_same_by_type_and_data_whatever_their_time_and_key_order():
    a = Event(3, "user_message", T0, {"content": "hi", "metadata": {"x": 1, "y": 2}})
    assert same_event(a, replace(a, time=T0.replace(year=2030), data={"metadata": {"y": 2, "x": 1}, "content": "hi"}))
    assert not same_event(a, replace(a, type="assistant_message"))
    assert not same_event(a, replace(a, data={"content": "hi", "metadata": {"x": 1.0, "y": 2}}))  # 1 and 1.0 differ
    assert not same_event(a, replace(a, data={"content": "hi", "metadata": {"x": True, "y": 2}}))  # so do true and 1


@given(logs(), logs())
def test_the_common_length_is_where_two_logs_first_differ(a, b):
    n = common_length(a, b)
    assert all(same_event(x, y) for x, y in zip(a[:n], b[:n]))
    assert n == min(len(a), len(b)) or not same_event(a[n], b[n])


@given(logs(), st.data())
def test_chunked_reading_finds_the_same_prefix_as_one_read(a, data):
    """What the selector does: compare CHUNK events of each at a time, stop at the first difference."""
    b = a[: data.draw(st.integers(0, len(a)))] + events_of([("user_message", message("elsewhere"))])[:1]
    b = [replace(e, seq=i) for i, e in enumerate(b)]
    chunk = data.draw(st.integers(1, 5))
    position = 0
    while True:
        left, right = a[position : position + chunk], b[position : position + chunk]
        same = common_length(left, right)
        position += same
        if same < chunk or len(left) < chunk or len(right) < chunk:
            break
    assert position == common_length(a, b)


@given(logs(), st.data())
def test_segments_hold_every_event_once_in_order_each_ending_where_an_outermost_turn_closes(log, data):
    start = data.draw(st.integers(0, len(log)))
    placements, _, _ = place_all(log)
    turn_stack: list[int] = []
    for event in log[:start]:  # how many turns are open where the continuation starts
        if event.type == "turn_start":
            turn_stack.append(event.seq)
        elif event.type == "turn_end" and turn_stack:
            turn_stack.pop()
    segments = turn_segments(log[start:], open_turns=len(turn_stack))
    assert [e for s in segments for e in s.events] == log[start:]
    depth = len(turn_stack)
    for segment in segments[:-1]:  # every segment but the last ends closing an outermost turn
        for event in segment.events:
            if event.type == "turn_start":
                depth += 1
            elif event.type == "turn_end" and depth:
                depth -= 1
        assert segment.events[-1].type == "turn_end" and depth == 0


def test_a_segment_is_labelled_by_its_turn_and_a_continuation_may_start_inside_one():
    log = events_of([
        ("assistant_message", message("still in turn 1")), ("turn_end", {"turn": 1}),
        ("user_message", message("q")), ("turn_start", {"turn": 2}), ("turn_end", {"turn": 2}),
        ("turn_start", {}), ("user_message", message("open")),
    ])  # fmt: skip
    labels = [s.label for s in turn_segments(log, open_turns=1)]
    assert labels == ["the turn already open", "turn 2", "the turn at seq 5"]


def test_continuations_pair_turn_by_turn_and_same_events_stand_opposite_each_other():
    left = events_of([("user_message", message("q")), ("turn_start", {"turn": 2}), ("assistant_message", message("a")),
                      ("assistant_message", message("b")), ("turn_end", {"turn": 2})])  # fmt: skip
    right = events_of([("user_message", message("other q")), ("turn_start", {"turn": 2}), ("assistant_message", message("b")),
                       ("turn_end", {"turn": 2}), ("user_message", message("more"))])  # fmt: skip
    pairs = compare.align_turns(left, right)
    assert [(p.left.label if p.left else None, p.right.label if p.right else None) for p in pairs] == [("turn 2", "turn 2"), (None, "outside every turn")]
    rows = pairs[0].rows
    assert [(r.left.seq if r.left else None, r.right.seq if r.right else None, r.same) for r in rows] == [
        (0, 0, False), (1, 1, True), (2, None, False), (3, 2, True), (4, 3, True)
    ]


@given(logs(), logs())
def test_aligned_rows_keep_each_sides_events_in_order(a, b):
    for pair in compare.align_turns(a, b):
        rows = pair.rows
        assert [r.left for r in rows if r.left] == list(pair.left.events if pair.left else ())
        assert [r.right for r in rows if r.right] == list(pair.right.events if pair.right else ())
        assert all(same_event(r.left, r.right) for r in rows if r.same)


def test_a_call_of_the_same_tool_with_the_same_arguments_matches_across_the_continuations():
    left = [effect(5, "charge_card", {"order": 42}), effect(7, "send_email", {"to": "a"})]
    right = [effect(6, "lookup", {}), effect(8, "charge_card", {"order": 42}), effect(9, "send_email", {"to": "b"})]
    rows = match_effects(left, right)
    assert [(r.left.seq if r.left else None, r.right.seq if r.right else None) for r in rows] == [
        (None, 6), (5, 8), (7, None), (None, 9)
    ]
    charged = rows[1]
    assert charged.in_both and charged.ran_in_both
    assert charged.repeat_note("the parent", "the fork") == "charge_card ran in the parent and again in the fork"
    assert rows[2].repeat_note("the parent", "the fork") is None


def test_what_the_calls_states_say_of_having_run_in_both():
    def row(left_state, right_state):
        return match_effects([effect(1, "pay", {}, left_state)], [effect(1, "pay", {}, right_state)])[0]

    assert row("completed", "error").ran_in_both
    unknown = row("completed", "tool_outcome_unknown")
    assert unknown.in_both and not unknown.ran_in_both
    assert unknown.repeat_note("a", "b") == "pay may have run in both: ran in a, may have run in b"
    assert not row("completed", "tool_not_started").in_both  # known not to have run on one side


effects_strategy = st.lists(
    st.builds(effect, st.integers(0, 50), st.sampled_from(["pay", "mail", 7]), st.sampled_from([{}, {"n": 1}, {"n": 1.0}]),
              st.sampled_from(["completed", "tool_not_started", "pending"])),
    max_size=8,
)  # fmt: skip


@given(effects_strategy, effects_strategy)
def test_every_call_is_listed_once_in_its_sides_order_and_only_like_calls_share_a_row(left, right):
    left = [replace(e, call_id=f"l{i}") for i, e in enumerate(left)]
    right = [replace(e, call_id=f"r{i}") for i, e in enumerate(right)]
    rows = match_effects(left, right)
    assert [r.left for r in rows if r.left] == left
    assert sorted((r.right for r in rows if r.right), key=right.index) == right
    assert len([r for r in rows if r.right]) == len(right)
    pairs = [r for r in rows if r.left and r.right]
    assert all(r.left.key() == r.right.key() for r in pairs)
    for key in {e.key() for e in left}:  # as many pairs as the fewer side has of that call
        assert sum(r.left.key() == key for r in pairs) == min(sum(e.key() == key for e in left), sum(e.key() == key for e in right))
    lone_right = [r.right for r in rows if r.right and not r.left]
    assert lone_right == sorted(lone_right, key=right.index)  # the other side's lone calls keep their order


def test_the_comparison_marks_the_first_difference_or_says_the_logs_are_the_same():
    a = events_of([("user_message", message("x")), ("user_message", message("y"))])
    parted = compare.compare(1, a[1:], [])
    assert parted.parted and parted.first_left == a[1] and parted.first_right is None and not parted.identical
    same = compare.compare(2, [], [])
    assert same.identical and not same.parted
    capped = compare.compare(1, a[1:], a[1:])  # a reader stopped comparing before they part
    assert not capped.parted and not capped.identical and capped.first_left is None
