"""Spans read by convention: recorded spans of each family read as docs/guide/otlp.md says ("What maps to what"),
with content off they still give the structure, and no span whatever its attributes makes `read` raise.

The fixtures under tests/sessions_app/otel/fixtures/ were recorded from the real instrumentations by
fixtures/record.py (its docstring says how and with which versions), the `vercel_*` ones by
tests/js/agent.mjs --record from the real npm packages (OTLP/JSON as the JS SDK exported it; each
fixture's `source` says which versions), except the two `genai_*` ones, hand-written from the semantic
conventions because no installed instrumentation emits those forms.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.log import recovery
from sessions_app.log.events import Event
from sessions_app.otel.content import run_inputs
from sessions_app.otel.conventions import read
from sessions_app.otel.conventions.messages import semconv_messages, semconv_run_inputs, vercel_messages
from sessions_app.otel.planner import Planner, ordered
from sessions_app.otel.readings import AGENT, MODEL, OTHER, TOOL, Message, Reading
from sessions_app.otel import wire_json
from sessions_app.otel.spans import STATUS_ERROR, Span, SpanEvent

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROLES = {AGENT, MODEL, TOOL, OTHER}
WEATHER_CALLS = (
    {"id": "call_paris", "name": "get_weather", "arguments": {"city": "Paris"}},
    {"id": "call_atlantis", "name": "get_weather", "arguments": {"city": "Atlantis"}},
)
USAGE_FIRST = {"input_tokens": 30, "output_tokens": 12, "cache_read_input_tokens": 8}


def spans(name: str) -> list[Span]:
    """A fixture's spans, in the order they started (an OTLP/JSON request decoded as the endpoint does)."""
    document = json.loads((FIXTURES / f"{name}.json").read_text())
    if "request" in document:
        decoded, refused = wire_json.read(json.dumps(document["request"]).encode())
        assert refused == []
        return sorted(decoded, key=lambda span: (span.start_ns, span.end_ns))
    return [Span(**{**raw, "events": tuple(SpanEvent(**event) for event in raw["events"])}) for raw in document["spans"]]


def readings(name: str) -> list[Reading]:
    return [read(span) for span in spans(name)]


def whole_input(name: str, reading: Reading) -> list[Message]:
    """All of a model span's gen_ai.input.messages (a reading keeps what the log takes: run_inputs)."""
    found = next(s for s in spans(name) if s.span_id == reading.span_id)
    return semconv_messages(found.attributes["gen_ai.input.messages"], "user")


def of(found: list[Reading], role: str, pending: bool = False) -> list[Reading]:
    return [r for r in found if r.role == role and r.pending == pending]


def weather_tools(found: list[Reading]) -> tuple[Reading, Reading]:
    """The Paris and the Atlantis tool spans (LangGraph runs them in parallel: either may start first)."""
    tools = of(found, TOOL)
    assert len(tools) == 2
    return next(t for t in tools if t.error is None), next(t for t in tools if t.error is not None)


# ---- Pydantic AI ---------------------------------------------------------------------------------


def test_pydantic_ai_spans_read_as_an_agent_run_with_steps_and_tool_calls():
    agent, first, paris, atlantis, second = readings("pydantic_ai")
    assert [r.role for r in (agent, first, paris, atlantis, second)] == [AGENT, MODEL, TOOL, TOOL, MODEL]
    assert {r.family for r in (agent, first, paris, atlantis, second)} == {"pydantic_ai"}
    assert {r.conversation_id for r in (agent, first, paris, atlantis, second)} == {"pai-conversation-1"}
    assert agent.parent_span_id is None and agent.agent_name == "weather_agent"
    # Run totals (gen_ai.aggregated_usage.*) go to the turn, never into a step's usage.
    assert agent.aggregated_usage == {"input_tokens": 90, "output_tokens": 21, "cache_read_input_tokens": 8}
    assert agent.usage == {}
    assert first.model == "scripted" and first.provider == "function"
    assert first.system_instructions == "You are terse."
    assert first.input_messages == (Message("user", "Weather in Paris and Atlantis?"),)
    assert first.output_messages == (Message("assistant", "Let me look.", WEATHER_CALLS),)
    assert first.requested_calls == WEATHER_CALLS
    assert first.usage == {**USAGE_FIRST, "model": "scripted"}
    assert second.output_messages == (Message("assistant", "Sunny in Paris; Atlantis is unknown."),)
    # The second request's input holds the tool answers as tool messages; the log takes none of
    # it (no system message, no prompt at its end: the run so far is in the log already).
    assert [(m.role, m.tool_call_id) for m in whole_input("pydantic_ai", second)] == [
        ("user", None), ("assistant", None), ("tool", "call_paris"), ("tool", "call_atlantis")]
    assert second.input_messages == ()
    assert (paris.tool_name, paris.tool_call_id, paris.tool_arguments) == ("get_weather", "call_paris", {"city": "Paris"})
    assert paris.tool_result == "sunny in Paris" and paris.has_result and paris.error is None
    # ModelRetry: an ERROR span with an exception event; the retry prompt is its result.
    assert atlantis.tool_call_id == "call_atlantis" and atlantis.has_result
    assert atlantis.error == {"type": "pydantic_ai.exceptions.ToolRetryError", "message": "no such city: Atlantis"}
    assert atlantis.tool_result == "no such city: Atlantis"
    # The run's agent is named on every span (a session made from a batch without the agent span is named too).
    assert {r.agent_name for r in (agent, first, paris, atlantis, second)} == {"weather_agent"}


