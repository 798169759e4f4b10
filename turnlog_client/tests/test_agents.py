"""TurnlogProcessor against a live Daphne, with the OpenAI Agents SDK running offline on a scripted model."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import sys

import pytest

pytest.importorskip("agents")  # the optional extra

from agents import Agent, RunConfig, Runner, UserError, function_tool, handoff, set_trace_processors

from tests.servers import free_port
from turnlog_client import Client
from turnlog_client.agents import TurnlogProcessor, session_id_for
from turnlog_client.tests.conftest import ROOT, events_of, run_script, wait_for_line
from turnlog_client.tests.scripted_model import MODEL, ScriptedModel, call, say


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Nothing may leave this machine: the SDK's own exporter is replaced, and a stray connection fails the test."""
    connect = socket.socket.connect

    def local_only(sock, address):
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"a connection to {address} was tried")
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)


@pytest.fixture
def processor(client):
    processor = TurnlogProcessor(client, flush_interval=0.05)
    set_trace_processors([processor])
    yield processor
    set_trace_processors([])
    processor.shutdown()


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool
def fail(why: str) -> str:
    """Always fails (its error goes back to the model)."""
    raise RuntimeError(f"out of paper: {why}")


@function_tool(failure_error_function=None)
def crash(why: str) -> str:
    """Always fails, and the error ends the run."""
    raise RuntimeError(f"jammed: {why}")


def by_type(events, event_type):
    return [e["data"] for e in events if e["type"] == event_type]


def results(events) -> dict[str, dict]:
    return {data["tool_call_id"]: data for data in by_type(events, "tool_result")}


def expected_usage(request: int) -> dict:
    return {
        "input_tokens": 100 * request, "output_tokens": 10 * request, "total_tokens": 110 * request,
        "cache_read_input_tokens": 30 * request, "cache_creation_input_tokens": request, "reasoning_tokens": 4 * request,
        "model": MODEL, "source": "openai-agents",
    }  # fmt: skip


