"""Recovery strategies (session-log.md section 8.1): one per open turn, beside the plan."""

from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log.events import Event, call_id, tool_calls_of
from sessions_app.log.recovery import HAPPENED, NOT_HAPPENED, plan
from sessions_app.log.strategy import (
    MANUAL_CHECK,
    RESTART_TURN,
    RESUME_AFTER_EFFECTS,
    RISKY_CLASSES,
    context_message,
    deciding_in_wire,
    strategies,
)

from .strategies import events_of, logs, message

CLASSES = {"read_file": "read_only", "upsert": "idempotent", "send_email": "external_effect", "charge_card": "external_effect"}


def classes(name):
    return CLASSES.get(name, "unknown") if isinstance(name, str) else "unknown"


def call(cid, name):
    return {"id": cid, "name": name, "arguments": {}}


def ask(*calls):
    return ("assistant_message", message("", tool_calls=list(calls)))


def ran(cid, name, content="ok", **metadata):
    return ("tool_result", message(content, tool_call_id=cid, name=name, metadata=metadata))


def dispatch(cid, name):
    return ("tool_call", {"id": cid, "name": name})


def strategy_of(items):
    (turn,) = strategies(plan(events_of(items)), classes)
    return turn


def test_row_1_an_unknown_outcome_of_an_external_effect_needs_a_manual_check():
    items = [("turn_start", {"turn": 1}), ask(call("a", "send_email"), call("b", "charge_card")),
             dispatch("a", "send_email"), ran("a", "send_email", "sent"), dispatch("b", "charge_card")]  # fmt: skip
    turn = strategy_of(items)
    assert turn.strategy == MANUAL_CHECK
    assert [c.call.id for c in turn.unverified] == ["b"] and [c.call.id for c in turn.effects] == ["a"]
    assert [c.call.id for c in turn.deciding] == ["b"]


def test_row_1_a_tool_with_no_policy_counts_as_unknown():
    turn = strategy_of([("turn_start", {}), ask(call("a", "mystery")), dispatch("a", "mystery")])
    assert turn.strategy == MANUAL_CHECK and turn.calls[0].side_effect == "unknown"


def test_row_1_a_call_without_a_name_counts_as_unknown():
    turn = strategy_of([("turn_start", {}), ("assistant_message", message("", tool_calls=[{"id": "a"}]))])
    assert turn.strategy == MANUAL_CHECK and turn.calls[0].side_effect == "unknown"


def test_row_2_completed_effects_mean_resume_after_them():
    items = [("turn_start", {}), ask(call("a", "send_email"), call("b", "read_file")),
             dispatch("a", "send_email"), ran("a", "send_email"), dispatch("b", "read_file")]  # fmt: skip
    turn = strategy_of(items)
    assert turn.strategy == RESUME_AFTER_EFFECTS and [c.call.id for c in turn.deciding] == ["a"]


def test_row_2_an_error_result_counts_as_completed_the_tool_ran():
    items = [("turn_start", {}), ask(call("a", "send_email")), ran("a", "send_email", "SMTP 550", is_error=True)]
    assert strategy_of(items).strategy == RESUME_AFTER_EFFECTS


def test_row_2_a_not_started_external_effect_may_be_retried():
    # The turn logged a dispatch for b only: a is owed as not started (rule 2), which row 1 does not name.
    items = [("turn_start", {}), ask(call("a", "send_email"), call("b", "send_email")),
             dispatch("b", "send_email"), ran("b", "send_email")]  # fmt: skip
    turn = strategy_of(items)
    assert turn.strategy == RESUME_AFTER_EFFECTS
    assert {c.call.id: c.call.state for c in turn.calls} == {"a": "tool_not_started", "b": "completed"}


def test_row_3_read_only_and_idempotent_calls_allow_a_restart():
    items = [("turn_start", {}), ask(call("a", "read_file"), call("b", "upsert")),
             dispatch("a", "read_file"), ran("a", "read_file"), dispatch("b", "upsert")]  # fmt: skip
    turn = strategy_of(items)
    assert turn.strategy == RESTART_TURN and turn.deciding == []


def test_row_3_a_turn_without_calls_restarts():
    assert strategy_of([("turn_start", {"turn": 1}), ("step_start", {})]).strategy == RESTART_TURN


def test_a_call_answered_only_by_a_synthetic_result_is_skipped():
    items = [("turn_start", {}), ask(call("a", "send_email")),
             ran("a", "send_email", "interrupted", synthetic=True, risk="tool_outcome_unknown")]  # fmt: skip
    turn = strategy_of(items)
    assert turn.calls == () and turn.strategy == RESTART_TURN


