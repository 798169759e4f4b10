import hashlib
import json
from datetime import UTC, datetime

from hypothesis import given

from sessions_app.log.events import Event, call_id, event_from_wire, event_to_wire
from sessions_app.log.recovery import apply, interrupted, open_turns, patch_dangling_tool_calls, plan

from .strategies import clean_logs, events_of, logs, message

RECOVERED_AT = datetime(2026, 2, 1, tzinfo=UTC)
NOT_STARTED = (
    "Tool call was interrupted before it was dispatched. It did not run and had no side effects."
    " Retry if needed."
)
OUTCOME_UNKNOWN = (
    "Tool call was dispatched but the session was interrupted before its result was recorded."
    " It MAY have run and MAY have had side effects. Verify state before retrying."
)
DANGLING = "Tool call was interrupted and not executed. Please retry if needed."


def assistant(*ids: str) -> tuple[str, dict]:
    calls = [{"id": cid, "name": "echo", "arguments": {"i": cid}} for cid in ids]
    return ("assistant_message", message("", tool_calls=calls))


def result(cid: str) -> tuple[str, dict]:
    return ("tool_result", message("ok", tool_call_id=cid, name="echo"))


def dispatch(cid: str) -> tuple[str, dict]:
    return ("tool_call", {"id": cid, "name": "echo"})


def synthetic(cid: str, text: str, risk: str) -> dict:
    return {"tool_call_id": cid, "name": "echo", "content": text, "metadata": {"synthetic": True, "risk": risk}}


def repairs_of(events) -> list[tuple[str, dict]]:
    return [(r.type, r.data) for r in plan(events).repairs]


def recovered(events):
    return [*events, *apply(events, plan(events).repairs, RECOVERED_AT)]


WORKED_EXAMPLE = [
    ("user_message", message("go")),
    ("turn_start", {"turn": 1}),
    ("step_start", {"turn": 1, "step": 1}),
    assistant("c1", "c2"),
    dispatch("c1"),
    result("c1"),
    ("step_end", {"turn": 1, "step": 1, "outcome": "ok"}),
    ("step_start", {"turn": 1, "step": 2}),
    assistant("c3"),
    dispatch("c3"),
]


def test_worked_example_with_tool_call_events():
    events = events_of(WORKED_EXAMPLE)
    recovery = plan(events)
    assert recovery.open_turns == [1] and recovery.interrupted and recovery.warnings == []
    assert [(r.type, r.data) for r in recovery.repairs] == [
        ("tool_result", synthetic("c2", NOT_STARTED, "tool_not_started")),
        ("tool_result", synthetic("c3", OUTCOME_UNKNOWN, "tool_outcome_unknown")),
        ("turn_end", {"reason": "interrupted", "steps": 2, "turn": 1}),
    ]
    c2, c3, turn_end = recovery.repairs
    assert (c2.call.rule, c2.call.evidence) == (2, (4, 9))  # the turn's dispatches of c1 and c3
    assert (c3.call.rule, c3.call.evidence) == (1, (9,))
    assert (c2.call.turn_seq, c2.call.step_seq, c2.call.sighted_seq) == (1, 2, 3)
    assert (c3.call.step_seq, c3.call.arguments) == (7, {"i": "c3"})
    assert turn_end.call is None


def test_worked_example_without_tool_call_events():
    events = events_of([item for item in WORKED_EXAMPLE if item[0] != "tool_call"])
    c2, c3, turn_end = plan(events).repairs
    assert c2.data == synthetic("c2", NOT_STARTED, "tool_not_started")
    assert (c2.call.rule, c2.call.evidence) == (3, (5,))  # the step_end that closed c2's step
    assert c3.data == synthetic("c3", OUTCOME_UNKNOWN, "tool_outcome_unknown")
    assert (c3.call.rule, c3.call.evidence) == (4, ())
    assert turn_end.data == {"reason": "interrupted", "steps": 2, "turn": 1}


def test_a_dispatched_call_is_unknown_even_when_its_step_closed():
    events = events_of([("turn_start", {"turn": 1}), ("step_start", {}), assistant("c1"), dispatch("c1"),
                        ("step_end", {})])  # fmt: skip
    (owed, _) = plan(events).repairs
    assert (owed.call.risk, owed.call.rule) == ("tool_outcome_unknown", 1)


