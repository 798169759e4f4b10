"""The portable serialized form, version 2, and its reader (spec section 6)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .events import (
    EVENT_TYPES,
    Event,
    NewEvent,
    coerce_time,
    event_to_wire,
    format_time,
    is_integer,
    show_json,
    surface_op_problem,
)
from .fold import ROLES, project
from .values import check

MESSAGE_TYPES = {role: type for type, role in ROLES.items()}
EMPTY_USAGE = {
    "requests": 0,
    "tool_calls": 0,
    "input_tokens": 0,
    "output_tokens": 0,
    "total_tokens": 0,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}
# Ignored by the reference reader, used by this project. dangling_patch_seqs: the seqs of the
# tool_results dangling-call patches wrote, which their data (metadata {}) cannot tell.
# verdicts: what was found about the calls (session-log.md 8.2), beside the log as notes are.
EXTRA_KEYS = ("session", "parent", "notes", "dangling_patch_seqs", "verdicts")
PATCH_SEQS_KEY = "dangling_patch_seqs"
SHIFT_NOTE = "every later event's seq shifts down"


class UnsupportedVersion(ValueError):
    pass


@dataclass(frozen=True)
class LoadedBlob:
    events: list[NewEvent]  # in order; the caller reassigns seqs (a persisted seq is never trusted)
    warnings: list[str]
    extra: dict  # the EXTRA_KEYS found at the top level
    # Each seq the blob's events carried -> the seq its event gets when the events are
    # re-appended from 0 (follow_seq); none for a v1 blob, a dropped event or a seq given twice.
    seqs: dict[int, int] = field(default_factory=dict)

    def follow_seq(self, seq: int) -> int | None:
        """Where the blob's event `seq` lands in the imported log; None when it was not imported."""
        return self.seqs.get(seq)


def _wire_message(message: dict) -> dict:
    shown = {key: value for key, value in message.items() if key != "seq"}
    return shown | {"created_at": format_time(message["created_at"])}


def write_blob(
    events: Sequence[Event], *, agent_name: str | None = None, extra: dict | None = None
) -> dict:
    """The blob as the reference's Context.serialize/1 writes it, plus this project's extra keys."""
    blob = {
        "version": 2,
        "events": [event_to_wire(event) for event in events],
        "messages": [_wire_message(message) for message in project(events)],
        "tool_calls": [],
        "system_prompt": None,
        "deps": {},
        "usage": dict(EMPTY_USAGE),
        "needs_response": False,
        "iteration": 0,
        "max_iterations": 10,
        "started_at": None,
        "agent_name": agent_name,
    }
    extra = extra or {}
    if clash := sorted(blob.keys() & extra.keys()):
        raise ValueError(f"extra keys {clash} would overwrite the blob's own")
    return blob | extra


def _time_or(now: datetime, value: object) -> datetime:
    try:
        return coerce_time(value)
    except ValueError:  # an unparseable or missing time becomes the load time
        return now


def _load_event(index: int, item: object, now: datetime, warnings: list[str]) -> NewEvent | None:
    """One stored event, repaired where section 6 allows it; None (with a warning) when dropped."""
    if not isinstance(item, Mapping):
        warnings.append(f"events[{index}] dropped: not an object; {SHIFT_NOTE}")
        return None
    name = f"events[{index}] (seq {show_json(item.get('seq'))})"
    type, data = item.get("type"), item.get("data")
    if not isinstance(type, str) or type not in EVENT_TYPES:
        warnings.append(f"{name} dropped: {show_json(type)} is not an event type; {SHIFT_NOTE}")
        return None
    if not isinstance(data, dict):
        warnings.append(f"{name} dropped: data {show_json(data)} is not an object; {SHIFT_NOTE}")
        return None
    if problem := surface_op_problem(type, data):
        warnings.append(f"{name}: surface_op removed, the event kept: {problem[1]}")
        data = {key: value for key, value in data.items() if key != "surface_op"}
    return NewEvent(type, data, _time_or(now, item.get("time")))


