"""The state of every sighted call (api.md, "Calls, notes and search"): one example per rule, then properties."""

from datetime import UTC, datetime, timedelta
from itertools import product

from hypothesis import example, given
from hypothesis import strategies as st

from sessions_app.log.events import Event
from sessions_app.log.ledger import (
    COMPLETED,
    ERROR,
    NO_RESULT,
    PENDING,
    STATES,
    SUPERSEDED,
    CallState,
    call_states,
)
from sessions_app.log.recovery import TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, apply, patch_dangling_tool_calls, plan
from tests.wire_batches import batches_of

from .strategies import T0, events_of, logs, message
from .test_recovery import WORKED_EXAMPLE, assistant, dispatch, result

LATER = datetime(2026, 2, 1, tzinfo=UTC)
STATUS_WORDS = [{"running": running, "active": active} for running, active in product([True, False], repeat=2)]


def states(events, *, running=False, active=False, patch_seqs=()) -> dict[str, tuple[str, int | None]]:
    """call id -> (state, result_seq)."""
    return {c.call_id: (c.state, c.result_seq) for c in call_states(events, running=running, active=active, patch_seqs=patch_seqs)}


def recovered(events: list[Event]) -> list[Event]:
    return [*events, *apply(events, plan(events).repairs, LATER)]


def patched(events: list[Event]) -> tuple[list[Event], set[int]]:
    """The log after the dangling-call patch, and the seqs the patch wrote (as storage records them)."""
    appended = apply(events, patch_dangling_tool_calls(events), LATER)
    return [*events, *appended], {e.seq for e in appended}


def then(events: list[Event], *items) -> list[Event]:
    """`events` followed by more items, seqs continuing."""
    return events_of([(e.type, e.data) for e in events] + list(items))


def failed(cid: str, **metadata) -> tuple[str, dict]:
    return ("tool_result", message("boom", tool_call_id=cid, name="echo", metadata=metadata))


def agent_synthetic(cid: str, **metadata) -> tuple[str, dict]:
    """A result an agent marked synthetic itself: only recovery writes a risk, and maybe not this one."""
    return ("tool_result", message("?", tool_call_id=cid, name="echo", metadata={"synthetic": True, **metadata}))


CLOSED_TURN_LEFT_C1 = [
    ("user_message", message("go")),
    ("turn_start", {"turn": 1}),
    assistant("c1"),
    ("turn_end", {"turn": 1, "steps": 0, "reason": "complete"}),
]

# Rule 1: superseded ---------------------------------------------------------


def test_rule_1_a_late_real_result_after_a_dangling_call_patch_supersedes_it():
    log, patch_seqs = patched(events_of(CLOSED_TURN_LEFT_C1))
    assert patch_seqs == {4}
    log = then(log, result("c1"))
    assert states(log, patch_seqs=patch_seqs)["c1"] == (SUPERSEDED, 5)
    # The patch is known by where it was stored: without its seqs, its result reads as the tool's.
    assert states(log)["c1"] == (COMPLETED, 4)


def test_rule_1_a_late_real_result_after_recovery_supersedes_its_synthetic_one():
    log = recovered(events_of(WORKED_EXAMPLE))  # c2 at seq 10 (not started), c3 at 11 (outcome unknown)
    log = then(log, result("c3"))
    assert states(log)["c3"] == (SUPERSEDED, 13)
    assert states(log)["c2"] == (TOOL_NOT_STARTED, 10)


def test_rule_1_a_second_synthetic_result_is_not_a_real_one():
    log = then(recovered(events_of(WORKED_EXAMPLE)), agent_synthetic("c3", risk=TOOL_NOT_STARTED))
    assert states(log)["c3"] == (TOOL_OUTCOME_UNKNOWN, 11)  # still only synthetic: the first one's risk
    log = then(log, result("c3"))
    assert states(log)["c3"] == (SUPERSEDED, 14)  # the real result's seq, not the second synthetic's


def test_rule_1_a_stand_in_after_the_first_real_result_supersedes_nothing():
    log = events_of([*CLOSED_TURN_LEFT_C1, result("c1"), agent_synthetic("c1", risk=TOOL_NOT_STARTED), result("c1")])
    assert states(log, patch_seqs={5})["c1"] == (COMPLETED, 4)


