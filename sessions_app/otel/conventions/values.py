"""Reading attribute values that may be of any type: every helper answers None for a value it cannot use, never raises."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

# How deep a value is searched for what an instrumentation wrapped around it (LangChain's
# message dumps inside OpenLLMetry's envelopes): the real shapes are two or three levels deep.
MAX_UNWRAP = 4


def text(value: Any) -> str | None:
    """A non-empty string as it is, else None."""
    return value if isinstance(value, str) and value else None


def ident(value: Any) -> str | None:
    """An id as session-log.md reads call ids: a string as it is, an integer as its decimal string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return text(value)


def count(value: Any) -> int | None:
    """A token count: a non-negative whole number (an integral float or a numeric string counts too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value >= 0 and value == int(value) else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        return int(value)
    return None


def parsed(value: Any) -> Any:
    """JSON text parsed when valid, else the value as it is (text that is not JSON stays text)."""
    if isinstance(value, bytes | bytearray):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def parsed_structure(value: Any) -> Any:
    """Like `parsed`, but only text that looks like a JSON object or array is parsed: "42" stays text."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        return parsed(value)
    return value


def first(attributes: Mapping[str, Any], keys: Iterable[str], reader=text) -> Any:
    """The first usable value under `keys`, read by `reader`."""
    for key in keys:
        value = reader(attributes.get(key))
        if value is not None:
            return value
    return None


def unflatten(attributes: Mapping[str, Any], prefix: str) -> list[dict]:
    """Indexed flattened attributes (`prefix.N.a.b`) as a list of nested dicts, in index order.

    OpenInference's `llm.input_messages.0.message.role` and OpenLLMetry's `gen_ai.prompt.0.role`
    are read this way. Inside an entry, numeric segments become lists again (`tool_calls.1.id`).
    A key that is both a value and a prefix of others keeps the value.
    """
    entries: dict[int, dict] = {}
    start = len(prefix) + 1
    for key, value in attributes.items():
        if not isinstance(key, str) or not key.startswith(prefix + "."):
            continue
        index, _, rest = key[start:].partition(".")
        if not index.isascii() or not index.isdigit() or not rest or len(index) > 9:
            continue
        node = entries.setdefault(int(index), {})
        *path, leaf = rest.split(".")
        for segment in path:
            child = node.setdefault(segment, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node.setdefault(leaf, value)
    return [_listed(entries[index]) for index in sorted(entries)]


def _listed(node: Any) -> Any:
    """Dicts whose keys are all digits become lists in index order (recursively)."""
    if not isinstance(node, dict):
        return node
    items = {key: _listed(value) for key, value in node.items()}
    if items and all(key.isascii() and key.isdigit() and len(key) <= 9 for key in items):
        return [items[key] for key in sorted(items, key=int)]
    return items


def get(value: Any, *path: str) -> Any:
    """`value[path[0]][path[1]]...` through dicts, None where the path breaks."""
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def listed(value: Any) -> list:
    """A list as it is (a tuple too); anything else holds nothing."""
    return list(value) if isinstance(value, list | tuple) else []
