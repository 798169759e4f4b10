"""A session's fold as OpenAI chat messages, to continue an agent from its log (`Client.resume`).

The fold (docs/session-log.md, "The fold") is what the model saw: surface
events with compactions applied, recovery's synthetic results and its context
message included. `chat_messages` turns the server's fold (GET .../messages)
into the shape OpenAI's Chat Completions API takes, which most runtimes accept:

- `system_message`, `user_message`: `{"role", "content"}`;
- `assistant_message`: `{"role": "assistant", "content", "tool_calls"?}`, each
  call as `{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}`
  whichever shape it was logged in (this project's or OpenAI's);
- `tool_result`: `{"role": "tool", "tool_call_id", "content"}`.

Content that is a string stays one; a list of content parts stays a list
(multimodal user messages; text parts in OpenAI's `{"type": "text", "text"}`),
except in a tool message, where (like any other non-string content) it
becomes its JSON text. What the chat shape has no field
for is dropped: `reasoning_content`, `metadata`, `name`, `created_at`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from turnlog_client.errors import RecoveryNeeded
from turnlog_client.types import Message

ROLES = ("system", "user", "assistant", "tool")


def id_text(value: object) -> str | None:
    """A usable id or name as text (session-log.md section 1): a string as is, an integer in decimal,
    a boolean as "true"/"false"; None for anything else."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer() and "e" in repr(value):  # 1e16: JSON's way of writing an integer
        return str(int(value))
    return None


def call_id(mapping: object) -> str | None:
    """The first usable id under `tool_call_id`, then `id`."""
    if not isinstance(mapping, Mapping):
        return None
    for key in ("tool_call_id", "id"):
        if (text := id_text(mapping.get(key))) is not None:
            return text
    return None


def calls_of(tool_calls: object) -> list[Mapping[str, Any]]:
    """An assistant message's calls: a single object is one call, any other non-list holds none."""
    if isinstance(tool_calls, Mapping):
        return [tool_calls]
    if isinstance(tool_calls, list):
        return [call for call in tool_calls if isinstance(call, Mapping)]
    return []


def call_name(call: Mapping[str, Any]) -> str:
    """Its `name` when usable, else its `function`'s; "" when neither is."""
    for holder in (call, call.get("function")):
        if isinstance(holder, Mapping) and (name := id_text(holder.get("name"))) is not None:
            return name
    return ""


def call_arguments(call: Mapping[str, Any]) -> str:
    """Its `arguments` (else its `function`'s) as JSON text: a text is kept as sent, a value is encoded."""
    function = call.get("function")
    if "arguments" in call:
        arguments = call["arguments"]
    elif isinstance(function, Mapping) and "arguments" in function:
        arguments = function["arguments"]
    else:
        arguments = {}
    return arguments if isinstance(arguments, str) else json_text({} if arguments is None else arguments)


def json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def chat_call(call: Mapping[str, Any]) -> dict[str, Any] | None:
    """One call in OpenAI's shape; None for a call with no usable id (no result could ever answer it)."""
    if (cid := call_id(call)) is None:
        return None
    return {"id": cid, "type": "function", "function": {"name": call_name(call), "arguments": call_arguments(call)}}


def chat_parts(content: list[Any]) -> list[Any]:
    """Content parts in OpenAI's shape where the log has them in another: a plain string, or a text part
    as the OpenTelemetry conventions write it (`{"type": "text", "content"}`), becomes `{"type": "text", "text"}`;
    other parts are kept as given."""
    parts = []
    for part in content:
        if isinstance(part, str):
            part = {"type": "text", "text": part}
        elif isinstance(part, Mapping) and part.get("type") == "text" and "text" not in part and isinstance(part.get("content"), str):
            part = {"type": "text", "text": part["content"]}
        parts.append(part)
    return parts


def chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One fold message in OpenAI's chat shape."""
    role, content = message["role"], message.get("content")
    if role == "tool":
        text = content if isinstance(content, str) else json_text(content)
        return {"role": "tool", "tool_call_id": call_id(message), "content": text}
    if role == "assistant":
        calls = [c for call in calls_of(message.get("tool_calls")) if (c := chat_call(call)) is not None]
        if content is None and not calls:
            content = ""
        elif content is not None:
            content = chat_parts(content) if isinstance(content, list) else content if isinstance(content, str) else json_text(content)
        return {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}
    if content is None:
        content = ""
    else:
        content = chat_parts(content) if isinstance(content, list) else content if isinstance(content, str) else json_text(content)
    return {"role": role, "content": content}


def unanswered_calls(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Ids of the assistant calls no later tool message answers, in order (a chat API refuses them)."""
    owed: dict[str, None] = {}
    for message in messages:
        if message["role"] == "assistant":
            owed.update((call["id"], None) for call in message.get("tool_calls", ()))
        elif message["role"] == "tool":
            owed.pop(message["tool_call_id"], None)
    return list(owed)


def chat_messages(session_id: str, fold: Sequence[Message], open_turns: Sequence[int], *, strict: bool = True) -> list[dict[str, Any]]:
    """The fold as chat messages. With `strict`, RecoveryNeeded when a turn is still open, or when a
    call has no result (a chat model would refuse such a history): recover, or patch, first."""
    if strict and open_turns:
        raise RecoveryNeeded(
            session_id, list(open_turns), [],
            f"session {session_id} has an open turn (turn_start at seq {', '.join(map(str, open_turns))}): "
            f"recover it first, e.g. client.recover({session_id!r}, context=True), then resume",
        )  # fmt: skip
    messages = [chat_message(message) for message in fold if message.get("role") in ROLES]
    if strict and (owed := unanswered_calls(messages)):
        raise RecoveryNeeded(
            session_id, [], owed,
            f"session {session_id}: tool call(s) {', '.join(owed)} have no result in the fold; "
            f"answer them first, e.g. client.patch_dangling_calls({session_id!r}), then resume",
        )  # fmt: skip
    return messages
