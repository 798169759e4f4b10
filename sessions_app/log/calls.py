"""How a tool call names its tool and where its arguments are, in the shapes runtimes send (spec section 1).

A call in `tool_calls` (or a `tool_call` event's data) comes in this
project's own shape, `{"id", "name", "arguments": {...}}`, or in OpenAI's
chat shape, `{"id", "type": "function", "function": {"name", "arguments":
"<JSON text>"}}`. `call_name` and `call_arguments` read both; the stored
data is never rewritten.

Two more shapes are read for display and tool policies only, never by
recovery (the spec does not define how they pair): Anthropic `tool_use`
content blocks and OpenAI Responses `function_call` items, found in an
assistant message's `content` list (`content_calls`). Either one inside
`tool_calls` is read like any other entry there (by its `id`; a `tool_use`
call's arguments are its `input`).
"""

from collections.abc import Mapping

from . import values
from .events import call_id, id_text, tool_calls_of

TOOL_USE, FUNCTION_CALL = "tool_use", "function_call"  # the `type` of Anthropic's and OpenAI Responses' call shapes


def _usable(value: object) -> bool:
    """A usable name, as a usable id (section 1): a string, an integer or a boolean."""
    return id_text(value) is not None


def call_name(call: object) -> str | int | bool | None:
    """The call's name: its `name` when usable, else its `function`'s `name` when usable, else None.

    The value is kept as sent (an integer name stays an integer); `name_text` is its text.
    """
    if not isinstance(call, Mapping):
        return None
    for holder in (call, call.get("function")):
        if isinstance(holder, Mapping) and _usable(name := holder.get("name")):
            return name
    return None


def name_text(name: object) -> str:
    """A name as text, the way ids read (section 1): "7" for 7, "true" for true, "" for no name."""
    text = id_text(name)
    return "" if text is None else text


def raw_arguments(call: object) -> object:
    """The call's arguments as stored: its `arguments` when present, else its `function`'s; None when neither.

    An Anthropic `tool_use` call, which has neither, names them `input` (read for display only).
    """
    if not isinstance(call, Mapping):
        return None
    if "arguments" in call:
        return call["arguments"]
    function = call.get("function")
    if isinstance(function, Mapping) and "arguments" in function:
        return function["arguments"]
    return call.get("input") if call.get("type") == TOOL_USE else None


def parsed_json_text(value: object) -> object:
    """A JSON text as the value it holds, when it is valid JSON that the log itself could store
    (no NUL or lone surrogate, nested no deeper than a request may be); anything else as given."""
    if not isinstance(value, str):
        return value
    try:
        parsed = values.loads(value)
    except ValueError:  # not JSON (InvalidJSON), or nested past the reader (UnacceptableValue)
        return value
    return value if values.first_problem(parsed) is not None else parsed


def call_arguments(call: object) -> object:
    """The call's arguments for display: `raw_arguments`, a valid JSON text parsed."""
    return parsed_json_text(raw_arguments(call))


def sighting_names(data: Mapping) -> dict[str, str]:
    """An assistant message's sightings as stored (CallSighting): call id -> its name as text.

    One per distinct usable id, the first call naming it winning, in the order of `tool_calls`.
    """
    names: dict[str, str] = {}
    for call in tool_calls_of(data):
        if (cid := call_id(call)) is not None and cid not in names:
            names[cid] = name_text(call_name(call))
    return names


# Display only: calls written as content blocks -------------------------------


def content_calls(data: Mapping) -> list[dict]:
    """The tool calls an assistant message's `content` list holds as Anthropic `tool_use` blocks
    (`{"type": "tool_use", "id", "name", "input"}`) or OpenAI Responses `function_call` items
    (`{"type": "function_call", "call_id", "name", "arguments": "<JSON text>"}`), in order.

    Each as `{"kind", "id", "name", "arguments"}`: id as section 1 reads ids (None when
    unusable), name as `call_name`, arguments parsed as `call_arguments`. For display and
    tool policies: recovery neither sights nor pairs these.
    """
    content = data.get("content")
    if not isinstance(content, list):
        return []
    found = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind not in (TOOL_USE, FUNCTION_CALL):
            continue
        cid = call_id({"id": block.get("id" if kind == TOOL_USE else "call_id")})
        found.append({"kind": kind, "id": cid, "name": call_name(block), "arguments": call_arguments(block)})
    return found