def test_pydantic_ai_without_content_still_gives_roles_names_ids_and_usage():
    agent, first, paris, atlantis, second = readings("pydantic_ai_nocontent")
    assert [r.role for r in (agent, first, paris, atlantis, second)] == [AGENT, MODEL, TOOL, TOOL, MODEL]
    assert agent.agent_name == "weather_agent" and agent.aggregated_usage["input_tokens"] == 90
    assert first.system_instructions is None
    assert first.input_messages == (Message("user", None),)
    assert first.requested_calls == tuple({**call, "arguments": None} for call in WEATHER_CALLS)
    assert first.output_messages[0].content is None and first.usage == {**USAGE_FIRST, "model": "scripted"}
    assert (paris.tool_name, paris.tool_call_id, paris.tool_arguments, paris.tool_result) == (
        "get_weather", "call_paris", None, None)
    assert paris.has_result  # the span ended: its result is owed to nobody, content or not
    assert atlantis.error == {"type": "pydantic_ai.exceptions.ToolRetryError", "message": None}


def test_pydantic_ai_instrumentation_version_2_names():
    agent, first, paris, atlantis, _ = readings("pydantic_ai_v2")
    assert (agent.name, agent.role, agent.agent_name) == ("agent run", AGENT, "weather_agent")
    assert first.requested_calls == WEATHER_CALLS
    assert (paris.name, paris.role) == ("running tool", TOOL)
    assert (paris.tool_name, paris.tool_call_id, paris.tool_arguments, paris.tool_result) == (
        "get_weather", "call_paris", {"city": "Paris"}, "sunny in Paris")
    assert atlantis.error["type"] == "pydantic_ai.exceptions.ToolRetryError"


def test_logfire_pending_spans_announce_the_real_span():
    found = readings("logfire_pydantic_ai")
    pending = [r for r in found if r.pending]
    ended = {r.span_id: r for r in found if not r.pending}
    assert len(pending) == len(ended) == 5
    for start in pending:
        real = ended[start.span_id]  # the pending span's id is the real span's
        assert (start.role, start.name, start.parent_span_id) == (real.role, real.name, real.parent_span_id)
        assert start.start_ns == real.start_ns and not start.has_result and start.error is None
    root = next(r for r in pending if r.role == AGENT)
    assert root.parent_span_id is None  # logfire.pending_parent_id of a root is zeros
    assert root.agent_name == "weather_agent" and root.conversation_id == "lf-conversation-1"
    # A tool's start says what was dispatched: the planner's evidence for a call whose span never ends.
    tools = of(found, TOOL, pending=True)
    assert [(t.tool_name, t.tool_call_id, t.tool_arguments) for t in tools] == [
        ("get_weather", "call_paris", {"city": "Paris"}), ("get_weather", "call_atlantis", {"city": "Atlantis"})]
    assert all(r.model == "scripted" and r.usage == {} for r in of(found, MODEL, pending=True))


# ---- Google ADK ----------------------------------------------------------------------------------

REFUND_CALLS = ({"id": "call_a1", "name": "refund", "arguments": {"order": "A1"}},
                {"id": "call_a2", "name": "refund", "arguments": {"order": "A2"}})


def adk_spans(name: str) -> tuple[Reading, Reading, Reading, Reading, Reading, Reading, Reading]:
    """workflow, agent, first model, tool A1, tool A2, merged tools, second model (in the order they started)."""
    found = readings(name)
    assert [r.name for r in found] == ["invoke_workflow support", "invoke_agent support", "generate_content scripted",
                                       "execute_tool refund", "execute_tool refund", "execute_tool (merged)",
                                       "generate_content scripted"]
    return tuple(found)


@pytest.mark.parametrize("name", ["adk", "adk_nocontent"])
def test_adk_spans_read_as_a_workflow_with_steps_and_tool_calls_whatever_the_content(name):
    workflow, agent, first, a1, a2, merged, second = adk_spans(name)
    assert [r.role for r in (workflow, agent, first, a1, a2, merged, second)] == [AGENT, AGENT, MODEL, TOOL, TOOL, OTHER, MODEL]
    assert workflow.parent_span_id is None and agent.parent_span_id == workflow.span_id
    # The tool spans are the agent's children, beside the model span (which ends after them).
    assert {r.parent_span_id for r in (first, a1, a2, merged, second)} == {agent.span_id}
    assert first.end_ns > a2.end_ns
    # The ADK session's id, on the workflow, agent and model spans, not on the tool spans.
    assert [r.conversation_id for r in (workflow, agent, first, second)] == ["adk-conversation-1"] * 4
    assert a1.conversation_id is a2.conversation_id is None
    assert {r.agent_name for r in (workflow, agent, first, a1, a2, second)} == {"support"}  # the workflow by its span name
    assert (first.model, first.provider) == ("scripted", "gcp.gemini")  # ADK names its provider whatever the model
    assert first.usage == {"input_tokens": 30, "output_tokens": 12, "model": "scripted"}
    assert second.usage == {"input_tokens": 60, "output_tokens": 9, "model": "scripted"}
    assert workflow.aggregated_usage == agent.aggregated_usage == {}
    assert [(t.tool_name, t.tool_call_id, t.has_result, t.error) for t in (a1, a2)] == [
        ("refund", "call_a1", True, None), ("refund", "call_a2", True, None)]
    # The merged span's call id is an event's id: no call of its own.
    assert (merged.tool_name, merged.tool_call_id) == (None, None)


