"""The API's JSON objects as typed dictionaries (docs/api.md).

The answers stay plain dicts, as decoded: the API may add fields at any time,
and a dict keeps them. These types name the fields the contract guarantees.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

EVENT_TYPES = frozenset(
    {
        "system_message", "user_message", "assistant_message", "tool_result",
        "tool_call", "turn_start", "turn_end", "step_start", "step_end", "request_header",
    }
)  # fmt: skip

TurnEndReason = Literal["complete", "rejected", "interrupted"]
StepOutcome = Literal["ok", "error"]


class NewEvent(TypedDict):
    """An event to append: the log assigns its seq; `time` defaults to the append time."""

    type: str
    data: dict[str, Any]
    time: NotRequired[str]


class Event(TypedDict):
    seq: int
    type: str
    time: str
    data: dict[str, Any]


class Parent(TypedDict):
    session_id: str
    seed_length: int


class Session(TypedDict):
    id: str
    project: str
    agent_name: str
    metadata: dict[str, Any]
    created_at: str
    last_event_at: str | None
    last_activity_at: str
    event_count: int
    parent: Parent | None
    open_turns: list[int]
    interrupted: bool
    status: str


class SessionPage(TypedDict):
    items: list[Session]
    next_cursor: str | None


class AppendResult(TypedDict):
    first_seq: int
    next_seq: int


class EventsPage(TypedDict):
    events: list[Event]
    next_seq: int


class Message(TypedDict):
    seq: int
    role: str
    content: Any
    tool_calls: list[Any]
    tool_call_id: str | None
    name: str | None
    metadata: dict[str, Any]
    reasoning_content: Any
    created_at: str


class Repair(TypedDict):
    type: str
    data: dict[str, Any]


class OwedCall(TypedDict):
    id: str
    name: Any
    arguments: Any
    turn_seq: int
    step_seq: int | None
    sighted_seq: int
    risk: str
    rule: int
    evidence: list[int]
    side_effect: str


class Plan(TypedDict):
    interrupted: bool
    open_turns: list[int]
    next_seq: int
    repairs: list[Repair]
    warnings: list[str]
    digest: str
    owed_calls: list[OwedCall]
    strategies: list[dict[str, Any]]


class RepairApplied(TypedDict):
    appended: list[Event]
    next_seq: int


class ImportResult(TypedDict):
    session: Session
    warnings: list[str]
