"""Chat messages in the shapes instrumentations record them, as `Message`s.

- GenAI semantic conventions v1.37+: `gen_ai.input.messages` / `gen_ai.output.messages` /
  `gen_ai.system_instructions`, JSON lists of `{role, parts: [{type, ...}]}`.
- GenAI semantic conventions v1.28-v1.36: per-message span events (`gen_ai.system.message`,
  `gen_ai.user.message`, `gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`), their
  body either as the event's attributes or JSON text under `gen_ai.event.content`; and the older
  `gen_ai.content.prompt` / `gen_ai.content.completion` events (`gen_ai.prompt` / `gen_ai.completion`).
- OpenAI-style message dicts (`role`, `content`, `tool_calls` with or without a `function` object,
  `tool_call_id`): the events' bodies, OpenLLMetry's flattened `gen_ai.prompt.N.*`.
- OpenInference's flattened `llm.input_messages.N.message.*`.
- The Vercel AI SDK's `ai.prompt.messages` (its ModelMessages: `content` as text or parts of type
  text, reasoning, tool-call, tool-result) and `ai.response.toolCalls`.

Content is opt-in everywhere: a message without content keeps its role, its calls' ids and names.
"""

from __future__ import annotations

from typing import Any

from ..readings import Message
from ..spans import Span
from .values import get, ident, listed, parsed, text

ROLES = {"system": "system", "developer": "system", "user": "user", "human": "user", "assistant": "assistant",
         "ai": "assistant", "model": "assistant", "tool": "tool", "function": "tool", "ipython": "tool"}

EVENT_ROLES = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
               "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}


def role_of(value: Any, default: str) -> str:
    return ROLES.get(value.lower(), default) if isinstance(value, str) else default


def call(raw: Any) -> dict | None:
    """A tool call `{"id", "name", "arguments"}` from a semconv part, an OpenAI call or a flattened one."""
    if not isinstance(raw, dict):
        return None
    function = raw.get("function") if isinstance(raw.get("function"), dict) else {}
    name = text(raw.get("name")) or text(function.get("name"))
    arguments = raw["arguments"] if "arguments" in raw else function.get("arguments", raw.get("args"))
    call_id = ident(raw.get("id"))
    if name is None and call_id is None:
        return None
    return {"id": call_id, "name": name, "arguments": parsed(arguments)}


def joined(texts: list) -> str | None:
    """Text parts as one string; None when none of them carries content (content capture off)."""
    present = [part for part in texts if isinstance(part, str)]
    return "\n".join(present) if present else None


# ---- GenAI semantic conventions v1.37+: messages of parts -----------------------------------------


def from_parts(raw: Any, default_role: str) -> list[Message]:
    """One semconv ChatMessage/OutputMessage as Messages: its tool_call_response parts become tool messages."""
    if not isinstance(raw, dict):
        return []
    role = role_of(raw.get("role"), default_role)
    name = text(raw.get("name"))
    texts, reasoning, others, calls, answers = [], [], [], [], []
    for part in listed(raw.get("parts")):
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(part.get("content"))
        elif kind == "reasoning":
            reasoning.append(part.get("content"))
        elif kind == "tool_call":
            if (found := call(part)) is not None:
                calls.append(found)
        elif kind == "tool_call_response":
            # Pydantic AI names the answer `result`; the conventions name it `response`.
            answer = part.get("response", part.get("result"))
            answers.append(Message(role="tool", content=answer, tool_call_id=ident(part.get("id")),
                                   name=text(part.get("name"))))
        else:
            others.append(part)  # blob, file, uri, server tool calls: kept as given
    content: Any = joined(texts)
    if others:
        content = [{"type": "text", "content": part} for part in texts if isinstance(part, str)] + others
    messages = []
    if texts or others or calls or reasoning or not answers:
        messages.append(Message(role=role, content=content, tool_calls=tuple(calls), name=name,
                                reasoning_content=joined(reasoning)))
    return messages + answers


def semconv_messages(value: Any, default_role: str) -> list[Message]:
    """`gen_ai.input.messages` / `gen_ai.output.messages`: JSON text or an already structured list."""
    return [message for raw in listed(parsed(value)) for message in from_parts(raw, default_role)]


