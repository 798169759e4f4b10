"""The planner against session-log.md: runs that finish, runs that crash at every point, repeats,
any arrival order, several runs in one conversation, late spans. Pure: no database."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.log import recovery, structure
from sessions_app.log.events import Event
from sessions_app.otel.planner import Planner, ordered
from sessions_app.otel.readings import AGENT, MODEL, OTHER, TOOL, Message, Reading
from sessions_app.otel.trace_state import TraceState

SETTLE = 5.0
UNKNOWN, NOT_STARTED = "tool_outcome_unknown", "tool_not_started"


class Log:
    """A session's log and OTLP memory, fed batch by batch as the service does."""

    def __init__(self):
        self.events: list[Event] = []
        self.traces: dict[str, TraceState] = {}
        self.seen: dict = {}
        self.turn_count = 0
        self.clock = 1000.0
        self.refusals: list[str] = []

    def _planner(self) -> Planner:
        _, turn_stack, step_stack = structure.place_all(self.events)
        latest = max(self.traces.values(), key=lambda t: t.turn_seq or -1, default=None)
        return Planner(
            next_seq=len(self.events), turn_stack=turn_stack, step_stack=step_stack, turn_count=self.turn_count,
            traces={k: TraceState.from_json(v.as_json()) for k, v in self.traces.items()}, seen=dict(self.seen),
            system_digest=latest.system_digest if latest else None, received=self.clock,
        )

    def _keep(self, planner: Planner) -> None:
        for new in planner.events:
            self.events.append(Event(len(self.events), new.type, new.time or datetime.now(UTC), new.data))
        self.traces, self.seen, self.turn_count = planner.traces, planner.seen, planner.turn_count

    def send(self, *readings: Reading) -> None:
        self.clock += 0.1
        planner = self._planner()
        self.refusals += [reason for r in ordered(readings) if (reason := planner.take(r)) is not None]
        self._keep(planner)

    def settle(self, seconds: float = SETTLE) -> None:
        self.clock += seconds
        planner = self._planner()
        planner.close_settled(now=self.clock, settle=SETTLE)
        self._keep(planner)

    def recover(self) -> None:
        plan = recovery.plan(self.events)
        self.events = recovery.apply(self.events, plan.repairs, datetime.now(UTC))

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def plan_risks(self) -> dict[str, str]:
        return {r.call.id: r.call.risk for r in recovery.plan(self.events).repairs if r.call is not None}

    def summary(self) -> dict:
        """What must not depend on arrival order (event order may)."""
        calls = Counter(e.data["id"] for e in self.events if e.type == "tool_call")
        results = Counter(e.data["tool_call_id"] for e in self.events if e.type == "tool_result")
        ends = sorted(e.data["reason"] for e in self.events if e.type == "turn_end")
        usage = sorted(str(e.data["metadata"].get("usage")) for e in self.events if e.type == "assistant_message")
        requested = sorted(c["id"] for e in self.events if e.type == "assistant_message" for c in e.data["tool_calls"])
        return {
            "calls": calls, "results": results, "turns": self.types().count("turn_start"), "ends": ends,
            "usage": usage, "requested": requested, "risks": self.plan_risks(),
            "open": len(recovery.open_turns(self.events)),
        }


# -- readings as the conventions give them ---------------------------------------

T = "a" * 32
ROOT = "0000000000000001"


def agent(trace=T, span=ROOT, parent=None, start=1, end=100, **kw) -> Reading:
    return Reading(AGENT, trace, span, parent, "invoke_agent", start_ns=start, end_ns=end, agent_name="support", **kw)


def chat(span, calls=(), trace=T, parent=ROOT, start=10, end=20, text=None, usage=None, **kw) -> Reading:
    output = (Message("assistant", text, tuple({"id": c, "name": "refund", "arguments": {"order": c}} for c in calls)),)
    return Reading(
        MODEL, trace, span, parent, "chat m", start_ns=start, end_ns=end, output_messages=output,
        input_messages=(Message("system", "be kind"), Message("user", "refund my orders")),
        usage=usage or {"input_tokens": 10, "output_tokens": 5, "model": "m"}, **kw,
    )


def tool(span, call, trace=T, parent=ROOT, start=30, end=40, **kw) -> Reading:
    fields = {"tool_name": "refund", "tool_call_id": call, "tool_arguments": {"order": call}, "tool_result": "done", "has_result": True, **kw}
    return Reading(TOOL, trace, span, parent, "execute_tool refund", start_ns=start, end_ns=end, **fields)


