"""What the API's bodies and answers look like: every Schema (the OpenAPI document's
components) and the error answers each kind of endpoint may give."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Field, Schema
from pydantic import StrictBool, StrictInt, StrictStr

from sessions_app import services
from sessions_app.log import events as log_events


class ParentOut(Schema):
    session_id: str
    seed_length: int


class UsageOut(Schema):
    input_tokens: int = Field(..., description="every input token, cache reads and writes included")
    output_tokens: int = Field(..., description="every output token, reasoning included")
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    models: list[str] = Field(..., description="each model once, in order of first use")
    cost: str = Field(..., description="a decimal string, at most 6 places: the priced part when priced is false")
    currency: str
    priced: bool = Field(..., description="false when a model call with tokens could not be priced")
    unpriced: list[str] = Field(..., description='the models (or "(no model)") that could not be priced')


class SessionOut(Schema):
    id: str
    project: str = Field(..., description="the slug of the session's project")
    agent_name: str
    metadata: dict
    created_at: str
    last_event_at: str | None = Field(..., description="the time the latest event claims, as the agent sent it; null for an empty log")
    last_activity_at: str = Field(
        ...,
        description="the latest activity by the server's clock (when the latest event was received; else creation): what status and list order use",
    )
    event_count: int
    parent: ParentOut | None
    open_turns: list[int]
    interrupted: bool
    status: str = Field(..., description="running | stalled (open turn, quiet too long) | active (no open turn, written to recently) | recovered | clean")
    usage: UsageOut = Field(..., description="token usage and cost (api.md, Usage and cost)")


class SessionIn(Schema):
    id: str | None = Field(None, description="1-128 of A-Z a-z 0-9 . _ : - ; generated when absent")
    agent_name: str | None = Field(None, max_length=services.AGENT_NAME_MAX)
    metadata: dict[str, Any] = Field(default_factory=dict)
    project: str | None = Field(
        None, description="the project's slug; default: the token's project, else the one project where you may create sessions"
    )


class SessionPageOut(Schema):
    items: list[SessionOut]
    next_cursor: str | None


class EventOut(Schema):
    seq: int
    type: str
    time: str
    data: dict[str, Any]


class EventIn(Schema):
    """One event to append (documentation of AppendIn.events' items)."""

    type: Literal[tuple(sorted(log_events.EVENT_TYPES))] = Field(..., description="one of the event types of docs/session-log.md")
    data: dict[str, Any]
    time: str | None = Field(None, description="ISO 8601 with a UTC offset or Z; default: the append time")


class AppendIn(Schema):
    # Items stay untyped here so that the core's validation names the index
    # and reason of a bad event (422 invalid_event) instead of pydantic.
    events: list[Any] = Field(
        ..., description="Events to append, all or nothing", json_schema_extra={"items": EventIn.model_json_schema()}
    )
    expected_seq: StrictInt | None = None


class AppendOut(Schema):
    first_seq: int
    next_seq: int


class EventsOut(Schema):
    events: list[EventOut]
    next_seq: int


class MessageOut(Schema):
    # Every field but seq, role and created_at is the event's data as accepted
    # (session-log.md section 1 allows e.g. a single-object tool_calls or an integer id).
    seq: int
    role: str
    content: Any = None
    tool_calls: Any = Field(..., description="as stored: usually a list; [] when absent or null")
    tool_call_id: Any = None
    name: Any = None
    metadata: Any = None
    reasoning_content: Any = None
    created_at: str


class MessagesOut(Schema):
    messages: list[MessageOut]


class ImportOut(Schema):
    session: SessionOut
    warnings: list[str]


class ErrorOut(Schema):
    detail: str
    error: str | None = None


class InvalidJsonOut(Schema):
    detail: str = Field(..., description="what is wrong and at which line and column")
    error: Literal["invalid_json"]


class RepairOut(Schema):
    type: str
    data: dict[str, Any]


CALL_NAME_DESCRIPTION = (
    "the call's name (session-log.md section 1): its `name` when a string, integer or boolean (kept as sent),"
    " else its `function`'s `name` (OpenAI's chat shape); null when neither"
)


class OwedCallOut(Schema):
    id: str = Field(..., description="the call id as section 1 reads it (an integer id as its decimal string)")
    name: Any = Field(None, description=CALL_NAME_DESCRIPTION)
    arguments: Any = Field(
        None, description="its `arguments`, else its `function`'s `arguments`; a JSON text that is valid JSON is given parsed"
    )
    turn_seq: int
    step_seq: int | None
    sighted_seq: int
    risk: str
    rule: int
    evidence: list[int]
    side_effect: str


class StrategyCallOut(Schema):
    id: str
    name: Any = Field(None, description=CALL_NAME_DESCRIPTION)
    seq: int = Field(..., description="where the call was first sighted")
    class_: Literal["external_effect", "unknown"] = Field(..., alias="class")
    state: Literal["completed", "tool_not_started", "tool_outcome_unknown"]
    verdict: Literal["happened", "not_happened"] | None = Field(
        None, description="the outcome of the call's current verdict (session-log.md 8.2), or null; `state` stays the log's"
    )


class StrategyOut(Schema):
    turn_seq: int
    strategy: Literal["manual_check", "resume_after_effects", "restart_turn"]
    calls: list[StrategyCallOut] = Field(
        ..., description="every call of the turn whose tool's class is external_effect or unknown"
    )


class PlanOut(Schema):
    interrupted: bool
    open_turns: list[int]
    next_seq: int
    repairs: list[RepairOut]
    warnings: list[str]
    digest: str
    owed_calls: list[OwedCallOut] = Field(
        ..., description="Why each tool_result repair has its risk: the rule, its evidence seqs, the tool's side-effect class"
    )
    strategies: list[StrategyOut] = Field(
        ...,
        description="What to do next, per open turn, innermost first (session-log.md section 8.1); outside the digest",
    )


class RepairIn(Schema):
    digest: str | None = None
    note: str = ""


class RecoverIn(RepairIn):
    context: StrictBool = Field(
        False, description="also append one recovery-context system_message after the plan (listed in `appended`)"
    )
    abandon: StrictBool = Field(False, description="record that the turns were abandoned instead of the recommended strategy")


class RepairAppliedOut(Schema):
    appended: list[EventOut]
    next_seq: int


class DanglingPatchOut(Schema):
    blocked_by_open_turns: list[int]
    next_seq: int
    repairs: list[RepairOut]
    digest: str


class ForkIn(Schema):
    boundary: Any = Field("last", description='The seq of the last event to inherit (inclusive), or "last"')
    id: str | None = Field(None, description="The new session's id; generated when absent")


NOTE_LIMITS = (
    f"text: 1 to {services.notes.TEXT_MAX} characters, not only spaces; tags: at most {services.notes.TAGS_MAX},"
    f" each 1 to {services.notes.TAG_MAX} characters of a-z 0-9 . _ : - starting with a letter or digit (a repeated tag is kept once)"
)


class NoteOut(Schema):
    id: int
    session_id: str
    seq: int | None = Field(..., description="the event the note is pinned to; null: a note on the whole session")
    text: str
    tags: list[str]
    author: str = Field(..., description="who wrote it: a user's name, or an imported note's author as exported")
    created_at: str
    updated_at: str


class NotesOut(Schema):
    notes: list[NoteOut]


CALL_STATES = Literal["pending", "completed", "error", "superseded", "no_result", "tool_not_started", "tool_outcome_unknown"]


class VerdictOut(Schema):
    outcome: Literal["happened", "not_happened"]
    evidence: str
    external_ref: str | None
    by: str = Field(..., description='the user name, or "reconciler:<policy pattern>"')
    source: Literal["person", "reconciler"]
    at: str


class CallOut(Schema):
    session_id: str
    project: str = Field(..., description="the slug of the session's project")
    agent_name: str
    call_id: str = Field(..., description="the call id as section 1 reads it (an integer id as its decimal string)")
    name: Any = Field(None, description=CALL_NAME_DESCRIPTION)
    arguments: Any = Field(
        None, description="its `arguments`, else its `function`'s `arguments`; a JSON text that is valid JSON is given parsed"
    )
    class_: Literal["read_only", "idempotent", "external_effect", "unknown"] = Field(
        ..., alias="class", description="the tool's side-effect class by the tool policies as they are now"
    )
    state: CALL_STATES = Field(..., description="one word, the same reading every view gives (api.md's seven rules)")
    seq: int = Field(..., description="where the call was first sighted")
    result_seq: int | None = Field(..., description="the result that decided `state` (for superseded, the late real result)")
    turn_seq: int | None = Field(..., description="the innermost turn it was first sighted in; null outside every turn")
    time: str = Field(..., description="the time the first-sighting event claims")
    notes: list[NoteOut] = Field(..., description="notes pinned to the first sighting or to any of the call's tool_results")
    idempotency_key: str | None = Field(None, description="the idempotency key the agent used, as session-log.md section 1 reads it")
    receipt: str | None = Field(
        None, description="what the tool policy's receipt pointer finds in the call's first real result, as a string"
    )
    verdict: VerdictOut | None = Field(None, description="the current verdict (session-log.md 8.2), or null")


class CallsOut(Schema):
    calls: list[CallOut]


class CallPageOut(Schema):
    items: list[CallOut]
    next_cursor: str | None


class SearchHitOut(Schema):
    kind: Literal["event", "note"]
    session_id: str
    seq: int | None
    type: str | None = Field(description="the event's type; null for a note")
    note_id: int | None
    snippet: str = Field(description="plain text: escape it to show it")
    highlights: list[tuple[int, int]] = Field(description="the matches in the snippet, [start, end) character offsets")


class SearchPageOut(Schema):
    items: list[SearchHitOut]
    next_cursor: str | None


class NoteIn(Schema):
    text: StrictStr = Field(..., description=NOTE_LIMITS)
    tags: list[StrictStr] | None = Field(None, description="free words such as verified, refund-confirmed, needs-follow-up")
    seq: StrictInt | None = Field(None, description="the seq of the event to pin the note to; absent or null: the whole session")


class NoteEditIn(Schema):
    text: StrictStr | None = Field(None, description="the new text (absent: unchanged; null is refused). " + NOTE_LIMITS)
    tags: list[StrictStr] | None = Field(None, description="the new tags, replacing the old (absent: unchanged; null is refused)")


ERRORS = {403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}
BODY_ERRORS = {400: InvalidJsonOut, 413: ErrorOut, 422: ErrorOut}  # any endpoint reading a JSON body
