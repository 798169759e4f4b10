"""What one span says in Turnlog's terms: `read(span) -> Reading`, by the family that instrumented it.

The families and what their attributes mean are the table in `table.py` (docs/guide/otlp.md, "What maps
to what"): the GenAI semantic conventions, Pydantic AI (and Logfire's pending spans), OpenInference,
OpenLLMetry. Pure: no Django, no I/O, and no exception for any span, whatever its attributes hold
(a value of the wrong type is a value not given).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..readings import AGENT, MODEL, OTHER, TOOL, Reading
from ..spans import STATUS_ERROR, Span, digest
from .table import AGENT_IF_ROOT, Family, family_of, role_of
from .values import count, first, ident, parsed, text

__all__ = ["read"]

HEX = frozenset("0123456789abcdef")


def read(span: Span) -> Reading:
    """The evidence of one span (an ended span, or a Logfire pending span announcing one)."""
    attributes = span.attributes
    family = family_of(span)
    pending = attributes.get("logfire.span_type") == "pending_span"
    span_id, parent_span_id = span.span_id, span.parent_span_id
    if pending:
        # Logfire's pending span is a zero-length child of the span it announces, sent when that span
        # starts; `logfire.pending_parent_id` names the announced span's own parent (zeros for a root).
        span_id = span.parent_span_id or span.span_id
        parent_span_id = span_id_or_none(attributes.get("logfire.pending_parent_id"))
    role = role_of(family, span)
    if role == AGENT_IF_ROOT:
        role = AGENT if parent_span_id is None else OTHER
    fields: dict[str, Any] = {
        "role": role, "trace_id": span.trace_id, "span_id": span_id, "parent_span_id": parent_span_id,
        "name": span.name, "start_ns": span.start_ns, "end_ns": span.end_ns, "pending": pending,
        "family": family.name, "conversation_id": first(attributes, family.conversation, ident),
        "error": None if pending else error_of(span),
        # Agent frameworks put the agent's name on every span of its run (Pydantic AI through baggage):
        # a session created by a batch without the agent span still gets it. A family's other name
        # keys may name something else on such spans (OpenLLMetry's entity is the tool), so only this one.
        "agent_name": text(attributes.get("gen_ai.agent.name")),
        "digest": digest(span),
    }
    if role == AGENT:
        fields |= agent_fields(family, span)
    elif role == MODEL:
        fields |= model_fields(family, span)
    elif role == TOOL:
        fields |= tool_fields(family, span, pending)
    return Reading(**fields)


def span_id_or_none(value: Any) -> str | None:
    """A span id as Logfire writes it (16 hex digits), None for zeros or anything else."""
    if not isinstance(value, str) or len(value) != 16 or not set(value.lower()) <= HEX:
        return None
    return None if value == "0" * 16 else value.lower()


def error_of(span: Span) -> dict | None:
    """`{"type", "message"}` from the span's last `exception` event, else from an ERROR status."""
    for event in reversed(span.events):
        if event.name == "exception" and isinstance(event.attributes, dict):
            return {"type": text(event.attributes.get("exception.type")) or "exception",
                    "message": text(event.attributes.get("exception.message"))}
    if span.status_code == STATUS_ERROR:
        return {"type": text(span.attributes.get("error.type")) or "error", "message": text(span.status_message)}
    return None


def usage_of(attributes: dict, keys: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """Token counts under the family's keys (only those present)."""
    found = {name: first(attributes, names, count) for name, names in keys.items()}
    return {name: value for name, value in found.items() if value is not None}


def agent_fields(family: Family, span: Span) -> dict[str, Any]:
    return {
        "agent_name": first(span.attributes, family.agent_name) or family.agent_name_from_span(span.name),
        "aggregated_usage": family.usage_inclusive(span.attributes, usage_of(span.attributes, family.aggregated_usage)),
    }


def model_fields(family: Family, span: Span) -> dict[str, Any]:
    attributes = span.attributes
    model = first(attributes, family.model) or family.model_from_span(span.name)
    instructions, inputs, outputs = family.content(span)
    usage = family.usage_inclusive(attributes, usage_of(attributes, family.usage))
    if usage and model is not None:
        usage["model"] = model  # which model the counts are of; alone it would be no usage
    return {
        "model": model, "provider": first(attributes, family.provider), "system_instructions": instructions,
        "input_messages": tuple(inputs), "output_messages": tuple(outputs), "usage": usage,
    }


def given(attributes: dict, keys: tuple[str, ...]) -> tuple[bool, Any]:
    """(True, value) for the first of `keys` present, even with an empty value (an empty result is a result)."""
    for key in keys:
        if key in attributes and attributes[key] is not None:
            return True, attributes[key]
    return False, None


def tool_fields(family: Family, span: Span, pending: bool) -> dict[str, Any]:
    attributes = span.attributes
    extra_arguments, extra_result, extra_id = family.tool_extra(span)
    has_arguments, arguments = given(attributes, family.tool_arguments)
    has_result, result = given(attributes, family.tool_result)
    # A call deferred outside the run (Pydantic AI's CallDeferred / ApprovalRequired) ends its span
    # without a result: the call stays owed.
    deferred = "pydantic_ai.tool.deferral.name" in attributes
    return {
        "tool_name": first(attributes, family.tool_name) or family.tool_name_from_span(span.name),
        "tool_call_id": first(attributes, family.tool_call_id, ident) or ident(extra_id),
        "tool_arguments": parsed(arguments) if has_arguments else extra_arguments,
        "tool_result": unquoted(result) if has_result else extra_result,
        "has_result": not pending and not deferred,
    }


def unquoted(value: Any) -> Any:
    """A result given as JSON text of a string (`"refunded A1"` with its quotes: the Vercel AI SDK's GenAI
    spans encode every result as JSON) is that string; any other value as it is."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
        return decoded if isinstance(decoded, str) else value
    return value