def test_adk_with_content_gives_messages_calls_arguments_and_results():
    _, _, first, a1, a2, _, second = adk_spans("adk")
    assert first.system_instructions == 'You refund orders.\n\nYou are an agent. Your internal name is "support".'
    assert first.input_messages == (Message("user", "Refund orders A1 and A2"),)
    assert first.requested_calls == REFUND_CALLS
    assert second.output_messages == (Message("assistant", "Both orders are refunded."),)
    # ADK hands the model a tool's return value as {"result": value}: that is the result it records.
    assert [(t.tool_arguments, t.tool_result) for t in (a1, a2)] == [
        ({"order": "A1"}, '{"result": "refunded A1"}'), ({"order": "A2"}, '{"result": "refunded A2"}')]
    assert [(m.role, m.tool_call_id) for m in whole_input("adk", second)] == [
        ("user", None), ("assistant", None), ("tool", "call_a1"), ("tool", "call_a2")]


def test_adk_without_content_still_gives_the_calls_ids_and_usage():
    _, _, first, a1, a2, _, second = adk_spans("adk_nocontent")
    assert first.system_instructions is None and first.input_messages == first.output_messages == ()
    assert first.requested_calls == ()  # ADK drops the calls with the messages: the tool spans carry the ids
    assert [(t.tool_arguments, t.tool_result) for t in (a1, a2)] == [(None, None), (None, None)]
    assert second.usage["input_tokens"] == 60


def test_adk_merged_tools_span_is_bookkeeping_even_before_its_attributes():
    # ADK starts the span bare and names the merge at its end: a span seen as it starts (a pending span) has only its name.
    assert read(span("execute_tool (merged)", {})).role == OTHER
    assert read(span("execute_tool (merged)", {"gen_ai.operation.name": "execute_tool",
                                               "gen_ai.tool.name": "(merged tools)", "gen_ai.tool.call.id": "e-1"})).role == OTHER
    assert read(span("execute_tool refund", {})).role == TOOL


# ---- OpenInference -------------------------------------------------------------------------------


def test_openinference_langgraph_reads_as_a_turn_of_steps_and_tools():
    found = readings("openinference_langgraph")
    assert {r.family for r in found} == {"openinference"} and {r.conversation_id for r in found} == {"lg-session-1"}
    root = found[0]
    # LangGraph's root CHAIN is the turn; its graph nodes are nested AGENT spans; other CHAINs are plumbing.
    assert (root.name, root.role, root.parent_span_id, root.agent_name) == ("LangGraph", AGENT, None, "LangGraph")
    assert [(r.name, r.parent_span_id == root.span_id) for r in of(found, AGENT)[1:]] == [("agent", True), ("agent", True)]
    assert {r.name for r in of(found, OTHER)} == {"call_model", "RunnableSequence", "Prompt", "should_continue", "tools"}
    first, second = of(found, MODEL)
    assert first.provider == "scriptedmodel" and first.model is None
    assert first.input_messages == (Message("system", "You are terse."), Message("user", "Weather in Paris and Atlantis?"))
    assert first.output_messages == (Message("assistant", "Let me look.", WEATHER_CALLS),)
    assert first.usage == USAGE_FIRST
    assert second.output_messages == (Message("assistant", "Sunny in Paris; Atlantis is unknown."),)
    assert second.input_messages[3] == Message("tool", "sunny in Paris", tool_call_id="call_paris", name="get_weather")
    paris, atlantis = weather_tools(found)
    # LangChain's TOOL spans have no call id attribute: the ToolMessage in output.value names it.
    assert (paris.tool_name, paris.tool_call_id, paris.tool_result) == ("get_weather", "call_paris", "sunny in Paris")
    assert paris.tool_arguments == "Paris"  # LangChain records a one-argument tool's input as the bare value
    # A failed tool has no output: no call id (the planner pairs it by name and arguments), an error result.
    assert (atlantis.tool_call_id, atlantis.tool_arguments, atlantis.tool_result) == (None, "Atlantis", None)
    assert atlantis.error == {"type": "ValueError", "message": "no such city: Atlantis"} and atlantis.has_result


def test_openinference_with_inputs_and_outputs_hidden_still_gives_the_structure():
    shown, hidden = readings("openinference_langgraph"), readings("openinference_langgraph_hidden")
    assert [(r.name, r.role) for r in hidden] == [(r.name, r.role) for r in shown]
    first, _ = of(hidden, MODEL)
    assert first.input_messages == first.output_messages == () and first.usage == USAGE_FIRST
    paris, atlantis = weather_tools(hidden)
    # OpenInference's redaction marker is no value: no arguments, no result, no call id inside it.
    assert (paris.tool_name, paris.tool_call_id, paris.tool_arguments) == ("get_weather", None, None)
    assert paris.tool_result is None and paris.has_result
    assert atlantis.error == {"type": "ValueError", "message": "no such city: Atlantis"}


