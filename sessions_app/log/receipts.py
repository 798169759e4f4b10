"""What helps a person settle a call: its idempotency key (spec section 1) and its receipt (api.md,
"Verdicts, receipts and reconcilers").

The key is read from up to four places, in this precedence whatever order the events
came in: `metadata.idempotency_key` of the call's `tool_call` event, of its entry in an
assistant message's `tool_calls`, the arguments' top-level `idempotency_key`, then
`metadata.idempotency_key` of its `tool_result`. Within one place, the first event (by
seq) holding a usable key wins. Recovery never reads either value.

The receipt is what a tool policy's RFC 6901 pointer finds in the call's first real
result, as text. Both are looked up exactly (`?ref=`), so a value longer than the
ledger's columns (REFERENCE_MAX) is no reference at all rather than a cut one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache

from jsonpointer import EndOfList, JsonPointer, JsonPointerException

from .calls import call_arguments, parsed_json_text
from .events import call_id, json_integer, tool_calls_of

KEY = "idempotency_key"
REFERENCE_MAX = 500
# Where a key was read, best first (a lower number wins over any later event's higher one).
DISPATCH, ENTRY, ARGUMENTS, RESULT = 0, 1, 2, 3
TOOL_CALL, TOOL_CALLS_ENTRY, TOOL_RESULT = "tool_call", "tool_calls", "tool_result"


def key_text(value: object) -> str | None:
    """A usable key: a non-empty string as it is, an integer as its decimal string; None otherwise."""
    if isinstance(value, str):
        text = value
    elif (number := json_integer(value)) is not None:
        text = str(number)
    else:
        return None  # booleans, null, numbers with a fraction, objects, lists
    return text if 0 < len(text) <= REFERENCE_MAX else None


def _metadata_key(mapping: Mapping) -> str | None:
    metadata = mapping.get("metadata")
    return key_text(metadata.get(KEY)) if isinstance(metadata, Mapping) else None


def _arguments_key(call: Mapping) -> str | None:
    arguments = call_arguments(call)  # an object, or a JSON text holding one
    return key_text(arguments.get(KEY)) if isinstance(arguments, Mapping) else None


def key_sources(kind: str, mapping: object) -> list[tuple[int, str]]:
    """The keys one place offers, each with its rank: `kind` is TOOL_CALL (a tool_call event's data),
    TOOL_CALLS_ENTRY (a call in an assistant message's tool_calls) or TOOL_RESULT (a result's data)."""
    if not isinstance(mapping, Mapping):
        return []
    found = []
    if kind == TOOL_RESULT:
        if (key := _metadata_key(mapping)) is not None:
            found.append((RESULT, key))
        return found
    if (key := _metadata_key(mapping)) is not None:
        found.append((DISPATCH if kind == TOOL_CALL else ENTRY, key))
    if (key := _arguments_key(mapping)) is not None:  # a tool_call event may carry the arguments too
        found.append((ARGUMENTS, key))
    return found


def better(current: tuple[int, str] | None, candidate: tuple[int, str]) -> bool:
    """Whether a key read later replaces the one held: only one from a better place does."""
    return current is None or candidate[0] < current[0]


def idempotency_key(places: Iterable[tuple[str, object]]) -> tuple[int, str] | None:
    """The call's key and its rank, from its places `(kind, mapping)` in seq order; None when none has one."""
    held: tuple[int, str] | None = None
    for kind, mapping in places:
        for candidate in key_sources(kind, mapping):
            if better(held, candidate):
                held = candidate
    return held


def keys_of_log(events: Iterable) -> dict[str, tuple[int, str]]:
    """Every call's key and its rank, from a whole log (anything with `type` and `data`, in seq order)."""
    held: dict[str, tuple[int, str]] = {}

    def offer(cid: str | None, kind: str, mapping: object) -> None:
        if cid is None:
            return
        for candidate in key_sources(kind, mapping):
            if better(held.get(cid), candidate):
                held[cid] = candidate

    for event in events:
        if event.type == "assistant_message":
            for call in tool_calls_of(event.data):
                offer(call_id(call), TOOL_CALLS_ENTRY, call)
        elif event.type in (TOOL_CALL, TOOL_RESULT):
            offer(call_id(event.data), event.type, event.data)
    return held


# Receipts ----------------------------------------------------------------------


def pointer_problem(pointer: object) -> str | None:
    """Why `pointer` is no RFC 6901 JSON pointer (None when it is one): it is "" or starts with "/",
    and "~" appears only as "~0" or "~1". (An array index with a leading zero finds nothing.)"""
    if not isinstance(pointer, str):
        return "must be text"
    try:
        _compiled(pointer)
    except JsonPointerException as error:
        return str(error)
    return None


_MISSING = object()


@lru_cache(maxsize=256)
def _compiled(pointer: str) -> JsonPointer:
    return JsonPointer(pointer)  # a sweep reads thousands of results with one pointer


def resolve(document: object, pointer: str) -> object:
    """The value `pointer` finds in `document`, or _MISSING (an array index such as "01" or "-" finds nothing)."""
    try:
        found = _compiled(pointer).resolve(document)
    except JsonPointerException:
        return _MISSING
    return _MISSING if isinstance(found, EndOfList) else found


def reference_text(value: object) -> str | None:
    """A found value as a receipt: a string as it is, anything else as compact JSON; None for null or empty."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            return None
    return text if 0 < len(text) <= REFERENCE_MAX else None


def result_document(result_data: object) -> object:
    """What a pointer reads in a result: its `content` parsed as JSON when it is a JSON text, else as it is."""
    if not isinstance(result_data, Mapping):
        return None
    return parsed_json_text(result_data.get("content"))


def receipt(result_data: object, pointer: str | None) -> str | None:
    """The receipt the policy's `pointer` finds in a call's first real result's data (None when the policy
    names no pointer, the pointer is invalid, or the result holds nothing there)."""
    if not pointer or pointer_problem(pointer) is not None:
        return None
    value = resolve(result_document(result_data), pointer)
    return None if value is _MISSING else reference_text(value)