def finished_run(trace=T, prefix="c", at=0) -> list[Reading]:
    """invoke_agent { chat -> [c1, c2]; tool c1; tool c2; chat -> text }, starting `at` ns later."""
    return [
        chat(f"{prefix}0000000000000a1"[:16], [f"{prefix}1", f"{prefix}2"], trace=trace, start=at + 10, end=at + 20),
        tool(f"{prefix}0000000000000b1"[:16], f"{prefix}1", trace=trace, start=at + 30, end=at + 40),
        tool(f"{prefix}0000000000000b2"[:16], f"{prefix}2", trace=trace, start=at + 41, end=at + 50),
        chat(f"{prefix}0000000000000a2"[:16], [], trace=trace, start=at + 60, end=at + 70, text="refunded"),
        agent(trace=trace, start=at + 1, end=at + 100, aggregated_usage={"input_tokens": 20, "output_tokens": 10}),
    ]


# -- a finished run ---------------------------------------------------------------


def test_a_finished_run_reads_as_one_turn_of_steps_with_calls_results_and_usage():
    log = Log()
    log.send(*finished_run())
    assert log.types() == [
        "turn_start", "system_message", "user_message",
        "step_start", "assistant_message", "tool_call", "tool_call", "tool_result", "tool_result", "step_end",
        "step_start", "assistant_message", "step_end",
    ]
    assert "turn_end" not in log.types()  # not before the settle time: later spans may still come
    log.settle()
    assert log.types().count("step_start") == log.types().count("step_end") == 2
    end = log.events[-1]
    assert end.type == "turn_end" and end.data["reason"] == "complete" and end.data["steps"] == 2 and end.data["turn"] == 1
    # Run totals stay on the turn; the steps carry their own usage.
    assert end.data["metadata"]["usage"] == {"input_tokens": 20, "output_tokens": 10}
    assert [e.data["metadata"]["usage"]["input_tokens"] for e in log.events if e.type == "assistant_message"] == [10, 10]
    assert recovery.plan(log.events).repairs == []
    # Calls the model asked for are written dispatched as soon as it asked (inferred), results as they come.
    inferred = [e.data["id"] for e in log.events if e.type == "tool_call" and e.data["metadata"].get("inferred")]
    assert inferred == ["c1", "c2"]


def test_a_repeated_batch_stores_nothing_new():
    log = Log()
    log.send(*finished_run())
    before = len(log.events)
    log.send(*finished_run())
    log.send(*reversed(finished_run()))
    assert len(log.events) == before


# -- crashes at every point ---------------------------------------------------------


def test_a_crash_inside_the_first_tool_owes_both_calls_as_outcome_unknown():
    log = Log()
    log.send(finished_run()[0])  # the model asked for c1 and c2; the process died running c1
    assert log.plan_risks() == {"c1": UNKNOWN, "c2": UNKNOWN}
    assert len(recovery.open_turns(log.events)) == 1


def test_a_crash_between_results_owes_only_the_missing_one():
    log = Log()
    log.send(*finished_run()[:2])
    assert log.plan_risks() == {"c2": UNKNOWN}


def test_an_early_step_close_never_makes_a_missing_tool_span_not_started():
    # The next model span closes the first step while c2's span never came (lost with the crash):
    # absence is no evidence, so rule 1 (its inferred tool_call) keeps it unknown, never rule 3.
    log = Log()
    run = finished_run()
    log.send(run[0], run[1], run[3])
    assert "step_end" in log.types()
    assert log.plan_risks() == {"c2": UNKNOWN}
    plan = recovery.plan(log.events)
    assert [r.call.rule for r in plan.repairs if r.call] == [1]


def test_a_crash_while_the_model_answers_owes_nothing_but_the_turn():
    log = Log()
    run = finished_run()
    log.send(*run[:3])
    plan = recovery.plan(log.events)
    assert [r.type for r in plan.repairs] == ["turn_end"]


def test_a_pending_tool_span_is_dispatch_evidence_and_its_end_the_result():
    log = Log()
    run = finished_run()
    log.send(run[0], Reading(TOOL, T, "c0000000000000b1", ROOT, "execute_tool refund", start_ns=30, pending=True, tool_name="refund", tool_call_id="c1"))
    calls = [e for e in log.events if e.type == "tool_call"]
    assert [c.data["id"] for c in calls] == ["c1", "c2"]
    log.send(run[1])
    assert [e.data["tool_call_id"] for e in log.events if e.type == "tool_result"] == ["c1"]
    assert log.plan_risks() == {"c2": UNKNOWN}