# ---- OpenLLMetry ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["openllmetry_langgraph", "openllmetry_langgraph_flattened"])
def test_openllmetry_langgraph_reads_as_a_turn_of_steps_and_tools(name):
    found = readings(name)
    create, root, workflow = found[:3]
    assert (create.name, create.role) == ("create_agent react_agent", OTHER)  # builds an agent, runs nothing
    assert (root.role, root.parent_span_id, root.agent_name) == (AGENT, None, "LangGraph")
    assert (workflow.role, workflow.parent_span_id, workflow.agent_name) == (AGENT, root.span_id, "LangGraph")
    assert workflow.conversation_id == "lg-session-1"  # traceloop.association.properties.session_id
    assert {r.name for r in of(found, OTHER)} - {"create_agent react_agent"} == {
        "execute_task agent", "execute_task call_model", "execute_task RunnableSequence", "execute_task Prompt",
        "execute_task should_continue", "execute_task tools"}
    first, second = of(found, MODEL)
    assert first.family == "openllmetry" and first.provider in ("langchain", "Langchain")
    assert first.requested_calls == WEATHER_CALLS and first.output_messages[0].content == "Let me look."
    assert Message("user", "Weather in Paris and Atlantis?") in first.input_messages
    assert first.usage == {**USAGE_FIRST, "model": "unknown"}
    assert second.output_messages[0].content == "Sunny in Paris; Atlantis is unknown."
    paris, atlantis = weather_tools(found)
    # No call id attribute: the input envelope's kwargs.tool_call_id names it.
    assert (paris.tool_name, paris.tool_call_id, paris.tool_arguments, paris.tool_result) == (
        "get_weather", "call_paris", {"city": "Paris"}, "sunny in Paris")
    assert (atlantis.tool_call_id, atlantis.tool_arguments, atlantis.tool_result) == (
        "call_atlantis", {"city": "Atlantis"}, None)
    assert atlantis.error == {"type": "ValueError", "message": "no such city: Atlantis"}


def test_openllmetry_without_content_still_gives_the_structure():
    shown, hidden = readings("openllmetry_langgraph"), readings("openllmetry_langgraph_nocontent")
    assert [(r.name, r.role) for r in hidden] == [(r.name, r.role) for r in shown]
    first, _ = of(hidden, MODEL)
    assert first.output_messages == () and first.usage == {**USAGE_FIRST, "model": "unknown"}
    paris, atlantis = weather_tools(hidden)
    assert (paris.tool_name, paris.tool_call_id, paris.tool_arguments, paris.tool_result) == (
        "get_weather", None, None, None)
    assert atlantis.error["type"] == "ValueError"


# ---- the Vercel AI SDK ---------------------------------------------------------------------------

VERCEL_CALLS = (
    {"id": "call_a1", "name": "refund", "arguments": {"order": "A1"}},
    {"id": "call_x9", "name": "refund", "arguments": {"order": "X9"}},
)
VERCEL_USAGE_FIRST = {"input_tokens": 30, "output_tokens": 12, "cache_read_input_tokens": 8}


def vercel_tools(found: list[Reading]) -> tuple[Reading, Reading]:
    """The A1 and the X9 tool spans (the SDK runs a step's tools in parallel: either may start first)."""
    tools = sorted(of(found, TOOL), key=lambda reading: reading.tool_call_id)
    assert [t.tool_call_id for t in tools] == ["call_a1", "call_x9"]
    return tools[0], tools[1]


@pytest.mark.parametrize("name", ["vercel_ai6", "vercel_ai6_stream", "vercel_ai7_legacy", "vercel_ai7_legacy_stream"])
def test_vercel_ai_spans_read_as_a_call_of_steps_and_tool_calls(name):
    found = readings(name)
    agent, first, second = of(found, AGENT)[0], *of(found, MODEL)
    assert [r.role for r in found].count(TOOL) == 2 and len(found) == 5
    assert {r.family for r in found} == {"vercel"}
    assert {r.conversation_id for r in found} == {"vercel-session-1"}  # metadata (v6) or runtime context (v7)
    assert agent.parent_span_id is None and agent.name in ("ai.generateText", "ai.streamText")
    assert agent.agent_name == "support"  # ai.telemetry.functionId
    assert agent.aggregated_usage == {"input_tokens": 90, "output_tokens": 21, "cache_read_input_tokens": 8}
    assert {first.parent_span_id, second.parent_span_id} == {agent.span_id}
    assert (first.model, first.provider) == ("scripted", "mock-provider")
    assert first.input_messages == (Message("system", "You refund orders."), Message("user", "Refund orders A1 and A2"))
    assert first.output_messages == (Message("assistant", "Let me refund them.", VERCEL_CALLS),)
    assert first.usage == {**VERCEL_USAGE_FIRST, "model": "scripted"}
    assert second.output_messages == (Message("assistant", "Both orders are refunded."),)
    assert second.usage == {"input_tokens": 60, "output_tokens": 9, "cache_read_input_tokens": 0, "model": "scripted"}
    # The second request's input: the run so far, the tools' answers as tool messages (the log takes none of it).
    whole = next(s for s in spans(name) if s.span_id == second.span_id).attributes["ai.prompt.messages"]
    assert [(m.role, m.tool_call_id) for m in vercel_messages(whole)] == [
        ("system", None), ("user", None), ("assistant", None), ("tool", "call_a1"), ("tool", "call_x9")]
    assert second.input_messages[:1] == (Message("system", "You refund orders."),)
    a1, x9 = vercel_tools(found)
    assert (a1.tool_name, a1.tool_arguments, a1.tool_result, a1.has_result, a1.error) == (
        "refund", {"order": "A1"}, "refunded A1", True, None)
    # A tool that threw: the exception recorded on its span is an error result.
    assert (x9.tool_arguments, x9.tool_result, x9.has_result) == ({"order": "X9"}, None, True)
    assert x9.error == {"type": "Error", "message": "no such order: X9"}
    # Version 6's generateText parents the tools on the call; streamText and version 7 on the model span.
    assert {a1.parent_span_id, x9.parent_span_id} in ({agent.span_id}, {first.span_id})


