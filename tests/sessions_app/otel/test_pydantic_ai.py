"""Real agents in: Pydantic AI runs (scripted model, no network) instrumented through the real
OpenTelemetry SDK and exported with its OTLP/HTTP exporters to a live Daphne, on the test's
database (SQLite file or PostgreSQL). A finished run reads back as a turn of steps and calls with
usage; a run killed inside a tool reads stalled, its recovery owing that call as outcome unknown. With
turnlog_client.otel's PendingSpanProcessor (--processor), a tool's start reaches Turnlog within a second
even when the batch processor holds its ended spans 5 s; without it, a run killed in that time leaves
nothing (docs/guide/otlp.md, "Send traces")."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sessions_app.models import OtlpSpan
from tests.conftest import load_factor
from tests.sessions_app.otel.conftest import STALL

AGENT_RUN = Path(__file__).with_name("agent_run.py")


def api(server, token, path: str, *, missing=...):
    """GET an API path; `missing` is the answer for a 404 (a session its spans have not created yet)."""
    answer = httpx.get(f"{server.url}/api/v1{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    if answer.status_code == 404 and missing is not ...:
        return missing
    assert answer.status_code == 200, answer.text
    return answer.json()


def run_agent(server, token, conversation: str, *options: str, timeout: float = 60) -> str:
    done = subprocess.run([sys.executable, str(AGENT_RUN), server.url, token, conversation, *options], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_for(condition, *, seconds: float = 15.0, what: str = ""):
    deadline = time.monotonic() + seconds
    while True:
        if value := condition():
            return value
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.1)


def events(server, token, session_id: str) -> list[dict]:
    return api(server, token, f"/sessions/{session_id}/events?limit=1000", missing={"events": []})["events"]


def closed(server, token, session_id: str) -> list[dict] | None:
    found = events(server, token, session_id)
    return found if found and found[-1]["type"] == "turn_end" else None


FINISHED = {
    "protobuf": (), "json": ("--encoding", "json"), "pending": ("--pending",), "no-content": ("--no-content",),
    "simple": ("--simple",), "processor": ("--processor",), "processor-simple": ("--processor", "--simple"),
    "processor-json": ("--processor", "--encoding", "json"),
}  # fmt: skip


@pytest.mark.parametrize("options", FINISHED.values(), ids=FINISHED.keys())
def test_a_finished_run_reads_back_as_a_turn_of_steps_and_calls_with_usage(server, token, options):
    said = run_agent(server, token, "c-42", *options)
    log = wait_for(lambda: closed(server, token, "c-42"), what="the turn closed after the settle time")
    types = [e["type"] for e in log]
    assert types.count("turn_start") == types.count("turn_end") == 1
    assert types.count("step_start") == types.count("step_end") == 2
    assert log[-1]["data"]["reason"] == "complete" and log[-1]["data"]["steps"] == 2
    results = {e["data"]["tool_call_id"]: e["data"]["content"] for e in log if e["type"] == "tool_result"}
    assert set(results) == {"call_a1", "call_a2"}
    assistant = [e for e in log if e["type"] == "assistant_message"]
    assert all(m["data"]["metadata"]["usage"]["input_tokens"] > 0 for m in assistant)
    if "--no-content" not in options:
        assert results["call_a1"] == "refunded A1"
        assert [c["id"] for c in assistant[0]["data"]["tool_calls"]] == ["call_a1", "call_a2"]
        assert assistant[-1]["data"]["content"] == "Both orders are refunded."
        assert any(e["type"] == "user_message" and e["data"]["content"] == "Refund orders A1 and A2" for e in log)
    session = api(server, token, "/sessions/c-42")
    assert session["agent_name"] == "support" and not session["interrupted"]
    assert api(server, token, "/sessions/c-42/recovery-plan")["repairs"] == []
    # Pending spans and ended spans alike land in the conversation's session: no session of the trace's own.
    assert [s["id"] for s in api(server, token, "/sessions")["items"]] == ["c-42"]
    assert sorted(e["data"]["id"] for e in log if e["type"] == "tool_call") == ["call_a1", "call_a2"]  # each call once
    if "--processor" in options:  # the agent's, both models' and both tools' starts, every one exported
        assert "pending spans: exported=5 dropped=0 failed=0" in said
    elif "--pending" not in options:
        assert not OtlpSpan.objects.filter(session_id="c-42", pending=True).exists()


KILLED = {"plain": (), "pending-spans": ("--pending",), "simple": ("--simple",), "processor": ("--processor",)}


@pytest.mark.parametrize("options", KILLED.values(), ids=KILLED.keys())
def test_a_run_killed_inside_a_tool_reads_stalled_and_its_recovery_owes_that_call_as_outcome_unknown(server, token, tmp_path, options):
    marker = tmp_path / "in-tool"
    command = [sys.executable, str(AGENT_RUN), server.url, token, "c-crash", "--crash", str(marker)]
    agent = subprocess.Popen([*command, *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(marker.exists, seconds=30, what="the agent reached its second tool call")
        # What the batch exporter sends on its clock (50 ms): the first step and A1's tool span.
        wait_for(lambda: any(e["type"] == "tool_result" for e in events(server, token, "c-crash") or []), what="A1's result")
        time.sleep(0.5)
    finally:
        agent.kill()
        agent.wait()
    session = wait_for(lambda: (s := api(server, token, "/sessions/c-crash"))["status"] == "stalled" and s, seconds=STALL + 10, what="stalled")
    assert session["interrupted"]
    plan = api(server, token, "/sessions/c-crash/recovery-plan")
    owed = {r["data"]["tool_call_id"]: r["data"]["metadata"]["risk"] for r in plan["repairs"] if r["type"] == "tool_result"}
    assert owed == {"call_a2": "tool_outcome_unknown"}
    assert [r["data"]["reason"] for r in plan["repairs"] if r["type"] == "turn_end"] == ["interrupted"]
    # A new run in the same conversation nests inside the crashed one, closes, and leaves it owed.
    run_agent(server, token, "c-crash", "--call-prefix", "second")
    wait_for(lambda: [e["data"].get("reason") for e in events(server, token, "c-crash") if e["type"] == "turn_end"] == ["complete"], what="the second run closed")
    plan = api(server, token, "/sessions/c-crash/recovery-plan")
    assert {r["data"]["tool_call_id"] for r in plan["repairs"] if r["type"] == "tool_result"} == {"call_a2"}


def start_crashing_run(server, token, marker: Path, *options: str) -> subprocess.Popen:
    command = [sys.executable, str(AGENT_RUN), server.url, token, "c-crash", "--crash", str(marker), *options]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def owed_calls(server, token, session_id: str) -> dict[str, str]:
    """Once the session is stalled: the calls its recovery plan owes, with their risk."""
    session = wait_for(lambda: (s := api(server, token, f"/sessions/{session_id}"))["status"] == "stalled" and s, seconds=STALL + 10, what="stalled")
    assert session["interrupted"]
    plan = api(server, token, f"/sessions/{session_id}/recovery-plan")
    assert [r["data"]["reason"] for r in plan["repairs"] if r["type"] == "turn_end"] == ["interrupted"]
    return {r["data"]["tool_call_id"]: r["data"]["metadata"]["risk"] for r in plan["repairs"] if r["type"] == "tool_result"}


def started_not_ended(session_id: str) -> int:
    """Spans whose pending span was taken and whose ended span was not (in the server's database)."""
    taken = set(OtlpSpan.objects.filter(session_id=session_id).values_list("span_id", "pending"))
    return len({span for span, pending in taken if pending} - {span for span, pending in taken if not pending})


def dispatched(server, token, call_id: str) -> bool:
    """A tool_call of that id written from its tool span's start (not inferred from the model's request)."""
    return any(e["type"] == "tool_call" and e["data"]["id"] == call_id and not e["data"].get("metadata", {}).get("inferred")
               for e in events(server, token, "c-crash"))  # fmt: skip


# The SDK's batch processor exports every 5 s (OTEL_BSP_SCHEDULE_DELAY), counted from its creation: the
# scripted run reaches its tool a fraction of a second after, so a kill 1 s into the tool precedes any export.
SDK_DELAY = ("--schedule-delay", "5000")


@pytest.mark.parametrize("options", [SDK_DELAY, ("--simple",)], ids=["batch", "simple"])
def test_with_the_pending_processor_a_tools_start_is_recorded_within_a_second_and_a_kill_then_leaves_it_owed(server, token, tmp_path, options):
    marker = tmp_path / "in-tool"
    agent = start_crashing_run(server, token, marker, "--processor", *options)
    try:
        wait_for(marker.exists, seconds=30, what="the agent reached its second tool call")
        if "--simple" in options:
            # A2's tool_call is already written, inferred from the model span that ended before the tool
            # started: its pending span is the second span started and not ended, beside the agent's.
            wait_for(lambda: started_not_ended("c-crash") == 2, seconds=1.0 * load_factor(), what="A2's start")
        else:
            wait_for(lambda: dispatched(server, token, "call_a2"), seconds=1.0 * load_factor(), what="A2's dispatch")
        since_tool_start = time.time() - marker.stat().st_mtime  # the tool writes the marker as it starts
        assert since_tool_start < 1.0 * load_factor()
    finally:
        agent.kill()
        agent.wait()
    answered = {e["data"]["tool_call_id"] for e in events(server, token, "c-crash") if e["type"] == "tool_result"}
    if "--simple" in options:
        assert answered == {"call_a1"}  # ended spans go out as they end
    owed = owed_calls(server, token, "c-crash")
    # A1 finished, but under the batch processor its ended span was still held when the process died:
    # only its start reached Turnlog, so it is owed too (the tool may have run; it did).
    assert owed == {"call_a2": "tool_outcome_unknown"} | {"call_a1": "tool_outcome_unknown" for _ in [1] if "call_a1" not in answered}
    assert [s["id"] for s in api(server, token, "/sessions")["items"]] == ["c-crash"]


@pytest.mark.parametrize("killed", ["1s-into-the-tool", "after-the-batch"])
def test_without_the_pending_processor_a_run_killed_in_a_tool_shows_only_once_its_batch_was_sent(server, token, tmp_path, killed):
    marker = tmp_path / "in-tool"
    agent = start_crashing_run(server, token, marker, *SDK_DELAY)
    try:
        wait_for(marker.exists, seconds=30, what="the agent reached its second tool call")
        time.sleep(max(0.0, marker.stat().st_mtime + 1.0 - time.time()))
        assert api(server, token, "/sessions/c-crash", missing=None) is None  # 1 s into the tool: nothing sent yet
        if killed == "after-the-batch":
            # The batch goes out within 5 s of the processor's creation: the first step and A1's tool span.
            wait_for(lambda: any(e["type"] == "tool_result" for e in events(server, token, "c-crash")), seconds=5 * load_factor() + 5, what="the first batch")
    finally:
        agent.kill()
        agent.wait()
    if killed == "1s-into-the-tool":
        time.sleep(STALL)  # a dead process sends nothing more: still no session, and so nothing owed
        assert api(server, token, "/sessions/c-crash", missing=None) is None
        assert api(server, token, "/sessions")["items"] == []
    else:
        assert not dispatched(server, token, "call_a2")  # known only from the model's request
        assert owed_calls(server, token, "c-crash") == {"call_a2": "tool_outcome_unknown"}


def record_run(conversation: str) -> list:
    """The spans of one finished run, recorded in process (the same agent as agent_run.py)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    recorded = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(recorded))

    def model(messages, info):
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"order": "A1"}, tool_call_id="call_a1"), ToolCallPart("refund", {"order": "A2"}, tool_call_id="call_a2")])
        return ModelResponse(parts=[TextPart("Both orders are refunded.")])

    agent = Agent(FunctionModel(model), name="support")

    @agent.tool_plain(sequential=True)
    def refund(order: str) -> str:
        return f"refunded {order}"

    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider, include_content=True))
    try:
        agent.run_sync("Refund orders A1 and A2", conversation_id=conversation)
    finally:
        Agent.instrument_all(False)
    return list(recorded.get_finished_spans())


def summary(server, token, session_id: str) -> dict:
    """What must not depend on the order spans arrive in (the order of events may)."""
    log = events(server, token, session_id)
    plan = api(server, token, f"/sessions/{session_id}/recovery-plan")
    return {
        "calls": sorted(e["data"]["id"] for e in log if e["type"] == "tool_call"),
        "results": sorted((e["data"]["tool_call_id"], str(e["data"]["content"])) for e in log if e["type"] == "tool_result"),
        "requested": sorted(c["id"] for e in log if e["type"] == "assistant_message" for c in e["data"]["tool_calls"]),
        "turns": [e["type"] for e in log].count("turn_start"),
        "reasons": sorted(e["data"]["reason"] for e in log if e["type"] == "turn_end"),
        "usage": sorted(str(e["data"]["metadata"].get("usage")) for e in log if e["type"] == "assistant_message"),
        "risks": sorted((r["data"]["tool_call_id"], r["data"]["metadata"]["risk"]) for r in plan["repairs"] if r["type"] == "tool_result"),
    }


def crashed(spans: list) -> list:
    """What a run killed inside A2's tool had exported: the spans that ended before that."""
    tool_a2 = next(s for s in spans if s.attributes.get("gen_ai.tool.call.id") == "call_a2")
    return [s for s in spans if s.end_time < tool_a2.start_time]


@pytest.mark.parametrize("crash", [False, True], ids=["finished", "crashed"])
def test_the_same_spans_twice_in_order_reversed_or_shuffled_give_the_same_calls_results_states_and_risks(server, token, crash):
    import random

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    sessions = {}
    for order in ["forward", "twice", "reversed", "shuffled"]:
        spans = record_run(f"order-{order}-{crash}")
        spans = crashed(spans) if crash else spans
        exporter = OTLPSpanExporter(endpoint=f"{server.url}/otlp/v1/traces", headers={"Authorization": f"Bearer {token}"})
        if order == "forward":
            batches = [spans]
        elif order == "twice":
            batches = [spans, spans, spans[:2]]
        elif order == "reversed":
            batches = [[span] for span in reversed(spans)]
        else:
            shuffled = random.Random(7).sample(spans, len(spans))
            batches = [shuffled[:2], shuffled[2:3], shuffled[3:]]
        for batch in batches:
            assert exporter.export(batch).name == "SUCCESS"
        sessions[order] = f"order-{order}-{crash}"
    if not crash:
        for session_id in sessions.values():
            wait_for(lambda: closed(server, token, session_id), what=f"{session_id} closed")
    summaries = {order: summary(server, token, session_id) for order, session_id in sessions.items()}
    assert summaries["twice"] == summaries["reversed"] == summaries["shuffled"] == summaries["forward"]
    if crash:
        assert summaries["forward"]["risks"] == [("call_a2", "tool_outcome_unknown")]
        assert summaries["forward"]["reasons"] == []
    else:
        assert summaries["forward"]["reasons"] == ["complete"] and summaries["forward"]["risks"] == []
