"""SessionWriter's structure against a live Daphne: what a healthy run writes, what an exception leaves, and,
for a process killed at each crash point, the recovery plan the server derives (session-log.md, rules 1-4)."""

from __future__ import annotations

import signal
import time

import pytest

from turnlog_client import Backoff, Client
from turnlog_client.tests.conftest import events_of, run_script, wait_for_line

pytestmark = pytest.mark.django_db(transaction=True)  # the server reads what the test commits

CALLS = [{"id": "c1", "name": "charge_card", "arguments": {"order": 42}}, {"id": "c2", "name": "send_email", "arguments": {}}]


def shape(api: Client, session_id: str) -> list[tuple]:
    """(type, the structural fields of data) of every event."""
    keys = ("turn", "step", "steps", "reason", "outcome", "id", "tool_call_id")
    return [(e["type"], *(e["data"][k] for k in keys if k in e["data"])) for e in events_of(api, session_id)]


def test_a_healthy_run_writes_turns_steps_and_calls_as_session_log_md_shows(client):
    with client.writer("s1", agent_name="billing-bot") as session:
        session.system("You are a billing assistant.")
        session.user("Charge order 42 and tell the customer.")
        with session.turn() as turn:
            with session.step():
                session.assistant("", tool_calls=CALLS)
                for call in CALLS:
                    session.tool_call(call["id"], call["name"], call["arguments"])
                    session.tool_result(call["id"], "done", name=call["name"])
            with session.step():
                session.assistant("Charged, and the customer is told.")
        with session.turn() as second:
            pass
    assert (turn, second) == (1, 2)
    assert shape(client, "s1") == [
        ("system_message",), ("user_message",), ("turn_start", 1),
        ("step_start", 1, 1), ("assistant_message",),
        ("tool_call", "c1"), ("tool_result", "c1"), ("tool_call", "c2"), ("tool_result", "c2"), ("step_end", 1, 1, "ok"),
        ("step_start", 1, 2), ("assistant_message",), ("step_end", 1, 2, "ok"),
        ("turn_end", 1, 2, "complete"),
        ("turn_start", 2), ("turn_end", 2, 0, "complete"),
    ]  # fmt: skip
    assert client.get_session("s1")["open_turns"] == []
    with client.writer("s1") as again, again.turn() as third:  # turn numbers go on over the whole log
        pass
    assert third == 3


def test_an_error_without_a_dispatched_call_closes_the_step_and_rejects_the_turn(client):
    session = client.writer("s1")
    with pytest.raises(TimeoutError), session.turn():
        with session.step():
            session.assistant("", tool_calls=CALLS)  # requested, never dispatched
            raise TimeoutError("the model timed out")
    session.close()
    events = events_of(client, "s1")
    assert shape(client, "s1")[-2:] == [("step_end", 1, 1, "error"), ("turn_end", 1, 1, "rejected")]
    assert events[-1]["data"]["error"] == {"type": "TimeoutError", "message": "the model timed out"} == events[-2]["data"]["error"]
    assert client.recovery_plan("s1")["repairs"] == []  # nothing owed: nothing ran


def test_an_error_inside_a_tool_leaves_the_turn_open_for_recovery(client):
    session = client.writer("s1")
    with pytest.raises(ConnectionError), session.turn():
        with session.step():
            session.assistant("", tool_calls=CALLS)
            session.tool_call("c1", "charge_card", {"order": 42})
            raise ConnectionError("the payment gateway hung up")  # did the charge happen?
    session.close()
    assert shape(client, "s1")[-1] == ("step_end", 1, 1, "error")
    plan = client.recovery_plan("s1")
    assert [(c["id"], c["risk"], c["rule"]) for c in plan["owed_calls"]] == [
        ("c1", "tool_outcome_unknown", 1), ("c2", "tool_not_started", 2)
    ]  # fmt: skip


CRASH_SCRIPT = """
    import sys, time
    from turnlog_client import Backoff, Client

    url, token, point = sys.argv[1:]
    session = Client(url, token).writer("crash", flush_interval=3600)

    def crash_here():
        print("READY", flush=True)
        time.sleep(600)  # the tool "runs" until the test kills the process

    session.user("Charge order 42 and tell the customer.")
    session.start_turn()
    session.start_step()
    session.assistant("", tool_calls=[{"id": "c1", "name": "charge_card", "arguments": {}}, {"id": "c2", "name": "send_email", "arguments": {}}])
    if point == "before_dispatch":
        crash_here()
    session.tool_call("c1", "charge_card", {})
    if point == "in_first_tool":
        crash_here()
    session.tool_result("c1", "charged", name="charge_card")
    if point == "between_results":
        crash_here()
    if point == "second_step":
        session.end_step()
        session.start_step()
        session.assistant("", tool_calls=[{"id": "c3", "name": "refund", "arguments": {}}])
        session.tool_call("c3", "refund", {})
        crash_here()
    session.tool_call("c2", "send_email", {})
    if point == "in_second_tool":
        crash_here()
"""

