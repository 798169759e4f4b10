import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log.fold import fold
from sessions_app.log.fork import ForkRefused, fork_prefix, resolve_boundary, valid_boundaries
from sessions_app.log.recovery import apply, open_turns, plan

from .strategies import T0, events_of, logs, message

# allowed boundaries: 0, 1, 6, 7; turn 2 opens at 8 and never closes
CRASHED = events_of(
    [
        ("system_message", message("be brief")),
        ("user_message", message("one")),
        ("turn_start", {"turn": 1}),
        ("step_start", {"turn": 1, "step": 1}),
        ("assistant_message", message("done")),
        ("step_end", {"turn": 1, "step": 1, "outcome": "ok"}),
        ("turn_end", {"turn": 1, "steps": 1, "reason": "complete"}),
        ("user_message", message("two")),
        ("turn_start", {"turn": 2}),
        ("step_start", {"turn": 2, "step": 1}),
        ("assistant_message", message("", tool_calls=[{"id": "c1", "name": "echo"}])),
    ]
)


def refusal(events, boundary) -> ForkRefused:
    with pytest.raises(ForkRefused) as caught:
        fork_prefix(events, boundary)
    assert str(caught.value) == caught.value.detail
    return caught.value


@pytest.mark.parametrize("boundary", [0, 1, 6, 7])
def test_a_boundary_outside_any_turn_takes_the_prefix_unchanged(boundary):
    assert fork_prefix(CRASHED, boundary) == CRASHED[: boundary + 1]


@pytest.mark.parametrize("boundary, turn_start", [(2, 2), (4, 2), (5, 2), (8, 8), (10, 8), ("last", 8)])
def test_a_boundary_inside_an_open_turn_is_refused_never_clipped(boundary, turn_start):
    error = refusal(CRASHED, boundary)
    assert (error.code, error.fields) == ("open_turn", {"seq": turn_start})


def test_the_open_turn_detail_names_the_seq_the_turn_and_its_start():
    assert refusal(CRASHED, 9).detail == (
        "seq 9 is inside turn 2, opened at seq 8 and still open; recover the session first or pick an earlier boundary"
    )


def test_a_boundary_inside_a_turn_that_closes_later_names_where_it_closes_and_no_recovery():
    detail = refusal(CRASHED, 4).detail
    assert detail == "seq 4 is inside turn 1, which opened at seq 2 and closes at seq 6; a fork must end outside every turn"


def test_last_is_allowed_once_the_log_is_recovered():
    recovered = [*CRASHED, *apply(CRASHED, plan(CRASHED).repairs, T0)]
    assert fork_prefix(recovered, "last") == recovered


@pytest.mark.parametrize("boundary", [11, 12, 10**9])
def test_a_boundary_past_the_end_is_out_of_range(boundary):
    error = refusal(CRASHED, boundary)
    assert (error.code, error.fields) == ("boundary_out_of_range", {"boundary": boundary, "count": 11})


@pytest.mark.parametrize("boundary", [-1, 3.0, 2.5, "first", "3", "LAST", True, False, None, [3]])
def test_anything_else_is_an_invalid_boundary(boundary):
    error = refusal(CRASHED, boundary)
    assert (error.code, error.fields) == ("invalid_boundary", {"boundary": boundary})


def test_an_empty_log_forks_to_an_empty_session_only_at_last():
    assert fork_prefix([], "last") == []
    assert resolve_boundary("last", 0) == 0
    assert refusal([], 0).fields == {"boundary": 0, "count": 0}


def test_resolve_boundary_gives_the_seed_length():
    assert [resolve_boundary(b, 5) for b in (0, 3, 4, "last")] == [1, 4, 5, 5]


@pytest.mark.parametrize(
    "boundary, nearest", [(4, (1, 6)), (2, (1, 6)), (8, (7, None)), (10, (7, None)), (0, (None, 1)), (6, (1, 7))]
)
def test_valid_boundaries_around_an_open_turn(boundary, nearest):
    assert valid_boundaries(CRASHED, boundary) == nearest


def test_a_fork_keeps_the_compactions_of_its_prefix_and_not_the_parents_later_ones():
    summary = ("assistant_message", message("a and b", surface_op=["replace", 0, 1]))
    parent = events_of([("user_message", message("a")), ("user_message", message("b")), summary,
                        ("user_message", message("c")),
                        ("assistant_message", message("all", surface_op=["replace", 0, 3]))])  # fmt: skip
    fork = fork_prefix(parent, 3)
    assert [e.data["content"] for e in fold(fork)] == ["a and b", "c"]
    assert fold(fork) == fold(parent[:4])
    assert [e.data["content"] for e in fold(parent)] == ["all"]


@given(logs(), st.data())
def test_a_fork_is_the_prefix_or_names_its_open_turn(events, data):
    boundary = data.draw(st.one_of(st.just("last"), st.integers(0, max(len(events) - 1, 0))))
    seed_length = len(events) if boundary == "last" else boundary + 1
    if seed_length > len(events):
        return  # an empty log has no integer boundary
    prefix = events[:seed_length]
    try:
        assert fork_prefix(events, boundary) == prefix
        assert open_turns(prefix) == []
    except ForkRefused as refused:
        assert refused.code == "open_turn"
        assert refused.fields == {"seq": open_turns(prefix)[0]}


@given(logs(), st.data())
def test_valid_boundaries_are_the_nearest_allowed_ones(events, data):
    boundary = data.draw(st.integers(-1, len(events)))
    allowed = [b for b in range(len(events)) if not open_turns(events[: b + 1])]
    below = [b for b in allowed if b < boundary]
    above = [b for b in allowed if b > boundary]
    assert valid_boundaries(events, boundary) == (max(below, default=None), min(above, default=None))