def test_a_pending_tool_span_before_its_model_span_is_a_real_dispatch():
    log = Log()
    log.send(Reading(TOOL, T, "c0000000000000b1", ROOT, "execute_tool refund", start_ns=30, pending=True, tool_name="refund", tool_call_id="c1"))
    (call,) = [e for e in log.events if e.type == "tool_call"]
    assert "inferred" not in call.data["metadata"]
    assert log.plan_risks() == {"c1": UNKNOWN}  # a tool_call sights its call: owed, and it may have run


def test_a_pending_root_opens_the_turn_but_never_lets_it_close():
    log = Log()
    log.send(Reading(AGENT, T, ROOT, None, "invoke_agent", start_ns=1, pending=True))
    log.settle(60)
    assert log.types() == ["turn_start"]


# -- a model span that ends after its tools (Google ADK, the Vercel AI SDK's ai.* spans) ----------


M1, M2 = "e0000000000000a1", "e0000000000000a2"


def model_around_tools_run(trace=T) -> list[Reading]:
    """invoke_agent { chat -> [c1, c2] { tool c1; tool c2 }; chat -> text }: the first model span is the
    tools' parent and ends after them."""
    return [
        tool("e0000000000000b1", "c1", trace=trace, parent=M1, start=30, end=40),
        tool("e0000000000000b2", "c2", trace=trace, parent=M1, start=41, end=50),
        chat(M1, ["c1", "c2"], trace=trace, start=10, end=55),
        chat(M2, [], trace=trace, start=60, end=70, text="refunded"),
        agent(trace=trace, start=1, end=100),
    ]


def started(reading: Reading) -> Reading:
    """The pending span announcing `reading` when it started: the attributes known then, no result."""
    return Reading(reading.role, reading.trace_id, reading.span_id, reading.parent_span_id, reading.name,
                   start_ns=reading.start_ns, end_ns=reading.start_ns, pending=True, tool_name=reading.tool_name,
                   tool_call_id=reading.tool_call_id, tool_arguments=reading.tool_arguments,
                   conversation_id=reading.conversation_id, agent_name=reading.agent_name)


def test_tools_that_end_before_their_model_span_answer_its_calls_in_one_turn():
    log = Log()
    for reading in model_around_tools_run():  # as the exporter sends them: each span when it ends
        log.send(reading)
    log.settle()
    assert log.summary()["calls"] == {"c1": 1, "c2": 1} and log.summary()["results"] == {"c1": 1, "c2": 1}
    assert log.summary()["ends"] == ["complete"] and log.plan_risks() == {}


def test_a_tool_started_under_a_model_span_still_running_is_a_call_of_its_step_and_owed():
    log = Log()
    run = model_around_tools_run()
    root_started, model_started, tool_started = started(run[4]), started(run[2]), started(run[0])
    log.send(root_started)
    log.send(model_started)
    log.send(tool_started)  # the process dies in the tool: nothing else ever comes
    assert log.types() == ["turn_start", "step_start", "tool_call"]
    (call,) = [e for e in log.events if e.type == "tool_call"]
    assert "inferred" not in call.data["metadata"]
    log.settle(60)
    assert log.types()[-1] == "tool_call" and log.plan_risks() == {"c1": UNKNOWN}


def test_a_step_whose_model_span_ends_after_its_tools_closes_only_when_it_ends():
    log = Log()
    run = model_around_tools_run()
    log.send(started(run[4]), started(run[2]), started(run[0]))
    log.send(run[0])  # c1's result, while the model span is still running
    assert "step_end" not in log.types()
    log.send(run[1], run[2])
    assert log.types().count("step_end") == 1 and log.summary()["results"] == {"c1": 1, "c2": 1}


