"""Hypothesis strategies for session logs shaped like a real emitter's, crashes included."""

from datetime import UTC, datetime, timedelta
from itertools import count

from hypothesis import strategies as st

from sessions_app.log.events import Event

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Item = tuple[str, dict]


def message(content: str, **fields) -> dict:
    return {"content": content, "name": None, "metadata": {}} | fields


def events_of(items: list[Item]) -> list[Event]:
    """Items as a stored log: seq = index, one second apart."""
    return [Event(seq, t, T0 + timedelta(seconds=seq), data) for seq, (t, data) in enumerate(items)]


@st.composite
def steps(draw, turn: int, step: int, call_ids: count, dispatches: bool) -> list[Item]:
    """One model request and its parallel tool calls, some answered, some dispatched."""
    ids = [f"call_{next(call_ids)}" for _ in range(draw(st.integers(0, 3)))]
    calls = [{"id": cid, "name": "echo", "arguments": {"n": i}} for i, cid in enumerate(ids)]
    items: list[Item] = [
        ("step_start", {"turn": turn, "step": step}),
        ("assistant_message", message("thinking", tool_calls=calls)),
    ]
    dispatched = [cid for cid in ids if dispatches and draw(st.booleans())]
    items += [("tool_call", {"id": cid, "name": "echo"}) for cid in dispatched]
    for cid in ids:
        if draw(st.booleans()):
            items.append(("tool_result", message("ok", tool_call_id=cid, name="echo")))
    outcome = draw(st.sampled_from(["ok", "error"]))
    return items + [("step_end", {"turn": turn, "step": step, "outcome": outcome})]


@st.composite
def turns(draw, turn: int, call_ids: count, dispatches: bool) -> list[Item]:
    """A whole healthy turn, numbered or not, with zero or more steps."""
    numbered = draw(st.booleans())
    start = {"turn": turn} if numbered else {}
    items: list[Item] = [("turn_start", start)]
    step_count = draw(st.integers(0, 3))
    for step in range(1, step_count + 1):
        items += draw(steps(turn, step, call_ids, dispatches))
    reason = draw(st.sampled_from(["complete", "rejected"]))
    end = {"steps": step_count, "reason": reason} | ({"turn": turn} if numbered else {})
    return items + [("turn_end", end)]


@st.composite
def compaction(draw, length: int) -> Item:
    """A summary replacing a range of earlier positions (an in-place one when start == stop)."""
    start = draw(st.integers(0, length - 1))
    stop = draw(st.integers(start, length - 1))
    return ("user_message", message("summary", surface_op=["replace", start, stop]))


@st.composite
def logs(draw, crashes: bool = True, compactions: bool = True) -> list[Event]:
    """Runs of user message + turn; a crash cuts a turn anywhere after its turn_start (mid-step
    too), and the emitter may start the next turn without recovering (double-started turns)."""
    call_ids = count(1)
    dispatches = draw(st.booleans())  # many emitters write no tool_call events
    items: list[Item] = [("system_message", message("be brief"))]
    for turn in range(1, draw(st.integers(0, 3)) + 1):
        items.append(("user_message", message(f"question {turn}")))
        run = draw(turns(turn, call_ids, dispatches))
        if crashes and draw(st.booleans()):
            run = run[: draw(st.integers(1, len(run) - 1))]
        items += run
        if compactions and draw(st.integers(0, 3)) == 0:
            items.append(draw(compaction(len(items))))
    return events_of(items)


def clean_logs() -> st.SearchStrategy[list[Event]]:
    return logs(crashes=False)