def test_a_zero_step_turn_closes_with_steps_0():
    assert repairs_of(events_of([("turn_start", {"turn": 3})])) == [
        ("turn_end", {"reason": "interrupted", "steps": 0, "turn": 3})
    ]


def test_turn_end_names_the_turn_only_when_its_start_has_an_integer_turn():
    for start in ({}, {"turn": None}, {"turn": True}, {"turn": "1"}, {"turn": 1.0}):
        (turn_end,) = repairs_of(events_of([("turn_start", start)]))
        assert turn_end == ("turn_end", {"reason": "interrupted", "steps": 0})


def test_calls_outside_turns_are_left_to_the_patch():
    events = events_of([assistant("early"), ("turn_start", {"turn": 1})])
    assert repairs_of(events) == [("turn_end", {"reason": "interrupted", "steps": 0, "turn": 1})]


def test_a_clean_log_with_dangling_calls_gets_an_empty_plan_but_is_patched():
    events = events_of([("turn_start", {"turn": 1}), assistant("c1", "c2"), result("c2"),
                        ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}), assistant("c3")])  # fmt: skip
    recovery = plan(events)
    assert (recovery.open_turns, recovery.repairs, recovery.interrupted) == ([], [], False)
    patches = patch_dangling_tool_calls(events)
    assert [(r.type, r.data, r.call) for r in patches] == [
        ("tool_result", {"tool_call_id": cid, "name": "echo", "content": DANGLING, "metadata": {}}, None)
        for cid in ("c1", "c3")
    ]


def test_recovering_twice_appends_nothing_the_second_time():
    once = recovered(events_of(WORKED_EXAMPLE))
    assert len(once) == len(WORKED_EXAMPLE) + 3
    assert plan(once).repairs == [] and not interrupted(once)


def through_json(events):
    return [event_from_wire(w) for w in json.loads(json.dumps([event_to_wire(e) for e in events]))]


def test_a_log_that_came_back_through_json_gives_the_same_plan():
    once = recovered(events_of(WORKED_EXAMPLE))  # "interrupted" and the risks are plain strings now
    crashed_again = [*once, Event(len(once), "turn_start", RECOVERED_AT, {"turn": 2})]
    assert plan(through_json(crashed_again)) == plan(crashed_again)
    assert repairs_of(crashed_again) == [("turn_end", {"reason": "interrupted", "steps": 0, "turn": 2})]


def test_double_started_turns_close_innermost_first():
    events = events_of([("turn_start", {"turn": 1}), assistant("a"), ("turn_start", {"turn": 2}),
                        ("step_start", {}), assistant("b")])  # fmt: skip
    recovery = plan(events)
    assert recovery.open_turns == open_turns(events) == [2, 0]
    assert [(r.type, r.data.get("tool_call_id") or r.data["turn"]) for r in recovery.repairs] == [
        ("tool_result", "b"), ("turn_end", 2), ("tool_result", "a"), ("turn_end", 1),
    ]  # fmt: skip
    assert [r.data["steps"] for r in recovery.repairs if r.type == "turn_end"] == [1, 0]


def test_a_stray_turn_end_is_reported():
    events = events_of([("turn_end", {"reason": "complete"}), ("turn_start", {"turn": 1})])
    recovery = plan(events)
    assert recovery.warnings == ["turn_end at seq 0 closes no open turn"]
    assert recovery.open_turns == [1]


def test_the_first_sighting_of_a_call_wins():
    first = ("assistant_message", message("", tool_calls=[{"id": "c1", "name": "first", "arguments": 1}]))
    again = ("assistant_message", message("", tool_calls={"id": "c1", "name": "second"}))
    events = events_of([("turn_start", {"turn": 1}), first, ("step_start", {}), again])
    owed, _ = plan(events).repairs
    assert owed.data["name"] == "first"
    assert (owed.call.sighted_seq, owed.call.step_seq, owed.call.arguments) == (1, None, 1)


def test_a_result_carrying_only_id_answers_its_call():
    answer = ("tool_result", {"id": "c1", "content": "ok"})
    events = events_of([("turn_start", {"turn": 1}), assistant("c1"), answer])
    assert [r.type for r in plan(events).repairs] == ["turn_end"]
    assert patch_dangling_tool_calls(events) == []