def test_a_tool_span_that_names_its_call_only_when_it_ends_answers_the_call_its_start_stood_for():
    # Google ADK starts `execute_tool refund` with no attributes and sets the call id when it ends.
    log = Log()
    run = model_around_tools_run()
    bare = [dataclasses.replace(started(r), tool_call_id=None, tool_arguments=None) for r in run[:2]]
    log.send(started(run[4]), started(run[2]), bare[0])
    assert log.plan_risks() == {"otel-e0000000000000b1": UNKNOWN}  # a crash now owes the call that started
    log.send(run[0], bare[1], run[1], run[2], run[3], run[4])
    log.settle()
    assert log.plan_risks() == {} and log.summary()["ends"] == ["complete"]
    stand_in = next(e for e in log.events if e.type == "tool_result" and e.data["tool_call_id"] == "otel-e0000000000000b1")
    assert stand_in.data["metadata"]["otel"]["same_call_as"] == "c1" and stand_in.data["content"] == "done"


@settings(max_examples=80, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 7), st.booleans())
def test_a_model_span_around_its_tools_reads_the_same_in_any_order_with_or_without_pending_spans(rnd: random.Random, batches: int, pending: bool):
    run = model_around_tools_run()
    spans = [*run, *(started(r) for r in run)] if pending else run
    forward, log = Log(), Log()
    forward.send(*run)
    for part in _in_batches(rnd, spans, batches):
        log.send(*part)
    forward.settle()
    log.settle()
    assert log.summary() == forward.summary()


# -- roots that are their own ancestors ---------------------------------------------


def test_a_root_that_is_its_own_parent_closes_its_run():
    log = Log()
    log.send(*finished_run()[:4], agent(parent=ROOT))
    log.settle()
    assert log.summary()["ends"] == ["complete"]


def test_a_cycle_of_parent_ids_across_batches_reads_the_span_closing_it_as_the_root():
    log = Log()
    log.send(*finished_run()[:4], agent(parent="7777777777777777"))
    log.settle()
    assert "turn_end" not in log.types()  # its parent may still come
    log.send(Reading(OTHER, T, "7777777777777777", ROOT, "loop", start_ns=2, end_ns=99))
    log.settle()
    assert log.summary()["ends"] == ["complete"]


def test_a_long_chain_without_its_root_stays_open():
    log = Log()
    chain = [Reading(OTHER, T, f"{i:016x}", f"{i + 1:016x}", "step", start_ns=i, end_ns=i + 1) for i in range(1, 40)]
    log.send(chat("a000000000000001", [], parent=f"{1:016x}", text="hi"), *chain)
    log.settle()
    assert "turn_end" not in log.types()


# -- repeats ----------------------------------------------------------------------


def test_the_same_ids_with_other_content_are_refused_and_an_exact_repeat_taken():
    import dataclasses

    log = Log()
    first = dataclasses.replace(finished_run()[1], digest="one")
    log.send(chat("c0000000000000a1", ["c1", "c2"], digest="m"), first)
    log.send(first)
    assert log.refusals == []
    log.send(dataclasses.replace(first, digest="two", tool_result="other"))
    assert len(log.refusals) == 1 and "other content" in log.refusals[0]
    assert [e.data["content"] for e in log.events if e.type == "tool_result"] == ["done"]


# -- any order ----------------------------------------------------------------------


def _crashed_run(trace="b" * 32, at=1000) -> list[Reading]:
    """The first step of a run and c1's result; the process died running d2."""
    return finished_run(trace=trace, prefix="d", at=at)[:2]


def _in_batches(rnd: random.Random, readings: list[Reading], batches: int) -> list[list[Reading]]:
    shuffled = readings[:]
    rnd.shuffle(shuffled)
    cuts = sorted(rnd.sample(range(1, len(shuffled)), min(batches, len(shuffled)) - 1))
    return [shuffled[i:j] for i, j in zip([0, *cuts], [*cuts, len(shuffled)], strict=True)]


@settings(max_examples=80, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 6), st.integers(1, 3))
def test_any_arrival_order_and_batching_gives_the_same_calls_results_states_turns_and_risks(rnd: random.Random, batches: int, second: int):
    # Runs of a conversation arrive one after another (a run's exporter flushes before the next run
    # begins); within each, any order and any batching. A run that begins before the previous one's
    # root arrived nests inside it instead (session-log.md section 3): that is tested further below.
    runs = [finished_run(), [finished_run(trace="b" * 32, prefix="e", at=1000), _crashed_run(at=1000)][second % 2]][: 1 + (second > 1)]
    forward, log = Log(), Log()
    for run in runs:
        forward.send(*run)
        for part in _in_batches(rnd, run, batches):
            log.send(*part)
    forward.settle()
    log.settle()
    assert log.summary() == forward.summary()


