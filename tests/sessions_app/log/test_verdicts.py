"""Verdicts in the recovery plan and its strategies (session-log.md 8.2): what was found, never a state or a risk."""

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log import ledger
from sessions_app.log.events import call_id, tool_calls_of
from sessions_app.log.recovery import (
    HAPPENED,
    NOT_HAPPENED,
    NOT_STARTED_TEXT,
    Verdict,
    apply,
    plan,
)
from sessions_app.log.strategy import (
    MANUAL_CHECK,
    RESTART_TURN,
    RESUME_AFTER_EFFECTS,
    context_message,
    deciding_in_wire,
    strategies,
)

from .strategies import events_of
from .test_strategy import ask, call, classes, classified_logs, dispatch, expected_strategy, ran

AT = "2026-03-01T10:00:00Z"


def found(outcome, evidence="bank portal shows the wire", ref="W-123", by="vera"):
    return Verdict(outcome=outcome, evidence=evidence, external_ref=ref, by=by, at=AT)


CRASH = [("turn_start", {"turn": 1}), ("step_start", {}), ask(call("c1", "charge_card"), call("c2", "send_email")),
         dispatch("c1", "charge_card")]  # fmt: skip


def owed_results(p):
    return {r.data["tool_call_id"]: r.data for r in p.repairs if r.type == "tool_result"}


def test_an_owed_call_with_a_verdict_says_what_was_found_beside_its_risk():
    data = owed_results(plan(events_of(CRASH), verdicts={"c1": found(HAPPENED)}))["c1"]
    assert data["metadata"] == {
        "synthetic": True,
        "risk": "tool_outcome_unknown",
        "verdict": {"outcome": "happened", "evidence": "bank portal shows the wire", "external_ref": "W-123", "by": "vera", "at": AT},
    }
    assert data["content"] == (
        "Tool call was dispatched and the session was interrupted before its result was recorded. "
        "It was verified as having happened by vera: bank portal shows the wire (ref W-123). Do not repeat it."
    )


def test_a_not_happened_verdict_says_the_call_may_be_retried():
    data = owed_results(plan(events_of(CRASH), verdicts={"c1": found(NOT_HAPPENED, "bank portal, no wire", None)}))["c1"]
    assert data["metadata"]["risk"] == "tool_outcome_unknown"
    assert data["metadata"]["verdict"]["external_ref"] is None
    assert "verified as not having happened by vera: bank portal, no wire: it may be retried." in data["content"]
    assert "MAY have run" not in data["content"]


def test_calls_without_a_verdict_keep_the_spec_text():
    results = owed_results(plan(events_of(CRASH), verdicts={"c1": found(HAPPENED)}))
    assert results["c2"]["metadata"] == {"synthetic": True, "risk": "tool_not_started"}
    assert results["c2"]["content"] == NOT_STARTED_TEXT


def test_the_digest_covers_the_verdict():
    events = events_of(CRASH)
    bare = plan(events).digest(len(events))
    happened = plan(events, verdicts={"c1": found(HAPPENED)}).digest(len(events))
    not_happened = plan(events, verdicts={"c1": found(NOT_HAPPENED)}).digest(len(events))
    other_evidence = plan(events, verdicts={"c1": found(HAPPENED, "seen in the ledger")}).digest(len(events))
    assert len({bare, happened, not_happened, other_evidence}) == 4


def test_a_verdict_on_a_call_outside_the_open_turns_changes_nothing():
    events = events_of(CRASH)
    assert plan(events, verdicts={"elsewhere": found(HAPPENED)}).repairs == plan(events).repairs


def test_happened_unknown_external_calls_mean_resume_after_effects():
    items = [("turn_start", {}), ask(call("c1", "charge_card")), dispatch("c1", "charge_card")]
    (turn,) = strategies(plan(events_of(items), verdicts={"c1": found(HAPPENED)}), classes)
    assert turn.strategy == RESUME_AFTER_EFFECTS
    assert [c.call.id for c in turn.effects] == [c.call.id for c in turn.deciding] == ["c1"]
    assert turn.unverified == []
    assert turn.calls[0].call.state == "tool_outcome_unknown"  # the log's state stays


def test_not_happened_unknown_external_calls_mean_restart_turn():
    items = [("turn_start", {}), ask(call("c1", "charge_card")), dispatch("c1", "charge_card")]
    (turn,) = strategies(plan(events_of(items), verdicts={"c1": found(NOT_HAPPENED)}), classes)
    assert turn.strategy == RESTART_TURN and turn.deciding == [] and turn.effects == []
    assert turn.calls[0].counted_state == "tool_not_started"


def test_row_1_names_only_unknown_calls_without_a_verdict():
    items = [("turn_start", {}), ask(call("c1", "charge_card"), call("c2", "send_email")),
             dispatch("c1", "charge_card"), dispatch("c2", "send_email")]  # fmt: skip
    (turn,) = strategies(plan(events_of(items), verdicts={"c1": found(HAPPENED)}), classes)
    assert turn.strategy == MANUAL_CHECK
    assert [c.call.id for c in turn.unverified] == ["c2"]