def test_calls_before_the_turn_do_not_count():
    items = [ask(call("early", "send_email")), ran("early", "send_email"), ("turn_start", {}), ask(call("a", "read_file"))]
    assert strategy_of(items).strategy == RESTART_TURN


def test_a_result_logged_before_the_sighting_still_completes_the_call():
    items = [ran("a", "send_email"), ("turn_start", {}), ask(call("a", "send_email"))]
    turn = strategy_of(items)
    assert turn.strategy == RESUME_AFTER_EFFECTS and turn.calls[0].call.result_seq == 0


def test_nested_open_turns_each_see_their_own_and_nested_calls():
    items = [("turn_start", {"turn": 1}), ask(call("a", "send_email")), ran("a", "send_email"),
             ("turn_start", {"turn": 2}), ask(call("b", "read_file"))]  # fmt: skip
    inner, outer = strategies(plan(events_of(items)), classes)
    assert (inner.turn_seq, inner.strategy, [c.call.id for c in inner.calls]) == (3, RESTART_TURN, ["b"])
    assert (outer.turn_seq, outer.strategy, [c.call.id for c in outer.calls]) == (0, RESUME_AFTER_EFFECTS, ["a", "b"])


def test_a_closed_nested_turns_effects_count_for_the_open_turn_around_it():
    items = [("turn_start", {"turn": 1}), ("turn_start", {"turn": 2}), ask(call("a", "charge_card")),
             dispatch("a", "charge_card"), ("turn_end", {"reason": "complete"})]  # fmt: skip
    assert strategy_of(items).strategy == MANUAL_CHECK


def test_the_wire_form_lists_only_external_and_unknown_calls():
    items = [("turn_start", {}), ask(call("a", "send_email"), call("b", "read_file"), call("c", "charge_card")),
             ran("a", "send_email"), dispatch("c", "charge_card")]  # fmt: skip
    assert strategy_of(items).as_wire() == {
        "turn_seq": 0,
        "strategy": MANUAL_CHECK,
        "calls": [
            {"id": "a", "name": "send_email", "seq": 1, "class": "external_effect", "state": "completed", "verdict": None},
            {"id": "c", "name": "charge_card", "seq": 1, "class": "external_effect", "state": "tool_outcome_unknown", "verdict": None},
        ],
    }


def test_the_context_message_names_completed_effects_unknown_outcomes_and_the_strategy():
    items = [("turn_start", {"turn": 4}), ask(call("a", "send_email"), call("b", "charge_card")),
             ran("a", "send_email", "sent to ada@example.com"), dispatch("b", "charge_card")]  # fmt: skip
    turns = strategies(plan(events_of(items)), classes)
    data = context_message(turns, abandoned=False)
    assert data["metadata"] == {"synthetic": True, "recovery_context": True}
    text = data["content"]
    assert "Turn 4 (opened at seq 0): strategy manual_check" in text
    assert "Completed, never repeat: send_email (call a, seq 1), result at seq 2: sent to ada@example.com" in text
    assert "Outcome unknown, verify before retrying: charge_card (call b, seq 1)" in text
    assert "abandoned" in context_message(turns, abandoned=True)["content"]


def test_the_context_message_shortens_long_results():
    items = [("turn_start", {}), ask(call("a", "send_email")), ran("a", "send_email", "x" * 5000)]
    text = context_message(strategies(plan(events_of(items)), classes), abandoned=False)["content"]
    assert len(text) < 1000 and "x" * 199 + "…" in text


NAMES = ("read_file", "upsert", "send_email", "mystery")


def renamed(events: list[Event], names: dict[str, str]) -> list[Event]:
    """The generated logs call every tool "echo": give each call id a tool name."""

    def rename(data: dict) -> dict:
        cid = call_id(data)
        return {**data, "name": names[cid]} if cid in names else data

    out = []
    for e in events:
        data = e.data
        if e.type == "assistant_message":
            data = {**data, "tool_calls": [rename(c) for c in tool_calls_of(data)]}
        elif e.type in ("tool_call", "tool_result"):
            data = rename(data)
        out.append(Event(e.seq, e.type, e.time, data))
    return out


@st.composite
def classified_logs(draw):
    events = draw(logs())
    ids = {call_id(c) for e in events if e.type == "assistant_message" for c in tool_calls_of(e.data)}
    names = {cid: draw(st.sampled_from(NAMES)) for cid in sorted(ids - {None})}
    policy = {name: draw(st.sampled_from(["read_only", "idempotent", "external_effect", "unknown"])) for name in NAMES}
    return renamed(events, names), policy


