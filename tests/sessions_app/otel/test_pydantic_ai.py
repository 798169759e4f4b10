"""Real agents in: Pydantic AI runs (scripted model, no network) instrumented through the real
OpenTelemetry SDK and exported with its OTLP/HTTP exporters to a live Daphne, on the test's
database (SQLite file or PostgreSQL). A finished run reads back as a turn of steps and calls with
usage; a run killed inside a tool reads stalled, its recovery owing that call as outcome unknown."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.sessions_app.otel.conftest import STALL

AGENT_RUN = Path(__file__).with_name("agent_run.py")


def api(server, token, path: str, *, missing=...):
    """GET an API path; `missing` is the answer for a 404 (a session its spans have not created yet)."""
    answer = httpx.get(f"{server.url}/api/v1{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    if answer.status_code == 404 and missing is not ...:
        return missing
    assert answer.status_code == 200, answer.text
    return answer.json()


def run_agent(server, token, conversation: str, *options: str, timeout: float = 60) -> None:
    done = subprocess.run([sys.executable, str(AGENT_RUN), server.url, token, conversation, *options], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr


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


@pytest.mark.parametrize("options", [(), ("--encoding", "json"), ("--pending",), ("--no-content",)], ids=["protobuf", "json", "pending", "no-content"])
def test_a_finished_run_reads_back_as_a_turn_of_steps_and_calls_with_usage(server, token, options):
    run_agent(server, token, "c-42", *options)
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


@pytest.mark.parametrize("pending", [False, True], ids=["plain", "pending-spans"])
def test_a_run_killed_inside_a_tool_reads_stalled_and_its_recovery_owes_that_call_as_outcome_unknown(server, token, tmp_path, pending):
    marker = tmp_path / "in-tool"
    command = [sys.executable, str(AGENT_RUN), server.url, token, "c-crash", "--crash", str(marker)]
    agent = subprocess.Popen([*command, *(["--pending"] if pending else [])], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