# Rule 2: error or completed --------------------------------------------------


def test_rule_2_the_first_real_result_decides_error_or_completed():
    assert states(events_of([*CLOSED_TURN_LEFT_C1, result("c1")]))["c1"] == (COMPLETED, 4)
    assert states(events_of([*CLOSED_TURN_LEFT_C1, failed("c1", is_error=True), result("c1")]))["c1"] == (ERROR, 4)
    assert states(events_of([*CLOSED_TURN_LEFT_C1, result("c1"), failed("c1", is_error=True)]))["c1"] == (COMPLETED, 4)


def test_rule_2_is_error_or_error_true_or_non_empty():
    says_error = [{"is_error": True}, {"error": True}, {"error": "timeout"}, {"error": ["x"]}, {"error": {"code": 1}},
                  {"is_error": False, "error": "x"}, {"is_error": "false"}]  # fmt: skip
    says_nothing = [{}, {"is_error": False}, {"error": ""}, {"error": []}, {"error": {}}, {"error": None},
                    {"is_error": 1}, {"error": 0}, {"failed": True}]  # fmt: skip
    for metadata in says_error:
        assert states(events_of([*CLOSED_TURN_LEFT_C1, failed("c1", **metadata)]))["c1"][0] == ERROR, metadata
    for metadata in says_nothing:
        assert states(events_of([*CLOSED_TURN_LEFT_C1, failed("c1", **metadata)]))["c1"][0] == COMPLETED, metadata
    for not_an_object in (None, ["error"], "error", True):
        log = events_of([*CLOSED_TURN_LEFT_C1, ("tool_result", {"tool_call_id": "c1", "metadata": not_an_object})])
        assert states(log)["c1"][0] == COMPLETED, not_an_object


# Rule 3: only synthetic results ----------------------------------------------


def test_rule_3_only_synthetic_results_read_the_risk_recovery_wrote():
    log = recovered(events_of(WORKED_EXAMPLE))
    assert states(log) == {"c1": (COMPLETED, 5), "c2": (TOOL_NOT_STARTED, 10), "c3": (TOOL_OUTCOME_UNKNOWN, 11)}


def test_rule_3_a_synthetic_result_without_a_risk_reads_outcome_unknown():
    for metadata in ({}, {"risk": "fine"}, {"risk": None}):
        log = events_of([*CLOSED_TURN_LEFT_C1, agent_synthetic("c1", **metadata)])
        assert states(log)["c1"] == (TOOL_OUTCOME_UNKNOWN, 4), metadata


def test_rule_3_a_synthetic_result_beside_a_patch_result_keeps_its_risk():
    log = events_of([*CLOSED_TURN_LEFT_C1, ("tool_result", message("patched", tool_call_id="c1")),
                     agent_synthetic("c1", risk=TOOL_NOT_STARTED)])  # fmt: skip
    assert states(log, patch_seqs={4})["c1"] == (TOOL_NOT_STARTED, 5)


# Rule 4: only dangling-call patch results ------------------------------------


def test_rule_4_only_a_patch_result_is_no_result():
    log, patch_seqs = patched(events_of(CLOSED_TURN_LEFT_C1))
    for words in STATUS_WORDS:
        assert states(log, patch_seqs=patch_seqs, **words)["c1"] == (NO_RESULT, 4)


def test_rule_4_a_patch_result_outside_every_turn_is_no_result_while_active():
    log, patch_seqs = patched(events_of([("user_message", message("go")), assistant("c1")]))
    assert states(log, patch_seqs=patch_seqs, active=True)["c1"] == (NO_RESULT, 2)


# Rule 5: owed by an open turn ------------------------------------------------


def test_rule_5_an_owed_call_is_pending_while_running_else_the_plans_risk():
    log = events_of(WORKED_EXAMPLE)
    assert states(log, running=True) == {"c1": (COMPLETED, 5), "c2": (PENDING, None), "c3": (PENDING, None)}
    for active in (True, False):  # stalled: whatever the other word says
        got = states(log, running=False, active=active)
        assert got == {"c1": (COMPLETED, 5), "c2": (TOOL_NOT_STARTED, None), "c3": (TOOL_OUTCOME_UNKNOWN, None)}


