"""What a reading's values become in event data: call states, message data, times, and the check
that no database here would refuse them (sessions_app/log/values.py)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from datetime import UTC, datetime

import orjson

from sessions_app.log import values as log_values

from .conventions.values import parsed
from .readings import Message, Reading

# Room left for the event around a reading's values (data, metadata, otel) within the stored nesting limit.
CONTENT_DEPTH = log_values.MAX_DEPTH - 4


def call_state(name, arguments) -> dict:
    parsed_arguments = parsed(arguments)
    value = next(iter(parsed_arguments.values())) if isinstance(parsed_arguments, dict) and len(parsed_arguments) == 1 else None
    # The value of a one-argument call, as some instrumentations record its input: as text or as JSON.
    only_value = [canonical(value), orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=repr).decode()] if value is not None else []
    return {
        "name": name if isinstance(name, str) else None,
        "args": canonical(arguments),
        "only_value": only_value,
        "step": None,
        "dispatched": False,
        "resulted": False,
    }


def message_data(content, metadata: dict, *, name=None) -> dict:
    return {"content": content, "name": name, "metadata": metadata}


def canonical(value) -> str:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return repr(value)


def digest(value) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()[:32]


def event_time(time_ns: int | None) -> datetime | None:
    """A span's time as the event's, or None (the append time) when the span has none usable."""
    if not time_ns or time_ns <= 0:
        return None
    try:
        return datetime.fromtimestamp(time_ns / 1e9, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def content_problem(reading: Reading) -> str | None:
    """Why no database here could store what this reading would write, said with where; else None."""
    values = {
        "name": reading.name,
        "conversation_id": reading.conversation_id,
        "agent_name": reading.agent_name,
        "error": reading.error,
        "system_instructions": reading.system_instructions,
        "input_messages": [[m.role, m.content, list(m.tool_calls), m.tool_call_id, m.name] for m in reading.input_messages],
        "output_messages": [[m.role, m.content, list(m.tool_calls), m.tool_call_id, m.name] for m in reading.output_messages],
        "usage": reading.usage,
        "tool_name": reading.tool_name,
        "tool_call_id": reading.tool_call_id,
        "tool_arguments": reading.tool_arguments,
        "tool_result": reading.tool_result,
        "aggregated_usage": reading.aggregated_usage,
    }
    problem = log_values.first_problem(values, max_depth=CONTENT_DEPTH)
    if problem is None:
        return None
    return f"span {reading.span_id} of trace {reading.trace_id}: {problem.describe()}"


def run_inputs(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """What the log takes of a model span's input: its system messages and the user messages at its
    end (the run's prompt). The rest is the conversation so far, already in the log as it happened."""
    trailing = len(messages)
    while trailing and messages[trailing - 1].role == "user":
        trailing -= 1
    return tuple(m for m in messages[:trailing] if m.role == "system") + messages[trailing:]


def without_bytes(reading: Reading) -> Reading:
    """The reading with only the input the log takes (run_inputs), and every bytes value (OTLP's
    AnyValue bytesValue) as base64 text: JSON has no bytes. Checks and planning then walk the
    content written, not the whole history a model span carries."""
    changes: dict = {}
    if reading.input_messages and (used := run_inputs(reading.input_messages)) != reading.input_messages:
        reading = dataclasses.replace(reading, input_messages=used)
    if not _may_hold_bytes(reading):
        return reading
    for name in CONTENT_FIELDS:
        value = getattr(reading, name)
        if (plain := _plain(value)) is not value:
            changes[name] = plain
    for name in ("input_messages", "output_messages"):
        messages = getattr(reading, name)
        plain = tuple(_plain_message(m) for m in messages)
        if any(a is not b for a, b in zip(plain, messages, strict=True)):
            changes[name] = plain
    return dataclasses.replace(reading, **changes) if changes else reading


CONTENT_FIELDS = (
    "system_instructions", "tool_arguments", "tool_result", "error", "usage", "aggregated_usage",
    "name", "agent_name", "tool_name", "tool_call_id", "conversation_id", "model",
)


def _may_hold_bytes(reading: Reading) -> bool:
    """False when surely no bytes value is in the reading's content: orjson (C) serialises all the
    rest of what a decoder gives and refuses bytes, so most spans skip the walk in Python."""
    try:
        orjson.dumps([
            [getattr(reading, name) for name in CONTENT_FIELDS],
            [[m.content, m.tool_calls] for m in (*reading.input_messages, *reading.output_messages)],
        ])
    except TypeError:  # bytes somewhere, or something else orjson does not take (an integer past 64 bits): walk
        return True
    return False


def _plain_message(message: Message) -> Message:
    content, calls = _plain(message.content), _plain(message.tool_calls)
    if content is message.content and calls is message.tool_calls:
        return message
    return dataclasses.replace(message, content=content, tool_calls=calls)


def _plain(value):
    """`value` itself when it holds no bytes, else a copy with each bytes value as base64 text."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        items = {k: _plain(v) for k, v in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value
    if isinstance(value, list | tuple):
        items = [_plain(v) for v in value]
        return type(value)(items) if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value
