"""What one span says in Turnlog's terms: the output of `conventions.read`, the input of the planner."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import orjson

AGENT, MODEL, TOOL, OTHER = "agent", "model", "tool", "other"


@dataclass(frozen=True, slots=True)
class Message:
    """A chat message as session-log.md's events carry it.

    `role` is system, user, assistant or tool. `tool_calls` are
    `{"id", "name", "arguments"}` dicts (the id may be None when the
    instrumentation gives none; arguments parsed from JSON text when valid,
    else kept as text). `content` is a string, a list of parts, or None when
    the instrumentation recorded no content. `reasoning_content` is the
    model's reasoning text where the instrumentation records it (the
    assistant_message field of the same name).
    """

    role: str
    content: Any = None
    tool_calls: tuple[dict, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None


@dataclass(frozen=True, slots=True)
class Reading:
    """One span's evidence.

    For a Logfire pending span (`pending`), `span_id`, `parent_span_id` and
    the times are those of the real span it announces (the pending span's
    parent, and `logfire.pending_parent_id`): the start of that span.
    """

    role: str  # AGENT, MODEL, TOOL or OTHER
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_ns: int = 0
    end_ns: int = 0
    pending: bool = False
    family: str = ""  # genai, pydantic_ai, openinference, openllmetry, vercel: which table row read it
    conversation_id: str | None = None  # gen_ai.conversation.id, else the family's own (table.CONVERSATION)
    agent_name: str | None = None
    error: dict | None = None  # {"type": ..., "message": ...} from an ERROR status or an exception event
    # Model spans: a step.
    model: str | None = None
    provider: str | None = None
    system_instructions: Any = None
    # The input as far as the log takes it may be all that is read (content.run_inputs: the GenAI
    # conventions' gen_ai.input.messages are cut while read).
    input_messages: tuple[Message, ...] = ()
    output_messages: tuple[Message, ...] = ()  # what the model answered: assistant messages
    usage: dict[str, Any] = field(default_factory=dict)  # input_tokens, output_tokens, cache_*, reasoning_tokens, model
    # Tool spans: a call and its result.
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_arguments: Any = None
    tool_result: Any = None
    # The span ran the tool to a result, an error result included (content may be off: tool_result
    # None). False for a pending span and for a call the tool deferred outside the run (Pydantic AI's
    # CallDeferred / ApprovalRequired): no tool_result is owed by such a span.
    has_result: bool = False
    # Agent spans: run totals, stored on the turn and never added to the steps' sums.
    aggregated_usage: dict[str, Any] = field(default_factory=dict)
    digest: str = ""  # spans.digest of the span read ("" for a reading made otherwise: any content repeats it)

    @property
    def requested_calls(self) -> tuple[dict, ...]:
        """The tool calls the model asked for, in order."""
        return tuple(call for message in self.output_messages for call in message.tool_calls)


MESSAGE_FIELDS = ("input_messages", "output_messages")


def as_json(reading: Reading) -> bytes:
    """The reading as JSON, for a reading whose values are plain (content.without_bytes, then checked
    storable by content.content_problem): what a held span keeps until it is written."""
    values = {name: getattr(reading, name) for name in reading.__dataclass_fields__}
    for name in MESSAGE_FIELDS:
        values[name] = [dataclasses.asdict(message) for message in values[name]]
    return orjson.dumps(values, option=orjson.OPT_NON_STR_KEYS)


def from_json(data: bytes) -> Reading:
    values = orjson.loads(data)
    for name in MESSAGE_FIELDS:
        values[name] = tuple(Message(**{**m, "tool_calls": tuple(m["tool_calls"])}) for m in values[name])
    return Reading(**{k: v for k, v in values.items() if k in Reading.__dataclass_fields__})