def test_rule_5_a_call_known_only_from_its_tool_call_event_has_a_state():
    log = events_of([("user_message", message("go")), ("turn_start", {"turn": 1}),
                     ("tool_call", {"id": "c9", "type": "function", "function": {"name": "send_email", "arguments": '{"to": "a"}'}})])  # fmt: skip
    (call,) = call_states(log, running=False, active=False, patch_seqs=())
    assert call == CallState("c9", "send_email", {"to": "a"}, 2, 1, TOOL_OUTCOME_UNKNOWN, None)
    assert states(log, running=True)["c9"] == (PENDING, None)


# Rule 6: sighted outside every turn ------------------------------------------


def test_rule_6_outside_every_turn_pending_while_running_or_active_else_no_result():
    log = events_of([("user_message", message("go")), assistant("c1"), ("turn_start", {"turn": 1}), assistant("c2")])
    assert [(c.call_id, c.turn_seq) for c in call_states(log, running=False, active=False, patch_seqs=())] == [("c1", None), ("c2", 2)]
    assert states(log, running=True)["c1"] == (PENDING, None)
    assert states(log, running=False, active=True)["c1"] == (PENDING, None)
    assert states(log, running=False, active=False)["c1"] == (NO_RESULT, None)


# Rule 7: its turn closed -----------------------------------------------------


def test_rule_7_a_closed_turns_call_is_no_result_whatever_the_status():
    for words in STATUS_WORDS:
        assert states(events_of(CLOSED_TURN_LEFT_C1), **words) == {"c1": (NO_RESULT, None)}


def test_rule_7_a_closed_nested_turn_inside_an_open_one():
    log = events_of([("turn_start", {"turn": 1}), assistant("c1"), ("turn_start", {"turn": 2}), assistant("c2"),
                     ("turn_end", {"turn": 2, "reason": "complete"}), assistant("c3")])  # fmt: skip
    assert [(c.call_id, c.turn_seq) for c in call_states(log, running=True, active=False, patch_seqs=())] == [("c1", 0), ("c2", 2), ("c3", 0)]
    # The plan owes the open turn's own calls only: c2's turn closed without it.
    assert states(log, running=True) == {"c1": (PENDING, None), "c2": (NO_RESULT, None), "c3": (PENDING, None)}
    assert states(log, running=False)["c2"] == (NO_RESULT, None)


def test_rule_7_a_call_known_only_from_a_tool_call_event_of_a_closed_turn():
    log = events_of([("turn_start", {}), dispatch("c1"), ("turn_end", {"reason": "complete"})])
    assert states(log, running=False, active=True) == {"c1": (NO_RESULT, None)}


# Sightings -------------------------------------------------------------------


def test_a_call_is_listed_once_at_its_first_sighting_with_what_it_said_there():
    log = events_of([("turn_start", {}), ("tool_call", {"id": 7, "name": "early"}),
                     ("assistant_message", message("", tool_calls=[{"id": "7", "name": "late", "arguments": {"a": 1}}, {"id": None}])),
                     assistant("c2"), ("tool_result", {"id": 7, "content": "ok"})])  # fmt: skip
    calls = call_states(log, running=True, active=False, patch_seqs=())
    assert [(c.call_id, c.seq, c.name, c.arguments, c.state, c.result_seq) for c in calls] == [
        ("7", 1, "early", None, COMPLETED, 4),  # an integer id reads as its text; a result carrying only `id` answers it
        ("c2", 3, "echo", {"i": "c2"}, PENDING, None),
    ]


def test_an_empty_log_and_a_log_without_calls_have_no_states():
    assert call_states([], running=False, active=False, patch_seqs=()) == []
    no_calls = events_of([("user_message", message("hi")), ("tool_result", message("x", tool_call_id="c1"))])
    assert call_states(no_calls, running=True, active=True, patch_seqs=()) == []


# Properties --------------------------------------------------------------------


