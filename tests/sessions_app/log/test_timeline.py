"""The timeline's layout: bars from events, lanes for parallel calls, crashes, aggregates, ticks and gaps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.log import timeline
from sessions_app.log.pricing import Price, Pricer
from sessions_app.log.timeline import Mark
from sessions_app.log.usage import Usage

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def parallel_turn(*, closed: str | None = "complete", results: bool = True) -> list[Mark]:
    """Turn at 0, step at 1, a message at 3 naming two calls, both dispatched at 4, answered at 9 and 6."""
    usage = Usage(input_tokens=100, output_tokens=20, model="gpt-4o", provider="openai")
    marks = [
        Mark(0, "turn_start", at(0), turn=0),
        Mark(1, "step_start", at(1), turn=0, step=1),
        Mark(2, "assistant_message", at(3), turn=0, step=1, usage=usage, calls=(("a", "search"), ("b", "fetch"))),
        Mark(3, "tool_call", at(4), turn=0, step=1, call_id="a", name="search"),
        Mark(4, "tool_call", at(4), turn=0, step=1, call_id="b", name="fetch"),
    ]
    if results:
        marks += [Mark(5, "tool_result", at(6), turn=0, step=1, call_id="b"), Mark(6, "tool_result", at(9), turn=0, step=1, call_id="a")]
        marks += [Mark(7, "step_end", at(10), turn=0, step=1)]
    if closed:
        marks.append(Mark(8, "turn_end", at(11), turn=0, reason=closed))
    return marks


def by(bars, kind):
    return sorted((b for b in bars if b.kind == kind), key=lambda b: b.seq)


def test_turn_step_model_and_tool_bars_run_between_their_events():
    bars = timeline.bars_of(parallel_turn(), now=at(100))
    [turn], [step], [model] = by(bars, "turn"), by(bars, "step"), by(bars, "model")
    assert (turn.start, turn.end, turn.state) == (at(0), at(11), "done")
    assert (step.start, step.end) == (at(1), at(10))
    # The model call runs from the step's start (the event before it in its step) to its message.
    assert (model.start, model.end, model.name, model.seq) == (at(1), at(3), "gpt-4o", 2)
    tools = {b.name: b for b in by(bars, "tool")}
    assert (tools["search"].start, tools["search"].end, tools["search"].seq) == (at(4), at(9), 3)
    assert (tools["fetch"].start, tools["fetch"].end, tools["fetch"].seq) == (at(4), at(6), 4)
    assert turn.usages == step.usages == model.usages


def test_parallel_tool_calls_get_lanes_side_by_side():
    bars = by(timeline.bars_of(parallel_turn(), now=at(100)), "tool")
    assert timeline.lanes(bars) == 2
    assert {b.lane for b in bars} == {0, 1}


def test_sequential_calls_share_a_lane():
    bars = [timeline.Bar("tool", i, at(i * 2), at(i * 2 + 1), "t") for i in range(5)]
    assert timeline.lanes(bars) == 1


def test_a_call_without_dispatch_starts_at_the_message_naming_it():
    marks = [m for m in parallel_turn() if m.type != "tool_call"]
    tools = {b.name: b for b in by(timeline.bars_of(marks, now=at(100)), "tool")}
    assert (tools["search"].start, tools["search"].seq) == (at(3), 2)


def test_an_open_turn_runs_to_now_and_reads_stalled_once_quiet():
    marks = parallel_turn(closed=None, results=False)
    running = timeline.bars_of(marks, now=at(50), running=True)
    [turn] = by(running, "turn")
    assert (turn.end, turn.state) == (at(50), "open")
    assert {b.end for b in by(running, "tool")} == {at(50)}
    [stalled] = by(timeline.bars_of(marks, now=at(50), running=False), "turn")
    assert stalled.state == "stalled"


def test_a_recovered_turn_runs_to_its_recovery_and_knows_when_it_was_last_heard_from():
    marks = parallel_turn(closed=None, results=False)
    marks += [
        Mark(5, "tool_result", at(30), turn=0, step=1, call_id="a", synthetic=True),
        Mark(6, "tool_result", at(30), turn=0, step=1, call_id="b", synthetic=True),
        Mark(7, "turn_end", at(30), turn=0, reason="interrupted"),
    ]
    bars = timeline.bars_of(marks, now=at(100))
    [turn] = by(bars, "turn")
    assert (turn.end, turn.state, turn.heard) == (at(30), "crashed", at(4))
    assert {b.state for b in by(bars, "tool")} == {"crashed"}
    drawn = timeline.layout(bars)
    [(heard_x, recovered_x, crashed)] = drawn.crashes
    assert crashed is turn and heard_x < recovered_x == drawn.width


def test_many_bars_in_one_column_become_one_aggregate_that_says_how_many():
    bars = [timeline.Bar("tool", i, at(i * 0.001), at(i * 0.001 + 0.0005), "t") for i in range(50)]
    bars.append(timeline.Bar("turn", 1000, at(0), at(1000), "turn"))
    drawn = timeline.layout(bars, width=1000, per_column=2)
    tools = [b for b in drawn.bars if b.kind == "tool"]
    assert len(tools) == 1 and tools[0].count == 50 and tools[0].name == "50 tool calls"
    assert drawn.aggregated == 50 and drawn.total == 51


def test_bars_carry_their_bill_priced_once_per_model_and_hour():
    pricer = Pricer([Price(model="gpt-4o", valid_from=T0.replace(hour=0), input=Decimal(1), output=Decimal(2))])
    drawn = timeline.layout(timeline.bars_of(parallel_turn(), now=at(100)), price=timeline.priced(pricer))
    [model] = [b for b in drawn.bars if b.kind == "model"]
    assert model.bill.cost == Decimal("0.00014") and model.bill.tokens == 120
    assert all(b.bill is None for b in drawn.bars if b.kind == "tool")


def test_gaps_where_nothing_runs_are_marked():
    bars = [timeline.Bar("turn", 0, at(0), at(10), "turn"), timeline.Bar("turn", 5, at(110), at(120), "turn")]
    drawn = timeline.layout(bars, width=1200)
    assert drawn.gaps == [(100.0, 1000.0, "1 min 40 s")]


def test_ticks_are_round_and_span_the_axis():
    labels = [label for _, label in timeline.ticks(125, 1000)]
    assert labels[:3] == ["0 s", "30 s", "1 min"] and labels[-1] == "2 min"


def test_durations_read_as_people_say_them():
    assert [timeline.duration_text(s) for s in (0, 0.35, 2.5, 250, 11100)] == ["0 s", "350 ms", "2.5 s", "4 min 10 s", "3 h 5 min"]


def test_slowest_steps_and_tools_are_listed_longest_first():
    drawn = timeline.layout(timeline.bars_of(parallel_turn(), now=at(100)))
    assert [b.name for b in drawn.slowest_tools] == ["search", "fetch"]
    assert [b.seq for b in drawn.slowest_steps] == [1]


# Any log: bars stay inside the axis, never end before they start, overlapping bars of a kind never share a lane.

@st.composite
def logs(draw):
    marks, seq, clock = [], 0, 0.0
    for _turn in range(draw(st.integers(0, 4))):
        turn = seq
        marks.append(Mark(seq, "turn_start", at(clock), turn=turn)); seq += 1  # noqa: E702
        for _step in range(draw(st.integers(0, 3))):
            step = seq
            marks.append(Mark(seq, "step_start", at(clock), turn=turn, step=step)); seq += 1  # noqa: E702
            ids = [f"c{seq}-{i}" for i in range(draw(st.integers(0, 4)))]
            clock += draw(st.floats(0, 30))
            marks.append(Mark(seq, "assistant_message", at(clock), turn=turn, step=step, calls=tuple((i, "tool") for i in ids))); seq += 1  # noqa: E702
            for cid in ids:
                if draw(st.booleans()):
                    clock += draw(st.floats(0, 5))
                    marks.append(Mark(seq, "tool_call", at(clock), turn=turn, step=step, call_id=cid)); seq += 1  # noqa: E702
            for cid in draw(st.permutations(ids)):
                if draw(st.booleans()):
                    clock += draw(st.floats(0, 20))
                    marks.append(Mark(seq, "tool_result", at(clock), turn=turn, step=step, call_id=cid)); seq += 1  # noqa: E702
            if draw(st.booleans()):
                marks.append(Mark(seq, "step_end", at(clock), turn=turn, step=step)); seq += 1  # noqa: E702
        if draw(st.booleans()):
            clock += draw(st.floats(0, 500))
            marks.append(Mark(seq, "turn_end", at(clock), turn=turn, reason=draw(st.sampled_from(["complete", "interrupted"])))); seq += 1  # noqa: E702
    return marks, at(clock + draw(st.floats(0, 100)))


@settings(max_examples=150, deadline=None)
@given(logs(), st.integers(1, 3))
def test_any_log_draws_inside_its_axis_with_overlapping_bars_in_different_lanes(log, per_column):
    marks, now = log
    bars = timeline.bars_of(marks, now=now)
    drawn = timeline.layout(bars, per_column=per_column)
    assert all(b.start <= b.end for b in bars)
    assert all(0 <= b.x <= drawn.width and b.width >= 1 and b.x + b.width <= drawn.width + 1 for b in drawn.bars)
    assert drawn.aggregated + len([b for b in drawn.bars if b.count == 1]) == drawn.total
    for kind in timeline.KINDS:
        mine = [b for b in bars if b.kind == kind and b.lane < timeline.MAX_LANES - 1]
        for a in mine:
            for b in mine:
                if a is not b and a.lane == b.lane:
                    assert a.end <= b.start or b.end <= a.start
    assert [x for x, _ in drawn.ticks] == sorted(x for x, _ in drawn.ticks)
