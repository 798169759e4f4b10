import json
from collections import Counter
from datetime import UTC, datetime

import pytest

from sessions_app.lib import demo
from sessions_app.log import events as log_events
from sessions_app.log import recovery

SEEDS = range(120)
START = datetime(2026, 1, 1, tzinfo=UTC)


def logged(scenario: demo.Scenario) -> list[log_events.Event]:
    """The scenario's events as a fresh session stores them: seq = index."""
    return [log_events.Event(seq, e["type"], START, e["data"]) for seq, e in enumerate(scenario.events)]


@pytest.fixture(scope="module")
def scenarios() -> list[demo.Scenario]:
    return [demo.scenario(seed) for seed in SEEDS]


def test_a_seed_always_gives_the_same_scenario():
    assert demo.scenario(7) == demo.scenario(7)
    assert demo.scenario(7, crash_rate=1.0) == demo.scenario(7, crash_rate=1.0)
    assert demo.scenario(7) != demo.scenario(8)


def test_every_batch_validates_and_holds_wire_events(scenarios):
    for scenario in scenarios:
        assert len(scenario.pauses) == len(scenario.batches)
        assert all(pause >= 0 for pause in scenario.pauses)
        for batch in scenario.batches:
            assert batch and all(set(event) == {"type", "data"} for event in batch)
            log_events.validate_batch(batch)


def test_timed_batches_carry_valid_times_from_the_pauses():
    scenario = demo.scenario(3)
    timed = demo.timed_batches(scenario, START)
    times = [log_events.validate_batch(batch)[0].time for batch in timed]
    assert times[0] == START
    assert times == sorted(times)
    assert (times[-1] - START).total_seconds() == pytest.approx(scenario.duration, abs=0.01)


def test_crashed_scenarios_end_inside_an_open_turn_and_clean_ones_close_everything(scenarios):
    risks = Counter()
    for scenario in scenarios:
        events = logged(scenario)
        plan = recovery.plan(events)
        assert bool(plan.open_turns) == scenario.crashes, scenario.session_id
        assert plan.warnings == []
        if scenario.crashes:
            assert scenario.crash_point in demo.CRASH_POINTS
            risks.update(repair.call.risk for repair in plan.repairs if repair.call)
        else:
            assert scenario.crash_point is None
            assert recovery.patch_dangling_tool_calls(events) == []  # every call got its result
    assert risks[recovery.TOOL_OUTCOME_UNKNOWN] and risks[recovery.TOOL_NOT_STARTED]


def test_crash_rate_bounds_the_crashes():
    assert not any(demo.scenario(seed, crash_rate=0.0).crashes for seed in SEEDS)
    assert all(demo.scenario(seed, crash_rate=1.0).crashes for seed in SEEDS)


def test_turns_and_steps_are_numbered_as_the_spec_writes_them(scenarios):
    for scenario in scenarios:
        turn = step = 0
        for event in scenario.events:
            data = event["data"]
            if event["type"] == "turn_start":
                turn, step = turn + 1, 0
                assert data == {"turn": turn}
            elif event["type"] == "step_start":
                step += 1
                assert data == {"turn": turn, "step": step}
            elif event["type"] == "step_end":
                assert (data["turn"], data["step"], data["outcome"] in {"ok", "error"}) == (turn, step, True)
            elif event["type"] == "turn_end":
                assert data["turn"] == turn and data["steps"] == step
                assert data["reason"] in {"complete", "rejected"}


def test_compactions_replace_ranges_that_exist_before_them(scenarios):
    compactions = 0
    for scenario in scenarios:
        for seq, event in enumerate(scenario.events):
            if event["data"].get("surface_op") is not None:
                _, start, stop = event["data"]["surface_op"]
                assert 0 <= start <= stop < seq
                compactions += 1
    assert compactions
    assert all(
        any(e["data"].get("surface_op") for e in demo.scenario(seed, compaction_rate=1.0).events) for seed in SEEDS
    )


