"""Events: the whitelist, validation at append, call ids and the wire form (spec section 1)."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from . import values

SURFACE_TYPES = frozenset({"system_message", "user_message", "assistant_message", "tool_result"})
BOOKKEEPING_TYPES = frozenset(
    {"tool_call", "turn_start", "turn_end", "step_start", "step_end", "request_header"}
)
EVENT_TYPES = SURFACE_TYPES | BOOKKEEPING_TYPES
# Where an event's data sits in a request body or a blob (the body, its events
# list, the event, then data): its nesting counts from there (values.MAX_DEPTH).
DATA_LEVEL = 4


@dataclass(frozen=True)
class Event:
    """A stored event; `seq` equals its index in its session's log, `time` is aware UTC.

    `time` is the time the agent claimed; `received_at` when the server received it (None:
    unknown or not read). It is no part of the log's wire form, nor of an event's equality.
    """

    seq: int
    type: str
    time: datetime
    data: dict
    received_at: datetime | None = field(default=None, compare=False)


@dataclass(frozen=True)
class NewEvent:
    """A validated event not yet given a seq; `time` None means "use the append time"."""

    type: str
    data: dict
    time: datetime | None


class InvalidEvent(ValueError):
    """Why an event was refused: `reason` is a section 1 code, `detail` says what and where."""

    def __init__(self, index: int, reason: str, detail: str):
        super().__init__(detail)
        self.index = index
        self.reason = reason
        self.detail = detail


def is_integer(value: object) -> bool:
    # JSON true/false arrive as Python bools, which are ints; they are not indexes or numbers here.
    return isinstance(value, int) and not isinstance(value, bool)


def show_json(value: object) -> str:
    """A short JSON-ish rendering of a client's value for error texts."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _replace_bounds(op: object) -> tuple[int, int] | None:
    if isinstance(op, list | tuple) and len(op) == 3 and op[0] == "replace":
        start, stop = op[1], op[2]
        if is_integer(start) and is_integer(stop) and 0 <= start <= stop:
            return start, stop
    return None


def replace_range(data: Mapping) -> tuple[int, int] | None:
    """(start, stop) when `data.surface_op` is a valid ["replace", start, stop]."""
    return _replace_bounds(data.get("surface_op"))


def surface_op_problem(type: str, data: Mapping) -> tuple[str, str] | None:
    """(reason, what is wrong) when `data.surface_op` is not allowed here; a null one is absent."""
    op = data.get("surface_op")
    if op is None:
        return None
    if type not in SURFACE_TYPES:
        return "surface_op_on_non_surface_event", f"only surface events may have one, not {type}"
    if op == "append" or _replace_bounds(op):
        return None
    return (
        "invalid_surface_op",
        f'{show_json(op)} is neither "append" nor ["replace", start, stop]'
        " with integers 0 <= start <= stop",
    )


class TimeOutOfRange(ValueError):
    """A valid date-time with an offset that, converted to UTC, falls before year 1 or after year 9999."""


def parse_time(value: str) -> datetime:
    """An ISO 8601 date-time with a UTC offset or "Z", as aware UTC; raises ValueError otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO 8601 string, got {show_json(value)}")
    parsed = datetime.fromisoformat(value)  # 3.11 reads "Z"; a date alone parses naive
    if parsed.utcoffset() is None:
        raise ValueError(f"{value!r} has no UTC offset")
    try:
        return parsed.astimezone(UTC)
    except OverflowError as exc:  # e.g. year 1 with a positive offset
        raise TimeOutOfRange(f"{value!r} is out of range in UTC") from exc


def format_time(value: datetime) -> str:
    """ISO 8601 in UTC ending in "Z"; microseconds only when non-zero."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def coerce_time(value: object) -> datetime:
    """A client's time (ISO string or aware datetime) as aware UTC; raises ValueError otherwise."""
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise ValueError("naive datetime")
        return value.astimezone(UTC)
    return parse_time(value)