# What session-log.md's rules owe for each crash point: (call, risk, rule) and the turn_end's steps.
OWED = {
    # No dispatch on record, the step still open: the log cannot tell (rule 4).
    "before_dispatch": ([("c1", "tool_outcome_unknown", 4), ("c2", "tool_outcome_unknown", 4)], 1),
    # c1 dispatched (rule 1); the turn logs dispatches, so c2, without one, never started (rule 2).
    "in_first_tool": ([("c1", "tool_outcome_unknown", 1), ("c2", "tool_not_started", 2)], 1),
    "between_results": ([("c2", "tool_not_started", 2)], 1),
    "in_second_tool": ([("c2", "tool_outcome_unknown", 1)], 1),
    # session-log.md's worked example: c2 of the closed first step (rule 2), c3 in flight (rule 1).
    "second_step": ([("c2", "tool_not_started", 2), ("c3", "tool_outcome_unknown", 1)], 2),
}


@pytest.mark.parametrize("point", OWED)
def test_a_process_killed_at_each_crash_point_leaves_the_log_recovery_owes(server, client, token, point):
    process = run_script(CRASH_SCRIPT, server.url, token, point)
    try:
        wait_for_line(process, "READY")
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=10)
    owed, steps = OWED[point]
    plan = client.recovery_plan("crash")
    assert plan["interrupted"] and plan["open_turns"] == [1]
    assert [(c["id"], c["risk"], c["rule"]) for c in plan["owed_calls"]] == owed
    assert plan["repairs"][-1] == {"type": "turn_end", "data": {"reason": "interrupted", "steps": steps, "turn": 1}}
    assert [r["data"]["tool_call_id"] for r in plan["repairs"][:-1]] == [call for call, _, _ in owed]


FAST = Backoff(initial=0.05, maximum=0.2)


def wait_until(check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def an_old_session_with_one_turn(daphne, token) -> None:
    with Client(daphne.start().url, token) as api, api.writer("s1") as session, session.turn():
        pass
    daphne.stop()


def test_a_turn_opened_while_the_server_is_away_and_the_log_unread_has_no_number(down_server, token, tmp_path):
    an_old_session_with_one_turn(down_server, token)
    with Client(down_server.url, token, timeout=2) as api:
        session = api.writer("s1", spool=tmp_path / "agent.spool", backoff=FAST)  # started without the server
        with session.turn() as unknown, session.step():
            session.user("while away")
        down_server.start()
        wait_until(lambda: session.writer.next_seq is not None)  # the writer finds the server back
        with session.turn() as known:  # the log counted again: the turn without a number is one of its turns
            pass
        session.close()
        assert (unknown, known) == (None, 3)
        assert shape(api, "s1")[2:] == [
            ("turn_start",), ("step_start", 1), ("user_message",), ("step_end", 1, "ok"), ("turn_end", 1, "complete"),
            ("turn_start", 3), ("turn_end", 3, 0, "complete"),
        ]  # fmt: skip
        assert api.get_session("s1")["open_turns"] == []


def test_a_turn_opened_after_the_server_went_away_has_no_number(down_server, token, tmp_path):
    an_old_session_with_one_turn(down_server, token)
    down_server.start()
    with Client(down_server.url, token, timeout=2) as api:
        session = api.writer("s1", spool=tmp_path / "agent.spool", backoff=FAST)  # its count read from the server
        down_server.stop()
        assert session.start_turn() is None  # the log's turns cannot be read
        session.end_turn()
        down_server.start()
        session.close()
        assert shape(api, "s1")[2:] == [("turn_start",), ("turn_end", 0, "complete")]


def test_a_new_session_started_without_the_server_numbers_its_turns(down_server, token, tmp_path):
    with Client(down_server.url, token, timeout=2) as api:
        session = api.writer(spool=tmp_path / "agent.spool", backoff=FAST)
        with session.turn() as first:
            pass
        down_server.start()
        session.close()
        assert first == 1 and shape(api, session.session_id) == [("turn_start", 1), ("turn_end", 1, 0, "complete")]
