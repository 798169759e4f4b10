"""A session's fold as Pydantic AI's message history, to continue an agent from its log.

    from turnlog_client import Client
    from turnlog_client.pydantic_ai import message_history

    client.recover(session_id, context=True)  # after a crash: answer the owed calls, say what happened
    result = agent.run_sync("Go on.", message_history=message_history(client, session_id))

Needs Pydantic AI (`pip install './turnlog_client[pydantic-ai]'`, which installs
pydantic-ai-slim). The messages are those of `Client.resume` (OpenAI's chat
shape), grouped as Pydantic AI keeps a conversation: consecutive system, user
and tool messages make one `ModelRequest` (`SystemPromptPart`,
`UserPromptPart`, `ToolReturnPart`, in their order), each assistant message a
`ModelResponse` (`TextPart`, then a `ToolCallPart` per call). A system message
in the middle, such as recovery's context message, stays a `SystemPromptPart`
where it was; Pydantic AI sends it to a model as a system message, or, for a
model with no such channel mid-conversation, as `<system>`-tagged user text.
A tool result takes its tool's name from the call it answers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import (
    ImageUrl, ModelMessage, ModelRequest, ModelRequestPart, ModelResponse, ModelResponsePart, SystemPromptPart, TextPart,
    ToolCallPart, ToolReturnPart, UserContent, UserPromptPart,
)  # fmt: skip

if TYPE_CHECKING:
    from turnlog_client.client import Client

__all__ = ["message_history", "model_messages"]


def message_history(
    client_or_messages: Client | Sequence[Mapping[str, Any]], session_id: str | None = None, *, strict: bool = True
) -> list[ModelMessage]:
    """The session's fold as Pydantic AI messages, for `agent.run(..., message_history=...)`.

    Pass a Client and the session's id (the messages come from `client.resume(session_id,
    strict=strict)`, which raises RecoveryNeeded while a turn is open), or messages in OpenAI's
    chat shape (what `client.resume` returned, or an `AsyncClient`'s awaited `resume`).
    """
    if isinstance(client_or_messages, Sequence):
        return model_messages(client_or_messages)
    if session_id is None:
        raise TypeError("message_history(client, session_id): the session's id is needed with a client")
    return model_messages(client_or_messages.resume(session_id, strict=strict))


def model_messages(messages: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
    """OpenAI chat messages as Pydantic AI's ModelRequest and ModelResponse."""
    history: list[ModelMessage] = []
    request: list[ModelRequestPart] = []
    tool_names: dict[str, str] = {}  # call id -> tool name, for the results
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            if request:
                history.append(ModelRequest(parts=request))
                request = []
            history.append(ModelResponse(parts=_response_parts(message, tool_names)))
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            name = tool_names.get(call_id) or str(message.get("name") or "")
            request.append(ToolReturnPart(tool_name=name, content=message.get("content"), tool_call_id=call_id))
        elif role in ("system", "developer"):
            request.append(SystemPromptPart(content=_text(message.get("content"))))
        elif role == "user":
            request.append(UserPromptPart(content=_user_content(message.get("content"))))
        else:
            raise ValueError(f"message of role {role!r}: expected system, user, assistant or tool")
    if request:
        history.append(ModelRequest(parts=request))
    return history


def _response_parts(message: Mapping[str, Any], tool_names: dict[str, str]) -> list[ModelResponsePart]:
    parts: list[ModelResponsePart] = []
    content = message.get("content")
    if text := _text(content):
        parts.append(TextPart(content=text))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        tool_names[str(call["id"])] = name
        parts.append(ToolCallPart(tool_name=name, args=function.get("arguments"), tool_call_id=str(call["id"])))
    return parts or [TextPart(content="")]  # an empty answer still took its place in the conversation


def _text(content: object) -> str:
    """Text content as is; content parts as their texts joined; anything else as JSON text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(_part_text(part) is not None for part in content):
        return "\n".join(str(_part_text(part)) for part in content)
    return json.dumps(content, ensure_ascii=False)


def _part_text(part: object) -> str | None:
    """A text part's text (`{"type": "text", "text"}`, or `"content"` as the OpenTelemetry conventions write it)."""
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping) and part.get("type") == "text":
        text = part.get("text", part.get("content"))
        return text if isinstance(text, str) else None
    return None


def _user_content(content: object) -> str | list[UserContent]:
    """A user message's content: text, or its parts (text, and images by URL; other parts as JSON text)."""
    if not isinstance(content, list):
        return _text(content)
    parts: list[UserContent] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if (text := _part_text(part)) is not None:
            parts.append(text)
        elif kind == "image_url" and isinstance(url := (part.get("image_url") or {}).get("url"), str):
            parts.append(ImageUrl(url=url))
        else:
            parts.append(json.dumps(part, ensure_ascii=False))
    return parts
