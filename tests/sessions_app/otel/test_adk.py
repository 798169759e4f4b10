"""Real Google ADK runs in: an LlmAgent on a scripted model (adk_run.py, in ADK's own virtualenv), traced by
ADK's own telemetry and exported with the real OTLP/HTTP exporter to a live Daphne, on the test's database.

ADK stamps the conversation (its session's id) on its workflow, agent and model spans but not on its tool
spans, which end and are exported first: a finished run still reads back as one session, the
conversation's, and no other. Killed inside a tool, a run has exported only the tool spans that ended: no
span names the conversation, so nothing is written unless the spans are announced as they start
(turnlog_client.otel.PendingSpanProcessor)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import load_factor
from tests.sessions_app.otel.conftest import SETTLE, STALL
from tests.sessions_app.otel.test_pydantic_ai import api, closed, events, wait_for

ADK_RUN = Path(__file__).with_name("adk_run.py")
BATCH_DELAY = 0.05  # adk_run.py's batch processor sends every 50 ms
DISPATCH_WITHIN = 1.0  # seconds from the tool's start to its call in the log, with the processor


def command(adk_python: Path, server, token, conversation: str, *options: str) -> list[str]:
    return [str(adk_python), str(ADK_RUN), server.url, token, conversation, *options]


def session_ids(server, token) -> list[str]:
    return [s["id"] for s in api(server, token, "/sessions?limit=200")["items"]]


@pytest.mark.parametrize("content", [True, False], ids=["content", "no-content"])
def test_a_finished_adk_run_reads_back_as_the_conversations_session_with_every_call_answered(server, token, adk_python, content):
    done = subprocess.run(command(adk_python, server, token, "adk-42", *(["--content"] if content else [])),
                          capture_output=True, text=True, timeout=120 * load_factor())
    assert done.returncode == 0, done.stderr
    log = wait_for(lambda: closed(server, token, "adk-42"), seconds=15 * load_factor(), what="the turn closed after the settle time")
    # The tool spans, exported before any span named the conversation, made no session of their own.
    assert session_ids(server, token) == ["adk-42"]
    types = [e["type"] for e in log]
    assert types.count("turn_start") == types.count("turn_end") == 1
    assert types.count("step_start") == types.count("step_end") == 2
    assert log[-1]["data"]["reason"] == "complete" and log[-1]["data"]["steps"] == 2
    calls = sorted(e["data"]["id"] for e in log if e["type"] == "tool_call")
    results = {e["data"]["tool_call_id"]: e["data"]["content"] for e in log if e["type"] == "tool_result"}
    assert calls == sorted(results) == ["call_a1", "call_a2"]  # ADK's merged-tools span is no call
    assistant = [e for e in log if e["type"] == "assistant_message"]
    # ADK adds the thoughts to the output, as the conventions count it (adk_run.py's USAGE, Gemini's form).
    assert [m["data"]["metadata"]["usage"] for m in assistant] == [
        {"input_tokens": 30, "output_tokens": 12 + 5, "cache_read_input_tokens": 8, "reasoning_tokens": 5, "model": "scripted"},
        {"input_tokens": 60, "output_tokens": 9, "cache_read_input_tokens": 20, "model": "scripted"}]  # fmt: skip
    if content:
        assert results == {"call_a1": '{"result": "refunded A1"}', "call_a2": '{"result": "refunded A2"}'}
        assert [c["id"] for c in assistant[0]["data"]["tool_calls"]] == ["call_a1", "call_a2"]
        assert assistant[-1]["data"]["content"] == "Both orders are refunded."
        assert any(e["type"] == "user_message" and e["data"]["content"] == "Refund orders A1 and A2" for e in log)
    else:
        assert set(results.values()) == {None}
    session = api(server, token, "/sessions/adk-42")
    assert session["agent_name"] == "support" and not session["interrupted"]
    assert session["usage"] == {
        "input_tokens": 90, "output_tokens": 26, "cache_read_tokens": 28, "cache_write_tokens": 0, "reasoning_tokens": 5,
        "models": ["scripted"], "cost": "0", "currency": "USD", "priced": False, "unpriced": ["scripted"],
    }  # fmt: skip
    assert api(server, token, "/sessions/adk-42/recovery-plan")["repairs"] == []


def in_tool(agent: subprocess.Popen, marker: Path) -> bool:
    """Whether the agent reached its second tool call; an agent that exited before says why."""
    if agent.poll() is not None:
        pytest.fail(f"the agent exited ({agent.returncode}) before its second tool call:\n{agent.stderr.read().decode()[-3000:]}")
    return marker.exists()


def test_an_adk_run_killed_inside_a_tool_without_the_processor_leaves_only_its_ended_tool_spans_in_the_trace_session(server, token, adk_python, tmp_path):
    marker = tmp_path / "in-tool"
    agent = subprocess.Popen(command(adk_python, server, token, "adk-crash", "--crash", str(marker)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: in_tool(agent, marker), seconds=60 * load_factor(), what="the agent reached its second tool call")
        # A1's tool span, ended before A2 started, goes out with the next batch: it names no conversation.
        time.sleep(10 * BATCH_DELAY * load_factor())
    finally:
        agent.kill()
        agent.wait()
    # Held for a span naming the conversation, which never comes: once quiet, written to the trace's session.
    written = wait_for(lambda: session_ids(server, token), seconds=(SETTLE + 30) * load_factor(), what="the held spans written")
    assert api(server, token, "/sessions/adk-crash", missing=None) is None
    (trace_session,) = written
    log = events(server, token, trace_session)
    assert {e["data"]["id"] for e in log if e["type"] == "tool_call"} == {"call_a1"}
    assert {e["data"]["tool_call_id"] for e in log if e["type"] == "tool_result"} == {"call_a1"}


def dispatched_in_flight(log: list[dict]) -> dict | None:
    """A2's call, once A1's result and A2's dispatch are both in: a refund call started (not inferred) by a
    tool span other than A1's, with no result."""
    results = {e["data"]["tool_call_id"]: e for e in log if e["type"] == "tool_result"}
    if "call_a1" not in results:
        return None
    a1_span = results["call_a1"]["data"]["metadata"]["otel"]["span_id"]
    return next((e for e in log if e["type"] == "tool_call" and e["data"]["name"] == "refund"
                 and not e["data"]["metadata"].get("inferred") and e["data"]["metadata"]["otel"]["span_id"] != a1_span
                 and e["data"]["id"] not in results), None)


