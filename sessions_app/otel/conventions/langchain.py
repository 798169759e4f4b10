"""What LangChain tool spans carry inside their JSON texts, under OpenInference and OpenLLMetry.

Neither instrumentation gives a LangChain tool span a call id attribute. The id is inside what the
span records when content is on: OpenInference's `output.value` is the ToolMessage the tool
returned (`{"type": "tool", "data": {..., "tool_call_id"}}`); OpenLLMetry's
`traceloop.entity.input` has `kwargs.tool_call_id` and its `traceloop.entity.output` wraps the
ToolMessage as LangChain dumps it (`{"output": {"lc": 1, "type": "constructor", "id": [...,
"ToolMessage"], "kwargs": {...}}}`). Without content there is no id: the planner pairs the span
with the call by name and arguments (docs/guide/otlp.md).
"""

from __future__ import annotations

from typing import Any

from .values import MAX_UNWRAP, get, ident, listed, parsed, parsed_structure


def tool_message(value: Any) -> dict | None:
    """The fields of the LangChain ToolMessage in `value` (JSON text or parsed), None when there is none."""
    found = parsed(value)
    for _ in range(MAX_UNWRAP):
        if not isinstance(found, dict):
            return None
        if found.get("type") == "tool" and isinstance(found.get("data"), dict):
            return found["data"]  # langchain_core.messages.message_to_dict
        if found.get("type") == "constructor" and listed(found.get("id"))[-1:] == ["ToolMessage"]:
            return found["kwargs"] if isinstance(found.get("kwargs"), dict) else None  # dumpd
        if found.get("type") == "tool" and "tool_call_id" in found:
            return found  # a plain ToolMessage dict
        wrapped = [found[key] for key in ("output", "outputs") if key in found]
        if not wrapped:
            return None
        found = wrapped[0]
        if isinstance(found, dict) and isinstance(found.get("messages"), list) and len(found["messages"]) == 1:
            found = found["messages"][0]  # a ToolNode's {"messages": [ToolMessage]}
    return None


def result_of(value: Any) -> tuple[Any, str | None]:
    """(result, call id) of a tool span's output: a ToolMessage's content and id, else the output as given."""
    message = tool_message(value)
    if message is None:
        return value, None
    return message.get("content"), ident(message.get("tool_call_id"))


def traceloop_input(value: Any) -> tuple[Any, str | None]:
    """(arguments, call id) of OpenLLMetry's tool input envelope `{"input_str", "inputs", "kwargs"}`.

    A value that is not that envelope is the arguments themselves.
    """
    found = parsed(value)
    if not isinstance(found, dict) or not ({"inputs", "input_str"} & found.keys()):
        return parsed_structure(value), None
    arguments = found.get("inputs")
    if arguments is None:
        arguments = parsed_structure(found.get("input_str"))
    return arguments, ident(get(found, "kwargs", "tool_call_id"))