def test_vercel_ai_without_recorded_inputs_and_outputs_still_gives_the_structure():
    found = readings("vercel_ai6_nocontent")
    assert [r.role for r in found if r.role != TOOL] == [AGENT, MODEL, MODEL]
    first, _ = of(found, MODEL)
    assert first.input_messages == first.output_messages == () and first.model == "scripted"
    a1, x9 = vercel_tools(found)
    assert (a1.tool_name, a1.tool_arguments, a1.tool_result, a1.has_result) == ("refund", None, None, True)
    assert x9.error == {"type": "Error", "message": "no such order: X9"}
    assert {r.conversation_id for r in found} == {"vercel-session-1"}


def test_vercel_ai_7_default_integration_reads_by_the_genai_conventions():
    found = readings("vercel_ai7_otel")
    assert {r.family for r in found} == {"genai"} and {r.conversation_id for r in found} == {"vercel-session-1"}
    agent = of(found, AGENT)[0]
    assert (agent.name, agent.agent_name, agent.parent_span_id) == ("invoke_agent scripted", "support", None)
    assert agent.aggregated_usage == {"input_tokens": 90, "output_tokens": 21, "cache_read_input_tokens": 8}
    assert {r.name for r in of(found, OTHER)} == {"step 1", "step 2"}  # gen_ai.operation.name agent_step
    first, second = of(found, MODEL)
    assert first.requested_calls == VERCEL_CALLS and first.usage == {**VERCEL_USAGE_FIRST, "model": "scripted"}
    assert first.input_messages == (Message("user", "Refund orders A1 and A2"),)
    assert first.system_instructions == "You refund orders."
    assert second.output_messages == (Message("assistant", "Both orders are refunded."),)
    a1, x9 = vercel_tools(found)
    assert (a1.tool_name, a1.tool_arguments, a1.has_result) == ("refund", {"order": "A1"}, True)
    assert a1.tool_result == "refunded A1"  # written as JSON text, quotes and all
    assert x9.error == {"type": "Error", "message": "no such order: X9"}


@pytest.mark.parametrize(("name", "attributes", "role"), [
    ("ai.generateText", {"ai.operationId": "ai.generateText"}, AGENT),
    ("ai.streamObject", {"ai.operationId": "ai.streamObject"}, AGENT),
    ("ai.generateObject.doGenerate", {"ai.operationId": "ai.generateObject.doGenerate"}, MODEL),
    ("ai.streamText.doStream", {}, MODEL),  # the span name, when no attribute says
    ("ai.toolCall", {}, TOOL),
    ("ai.embed", {"ai.operationId": "ai.embed"}, OTHER),
    ("ai.embedMany.doEmbed", {"ai.operationId": "ai.embedMany.doEmbed", "gen_ai.operation.name": "chat"}, OTHER),
])
def test_vercel_ai_roles(name, attributes, role):
    reading = read(span(name, attributes))
    assert (reading.family, reading.role) == ("vercel", role)


