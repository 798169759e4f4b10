"""Reading the Agents SDK's span data (turnlog_client.agent_spans): each shape the SDK's models leave on their spans."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")  # the optional extra

from agents.tracing import FunctionSpanData, GenerationSpanData, ResponseSpanData, TaskSpanData
from agents.usage import model_usage_to_span_usage
from openai.types.responses import Response, ResponseComputerToolCall, ResponseReasoningItem
from openai.types.responses.response_computer_tool_call import ActionClick
from openai.types.responses.response_reasoning_item import Summary

from turnlog_client.agent_spans import jsonable, kind_of, read_output, text_of, usage_of
from turnlog_client.tests.scripted_model import MODEL, call, say, usage_for


def response(*output) -> Response:
    return Response(id="r1", created_at=0, model=MODEL, object="response", output=list(output), parallel_tool_calls=True, tool_choice="auto", tools=[])


def as_tuples(calls):
    return [(c.id, c.name, c.arguments, sorted(c.names)) for c in calls]


def test_a_response_span_gives_text_calls_reasoning_and_model():
    reasoning = ResponseReasoningItem(id="rs1", type="reasoning", summary=[Summary(type="summary_text", text="add them")])
    tool = call("c1", "add", a=1, b=2).model_copy(update={"namespace": "math"})
    content, calls, thought, model = read_output(ResponseSpanData(response=response(reasoning, say("sum: "), tool)))
    assert (content, thought, model) == ("sum: ", "add them", MODEL)
    assert as_tuples(calls) == [("c1", "add", {"a": 1, "b": 2}, ["add", "math.add"])]


def test_a_generation_span_holds_a_chat_message_or_a_response_dump():
    chat = {"role": "assistant", "content": "ok", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2}"}}]}
    content, calls, _, _ = read_output(GenerationSpanData(output=[chat], model=MODEL))
    assert content == "ok" and as_tuples(calls) == [("call_1", "add", {"a": 2}, ["add"])]
    # The streamed Chat Completions path (and LiteLLM, any-llm) stores the converted Response's dump.
    content, calls, _, model = read_output(GenerationSpanData(output=[response(say("hi"), call("c2", "echo")).model_dump()]))
    assert (content, model) == ("hi", MODEL) and as_tuples(calls) == [("c2", "echo", {}, ["echo"])]


def test_no_recorded_output_is_no_content_and_no_calls():
    """trace_include_sensitive_data off: the span has usage only."""
    assert read_output(ResponseSpanData()) == (None, [], None, None)
    assert read_output(GenerationSpanData()) == (None, [], None, None)


def test_calls_without_a_name_and_arguments_that_are_not_json():
    computer = ResponseComputerToolCall(
        id="cu1", call_id="cc1", type="computer_call", status="completed", pending_safety_checks=[],
        action=ActionClick(type="click", button="left", x=1, y=2),
    )  # fmt: skip
    bad = call("c3", "add").model_copy(update={"arguments": "{not json"})
    _, calls, _, _ = read_output(ResponseSpanData(response=response(computer, bad)))
    assert as_tuples(calls) == [
        ("cc1", None, {"button": "left", "type": "click", "x": 1, "y": 2, "keys": None}, []),
        ("c3", "add", "{not json", ["add"]),
    ]


def test_usage_in_turnlogs_words():
    assert usage_of(model_usage_to_span_usage(usage_for(2))) == {
        "input_tokens": 200, "output_tokens": 20, "total_tokens": 220, "cache_read_input_tokens": 60,
        "cache_creation_input_tokens": 2, "reasoning_tokens": 8,
    }  # fmt: skip
    task_totals = {"input_tokens": 5, "output_tokens": 1, "cached_input_tokens": 2, "cache_write_input_tokens": 0, "requests": 1}
    assert usage_of(task_totals) == {"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": 2, "cache_creation_input_tokens": 0}
    assert usage_of(None) == {}


def test_kinds_and_values():
    assert [kind_of(d) for d in (ResponseSpanData(), GenerationSpanData(), FunctionSpanData("f", None, None), TaskSpanData("t"), object())] == [
        "model", "model", "tool", "task", "other",
    ]  # fmt: skip
    assert text_of("as is") == "as is" and text_of({"n": 1}) == '{"n": 1}' and text_of(response()).startswith('{"id": "r1"')
    assert jsonable({"when": object}) == {"when": str(object)}