def semconv_run_inputs(value: Any) -> list[Message]:
    """`gen_ai.input.messages` cut as content.run_inputs cuts any input (its system messages and the
    user messages at its end), converting only those: a model span carries the whole conversation
    so far, and converting all of it was a sixth of the ingest (docs/performance.md, OTLP ingest).

    Equal to run_inputs(semconv_messages(value, "user")): a raw message converts to at most one
    message of its own role followed by tool messages (its answers), so the trailing user messages
    are those of the trailing raw messages that convert to user messages only (or to nothing), and
    only a raw message of a system role gives a system message.
    """
    raws = listed(parsed(value))
    trailing: list[Message] = []
    cut = len(raws)
    while cut:
        converted = from_parts(raws[cut - 1], "user")
        if any(message.role != "user" for message in converted):
            break
        trailing[:0] = converted
        cut -= 1
    systems = [
        message
        for raw in raws[:cut]
        if isinstance(raw, dict) and role_of(raw.get("role"), "user") == "system"
        for message in from_parts(raw, "user")
        if message.role == "system"
    ]
    return systems + trailing


def system_instructions(value: Any) -> Any:
    """`gen_ai.system_instructions`: the text of its text parts, else the parts as given, else plain text."""
    found = parsed(value)
    if isinstance(found, list):
        texts = [get(part, "content") for part in found if get(part, "type") == "text"]
        if len(texts) == len(found):
            return joined(texts)
        return found or None
    return found if isinstance(found, str | dict) and found else None


# ---- OpenAI-style message dicts ------------------------------------------------------------------


def from_openai(raw: Any, default_role: str) -> Message | None:
    """An OpenAI-style message (also the v1.28-1.36 event bodies and OpenLLMetry's flattened ones)."""
    if not isinstance(raw, dict):
        return None
    role = role_of(raw.get("role"), default_role)
    # Span event attributes cannot hold a list of objects: event bodies carry their calls as JSON text.
    calls = [found for found in map(call, listed(parsed(raw.get("tool_calls")))) if found is not None]
    if (legacy := raw.get("function_call")) is not None and (found := call(legacy)) is not None:
        calls.append(found)  # OpenAI's pre-tools single function call
    content = raw.get("content")
    if isinstance(content, dict) and isinstance(get(content, "text", "value"), str):
        content = content["text"]["value"]  # Azure AI Agents' {"text": {"value": ...}}
    elif isinstance(content, str) and content.lstrip()[:1] == "[":
        content = parsed(content)  # multimodal content some instrumentations serialize
    call_id = ident(raw.get("tool_call_id")) or (ident(raw.get("id")) if role == "tool" else None)
    return Message(role=role, content=content, tool_calls=tuple(calls), tool_call_id=call_id,
                   name=text(raw.get("name")), reasoning_content=text(raw.get("reasoning_content")))


def openai_messages(value: Any, default_role: str) -> list[Message]:
    return [found for raw in listed(parsed(value)) if (found := from_openai(raw, default_role)) is not None]


def event_body(attributes: dict) -> dict:
    """A v1.28-1.36 event's body: JSON under `gen_ai.event.content` (Azure's form) or the attributes themselves."""
    body = parsed(attributes.get("gen_ai.event.content"))
    if isinstance(body, dict):
        return body
    if isinstance(body, str):
        return {**attributes, "content": body}
    return attributes


def event_messages(span: Span) -> tuple[list[Message], list[Message]]:
    """(input, output) messages of the per-message span events, in event order."""
    inputs: list[Message] = []
    outputs: list[Message] = []
    for event in span.events:
        if not isinstance(event.attributes, dict):
            continue
        if event.name in EVENT_ROLES:
            body = event_body(event.attributes)
            if (found := from_openai(body, EVENT_ROLES[event.name])) is not None:
                inputs.append(found)
        elif event.name == "gen_ai.choice":
            body = event_body(event.attributes)
            message = parsed(body.get("message"))
            message = message if isinstance(message, dict) else body
            if (found := from_openai(message, "assistant")) is not None:
                outputs.append(found)
        elif event.name == "gen_ai.content.prompt":
            inputs += openai_messages(event.attributes.get("gen_ai.prompt"), "user")
        elif event.name == "gen_ai.content.completion":
            outputs += openai_messages(event.attributes.get("gen_ai.completion"), "assistant")
    return inputs, outputs