def test_scenarios_cover_what_a_dashboard_must_handle(scenarios):
    events = [(scenario, event) for scenario in scenarios for event in scenario.events]
    calls = [e["data"]["tool_calls"] for _, e in events if e["type"] == "assistant_message"]
    results = [e["data"] for _, e in events if e["type"] == "tool_result"]
    dispatching = {s.agent_name for s, e in events if e["type"] == "tool_call"}
    calling = {s.agent_name for s, e in events if e["type"] == "assistant_message" and e["data"]["tool_calls"]}

    assert {s.agent_name for s in scenarios} == set(demo.AGENT_NAMES)
    assert any(len(c) > 1 for c in calls) and max(len(c) for c in calls) <= 3  # parallel calls
    assert dispatching and calling - dispatching  # agents with and without tool_call events
    assert any(r["metadata"].get("is_error") for r in results)
    assert any(len(r["content"]) > 10_000 for r in results)  # big payloads
    assert any("<script>" in str(e["data"].get("content")) for _, e in events)  # untrusted HTML
    assert any(e["data"].get("reasoning_content") for _, e in events if e["type"] == "assistant_message")
    assert any(e["data"].get("reason") == "rejected" for _, e in events if e["type"] == "turn_end")
    assert {s.crash_point for s in scenarios if s.crashes} == set(demo.CRASH_POINTS)


def turns(scenario: demo.Scenario) -> list[list[dict]]:
    """Each turn's events, from its user message to its turn_end (or the crash)."""
    found = []
    for event in scenario.events:
        if event["type"] == "user_message" and not event["data"].get("surface_op"):
            found.append([])
        if found:
            found[-1].append(event)
    return found


def test_a_turn_stops_at_a_failed_tool_and_says_what_failed_what_happened_and_what_did_not(scenarios):
    failed_turns = 0
    for scenario in scenarios:
        for events in turns(scenario):
            if events[-1]["type"] != "turn_end" or events[-1]["data"]["reason"] != "complete":
                continue
            reply = events[-3]["data"]["content"]
            assert events[-3]["type"] == "assistant_message" and not events[-3]["data"]["tool_calls"]
            results = [e["data"] for e in events if e["type"] == "tool_result"]
            errors = [r for r in results if r["metadata"].get("is_error")]
            if not errors:
                assert "could not" not in reply, (scenario.session_id, reply)
                continue
            failed_turns += 1
            assert reply.startswith("I could not finish: "), (scenario.session_id, reply)
            for result in errors:  # the transcript shows why
                assert f"{result['name']} failed ({result['content'].removeprefix('Error: ')})" in reply
            effects = [r["name"] for r in results if r not in errors and demo.side_effect_class(r["name"]) != "read_only"]
            assert (f"Already done: {', '.join(effects)}." in reply) == bool(effects), (scenario.session_id, reply)
            # No tool is called after the step whose result was an error.
            last_error = max(i for i, e in enumerate(events) if e["type"] == "tool_result" and e["data"] in errors)
            assert not any(e["type"] == "assistant_message" and e["data"]["tool_calls"] for e in events[last_error:])
    assert failed_turns


def test_final_answers_agree_with_the_tool_results(scenarios):
    checked = Counter()
    for scenario in scenarios:
        for events in turns(scenario):
            if events[-1]["type"] != "turn_end" or events[-1]["data"]["reason"] != "complete":
                continue
            reply = events[-3]["data"]["content"]
            if reply.startswith("I could not finish"):
                continue
            calls = {c["id"]: c for e in events if e["type"] == "assistant_message" for c in e["data"]["tool_calls"]}
            for result in (e["data"] for e in events if e["type"] == "tool_result"):
                call = calls[result["tool_call_id"]]
                if call["name"] == "search_flights":
                    cheapest = min(json.loads(result["content"])["options"], key=lambda o: o["price_usd"])
                    assert f"${cheapest['price_usd']} " in reply and cheapest["depart"] in reply, reply
                    checked["flights"] += 1
                elif call["name"] == "deploy_service":
                    assert f"in {call['arguments']['environment']}" in reply or f"to {call['arguments']['environment']}" in reply
                    checked["deploys"] += 1
                elif call["name"] == "get_invoice":
                    assert json.loads(result["content"])["status"] == "paid" and "unpaid" not in reply.replace("the unpaid notice", "")
                    checked["invoices"] += 1
    assert checked["flights"] and checked["deploys"] and checked["invoices"]