def test_the_wire_form_carries_the_outcome_word():
    items = [("turn_start", {}), ask(call("c1", "charge_card"), call("c2", "send_email")),
             dispatch("c1", "charge_card"), dispatch("c2", "send_email")]  # fmt: skip
    (turn,) = strategies(plan(events_of(items), verdicts={"c2": found(NOT_HAPPENED)}), classes)
    wire = turn.as_wire()
    assert [(c["id"], c["state"], c["verdict"]) for c in wire["calls"]] == [
        ("c1", "tool_outcome_unknown", None),
        ("c2", "tool_outcome_unknown", "not_happened"),
    ]
    assert [c["id"] for c in deciding_in_wire(wire)] == ["c1"]


def test_a_recorded_strategy_counts_happened_calls_among_its_effects():
    calls = [
        {"id": "c1", "name": "charge_card", "seq": 3, "class": "external_effect", "state": "tool_outcome_unknown", "verdict": "happened"},
        {"id": "c2", "name": "send_email", "seq": 3, "class": "external_effect", "state": "completed", "verdict": None},
    ]
    assert [c["id"] for c in deciding_in_wire({"strategy": RESUME_AFTER_EFFECTS, "calls": calls})] == ["c1", "c2"]
    assert deciding_in_wire({"strategy": MANUAL_CHECK, "calls": calls}) == []


def test_the_context_message_says_what_was_found_by_whom_and_the_reference():
    items = [("turn_start", {"turn": 2}), ask(call("c1", "charge_card"), call("c2", "send_email")),
             dispatch("c1", "charge_card"), dispatch("c2", "send_email")]  # fmt: skip
    verdicts = {
        "c1": found(HAPPENED, "found by idempotency key", "ch_3Px", by="reconciler:charge_*"),
        "c2": found(NOT_HAPPENED, "no such email in the outbox", None),
    }
    text = context_message(strategies(plan(events_of(items), verdicts=verdicts), classes), abandoned=False)["content"]
    assert "charge_card (call c1, seq 1): verified happened by reconciler:charge_* (ref ch_3Px): do not repeat it" in text
    assert "send_email (call c2, seq 1): verified not happened by vera: it may be retried" in text
    assert "found by idempotency key" in text and "Outcome unknown" not in text and "Completed, never repeat" not in text
    assert "strategy resume_after_effects" in text


# --- Property: over random logs and random verdicts ---------------------------------------------


@st.composite
def judged_logs(draw):
    events, policy = draw(classified_logs())
    ids = sorted({cid for e in events if e.type == "assistant_message" for c in tool_calls_of(e.data) if (cid := call_id(c)) is not None})
    verdicts = {}
    for cid in ids:
        outcome = draw(st.sampled_from([None, HAPPENED, NOT_HAPPENED]))
        if outcome is not None:
            verdicts[cid] = Verdict(outcome, draw(st.sampled_from(["seen", "not there"])), draw(st.sampled_from([None, "R-1"])), "vera", AT)
    return events, policy, verdicts


def without_verdict(data: dict) -> dict:
    metadata = {k: v for k, v in data["metadata"].items() if k != "verdict"}
    return {k: v for k, v in data.items() if k != "content"} | {"metadata": metadata}


@given(judged_logs())
def test_verdicts_change_only_what_section_8_2_says(case):
    events, policy, verdicts = case
    side_effect_of = lambda name: policy.get(name, "unknown")  # noqa: E731
    bare, judged = plan(events), plan(events, verdicts=verdicts)
    # The repairs differ only in the verdict and the words stating it.
    assert [(r.type, r.call) for r in bare.repairs] == [(r.type, r.call) for r in judged.repairs]
    for before, after in zip(bare.repairs, judged.repairs, strict=True):
        if before.type != "tool_result":
            assert before.data == after.data
            continue
        verdict = verdicts.get(before.data["tool_call_id"])
        assert without_verdict(before.data) == without_verdict(after.data)
        assert after.data["metadata"]["risk"] == before.data["metadata"]["risk"]
        if verdict is None:
            assert after.data == before.data
        else:
            assert after.data["metadata"]["verdict"] == verdict.as_data()
            assert verdict.evidence in after.data["content"] and after.data["content"] != before.data["content"]
    # No call's state changes: before recovery, nor after either plan is applied.
    now = datetime(2026, 3, 1, tzinfo=UTC)

    def states(log):
        return ledger.call_states(log, running=False, active=False, patch_seqs=())

    assert states(events + apply(events, bare.repairs, now)) == states(events + apply(events, judged.repairs, now))
    # The strategies follow the amended table.
    risks = {r.data["tool_call_id"]: r.data["metadata"]["risk"] for r in bare.repairs if r.type == "tool_result"}
    for turn in strategies(judged, side_effect_of):
        nested = {c.call.id: c.call.state for c in turn.calls if c.call.state != "completed" and c.call.id not in risks}
        assert turn.strategy == expected_strategy(events, turn.turn_seq, side_effect_of, risks | nested, verdicts)
        assert all((c.verdict is None) == (c.call.id not in verdicts) for c in turn.calls)