def test_vercel_ai_4_names_and_the_session_in_metadata():
    model = read(span("ai.generateText.doGenerate", {
        "ai.operationId": "ai.generateText.doGenerate", "ai.usage.promptTokens": 11, "ai.usage.completionTokens": 4,
        "ai.model.id": "gpt-4o", "ai.telemetry.metadata.conversationId": "conv-7",
        "ai.response.toolCalls": json.dumps([{"toolCallType": "function", "toolCallId": "c1", "toolName": "f",
                                              "args": '{"x": 1}'}]),
        "ai.prompt.messages": json.dumps([
            {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c0", "toolName": "f", "args": {"x": 0}}]},
            {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c0", "toolName": "f", "result": 5}]},
            {"role": "user", "content": "again"}])}))
    assert model.usage == {"input_tokens": 11, "output_tokens": 4, "model": "gpt-4o"}
    assert model.conversation_id == "conv-7"
    assert model.requested_calls == ({"id": "c1", "name": "f", "arguments": {"x": 1}},)
    assert model.input_messages == (Message("assistant", None, ({"id": "c0", "name": "f", "arguments": {"x": 0}},)),
                                    Message("tool", 5, tool_call_id="c0", name="f"), Message("user", "again"))
    tool = read(span("ai.toolCall", {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "f", "ai.toolCall.id": "c1",
                                     "ai.toolCall.args": '{"x": 1}', "ai.toolCall.result": "not json",
                                     "ai.settings.context.sessionId": "s-1"}))
    assert (tool.tool_arguments, tool.tool_result, tool.conversation_id) == ({"x": 1}, "not json", "s-1")


# ---- the GenAI semantic conventions' other forms (hand-written fixtures) ---------------------------


def test_per_message_events_of_semconv_1_36():
    agent, first, tool, second = readings("genai_events_v1_36")
    assert agent.aggregated_usage == {"input_tokens": 150, "output_tokens": 40}  # usage on invoke_agent: run totals
    assert first.input_messages == (Message("system", "You are a weather bot."), Message("user", "Weather in Paris?"))
    call = {"id": "call_VSPygqKTWdrhaFErNvMV18Yl", "name": "get_weather", "arguments": {"location": "Paris"}}
    assert first.requested_calls == (call,)
    # Deprecated token names, the response model over the requested one.
    assert first.usage == {"input_tokens": 97, "output_tokens": 52, "model": "gpt-4o-2024-08-06"}
    assert (tool.tool_name, tool.tool_call_id, tool.tool_arguments, tool.has_result) == (
        "get_weather", call["id"], None, True)
    assert second.input_messages[1:] == (Message("assistant", None, (call,)),
                                         Message("tool", "rainy, 57°F", tool_call_id=call["id"]))
    assert second.output_messages == (Message("assistant", "It is rainy, 57°F."),)


def test_semconv_1_41_parts_usage_and_errors():
    agent, first, tool, second, completion, embeddings = readings("genai_v1_41")
    assert agent.aggregated_usage == {"input_tokens": 2000, "output_tokens": 300, "cache_read_input_tokens": 1500}
    assert first.system_instructions == "Plan, then act."
    assert first.input_messages[0].content == [
        {"type": "text", "content": "Summarise this file."},
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "iVBORw0KGgo="}]
    assert first.output_messages == (Message("assistant", None, ({"id": "toolu_01", "name": "read_file",
                                                                 "arguments": {"path": "a.txt"}},),
                                             reasoning_content="I need to read it first."),)
    assert first.usage == {"input_tokens": 1200, "output_tokens": 180, "cache_read_input_tokens": 1000,
                           "cache_creation_input_tokens": 150, "reasoning_tokens": 90,
                           "model": "claude-sonnet-4-20250514"}
    # An ERROR status without an exception event: error.type and the status message.
    assert tool.error == {"type": "FileNotFoundError", "message": "a.txt: no such file"} and tool.has_result
    assert whole_input("genai_v1_41", second)[2] == Message("tool", "a.txt: no such file", tool_call_id="toolu_01")
    assert second.input_messages == ()  # what the log takes of it: no system message, no prompt at its end
    assert (completion.role, completion.input_messages, completion.output_messages) == (
        MODEL, (Message("user", "Say hi"),), (Message("assistant", "hi"),))
    assert embeddings.role == OTHER and embeddings.usage == {}


# ---- the rules, one by one -----------------------------------------------------------------------


def span(name="x", attributes=None, parent="00000000000000aa", events=(), status=0, message="", scope="") -> Span:
    return Span("ab" * 16, "00000000000000bb", parent, name, attributes=attributes or {}, events=tuple(events),
                status_code=status, status_message=message, scope=scope)


@pytest.mark.parametrize(("name", "attributes", "role"), [
    ("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"}, AGENT),
    ("invoke_workflow w", {"gen_ai.operation.name": "invoke_workflow"}, AGENT),
    ("create_agent a", {"gen_ai.operation.name": "create_agent"}, OTHER),
    ("generate_content g", {"gen_ai.operation.name": "generate_content"}, MODEL),
    ("x", {"gen_ai.operation.name": "embeddings"}, OTHER),
    ("execute_tool t", {}, TOOL),  # the span name, when no attribute says
    ("agent run", {}, AGENT),
    ("running tool", {}, TOOL),
    ("chatter", {}, OTHER),  # a name word, not a prefix
    ("chat m", {"openinference.span.kind": "CHAIN"}, OTHER),  # a nested CHAIN
    ("llm", {"openinference.span.kind": "llm"}, MODEL),
    ("r", {"openinference.span.kind": "RETRIEVER"}, OTHER),
    ("w", {"traceloop.span.kind": "workflow"}, AGENT),
    ("t", {"traceloop.span.kind": "task"}, OTHER),
    ("c", {"llm.request.type": "chat"}, MODEL),
    ("x", {"gen_ai.operation.name": 7}, OTHER),
])
def test_roles(name, attributes, role):
    assert read(span(name, attributes)).role == role


def test_a_root_chain_is_the_turn():
    assert read(span("LangGraph", {"openinference.span.kind": "CHAIN"}, parent=None)).role == AGENT


def test_a_deferred_tool_call_has_no_result():
    reading = read(span("execute_tool ask", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": "c1",
                                             "pydantic_ai.tool.deferral.name": "ApprovalRequired"}, scope="pydantic-ai"))
    assert reading.tool_call_id == "c1" and reading.tool_name == "ask" and not reading.has_result


@pytest.mark.parametrize(("pending_parent", "expected"), [
    ("0000000000000000", None), ("00000000000000AA", "00000000000000aa"), (None, None), (12, None), ("xyz", None)])
def test_pending_span_parents(pending_parent, expected):
    attributes = {"logfire.span_type": "pending_span", "gen_ai.operation.name": "execute_tool"}
    if pending_parent is not None:
        attributes["logfire.pending_parent_id"] = pending_parent
    reading = read(span("execute_tool t", attributes, parent="00000000000000cc"))
    assert (reading.pending, reading.span_id, reading.parent_span_id) == (True, "00000000000000cc", expected)


def test_errors_from_exception_events_and_status():
    exception = SpanEvent("exception", 1, {"exception.type": "KeyError", "exception.message": "'k'"})
    assert read(span(events=[exception])).error == {"type": "KeyError", "message": "'k'"}
    assert read(span(status=STATUS_ERROR, message="boom")).error == {"type": "error", "message": "boom"}
    assert read(span(status=STATUS_ERROR)).error == {"type": "error", "message": None}
    assert read(span(status=1)).error is None