def stored(batch: list[dict]) -> list[Event]:
    """An accepted wire batch as storage keeps it (the times an agent claims matter to no state)."""
    return [Event(seq, e["type"], T0 + timedelta(seconds=seq), e["data"]) for seq, e in enumerate(batch)]


# Odd shapes from the readback test (ids of every type, tool_calls as an object, crashed turns)
# and emitter-shaped logs (nested and double-started turns, compactions, crashes mid-step).
any_logs = st.one_of(batches_of(hostile=False).map(stored), logs())
# A tool's own result marked synthetic before its real one: section 8.1 reads the call as completed, rule 1 as superseded.
AGENT_SYNTHETIC_FIRST = events_of([("turn_start", {}), assistant("c1"), agent_synthetic("c1"), result("c1")])


@given(log=any_logs, active=st.booleans())
def test_a_call_the_plan_owes_reads_the_plans_risk_unless_running(log, active):
    owed = {r.call.id: r.call.risk for r in plan(log).repairs if r.call is not None}
    assert {cid: s for cid, (s, _) in states(log, running=False, active=active).items() if cid in owed} == owed
    assert {cid: s for cid, (s, _) in states(log, running=True, active=active).items() if cid in owed} == dict.fromkeys(owed, PENDING)


@given(log=any_logs, running=st.booleans(), active=st.booleans())
@example(log=AGENT_SYNTHETIC_FIRST, running=False, active=False)
def test_a_call_the_strategies_read_as_completed_is_completed_or_error_before_and_after_recovery(log, running, active):
    recovery = plan(log)
    completed = {c.id for calls in recovery.turn_calls.values() for c in calls if c.state == COMPLETED}
    for events in (log, recovered(log)):
        got = {c.call_id: c for c in call_states(events, running=running, active=active, patch_seqs=())}
        for cid in completed:
            assert got[cid].state in (COMPLETED, ERROR) or (got[cid].state == SUPERSEDED and stood_in_first(events, got[cid]))


def stood_in_first(events: list[Event], call: CallState) -> bool:
    """A synthetic result answered the call before its first real result did (no patch here)."""
    return any(
        e.type == "tool_result" and e.data.get("tool_call_id") == call.call_id and e.seq < call.result_seq
        and (e.data.get("metadata") or {}).get("synthetic") is True
        for e in events
    )  # fmt: skip


@given(log=any_logs)
def test_after_recovery_no_call_of_a_repaired_turn_is_pending(log):
    open_turns = plan(log).open_turns
    after = recovered(log)
    for words in STATUS_WORDS:
        calls = call_states(after, patch_seqs=(), **words)
        assert all(c.state in STATES for c in calls)
        if open_turns:  # every call sighted after the outermost open turn_start was inside it
            assert [c for c in calls if c.seq > min(open_turns) and c.state == PENDING] == []


# The patch reads the fold: it answers a call whose only result a compaction hides (the result still decides).
COMPACTED_RESULT = events_of([("turn_start", {}), assistant("c1"), result("c1"), ("turn_end", {"reason": "complete"}),
                              ("user_message", message("summary", surface_op=["replace", 2, 2]))])  # fmt: skip


@given(log=any_logs)
@example(log=COMPACTED_RESULT)
def test_after_recovery_and_the_patch_every_patched_call_is_no_result_and_nothing_else_moved(log):
    recovered_log = recovered(log)
    before = {c.call_id: c for c in call_states(recovered_log, running=False, active=False, patch_seqs=())}
    after_log, patch_seqs = patched(recovered_log)
    answered = {e.data["tool_call_id"]: e.seq for e in after_log if e.seq in patch_seqs}
    for words in STATUS_WORDS:
        after = {c.call_id: c for c in call_states(after_log, patch_seqs=patch_seqs, **words)}
        assert after.keys() == before.keys()
        for cid, call in after.items():
            if before[cid].result_seq is not None:  # a result decided, whatever the status words say
                assert call == before[cid]
            elif cid in answered:
                assert (call.state, call.result_seq) == (NO_RESULT, answered[cid])
            elif words == {"running": False, "active": False}:
                assert call == before[cid]