def test_reverse_order_one_span_per_batch():
    forward, backward = Log(), Log()
    forward.send(*finished_run())
    for reading in reversed(finished_run()):
        backward.send(reading)
    forward.settle()
    backward.settle()
    assert backward.summary() == forward.summary()
    assert backward.summary()["ends"] == ["complete"]


# -- several runs in one conversation -----------------------------------------------


def test_sequential_runs_close_the_finished_one_when_the_next_begins():
    log = Log()
    log.send(*finished_run())
    log.send(*finished_run(trace="b" * 32, prefix="d", at=1000)[:1])
    # The first run's root had arrived: its turn closed before the second opened, without waiting.
    starts_and_ends = [e.type for e in log.events if e.type in ("turn_start", "turn_end")]
    assert starts_and_ends == ["turn_start", "turn_end", "turn_start"]
    assert [e.data["turn"] for e in log.events if e.type == "turn_start"] == [1, 2]


def test_a_crashed_run_stays_owed_when_a_new_run_follows_in_the_same_conversation():
    log = Log()
    log.send(*_crashed_run(trace=T, at=0))  # its root never arrives
    log.send(*finished_run(trace="b" * 32, prefix="e", at=1000))
    log.settle()
    # The new run nested inside the crashed one and closed; the crashed one is still owed.
    ends = [e for e in log.events if e.type == "turn_end"]
    assert [e.data["reason"] for e in ends] == ["complete"]
    assert log.plan_risks() == {"d2": UNKNOWN}
    assert len(recovery.open_turns(log.events)) == 1


def test_overlapping_runs_each_close_when_innermost():
    log = Log()
    a, b = finished_run(trace=T), finished_run(trace="b" * 32, prefix="e")
    log.send(a[0], b[0])
    log.send(*a[1:], *b[1:3])  # a finishes while b is still running inside it: a cannot close yet
    log.settle()
    assert "turn_end" not in log.types()
    log.send(*b[3:])
    log.settle()
    assert [e.data["reason"] for e in log.events if e.type == "turn_end"] == ["complete", "complete"]
    assert recovery.plan(log.events).repairs == []


# -- late spans ---------------------------------------------------------------------


def test_a_span_after_the_turn_closed_is_late_never_a_second_turn():
    log = Log()
    run = finished_run()
    log.send(run[0], run[1], run[3], run[4])
    log.settle()
    log.send(run[2])
    assert log.types().count("turn_start") == 1 and log.types().count("turn_end") == 1
    late = log.events[-1]
    assert late.type == "tool_result" and late.data["tool_call_id"] == "c2" and late.data["metadata"]["otel"]["late"] is True


def test_a_root_arriving_after_recovery_writes_no_second_turn_end():
    log = Log()
    run = finished_run()
    log.send(run[0])
    log.recover()
    count = len(log.events)
    log.send(run[1], run[4])
    log.settle()
    assert log.types().count("turn_end") == 1  # recovery's
    assert len(log.events) == count + 1 and log.events[-1].type == "tool_result"  # c1's late result, superseded


def test_late_model_calls_inside_another_open_turn_are_kept_aside():
    log = Log()
    first = finished_run()
    log.send(first[0], first[4])
    log.settle()
    log.send(*_crashed_run())  # another run is open now
    log.send(chat("c0000000000000a9", ["c9"], start=80, end=90))  # a late model span of the first run
    late = log.events[-1]
    assert late.type == "assistant_message" and late.data["tool_calls"] == []
    assert [c["id"] for c in late.data["metadata"]["otel"]["tool_calls"]] == ["c9"]
    # Written inside the open run's turn, c9 would be owed by it; it is not.
    assert log.plan_risks() == {"d2": UNKNOWN}


# -- pairing, content, refusals -----------------------------------------------------


def test_a_tool_span_without_a_call_id_answers_the_call_of_the_same_name_and_arguments():
    log = Log()
    log.send(chat("a000000000000001", ["x1", "x2"]))
    log.send(Reading(TOOL, T, "b000000000000002", ROOT, "refund", start_ns=30, end_ns=40, tool_name="refund", tool_arguments='{"order": "x2"}', tool_result="ok", has_result=True))
    assert [e.data["tool_call_id"] for e in log.events if e.type == "tool_result"] == ["x2"]
    assert log.plan_risks() == {"x1": UNKNOWN}