def validate_event(type: object, data: object, time: object = None, *, index: int = 0, values_checked: bool = False) -> NewEvent:
    """Check one event in section 1's order of reasons; raise InvalidEvent on the first failure.

    `values_checked`: the caller found (values.surely_storable) that nothing in
    `data` can be unstorable, so that check is skipped; the outcome is the same.
    """
    where = f"events[{index}]"
    if not isinstance(type, str) or type not in EVENT_TYPES:
        shown = "missing" if type is None else f"{show_json(type)} is not an event type"
        raise InvalidEvent(index, "unknown_event_type", f"{where}.type: {shown}")
    if not isinstance(data, dict):
        shown = "missing" if data is None else f"must be a JSON object, got {show_json(data)}"
        raise InvalidEvent(index, "invalid_data", f"{where}.data: {shown}")
    if not values_checked and (unstorable := values.first_problem(data, level=DATA_LEVEL)):
        raise InvalidEvent(index, "invalid_data", unstorable.describe(f"{where}.data"))
    if problem := surface_op_problem(type, data):
        reason, text = problem
        raise InvalidEvent(index, reason, f"{where}.data.surface_op: {text}")
    if time is None:
        return NewEvent(type, data, None)
    try:
        return NewEvent(type, data, coerce_time(time))
    except TimeOutOfRange:
        raise InvalidEvent(
            index,
            "invalid_time",
            f"{where}.time: {show_json(time)} falls outside years 1 to 9999 once converted to UTC",
        ) from None
    except ValueError:
        raise InvalidEvent(
            index,
            "invalid_time",
            f"{where}.time: {show_json(time)} is not an ISO 8601 date-time with a UTC offset or Z",
        ) from None


def validate_batch(items: Sequence[Mapping], *, values_checked: bool = False) -> list[NewEvent]:
    """Validate a whole batch; the first invalid item refuses it, named by its index.

    `values_checked`: values.surely_storable(items, level=DATA_LEVEL - 2) held,
    so no event's data is checked again (the outcome is the same).
    """
    validated = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            detail = f"events[{index}]: must be an object with type and data"
            raise InvalidEvent(index, "unknown_event_type", detail)
        validated.append(
            validate_event(item.get("type"), item.get("data"), item.get("time"), index=index, values_checked=values_checked)
        )
    return validated


def call_id(mapping: object) -> str | None:
    """The first usable id under `tool_call_id`, then `id` (section 1); None when there is none."""
    if not isinstance(mapping, Mapping):
        return None
    for key in ("tool_call_id", "id"):
        if (text := id_text(mapping.get(key))) is not None:
            return text
    return None


def json_integer(value: object) -> int | None:
    """An integer as the stored log reads it back on either database; None for anything else.

    An int is one; a float is not (`1.0` stays a float in SQLite's text and in PostgreSQL's jsonb),
    but for an integral one that JSON writes with an exponent (`1e16`, from 1e16 on): jsonb keeps it
    as the integer 10000000000000000 and reads it back so. The append and SQLite read it the same
    way, so both databases read the log alike. Its digits are those of its JSON text (the shortest
    repr), as jsonb's.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer() and "e" in (text := repr(value)):
        return int(Decimal(text))
    return None


def id_text(value: object) -> str | None:
    """A usable id or name as text (section 1): a string as it is, an integer (json_integer) as its
    decimal string, a boolean as "true"/"false"; None for anything else."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    number = json_integer(value)
    return None if number is None else str(number)


def tool_name(name: object) -> str | None:
    """A call's name as a tool policy can match it: text, else None (no name; class unknown).

    The log keeps any name as given (a number, an object); only text names a tool.
    """
    return name if isinstance(name, str) else None


def tool_calls_of(data: Mapping) -> list[dict]:
    """The calls of an assistant message: a single object is one call, any non-list holds none."""
    calls = data.get("tool_calls")
    if isinstance(calls, dict):
        return [calls]
    if isinstance(calls, list):
        return [call for call in calls if isinstance(call, dict)]
    return []


def event_to_wire(event: Event) -> dict:
    """The event as JSON (anything with an Event's seq, type, time and data: stored rows too)."""
    time = format_time(event.time)
    return {"seq": event.seq, "type": event.type, "time": time, "data": event.data}


def event_from_wire(wire: Mapping) -> Event:
    """The inverse of event_to_wire, for events this project wrote itself (no validation)."""
    return Event(wire["seq"], wire["type"], parse_time(wire["time"]), wire["data"])
