import copy

from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log.events import SURFACE_TYPES, Event, replace_range
from sessions_app.log import fold as fold_module
from sessions_app.log.fold import fold, position, project, shadowed_seqs

from .strategies import T0, events_of, logs, message


def summary(start: int, stop: int) -> tuple[str, dict]:
    return ("assistant_message", message("summary", surface_op=["replace", start, stop]))


def user(text: str) -> tuple[str, dict]:
    return ("user_message", message(text))


def folded_seqs(items) -> list[int]:
    return [event.seq for event in fold(events_of(items))]


def test_a_summary_takes_the_place_of_the_range_it_replaces():
    items = [user("a"), user("b"), user("c"), user("d"), summary(1, 2)]
    assert folded_seqs(items) == [0, 4, 3]
    assert position(events_of(items)[4]) == 1


def test_a_later_summary_swallows_an_earlier_in_place_replacement():
    items = [user("a"), user("b"), user("c"), summary(1, 1), summary(0, 1)]
    assert shadowed_seqs(events_of(items)) == {0, 1, 3}
    assert folded_seqs(items) == [4, 2]


def test_a_replace_never_shadows_events_appended_after_it():
    items = [user("a"), summary(0, 5), user("c"), user("d")]
    assert folded_seqs(items) == [1, 2, 3]


def test_equal_positions_keep_log_order():
    # the summary names position 2 before seq 2 exists; seq 2 is later, so not shadowed
    items = [user("a"), summary(2, 2), user("c")]
    assert folded_seqs(items) == [0, 1, 2]


def test_bookkeeping_events_are_shadowed_but_never_folded_and_never_compact():
    compacted = [("turn_start", {"turn": 1}), user("a"), summary(0, 1)]
    assert shadowed_seqs(events_of(compacted)) == {0, 1}
    assert folded_seqs(compacted) == [2]
    # a replace on a bookkeeping event (refused at append, but possible in old data) compacts nothing
    stray = [user("a"), ("turn_end", {"surface_op": ["replace", 0, 0]})]
    assert shadowed_seqs(events_of(stray)) == set()
    assert folded_seqs(stray) == [0]


def test_projection_copies_the_message_fields():
    assistant = {"content": "", "tool_calls": [{"id": "c1", "name": "echo", "arguments": {}}],
                 "reasoning_content": "hm", "name": "bot", "metadata": {"k": 1},
                 "source": "memory", "surface_op": "append"}  # fmt: skip
    items = [
        ("system_message", {"content": [{"type": "text", "text": "hi"}]}),
        ("turn_start", {}),
        ("assistant_message", assistant),
        ("tool_result", {"tool_call_id": "c1", "content": "ok"}),
    ]
    system, reply, result = project(events_of(items))
    assert system == {
        "seq": 0, "role": "system", "content": [{"type": "text", "text": "hi"}], "tool_calls": [],
        "tool_call_id": None, "name": None, "metadata": {}, "reasoning_content": None, "created_at": T0,
    }  # fmt: skip
    assert reply == {
        "seq": 2, "role": "assistant", "content": "", "tool_calls": assistant["tool_calls"],
        "tool_call_id": None, "name": "bot", "metadata": {"k": 1}, "reasoning_content": "hm",
        "created_at": events_of(items)[2].time,
    }  # fmt: skip
    assert (result["role"], result["tool_call_id"], result["content"]) == ("tool", "c1", "ok")


def test_shadowing_100000_events_is_one_pass_over_merged_ranges(monkeypatch):
    """Cost, pinned without a clock: one coverage lookup per event, against disjoint merged ranges."""
    events = events_of([user("x")] * 100_000)
    for start in range(5_000, 100_000, 20_000):
        for overlap in range(3):  # overlapping compactions merge into one range
            seq = start + 100 + overlap
            events[seq] = Event(seq, "assistant_message", T0, {"surface_op": ["replace", start + overlap * 30, start + 30 + overlap * 30]})
    lookups = []
    covers = fold_module._Coverage.covers

    def counted(coverage, point):
        lookups.append(len(coverage.starts))
        return covers(coverage, point)

    monkeypatch.setattr(fold_module._Coverage, "covers", counted)
    shadowed = shadowed_seqs(events)
    assert len(shadowed) == 5 * 91  # positions start..start+90 of each group; a compaction sits at its own range start
    assert len(lookups) == len(events) and max(lookups) == 5


def shadowed_by_definition(events) -> set[int]:
    """Section 2 read literally: R shadows E when E.seq < R.seq and start <= position(E) <= stop."""
    ranges = [(e.seq, replace_range(e.data)) for e in events if e.type in SURFACE_TYPES and replace_range(e.data)]
    return {
        e.seq
        for e in events
        if any(e.seq < r_seq and start <= position(e) <= stop for r_seq, (start, stop) in ranges)
    }


ranges = st.tuples(st.integers(0, 30), st.integers(0, 10)).map(lambda r: summary(r[0], r[0] + r[1]))


@given(logs())
def test_shadowing_matches_the_definition(events):
    assert shadowed_seqs(events) == shadowed_by_definition(events)


@given(st.lists(st.one_of(st.just(user("x")), ranges), max_size=40))
def test_shadowing_matches_the_definition_under_many_overlapping_compactions(items):
    events = events_of(items)
    assert shadowed_seqs(events) == shadowed_by_definition(events)


@given(logs())
def test_fold_is_deterministic_and_ignores_list_identity(events):
    folded = fold(events)
    assert fold(copy.deepcopy(events)) == folded
    assert fold(tuple(events)) == folded
    assert [position(e) for e in folded] == sorted(position(e) for e in folded)