def test_a_span_without_content_still_gives_the_structure():
    log = Log()
    log.send(Reading(MODEL, T, "a000000000000001", ROOT, "chat m", start_ns=10, end_ns=20))
    log.send(Reading(TOOL, T, "b000000000000001", ROOT, "execute_tool refund", start_ns=30, end_ns=40, tool_name="refund", tool_call_id="c1", has_result=True))
    assert log.types() == ["turn_start", "step_start", "step_end", "tool_call", "tool_result"]
    assert [e.data["id"] for e in log.events if e.type == "tool_call"] == ["c1"]


def test_a_one_argument_call_recorded_as_its_bare_value_pairs_with_its_call():
    log = Log()
    log.send(chat("a000000000000001", ["x1", "x2"]))
    log.send(Reading(TOOL, T, "b000000000000002", ROOT, "refund", start_ns=30, end_ns=40, tool_name="refund", tool_arguments="x2", tool_result="ok", has_result=True))
    assert [e.data["tool_call_id"] for e in log.events if e.type == "tool_result"] == ["x2"]


def test_a_tool_span_that_ended_without_a_result_leaves_its_call_owed():
    log = Log()
    log.send(chat("a000000000000001", ["c1"]), tool("b000000000000001", "c1", has_result=False, tool_result=None))
    assert "tool_result" not in log.types() and log.plan_risks() == {"c1": UNKNOWN}


def test_reasoning_is_kept_on_the_assistant_message():
    log = Log()
    output = (Message("assistant", "done", (), reasoning_content="thought it through"),)
    log.send(Reading(MODEL, T, "a000000000000001", ROOT, "chat m", start_ns=10, end_ns=20, output_messages=output))
    (message,) = [e for e in log.events if e.type == "assistant_message"]
    assert message.data["reasoning_content"] == "thought it through"


def test_the_run_inputs_come_from_the_ended_model_span_when_its_pending_span_came_first():
    log = Log()
    started = Reading(MODEL, T, "a000000000000001", ROOT, "chat m", start_ns=10, pending=True)
    log.send(started)
    log.send(chat("a000000000000001", []))
    assert [e.data["content"] for e in log.events if e.type == "user_message"] == ["refund my orders"]
    assert log.types().count("step_start") == 1


def test_content_no_database_stores_refuses_that_span_alone():
    log = Log()
    bad = tool("b000000000000001", "c1", tool_result="nul \x00 here")
    log.send(chat("a000000000000001", ["c1"]), bad)
    assert len(log.refusals) == 1 and "tool_result" in log.refusals[0] and "b000000000000001" in log.refusals[0]
    assert [e.type for e in log.events if e.type == "tool_result"] == []


def test_spans_of_other_kinds_only_mark_the_root():
    log = Log()
    log.send(Reading(OTHER, T, "9999999999999999", None, "GET /chat"))
    assert log.events == []
    log.send(chat("a000000000000001", [], parent="9999999999999998", text="hi"), Reading(OTHER, T, "9999999999999999", None, "GET /chat"))
    log.settle()
    assert log.types()[-1] == "turn_end"


def test_a_finished_run_stays_open_while_it_holds_calls_of_another_run_still_owed():
    # Run A began first; run B nested inside it; A's model span, written while B was innermost, asked
    # for c1 and c2 inside B's turn. B finishes, but closing it would hide c1 and c2 from recovery
    # (it owes only the calls of open turns) if A then crashes: B stays open until they are answered.
    log = Log()
    log.send(Reading(AGENT, T, ROOT, None, "invoke_agent", start_ns=1, pending=True))
    b = finished_run(trace="b" * 32, prefix="e", at=5)
    log.send(b[0])
    log.send(chat("c0000000000000a1", ["c1", "c2"], start=12, end=22))
    log.send(*b[1:])
    log.settle()
    assert "turn_end" not in log.types()
    assert log.plan_risks() == {"c1": UNKNOWN, "c2": UNKNOWN}
    log.send(tool("c0000000000000b1", "c1"), tool("c0000000000000b2", "c2", start=41, end=50))
    log.settle()
    assert [e.data["reason"] for e in log.events if e.type == "turn_end"] == ["complete"]  # B; A's root never came


def test_bytes_values_are_stored_as_base64_text():
    log = Log()
    log.send(chat("a000000000000001", ["c1"]), tool("b000000000000001", "c1", tool_result=b"\x00\xff", tool_arguments={"blob": [b"x"]}))
    (result,) = [e for e in log.events if e.type == "tool_result"]
    assert result.data["content"] == "AP8=" and log.refusals == []