# ---- OpenInference -------------------------------------------------------------------------------


def from_openinference(entry: Any, default_role: str) -> Message | None:
    """One `llm.*_messages.N` entry, unflattened: `{"message": {"role", "content", "tool_calls": [...]}}`."""
    message = get(entry, "message")
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if content is None and (contents := listed(message.get("contents"))):
        parts = [get(part, "message_content") for part in contents]
        content = joined([get(part, "text") for part in parts if get(part, "type") in ("text", None)])
    calls = []
    for raw in listed(message.get("tool_calls")):
        tool_call = get(raw, "tool_call")
        if isinstance(tool_call, dict) and (found := call(tool_call)) is not None:
            calls.append(found)
    return Message(role=role_of(message.get("role"), default_role), content=content, tool_calls=tuple(calls),
                   tool_call_id=ident(message.get("tool_call_id")), name=text(message.get("name")))


def openinference_messages(entries: list, default_role: str) -> list[Message]:
    return [found for entry in entries if (found := from_openinference(entry, default_role)) is not None]


# ---- the Vercel AI SDK's ai.* spans -----------------------------------------------------------------


def vercel_call(raw: Any) -> dict | None:
    """A tool call as the SDK records it: `toolCallId`, `toolName`, and `input` (version 5+: an object,
    or JSON text in version 6's `ai.response.toolCalls`) or `args` (version 4)."""
    if not isinstance(raw, dict):
        return None
    name, call_id = text(raw.get("toolName")), ident(raw.get("toolCallId"))
    if name is None and call_id is None:
        return None
    return {"id": call_id, "name": name, "arguments": parsed(raw["input"] if "input" in raw else raw.get("args"))}


def vercel_calls(value: Any) -> list[dict]:
    """`ai.response.toolCalls`: a JSON list of the calls the model asked for."""
    return [found for raw in listed(parsed(value)) if (found := vercel_call(raw)) is not None]


def vercel_result(part: dict) -> Any:
    """A tool-result part's value: version 5+ wraps it (`output: {type, value}`), version 4 does not (`result`)."""
    output = part.get("output")
    if isinstance(output, dict) and "value" in output:
        return output["value"]
    return output if "output" in part else part.get("result")


def vercel_message(raw: Any) -> list[Message]:
    """One message of `ai.prompt.messages` (the SDK's ModelMessage): content as text or a list of parts."""
    if not isinstance(raw, dict):
        return []
    role = role_of(raw.get("role"), "user")
    content = raw.get("content")
    if isinstance(content, str) or content is None:
        return [Message(role=role, content=content)]
    texts, reasoning, others, calls, answers = [], [], [], [], []
    for part in listed(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(part.get("text"))
        elif kind == "reasoning":
            reasoning.append(part.get("text"))
        elif kind == "tool-call":
            if (found := vercel_call(part)) is not None:
                calls.append(found)
        elif kind == "tool-result":
            answers.append(Message(role="tool", content=vercel_result(part), tool_call_id=ident(part.get("toolCallId")),
                                   name=text(part.get("toolName"))))
        elif part is not None:
            others.append(part)  # images, files: kept as given
    joined_text: Any = joined(texts)
    if others:
        joined_text = [{"type": "text", "content": part} for part in texts if isinstance(part, str)] + others
    messages = []
    if role != "tool" and (texts or others or calls or reasoning or not answers):
        messages.append(Message(role=role, content=joined_text, tool_calls=tuple(calls),
                                reasoning_content=joined(reasoning)))
    return messages + answers


def vercel_messages(value: Any) -> list[Message]:
    """`ai.prompt.messages`: JSON text of a list of messages."""
    return [message for raw in listed(parsed(value)) for message in vercel_message(raw)]