def expected_strategy(events, turn_seq, side_effect_of, risks, verdicts=None) -> str:
    """Section 8.1's table as 8.2 amends it (`verdicts`: call id -> a log.recovery.Verdict), read straight off
    the log (an oracle, independent of the scan)."""
    verdicts = verdicts or {}
    first = {}
    for e in events:
        found_calls = tool_calls_of(e.data) if e.type == "assistant_message" else [e.data] if e.type == "tool_call" else []
        for c in found_calls:
            if call_id(c) is not None:
                first.setdefault(call_id(c), (e.seq, c.get("name")))
    inside = {cid: name for cid, (seq, name) in first.items() if seq > turn_seq}
    results = {}
    for e in events:
        if e.type == "tool_result":
            results.setdefault(call_id(e.data), []).append((e.data.get("metadata") or {}).get("synthetic") is True)
    states = {}
    for cid in inside:
        if cid in results:
            states[cid] = "completed" if not all(results[cid]) else None  # answered only synthetically: skipped
        else:
            states[cid] = risks[cid]
            outcome = verdicts[cid].outcome if cid in verdicts else None
            if states[cid] == "tool_outcome_unknown" and outcome == HAPPENED:
                states[cid] = "completed"
            elif states[cid] == "tool_outcome_unknown" and outcome == NOT_HAPPENED:
                states[cid] = "tool_not_started"
    risky = {cid for cid, name in inside.items() if side_effect_of(name) in RISKY_CLASSES}
    if any(states[cid] == "tool_outcome_unknown" for cid in risky):
        return MANUAL_CHECK
    if any(states[cid] == "completed" for cid in risky):
        return RESUME_AFTER_EFFECTS
    return RESTART_TURN


@given(classified_logs())
def test_strategies_follow_the_table_and_never_touch_the_plan(case):
    events, policy = case
    before = plan(events)
    side_effect_of = lambda name: policy.get(name, "unknown")  # noqa: E731
    turns = strategies(before, side_effect_of)
    after = plan(events)
    assert after.repairs == before.repairs and after.digest(len(events)) == before.digest(len(events))
    risks = {r.data["tool_call_id"]: r.data["metadata"]["risk"] for r in before.repairs if r.type == "tool_result"}
    assert [t.turn_seq for t in turns] == before.open_turns
    for turn in turns:
        # A call of a closed turn nested in an open one is owed no repair, but its risk still
        # counts (section 8.1): that risk is the scan's, the rest of the oracle is independent.
        nested = {c.call.id: c.call.state for c in turn.calls if not c.completed and c.call.id not in risks}
        assert turn.strategy == expected_strategy(events, turn.turn_seq, side_effect_of, risks | nested)
        if any(c.side_effect in RISKY_CLASSES for c in turn.calls if c.completed or c.outcome_unknown):
            assert turn.strategy != RESTART_TURN
        for c in turn.calls:  # an owed call's state is the risk the plan gives it, where the plan repairs it
            if not c.completed and c.call.id in risks:
                assert c.call.state == risks[c.call.id]


def test_a_call_of_a_closed_nested_turn_without_a_result_is_owed_with_its_risk():
    items = [("turn_start", {"turn": 1}), ("turn_start", {"turn": 2}), ask(call("a", "read_file")),
             ("turn_end", {"reason": "complete"}), ("step_start", {})]  # fmt: skip
    turn = strategy_of(items)
    # Not repaired (the plan owes results only for calls of open turns), yet the turn shows it.
    assert plan(events_of(items)).repairs[0].type == "turn_end"
    assert [(c.call.id, c.call.state) for c in turn.calls] == [("a", "tool_outcome_unknown")]
    assert turn.strategy == RESTART_TURN  # read-only


def test_the_calls_that_decided_a_recorded_strategy():
    calls = [
        {"id": "c1", "name": "charge_card", "seq": 3, "class": "external_effect", "state": "tool_outcome_unknown"},
        {"id": "c2", "name": "send_email", "seq": 3, "class": "external_effect", "state": "completed"},
        {"id": "c3", "name": None, "seq": 4, "class": "unknown", "state": "tool_not_started"},
    ]
    assert [c["id"] for c in deciding_in_wire({"strategy": MANUAL_CHECK, "calls": calls})] == ["c1"]
    assert [c["id"] for c in deciding_in_wire({"strategy": RESUME_AFTER_EFFECTS, "calls": calls})] == ["c2"]
    assert deciding_in_wire({"strategy": RESTART_TURN, "calls": calls}) == []
    assert deciding_in_wire({"strategy": MANUAL_CHECK, "calls": "odd"}) == deciding_in_wire(None) == []