def test_an_adk_run_killed_inside_a_tool_with_the_processor_owes_the_call_it_dispatched_as_outcome_unknown(server, token, adk_python, tmp_path):
    marker = tmp_path / "in-tool"
    agent = subprocess.Popen(command(adk_python, server, token, "adk-crash", "--crash", str(marker), "--processor"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: in_tool(agent, marker), seconds=60 * load_factor(), what="the agent reached its second tool call")
        started = marker.stat().st_mtime  # the tool writes the marker as it starts
        call = wait_for(lambda: dispatched_in_flight(events(server, token, "adk-crash")), seconds=10 * load_factor(),
                        what="A2's call dispatched in the log")
        seen = time.time()
    finally:
        agent.kill()
        _, stderr = agent.communicate()
    assert seen - started <= DISPATCH_WITHIN * load_factor(), (seen - started, stderr.decode()[-2000:])
    session = wait_for(lambda: (s := api(server, token, "/sessions/adk-crash"))["status"] == "stalled" and s,
                       seconds=(STALL + 10) * load_factor(), what="stalled")
    assert session["interrupted"]
    plan = api(server, token, "/sessions/adk-crash/recovery-plan")
    owed = {r["data"]["tool_call_id"]: r["data"]["metadata"]["risk"] for r in plan["repairs"] if r["type"] == "tool_result"}
    assert owed == {call["data"]["id"]: "tool_outcome_unknown"}
    assert [r["data"]["reason"] for r in plan["repairs"] if r["type"] == "turn_end"] == ["interrupted"]