def test_a_finished_run_reads_back_as_a_turn_of_steps_with_calls_results_and_usage(processor, client):
    # Two calls of one tool in one step: the order of output items pairs each span with its call id.
    model = ScriptedModel([[call("c1", "add", a=1, b=2), call("c2", "add", a=3, b=4)], [say("3 and 7")]])
    agent = Agent(name="calc", instructions="Add.", model=model, tools=[add])
    result = Runner.run_sync(agent, "add 1+2 and 3+4", run_config=RunConfig(group_id="conv-1"))
    assert result.final_output == "3 and 7"

    events = events_of(client, "conv-1")
    assert [e["type"] for e in events] == [
        "turn_start", "step_start", "user_message", "assistant_message", "tool_call", "tool_call", "tool_result", "tool_result",
        "step_end", "step_start", "assistant_message", "step_end", "turn_end",
    ]  # fmt: skip
    assert client.get_session("conv-1")["agent_name"] == "calc"
    assert by_type(events, "user_message")[0]["content"] == "add 1+2 and 3+4"
    first, last = by_type(events, "assistant_message")
    assert first["tool_calls"] == [{"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}},
                                   {"id": "c2", "name": "add", "arguments": {"a": 3, "b": 4}}]  # fmt: skip
    assert [(c["id"], c["name"], c["arguments"]) for c in by_type(events, "tool_call")] == [("c1", "add", {"a": 1, "b": 2}), ("c2", "add", {"a": 3, "b": 4})]
    assert {i: (r["content"], r["metadata"]) for i, r in results(events).items()} == {"c1": ("3", {}), "c2": ("7", {})}
    assert first["metadata"]["usage"] == expected_usage(1) and last["metadata"]["usage"] == expected_usage(2)
    assert last["content"] == "3 and 7" and last["tool_calls"] == []
    assert [s["outcome"] for s in by_type(events, "step_end")] == ["ok", "ok"]
    (end,) = by_type(events, "turn_end")
    assert (end["turn"], end["steps"], end["reason"]) == (1, 2, "complete")
    assert end["metadata"]["usage"] == {  # the run's totals, on the turn: never added to the steps' sums
        "input_tokens": 300, "output_tokens": 30, "total_tokens": 330, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 3,
        "source": "openai-agents",
    }  # fmt: skip
    # The session's usage: the two steps' (the processor's marked objects already count the cache), not the totals.
    assert client.get_session("conv-1")["usage"] == {
        "input_tokens": 300, "output_tokens": 30, "cache_read_tokens": 90, "cache_write_tokens": 3, "reasoning_tokens": 12,
        "models": [MODEL], "cost": "0", "currency": "USD", "priced": False, "unpriced": [MODEL],
    }  # fmt: skip
    plan = client.recovery_plan("conv-1")
    assert plan["interrupted"] is False and plan["repairs"] == []

    # The next run of the conversation is the session's second turn.
    agent.model = ScriptedModel([[say("hello again")]])
    Runner.run_sync(agent, result.to_input_list() + [{"role": "user", "content": "hi"}], run_config=RunConfig(group_id="conv-1"))
    later = events_of(client, "conv-1")[len(events):]
    assert [e["type"] for e in later] == ["turn_start", "step_start", "user_message", "assistant_message", "step_end", "turn_end"]
    assert later[0]["data"]["turn"] == 2 and later[2]["data"]["content"] == "hi"


def test_chat_completion_spans_read_the_same(processor, client):
    """A generation span (the Chat Completions models) carries the chat message, the model and the system prompt."""
    model = ScriptedModel([[call("call_9", "add", a=2, b=2)], [say("4")]], style="chat")
    agent = Agent(name="calc", instructions="Add carefully.", model=model, tools=[add])
    Runner.run_sync(agent, "2+2?", run_config=RunConfig(group_id="chat-1"))

    events = events_of(client, "chat-1")
    assert [e["type"] for e in events][:5] == ["turn_start", "step_start", "system_message", "user_message", "assistant_message"]
    assert by_type(events, "system_message")[0]["content"] == "Add carefully."
    first, last = by_type(events, "assistant_message")
    assert first["tool_calls"] == [{"id": "call_9", "name": "add", "arguments": {"a": 2, "b": 2}}]
    assert first["metadata"]["usage"] == expected_usage(1) and last["content"] == "4"
    assert results(events)["call_9"]["content"] == "4"


def test_a_tool_that_raises_gives_an_error_result(processor, client):
    model = ScriptedModel([[call("c1", "fail", why="tray 2")], [say("the printer failed")]])
    Runner.run_sync(Agent(name="printer", model=model, tools=[fail]), "print", run_config=RunConfig(group_id="err-1"))

    events = events_of(client, "err-1")
    result = results(events)["c1"]
    assert result["content"] == "An error occurred while running the tool. Please try again."  # what the model was told
    assert result["metadata"]["error"]["message"] == "Error running tool (non-fatal)"
    assert by_type(events, "turn_end")[0]["reason"] == "complete"  # the model handled it


def test_an_error_that_ends_the_run_rejects_the_turn_and_reaches_the_caller(processor, client):
    model = ScriptedModel([[call("c1", "crash", why="tray 3")]])
    with pytest.raises(UserError, match="jammed"):
        Runner.run_sync(Agent(name="printer", model=model, tools=[crash]), "print", run_config=RunConfig(group_id="err-2"))

    events = events_of(client, "err-2")
    assert results(events)["c1"]["metadata"]["error"]["message"] == "Error running tool"
    assert by_type(events, "step_end")[-1]["outcome"] == "error"
    (end,) = by_type(events, "turn_end")
    assert end["reason"] == "rejected" and end["error"]["type"] == "UserError" and "jammed" in end["error"]["message"]
    assert client.recovery_plan("err-2")["interrupted"] is False


def test_a_run_started_while_handling_an_exception_is_not_taken_for_a_failure(processor, client):
    """The SDK's code runs inside the caller's `except` block here, so that exception is "being handled" all along."""
    model = ScriptedModel([[call("c1", "add", a=1, b=1)], [say("2")]])
    try:
        raise KeyError("the caller's own")
    except KeyError:
        Runner.run_sync(Agent(name="calc", model=model, tools=[add]), "1+1", run_config=RunConfig(group_id="ambient-1"))

    events = events_of(client, "ambient-1")
    assert results(events)["c1"] == {"tool_call_id": "c1", "name": "add", "content": "2", "metadata": {}}
    assert [s["outcome"] for s in by_type(events, "step_end")] == ["ok", "ok"]
    assert by_type(events, "turn_end")[0]["reason"] == "complete"


def test_a_handoff_is_a_call_with_the_new_agent_as_its_result(processor, client):
    billing = Agent(name="billing", model=ScriptedModel([[say("refunded")]]))
    triage_model = ScriptedModel([[call("h1", "transfer_to_billing")]])
    triage = Agent(name="triage", model=triage_model, handoffs=[handoff(billing)])
    assert Runner.run_sync(triage, "refund me", run_config=RunConfig(group_id="handoff-1")).final_output == "refunded"

    events = events_of(client, "handoff-1")
    assert [(c["id"], c["name"]) for c in by_type(events, "tool_call")] == [("h1", "transfer_to_billing")]
    assert json.loads(results(events)["h1"]["content"]) == {"assistant": "billing"}
    assert by_type(events, "turn_end")[0]["steps"] == 2


def test_a_process_killed_inside_a_tool_leaves_the_call_owed_as_outcome_unknown(server, client, token):
    """The tool_call is stored before the tool runs; the call the killed step never started is owed as not started."""
    script = run_script(
        """
        import sys, time
        from agents import Agent, RunConfig, Runner, function_tool, set_trace_processors
        from agents.run_config import ToolExecutionConfig
        from turnlog_client import Client
        from turnlog_client.agents import TurnlogProcessor
        from turnlog_client.tests.scripted_model import ScriptedModel, call, say

        @function_tool
        def add(a: int, b: int) -> int:
            "Add."
            return a + b

        @function_tool
        def charge(order: int) -> str:
            "Charge an order."
            print("IN_TOOL", flush=True)
            time.sleep(60)
            return "charged"

        set_trace_processors([TurnlogProcessor(Client(sys.argv[1], sys.argv[2]))])
        model = ScriptedModel([[call("c1", "add", a=1, b=2)], [call("c2", "charge", order=42), call("c3", "add", a=5, b=5)], [say("done")]])
        agent = Agent(name="billing", model=model, tools=[add, charge])
        # One tool at a time: c3 waits for c2, so the kill finds it not started.
        config = RunConfig(group_id="killed-1", tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1))
        Runner.run_sync(agent, "charge order 42", run_config=config)
        """,
        server.url, token,
    )  # fmt: skip
    try:
        wait_for_line(script, "IN_TOOL")
        script.send_signal(signal.SIGKILL)
        script.wait(timeout=10)
    finally:
        if script.poll() is None:
            script.kill()

    events = events_of(client, "killed-1")
    assert [e["type"] for e in events][-3:] == ["step_start", "assistant_message", "tool_call"]
    plan = client.recovery_plan("killed-1")
    assert plan["interrupted"] is True
    owed = {c["id"]: c["risk"] for c in plan["owed_calls"]}
    assert owed == {"c2": "tool_outcome_unknown", "c3": "tool_not_started"}  # c1 has its result
    assert [r["type"] for r in plan["repairs"]] == ["tool_result", "tool_result", "turn_end"]
    assert client.get_session("killed-1")["agent_name"] == "billing"


def test_the_processor_never_raises_into_the_agent(caplog):
    """No server: every write fails, is logged, and the run goes on."""
    with Client(f"http://127.0.0.1:{free_port()}", "no-token", timeout=2) as unreachable:
        processor = TurnlogProcessor(unreachable, flush_timeout=1)
        set_trace_processors([processor])
        try:
            model = ScriptedModel([[call("c1", "add", a=1, b=1)], [say("2")]])
            with caplog.at_level(logging.ERROR, logger="turnlog_client.agents"):
                result = Runner.run_sync(Agent(name="calc", model=model, tools=[add]), "1+1", run_config=RunConfig(group_id="g"))
        finally:
            set_trace_processors([])
            processor.shutdown()
    assert result.final_output == "2"
    assert "could not open session g" in caplog.text


def test_session_ids_from_group_ids():
    class Trace:
        trace_id = "trace_0123"

        def __init__(self, group_id):
            self.group_id = group_id

    assert session_id_for(Trace("conv-1")) == ("conv-1", None)
    assert session_id_for(Trace(None)) == ("trace_0123", None)
    mapped, original = session_id_for(Trace("thread/42 of alice"))
    assert original == "thread/42 of alice" and mapped.startswith("thread-42-of-alice-") and len(mapped) <= 128
    assert session_id_for(Trace("thread/42 of alice"))[0] == mapped != session_id_for(Trace("thread/42 of bob"))[0]


def test_the_client_imports_without_the_agents_sdk():
    code = (
        "import sys; sys.modules['agents'] = None\n"  # as if openai-agents were not installed
        "import turnlog_client\n"
        "try:\n    import turnlog_client.agents\nexcept ImportError as error:\n    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install './turnlog_client[agents]'" in done.stdout