def test_recovery_first_then_the_patch_finds_nothing():
    events = recovered(events_of(WORKED_EXAMPLE))
    assert patch_dangling_tool_calls(events) == []


def test_integer_and_boolean_call_ids_are_matched_as_strings():
    events = events_of([("turn_start", {}), ("assistant_message", {"tool_calls": [{"id": 7}, {"id": True}]}),
                        ("tool_result", {"tool_call_id": "7"})])  # fmt: skip
    assert [r.data.get("tool_call_id") for r in plan(events).repairs] == ["true", None]


def test_the_digest_covers_next_seq_and_the_repairs():
    recovery = plan(events_of(WORKED_EXAMPLE))
    canonical = json.dumps(
        {"next_seq": 10, "repairs": [{"type": r.type, "data": r.data} for r in recovery.repairs]},
        sort_keys=True,
        separators=(",", ":"),
    )
    assert recovery.digest(10) == hashlib.sha256(canonical.encode()).hexdigest()
    assert recovery.digest(11) != recovery.digest(10)


def test_interrupted_keys_on_event_types_not_on_reason():
    assert not interrupted(events_of([("turn_start", {}), ("turn_end", {"reason": "interrupted"})]))
    assert interrupted(events_of([("turn_start", {}), ("step_end", {"reason": "complete"})]))


# properties over generated logs


@given(logs())
def test_recovery_appends_contiguous_seqs_and_only_results_and_turn_ends(events):
    after = recovered(events)
    assert [e.seq for e in after] == list(range(len(after)))
    assert {e.type for e in after[len(events) :]} <= {"tool_result", "turn_end"}


@given(clean_logs())
def test_a_clean_log_gets_an_empty_plan(events):
    assert plan(events).repairs == [] and open_turns(events) == []


@given(logs())
def test_recovery_closes_every_turn_and_answers_every_owed_call_once(events):
    owed = [r.call.id for r in plan(events).repairs if r.call]
    after = recovered(events)
    answers = [call_id(e.data) for e in after if e.type == "tool_result"]
    assert all(answers.count(cid) == 1 for cid in owed)
    assert open_turns(after) == []
    assert plan(after).repairs == []
    assert {r.data["tool_call_id"] for r in patch_dangling_tool_calls(after)}.isdisjoint(owed)


@given(logs())
def test_the_plan_survives_a_json_round_trip(events):
    assert plan(through_json(events)) == plan(events)


def test_the_patch_reads_the_fold_so_a_compacted_call_needs_no_answer():
    summary = ("user_message", message("earlier work", surface_op=["replace", 0, 0]))
    events = events_of([assistant("hidden"), assistant("shown"), summary])
    assert [r.data["tool_call_id"] for r in patch_dangling_tool_calls(events)] == ["shown"]


def test_each_rules_explanation_agrees_with_the_text_recovery_appends():
    from sessions_app.log.recovery import RISK_HEADLINES, RULE_REASONS

    # Rule 4 appends "Tool call was dispatched but ...": its explanation may not say the log
    # cannot tell whether it was dispatched; it says why recovery takes it as dispatched.
    assert "whether it was dispatched" not in RULE_REASONS[4]
    assert "treats it as dispatched" in RULE_REASONS[4]
    # Rules 2 and 3 append "... interrupted before it was dispatched. It did not run ...".
    for rule in (2, 3):
        assert "may have run" not in RULE_REASONS[rule]
    assert OUTCOME_UNKNOWN.startswith("Tool call was dispatched") and "MAY have run" in OUTCOME_UNKNOWN
    assert RISK_HEADLINES == {"tool_not_started": "Not started: it did not run", "tool_outcome_unknown": "Outcome unknown: it may have run"}


def test_rule_4_classifies_a_call_of_an_open_step_in_a_turn_without_dispatches():
    events = events_of(WORKED_EXAMPLE[:4] + [("step_end", {"outcome": "ok"}), ("step_start", {}), assistant("c3")])
    owed = {r.call.id: r.call for r in plan(events).repairs if r.call}
    assert (owed["c3"].rule, owed["c3"].risk) == (4, "tool_outcome_unknown")
    assert next(r for r in plan(events).repairs if r.call and r.call.id == "c3").data["content"] == OUTCOME_UNKNOWN