def test_values_of_the_wrong_type_are_values_not_given():
    reading = read(span("chat m", {
        "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": "12", "gen_ai.usage.output_tokens": -3,
        "gen_ai.usage.cache_read.input_tokens": 2.0, "gen_ai.usage.reasoning.output_tokens": float("nan"),
        "gen_ai.usage.cache_creation.input_tokens": True, "gen_ai.conversation.id": ["c"],
        "gen_ai.input.messages": "not json", "gen_ai.output.messages": {"role": "assistant"},
        "gen_ai.request.model": 3}))
    assert reading.usage == {"input_tokens": 12, "cache_read_input_tokens": 2, "model": "m"}
    assert reading.conversation_id is None and reading.input_messages == reading.output_messages == ()


def test_a_langchain_tool_output_without_a_call_id():
    reading = read(span("lookup", {"openinference.span.kind": "TOOL", "tool.name": "lookup",
                                   "input.value": '{"q": 1}', "output.value": "plain text"}))
    assert (reading.tool_call_id, reading.tool_arguments, reading.tool_result) == (None, {"q": 1}, "plain text")


# ---- through the planner: the recorded runs give the events docs/guide/otlp.md describes -------------------


def planned(found: list[Reading]) -> list[Event]:
    """The log a new session gets from these readings, in one batch, once the settle time has passed."""
    planner = Planner(next_seq=0, turn_stack=[], step_stack=[], turn_count=0, traces={}, seen=set(), received=1.0)
    for reading in ordered(found):
        planner.take(reading)
    planner.close_settled(now=1e9, settle=5.0)
    return [Event(seq, new.type, new.time or datetime.now(UTC), new.data) for seq, new in enumerate(planner.events)]


def planned_run(name: str) -> tuple[list[Event], list[str], list[str]]:
    """A recorded run's events, checked to be one closed turn of two steps; its call ids and result ids."""
    events = planned(readings(name))
    types = [e.type for e in events]
    assert types.count("turn_start") == types.count("turn_end") == 1
    assert types.count("step_start") == types.count("step_end") == 2
    calls = sorted(e.data["id"] for e in events if e.type == "tool_call")
    results = sorted(e.data["tool_call_id"] for e in events if e.type == "tool_result")
    return events, calls, results


@pytest.mark.parametrize("name", ["pydantic_ai", "pydantic_ai_v2", "logfire_pydantic_ai", "openinference_langgraph",
                                  "openllmetry_langgraph", "openllmetry_langgraph_flattened"])
def test_a_recorded_run_plans_to_one_closed_turn_whose_calls_all_have_results(name):
    events, calls, results = planned_run(name)
    assert calls == results == ["call_atlantis", "call_paris"]
    errors = [e.data["metadata"].get("error") for e in events if e.type == "tool_result"]
    assert sum(error is not None for error in errors) == 1
    assert recovery.plan(events).repairs == []


@pytest.mark.parametrize("name", ["vercel_ai6", "vercel_ai6_stream", "vercel_ai7_legacy", "vercel_ai7_legacy_stream",
                                  "vercel_ai7_otel"])
def test_a_recorded_vercel_ai_run_plans_to_one_closed_turn_whose_calls_all_have_results(name):
    events, calls, results = planned_run(name)
    assert calls == results == ["call_a1", "call_x9"]
    errors = {e.data["tool_call_id"]: e.data["metadata"].get("error") for e in events if e.type == "tool_result"}
    assert errors["call_a1"] is None and errors["call_x9"] is not None
    assert recovery.plan(events).repairs == []


@pytest.mark.parametrize("name", ["pydantic_ai_nocontent", "openinference_langgraph_hidden",
                                  "openllmetry_langgraph_nocontent", "vercel_ai6_nocontent"])
def test_a_recorded_run_without_content_still_plans_its_structure(name):
    events, calls, results = planned_run(name)
    # Without content LangChain's tool spans carry no call id and the model spans no calls: each
    # tool span is a call of its own (docs/guide/otlp.md), still dispatched and answered.
    assert calls == results and len(calls) == 2
    assert recovery.plan(events).repairs == []


@pytest.mark.parametrize("name", ["adk", "adk_nocontent"])
def test_a_recorded_adk_run_plans_to_one_closed_turn_of_its_two_calls_each_answered_once(name):
    events, calls, results = planned_run(name)
    assert calls == results == ["call_a1", "call_a2"]  # the merged span adds no call
    assert [e.data["reason"] for e in events if e.type == "turn_end"] == ["complete"]
    assert recovery.plan(events).repairs == []


# ---- no span makes read raise -----------------------------------------------------------------------

