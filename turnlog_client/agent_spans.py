"""Reading the OpenAI Agents SDK's span data as plain values, for turnlog_client.agents.

Duck-typed on each span data's `type` ("response", "generation", "function", ...)
and on pydantic objects' `model_dump`, so it imports nothing of the SDK: the
SDK's objects and their dumps (a generation span holds either) read the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KINDS = {"agent": "agent", "response": "model", "generation": "model", "function": "tool", "handoff": "handoff", "task": "task"}
# The SDK's usage keys (span usage, Responses usage, task totals) -> Turnlog's metadata.usage keys.
USAGE_KEYS = {
    "input_tokens": "input_tokens", "output_tokens": "output_tokens", "total_tokens": "total_tokens",
    "cached_tokens": "cache_read_input_tokens", "cached_input_tokens": "cache_read_input_tokens",
    "cache_write_tokens": "cache_creation_input_tokens", "cache_write_input_tokens": "cache_creation_input_tokens",
    "reasoning_tokens": "reasoning_tokens",
}  # fmt: skip


@dataclass
class Call:
    """A tool call a model span requested."""

    id: str
    name: str | None  # None for calls without a name (computer, shell, apply_patch)
    arguments: Any
    names: frozenset[str] = frozenset()  # the span names that mean this call: name and namespace.name
    dispatched: bool = False




def kind_of(data: Any) -> str:
    """agent, model, tool, handoff, task or other, from the span data's `type`."""
    return KINDS.get(getattr(data, "type", None), "other")


def dict_of(value: Any) -> dict:
    if isinstance(value, Mapping):
        return dict(value)
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else {}


def read_output(data: Any) -> tuple[Any, list[Call], Any, str | None]:
    """(content, requested calls, reasoning, model) of a model span; content None when no output was recorded."""
    if data.type == "response":
        outputs = [dict_of(data.response)] if data.response is not None else []
    else:
        outputs = [dict_of(o) for o in data.output or ()]
    if not outputs:
        return None, [], None, None
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[Call] = []
    model = None
    for output in outputs:
        model = model or output.get("model")
        if isinstance(output.get("output"), list):  # a Responses response (or its dump in a generation span)
            for item in map(dict_of, output["output"]):
                if item.get("type") == "message":
                    texts += [p.get("text") or p.get("refusal") or "" for p in map(dict_of, item.get("content") or ())]
                elif item.get("type") == "reasoning":
                    reasoning += [p.get("text", "") for p in map(dict_of, item.get("summary") or ())]
                elif isinstance(item.get("call_id"), str):
                    calls.append(call_of(item["call_id"], item.get("name"), item.get("namespace"), item))
        elif output.get("role") == "assistant":  # a chat completion message
            if isinstance(output.get("content"), str):
                texts.append(output["content"])
            if output.get("reasoning_content"):
                reasoning.append(str(output["reasoning_content"]))
            for tool_call in map(dict_of, output.get("tool_calls") or ()):
                function = dict_of(tool_call.get("function"))
                calls.append(call_of(str(tool_call.get("id")), function.get("name"), None, function))
    return "".join(texts), calls, "\n".join(reasoning) or None, model


def call_of(call_id: str, name: str | None, namespace: str | None, item: dict) -> Call:
    raw = item.get("arguments", item.get("input", item.get("action")))
    arguments: Any = raw
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError:
            pass  # kept as the text the model wrote: the server shows text that is not JSON as it is (session-log.md 1)
    names = frozenset(n for n in (name, f"{namespace}.{name}" if namespace and name else None) if n)
    return Call(call_id, name, jsonable(arguments), names)


def usage_in_output(data: Any) -> Any:
    if data.type == "response" and data.response is not None:
        return dict_of(data.response).get("usage")
    return None


def usage_of(raw: Any) -> dict[str, Any]:
    """Turnlog's usage keys from the SDK's (details nested one level: input_tokens_details.cached_tokens)."""
    found: dict[str, Any] = {}
    for key, value in dict_of(raw).items():
        if isinstance(value, Mapping):
            found |= {USAGE_KEYS[k]: v for k, v in value.items() if k in USAGE_KEYS and isinstance(v, int)}
        elif key in USAGE_KEYS and isinstance(value, int):
            found[USAGE_KEYS[key]] = value
    return found


def text_of(value: Any) -> Any:
    """A tool's output as the content of its result: text as it is, anything else as JSON (or its str)."""
    if isinstance(value, str):
        return value
    return json.dumps(jsonable(value), ensure_ascii=False)


def jsonable(value: Any) -> Any:
    """`value` as plain JSON values (the writer refuses anything else, which would lose the event)."""
    return json.loads(json.dumps(value, default=lambda v: dict_of(v) or str(v)))