def _seed_event(index: int, message: object, now: datetime, warnings: list[str]) -> NewEvent | None:
    """One surface event for one v1 message; None (with a warning) for an unknown role."""
    role = message.get("role") if isinstance(message, Mapping) else None
    type = MESSAGE_TYPES.get(role) if isinstance(role, str) else None
    if type is None:
        known = "system, user, assistant or tool"
        warnings.append(
            f"messages[{index}] dropped: role {show_json(role)} is not {known}; {SHIFT_NOTE}"
        )
        return None
    metadata = message.get("metadata")
    data = {
        "content": message.get("content"),
        "name": message.get("name"),
        "metadata": {} if metadata is None else metadata,
    }
    if type == "assistant_message":
        tool_calls = message.get("tool_calls")
        data["tool_calls"] = [] if tool_calls is None else tool_calls
        data["reasoning_content"] = message.get("reasoning_content")
    elif type == "tool_result":
        data["tool_call_id"] = message.get("tool_call_id")
    return NewEvent(type, data, _time_or(now, message.get("created_at")))


def read_blob(blob: object, *, now: datetime) -> LoadedBlob:
    """Events to re-append from a v1 or v2 blob, warning of everything dropped or removed.

    Raises UnsupportedVersion, or values.UnacceptableValue when any string in
    the blob is not storable text or it nests too deep: the whole blob is refused.
    """
    version = blob.get("version") if isinstance(blob, Mapping) else None
    if not (is_integer(version) and version in (1, 2)):
        raise UnsupportedVersion(f"version {show_json(version)} is not supported: expected 1 or 2")
    check(blob)  # values.UnacceptableValue: nothing of a blob is stored that a database would alter or refuse
    warnings: list[str] = []
    stored = blob.get("events")
    seqs: dict[int, int] = {}
    if version == 2 and isinstance(stored, list):
        loaded = [_load_event(i, item, now, warnings) for i, item in enumerate(stored)]
        seqs = _followed_seqs(stored, loaded)
    else:
        messages = blob.get("messages")
        if not isinstance(messages, list):
            warnings.append("no events list and no messages list: nothing to load")
            messages = []
        loaded = [_seed_event(i, message, now, warnings) for i, message in enumerate(messages)]
    events = [event for event in loaded if event is not None]
    extra = {key: blob[key] for key in EXTRA_KEYS if key in blob}
    return LoadedBlob(events, warnings, extra, seqs)


def _followed_seqs(stored: list, loaded: list[NewEvent | None]) -> dict[int, int]:
    """The blob's seq of each kept event -> its new seq (its place among the kept ones). A seq
    that more than one item carries, or a dropped event's, names no imported event for sure: left out."""
    seqs: dict[int, int] = {}
    unfollowable: set[int] = set()
    kept = 0
    for item, event in zip(stored, loaded, strict=True):
        seq = item.get("seq") if isinstance(item, Mapping) else None
        if is_integer(seq):
            if seq in seqs or seq in unfollowable:
                unfollowable.add(seq)
            elif event is not None:
                seqs[seq] = kept
            else:
                unfollowable.add(seq)
        kept += event is not None
    for seq in unfollowable:
        seqs.pop(seq, None)
    return seqs


def followed_patch_seqs(loaded: LoadedBlob, warnings: list[str]) -> list[int]:
    """Where the results the blob's dangling-call patches wrote (its `dangling_patch_seqs`) landed.

    Only an imported tool_result can be one: any other seq is ignored with a warning (an
    absent list says nothing: a blob from elsewhere, or of a session never patched).
    """
    given = loaded.extra.get(PATCH_SEQS_KEY)
    if given is None:
        return []
    if not isinstance(given, list):
        warnings.append(f"{PATCH_SEQS_KEY} {show_json(given)} is not a list of seqs; ignored")
        return []
    followed = set()
    for seq in given:
        new_seq = loaded.follow_seq(seq) if is_integer(seq) else None
        if new_seq is None or loaded.events[new_seq].type != "tool_result":
            warnings.append(f"{PATCH_SEQS_KEY}: seq {show_json(seq)} is not an imported tool_result; ignored")
        else:
            followed.add(new_seq)
    return sorted(followed)