KEYS = sorted({
    "gen_ai.operation.name", "gen_ai.conversation.id", "gen_ai.agent.name", "gen_ai.input.messages",
    "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.tool.name", "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens", "gen_ai.aggregated_usage.input_tokens", "gen_ai.request.model",
    "gen_ai.response.model", "gen_ai.provider.name", "gen_ai.system", "tool_arguments", "tool_response", "agent_name",
    "logfire.span_type", "logfire.pending_parent_id", "pydantic_ai.tool.deferral.name", "openinference.span.kind",
    "session.id", "input.value", "output.value", "tool.name", "tool_call.id", "llm.model_name", "llm.token_count.prompt",
    "llm.input_messages.0.message.role", "llm.input_messages.0.message.content",
    "llm.output_messages.0.message.tool_calls.0.tool_call.id", "llm.output_messages.0.message.tool_calls",
    "llm.output_messages.0.message.tool_calls.x.tool_call.function.name", "llm.output_messages.1.message",
    "traceloop.span.kind", "traceloop.entity.input", "traceloop.entity.output", "traceloop.entity.name",
    "llm.request.type", "gen_ai.prompt.0.role", "gen_ai.prompt.0.content", "gen_ai.prompt.0",
    "gen_ai.completion.0.tool_calls.0.name", "gen_ai.completion.0.tool_calls", "error.type",
    "ai.operationId", "ai.prompt.messages", "ai.response.text", "ai.response.toolCalls", "ai.response.reasoning",
    "ai.toolCall.name", "ai.toolCall.id", "ai.toolCall.args", "ai.toolCall.result", "ai.usage.inputTokens",
    "ai.usage.promptTokens", "ai.usage.cachedInputTokens", "ai.model.id", "ai.telemetry.functionId",
    "ai.telemetry.metadata.sessionId", "ai.settings.context.sessionId",
})
OPERATIONS = st.sampled_from(["invoke_agent", "chat", "execute_tool", "create_agent", "embeddings", "CHAIN", "LLM",
                              "ai.generateText", "ai.generateText.doGenerate", "ai.toolCall",
                              "TOOL", "AGENT", "workflow", "tool", "pending_span", "0000000000000000"])
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.sampled_from(
        ["role", "parts", "type", "content", "tool_calls", "id", "name", "arguments", "function", "message", "data",
         "output", "kwargs", "inputs", "tool_call_id", "lc", "text", "response", "result", "toolCallId", "toolName",
         "input", "args", "value"]), inner, max_size=5),
    max_leaves=20,
)
VALUES = (JSONISH | OPERATIONS | st.binary(max_size=8) | JSONISH.map(json.dumps)
          | st.lists(st.integers() | st.text(max_size=5), max_size=3))
ATTRIBUTES = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=30), VALUES, max_size=12)
EVENTS = st.lists(st.builds(SpanEvent, st.sampled_from(
    ["exception", "gen_ai.user.message", "gen_ai.choice", "gen_ai.tool.message", "gen_ai.content.prompt", "x"]),
    st.integers(0, 2**63), ATTRIBUTES), max_size=3)
NAMES = st.sampled_from(["invoke_agent a", "agent run", "chat m", "execute_tool", "execute_tool t", "running tool",
                         "", "LangGraph", "ai.generateText", "ai.streamText.doStream", "ai.toolCall"]) | st.text(max_size=20)


@settings(max_examples=200, deadline=None)
@given(name=NAMES, attributes=ATTRIBUTES, events=EVENTS, parent=st.none() | st.just("00000000000000aa"),
       status=st.integers(0, 2), message=st.text(max_size=10), scope=st.sampled_from(["", "pydantic-ai", "x"]))
def test_read_never_raises_and_answers_in_its_own_terms(name, attributes, events, parent, status, message, scope):
    reading = read(Span("ab" * 16, "00000000000000bb", parent, name, attributes=attributes, events=tuple(events),
                        status_code=status, status_message=message, scope=scope))
    assert reading.role in ROLES
    for usage in (reading.usage, reading.aggregated_usage):
        assert set(usage) <= {"input_tokens", "output_tokens", "cache_read_input_tokens",
                              "cache_creation_input_tokens", "reasoning_tokens", "model"}
        assert all(isinstance(v, int) and v >= 0 for k, v in usage.items() if k != "model")
    for value in (reading.conversation_id, reading.agent_name, reading.tool_name, reading.tool_call_id, reading.model):
        assert value is None or (isinstance(value, str) and value)
    for message in reading.input_messages + reading.output_messages:
        assert message.role in {"system", "user", "assistant", "tool"}
        assert all(isinstance(call, dict) and set(call) == {"id", "name", "arguments"} for call in message.tool_calls)
    assert reading.error is None or set(reading.error) == {"type", "message"}
    assert reading.parent_span_id is None or len(reading.parent_span_id) == 16


# ---- the input cut while read ------------------------------------------------------------------------

RAW_PART = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "content": st.text(max_size=3)}),
    st.fixed_dictionaries({"type": st.just("tool_call"), "id": st.sampled_from(["a", "b"]), "name": st.just("f"), "arguments": st.just({})}),
    st.fixed_dictionaries({"type": st.just("tool_call_response"), "id": st.sampled_from(["a", "b"]), "response": st.text(max_size=3)}),
    st.fixed_dictionaries({"type": st.just("blob"), "content": st.just("x")}),
    st.just("not a part"),
)
RAW_MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {"parts": st.lists(RAW_PART, max_size=3)},
        optional={"role": st.sampled_from(["system", "developer", "user", "human", "assistant", "tool", "SYSTEM", "other", 7])},
    ),
    st.just("not a message"),
    st.just(None),
)


@settings(max_examples=400, deadline=None)
@given(raws=st.lists(RAW_MESSAGE, max_size=8), as_text=st.booleans())
def test_the_inputs_cut_while_read_are_the_run_inputs_of_all_of_them(raws, as_text):
    """A model span's gen_ai.input.messages are converted only as far as the log takes them (its
    system messages and the prompt at its end): the same messages as converting all, then cutting."""
    value = json.dumps(raws) if as_text else raws
    assert tuple(semconv_run_inputs(value)) == run_inputs(tuple(semconv_messages(value, "user")))


def test_the_client_processor_stamps_from_every_key_the_server_reads_a_conversation_from():
    import turnlog_client.otel

    from sessions_app.otel.conventions import table

    assert set(turnlog_client.otel.CONVERSATION_KEYS) == set(table.CONVERSATION)
