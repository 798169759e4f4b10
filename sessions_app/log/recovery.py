"""Closing what a crash left open, by appending classified repairs (spec section 4)."""

import hashlib
import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .calls import call_arguments, call_name
from .events import Event, call_id, json_integer, tool_calls_of
from .fold import fold
from .policies import Policy
from .policies import side_effect_class as policies_side_effect_class
from .structure import Placement, place, place_all

TOOL_NOT_STARTED = "tool_not_started"
TOOL_OUTCOME_UNKNOWN = "tool_outcome_unknown"
NOT_STARTED_TEXT = (
    "Tool call was interrupted before it was dispatched. "
    "It did not run and had no side effects. Retry if needed."
)
OUTCOME_UNKNOWN_TEXT = (
    "Tool call was dispatched but the session was interrupted before its result was recorded. "
    "It MAY have run and MAY have had side effects. Verify state before retrying."
)
DANGLING_TEXT = "Tool call was interrupted and not executed. Please retry if needed."
HAPPENED, NOT_HAPPENED = "happened", "not_happened"  # a verdict's outcome (section 8.2)

# How every view (transcript card, recovery page, CLI) words a risk and the
# rule that decided it. Explanations only: the appended TEXTs above are the
# spec's, and these must never contradict them (rule 4's outcome_unknown text
# says the call "was dispatched", so its reason says why recovery assumes so).
RISK_HEADLINES = {
    TOOL_NOT_STARTED: "Not started: it did not run",
    TOOL_OUTCOME_UNKNOWN: "Outcome unknown: it may have run",
}
RISK_DETAILS = {
    TOOL_NOT_STARTED: "It had no side effects.",
    TOOL_OUTCOME_UNKNOWN: "It MAY have had side effects. Verify state before retrying.",
}
RULE_REASONS = {
    1: "A tool_call event shows the call was handed to the executor: it may have run, even if its step later closed.",
    2: "This turn logged dispatches (tool_call events) for other calls but none for this one: it never got that far.",
    3: "No dispatches were logged, and the call's step closed while the call was still unanswered: nothing was in flight.",
    4: (
        "This turn logged no dispatches (tool_call events) and the call's step was still open at the crash,"
        " so it may well have been dispatched: recovery treats it as dispatched, with an unknown outcome."
    ),
}
# Rule 1 when every tool_call naming the call is inferred (metadata.inferred: written from a model span's request by
# the OTLP mapping, docs/guide/otlp.md): nothing saw it handed to the tool, yet it may have run.
INFERRED_REASON = (
    "Its tool_call was inferred from the model's request (metadata.inferred), not seen handed to the tool: no span of"
    " the tool arrived. A missing span is no evidence that the tool did not run, so recovery treats it as dispatched,"
    " with an unknown outcome: it may have run."
)


def is_inferred(data: dict) -> bool:
    """A tool_call written from the model's request, not from a sight of the tool (metadata.inferred is exactly true)."""
    metadata = data.get("metadata")
    return isinstance(metadata, dict) and metadata.get("inferred") is True


def rule_reason(rule: int, *, inferred: bool = False) -> str:
    """Why a rule decided, as every view (card, recovery page, CLI) words it."""
    return INFERRED_REASON if inferred and rule == 1 else RULE_REASONS[rule]


def open_turn_label(number: object, seq: int) -> str:
    """An open turn as people read it: "turn 4 (opened at seq 50)" (number = its turn_start's data.turn)."""
    turn = json_integer(number)
    return f"turn {turn} (opened at seq {seq})" if turn is not None else f"unnumbered turn (opened at seq {seq})"


@dataclass(frozen=True)
class OwedCall:
    """A call an open turn still owes a result for, with the rule that classified it."""

    id: str
    name: str | int | bool | None  # calls.call_name: `name`, else `function.name`
    arguments: object  # calls.call_arguments: a valid JSON text parsed; None when absent
    turn_seq: int
    step_seq: int | None
    sighted_seq: int  # the event where the id was first seen
    risk: str
    rule: int  # 1..4, the row of the risk table that decided
    evidence: tuple[int, ...]  # seqs proving the rule (see _classify)
    inferred: bool = False  # rule 1 on inferred tool_calls only (is_inferred): known from the model's request alone


@dataclass(frozen=True)
class Verdict:
    """What a person or a reconciler found out about one call (section 8.2), as the plan reads it."""

    outcome: str  # HAPPENED or NOT_HAPPENED
    evidence: str
    external_ref: str | None
    by: str  # the user name, or "reconciler:<policy pattern>"
    at: str  # ISO 8601

    def as_data(self) -> dict:
        """The synthetic result's `metadata.verdict`."""
        return {"outcome": self.outcome, "evidence": self.evidence, "external_ref": self.external_ref or None, "by": self.by, "at": self.at}


def verdict_text(verdict: Verdict) -> str:
    """The synthetic result's content for a call with a verdict: the outcome and the evidence, not "unknown"."""
    found = f"by {verdict.by}: {verdict.evidence.strip().rstrip('.')}"
    if verdict.external_ref:
        found += f" (ref {verdict.external_ref})"
    if verdict.outcome == HAPPENED:
        return (
            "Tool call was dispatched and the session was interrupted before its result was recorded. "
            f"It was verified as having happened {found}. Do not repeat it."
        )
    return (
        "Tool call was interrupted before its result was recorded. "
        f"It was verified as not having happened {found}: it may be retried."
    )


@dataclass(frozen=True)
class Repair:
    """One event to append; `call` is None for a turn_end and for the turn-blind patch."""

    type: str
    data: dict
    call: OwedCall | None


COMPLETED = "completed"


@dataclass(frozen=True)
class TurnCall:
    """A call first sighted inside an open turn, as recovery strategies read it (section 8.1).

    `state` is COMPLETED (a non-synthetic result exists: the tool ran, even if it failed),
    or the risk it is owed under (no result at all). Calls answered only by synthetic
    results are not listed.
    """

    id: str
    name: object  # as sighted
    sighted_seq: int
    state: str
    result_seq: int | None = None  # COMPLETED: the first real result
    result: object = None  # COMPLETED: that result's content
    verdict: Verdict | None = None  # its current verdict (section 8.2); never changes `state`


@dataclass(frozen=True)
class Plan:
    open_turns: list[int]  # turn_start seqs, innermost first
    repairs: list[Repair]  # in append order
    warnings: list[str]
    # Outside the digest: per open turn, the calls sighted after its turn_start (its own and
    # those of turns nested in it), in sighting order; and each open turn's data.turn.
    turn_calls: dict[int, tuple[TurnCall, ...]] = field(default_factory=dict)
    turn_numbers: dict[int, object] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        return bool(self.open_turns)

    def digest(self, next_seq: int) -> str:
        return repairs_digest(next_seq, self.repairs)


def repairs_digest(next_seq: int, repairs: Sequence[Repair]) -> str:
    """Binds repairs to the log length: any append makes a previewed digest stale."""
    payload = {"next_seq": next_seq, "repairs": [{"type": r.type, "data": r.data} for r in repairs]}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Sighting:
    """Where the scan first saw a call id (an assistant message's `tool_calls` entry or a `tool_call` event)."""

    id: str
    name: str | int | bool | None
    call: dict  # the call as stored (its arguments are read only when shown: owed calls, the ledger)
    turn_seq: int | None
    step_seq: int | None
    sighted_seq: int


@dataclass
class _Scan:
    """The state of section 4's single pass, with the seqs that later serve as evidence."""

    turn_stack: list[int] = field(default_factory=list)
    step_stack: list[int] = field(default_factory=list)
    closed_steps: dict[int, int] = field(default_factory=dict)  # step_start seq -> its step_end seq
    dispatches: dict[str, list[int]] = field(default_factory=dict)  # call id -> tool_call seqs
    inferred_dispatches: set[int] = field(default_factory=set)  # the tool_call seqs that are is_inferred
    # turn_start seq (None outside turns) -> its tool_call seqs
    turn_dispatches: dict[int | None, list[int]] = field(default_factory=dict)
    results: dict[str, list[Event]] = field(default_factory=dict)  # call id -> every tool_result naming it
    real_results: dict[str, Event] = field(default_factory=dict)  # call id -> its first non-synthetic result
    turn_numbers: dict[int, object] = field(default_factory=dict)  # turn_start seq -> data.turn
    steps_per_turn: Counter = field(default_factory=Counter)
    sightings: dict[str, Sighting] = field(default_factory=dict)  # first sighting wins
    warnings: list[str] = field(default_factory=list)

    @property
    def resulted(self) -> Collection[str]:
        """The ids some tool_result answers (section 4's `resulted`), whatever wrote it."""
        return self.results.keys()

    def read(self, event: Event) -> None:
        where = place(self.turn_stack, self.step_stack, event.seq, event.type)
        if event.type == "turn_start":
            self.turn_numbers[event.seq] = event.data.get("turn")
        elif event.type == "turn_end" and where.turn_seq is None:
            self.warnings.append(f"turn_end at seq {event.seq} closes no open turn")
        elif event.type == "step_start" and where.turn_seq is not None:
            self.steps_per_turn[where.turn_seq] += 1
        elif event.type == "step_end" and where.step_seq is not None:
            self.closed_steps[where.step_seq] = event.seq
        elif event.type == "tool_call" and (cid := call_id(event.data)) is not None:
            self.dispatches.setdefault(cid, []).append(event.seq)
            if is_inferred(event.data):
                self.inferred_dispatches.add(event.seq)
            self.turn_dispatches.setdefault(where.turn_seq, []).append(event.seq)
            self._sight(cid, event.data, where, event.seq)
        elif event.type == "assistant_message":
            for call in tool_calls_of(event.data):
                if (cid := call_id(call)) is not None:
                    self._sight(cid, call, where, event.seq)
        elif event.type == "tool_result" and (cid := call_id(event.data)) is not None:
            self.results.setdefault(cid, []).append(event)
            if not is_synthetic(event.data):
                self.real_results.setdefault(cid, event)

    def _sight(self, cid: str, call: dict, where: Placement, seq: int) -> None:
        if cid not in self.sightings:
            self.sightings[cid] = Sighting(cid, call_name(call), call, where.turn_seq, where.step_seq, seq)


def is_synthetic(data: dict) -> bool:
    """Written by recovery, not by a tool or the agent (metadata.synthetic is exactly true)."""
    metadata = data.get("metadata")
    return isinstance(metadata, dict) and metadata.get("synthetic") is True


def _turn_calls(scan: _Scan, turn_seq: int, verdicts: Mapping[str, Verdict]) -> tuple[TurnCall, ...]:
    calls = []
    for call in scan.sightings.values():
        if call.sighted_seq <= turn_seq:  # everything after an open turn_start is inside it
            continue
        verdict = verdicts.get(call.id)
        if (result := scan.real_results.get(call.id)) is not None:
            calls.append(TurnCall(call.id, call.name, call.sighted_seq, COMPLETED, result.seq, result.data.get("content"), verdict))
        elif call.id not in scan.resulted:
            calls.append(TurnCall(call.id, call.name, call.sighted_seq, _classify(scan, call)[1], verdict=verdict))
    return tuple(calls)


def _scan(events: Sequence[Event], step_stack: Sequence[int] = ()) -> _Scan:
    scan = _Scan(step_stack=list(step_stack))
    for event in events:
        scan.read(event)
    return scan


def _classify(scan: _Scan, call: Sighting) -> tuple[int, str, tuple[int, ...]]:
    """(rule, risk, evidence) by the first matching row of the risk table."""
    if call.id in scan.dispatches:
        return 1, TOOL_OUTCOME_UNKNOWN, tuple(scan.dispatches[call.id])
    if call.turn_seq in scan.turn_dispatches:  # dispatches of other ids, since this one has none
        return 2, TOOL_NOT_STARTED, tuple(scan.turn_dispatches[call.turn_seq])
    if call.step_seq is not None and call.step_seq in scan.closed_steps:
        return 3, TOOL_NOT_STARTED, (scan.closed_steps[call.step_seq],)
    return 4, TOOL_OUTCOME_UNKNOWN, ()


def _owed_result(scan: _Scan, call: Sighting, verdict: Verdict | None) -> Repair:
    rule, risk, evidence = _classify(scan, call)
    owed = OwedCall(
        call.id, call.name, call_arguments(call.call), call.turn_seq, call.step_seq, call.sighted_seq,
        risk, rule, evidence, rule == 1 and all(seq in scan.inferred_dispatches for seq in evidence),
    )  # fmt: skip
    text = NOT_STARTED_TEXT if risk == TOOL_NOT_STARTED else OUTCOME_UNKNOWN_TEXT
    data = {
        "tool_call_id": call.id,
        "name": call.name,
        "content": text,
        "metadata": {"synthetic": True, "risk": risk},
    }
    if verdict is not None:  # the risk stays the log's (section 4); the verdict says what was found
        data["content"] = verdict_text(verdict)
        data["metadata"]["verdict"] = verdict.as_data()
    return Repair("tool_result", data, owed)


def _turn_end(scan: _Scan, turn_seq: int) -> Repair:
    data = {"reason": "interrupted", "steps": scan.steps_per_turn[turn_seq]}
    if (turn := json_integer(scan.turn_numbers[turn_seq])) is not None:
        data["turn"] = turn
    return Repair("turn_end", data, None)


def open_turns(events: Sequence[Event]) -> list[int]:
    """Seqs of the turn_starts never closed, innermost first; keyed on event types alone."""
    _, turn_stack, _ = place_all(events)
    return turn_stack[::-1]


def interrupted(events: Sequence[Event]) -> bool:
    return bool(open_turns(events))


def plan(events: Sequence[Event], *, step_stack: Sequence[int] = (), verdicts: Mapping[str, Verdict] | None = None) -> Plan:
    """What recovery would append: per open turn, innermost first, its owed results then a turn_end.

    A clean log gets an empty plan even when it holds dangling calls: a closed turn owing a
    result is not a crash.

    Storage may pass only the events that matter (everything from the outermost open turn on,
    plus earlier non-structural events naming the same call ids and stray turn_ends) together
    with the steps still open where that tail starts (`step_stack`); the plan is the same.

    `verdicts` (call id -> its current verdict, section 8.2) add what was found to the owed
    calls' synthetic results and to the strategies' calls; they never change a risk.
    """
    return _plan_of(_scan(events, step_stack), verdicts or {})


@dataclass(frozen=True)
class CallsSeen:
    """One scan of a whole log, read call by call: what the ledger (log.ledger) states from."""

    sightings: tuple[Sighting, ...]  # every call's first sighting, in sighting order
    results: Mapping[str, Sequence[Event]]  # call id -> every tool_result naming it, in seq order
    plan: Plan


def calls_seen(events: Sequence[Event]) -> CallsSeen:
    """The calls of a whole log (every event from seq 0: a tail would miss earlier sightings)."""
    scan = _scan(events)
    return CallsSeen(tuple(scan.sightings.values()), scan.results, _plan_of(scan, {}))


def _plan_of(scan: _Scan, verdicts: Mapping[str, Verdict]) -> Plan:
    turns = scan.turn_stack[::-1]
    repairs = []
    for turn_seq in turns:
        for call in scan.sightings.values():
            if call.turn_seq == turn_seq and call.id not in scan.resulted:
                repairs.append(_owed_result(scan, call, verdicts.get(call.id)))
        repairs.append(_turn_end(scan, turn_seq))
    return Plan(
        turns,
        repairs,
        scan.warnings,
        turn_calls={turn_seq: _turn_calls(scan, turn_seq, verdicts) for turn_seq in turns},
        turn_numbers={turn_seq: scan.turn_numbers[turn_seq] for turn_seq in turns},
    )


def patch_dangling_tool_calls(events: Sequence[Event]) -> list[Repair]:
    """The turn-blind fast path: a generic result for each assistant call nothing answers.

    Reads the fold, as the reference reads its transcript (ctx.messages): a call the model no
    longer sees needs no answer, and an answer must not land where its call is not visible.
    """
    visible = fold(events)
    answered = {call_id(e.data) for e in visible if e.type == "tool_result"}
    repairs: list[Repair] = []
    for event in visible:
        if event.type != "assistant_message":
            continue
        for call in tool_calls_of(event.data):
            cid = call_id(call)
            if cid is None or cid in answered:
                continue
            answered.add(cid)  # one patch per id, at its first sighting
            data = {
                "tool_call_id": cid,
                "name": call_name(call),
                "content": DANGLING_TEXT,
                "metadata": {},
            }
            repairs.append(Repair("tool_result", data, None))
    return repairs


def apply(events: Sequence[Event], repairs: Sequence[Repair], time: datetime) -> list[Event]:
    """The repairs as the events appending them would store, seqs continuing after `events`."""
    next_seq = events[-1].seq + 1 if events else 0
    return [Event(next_seq + i, r.type, time, r.data) for i, r in enumerate(repairs)]


def side_effect_class(tool_name: str | None, policies: Iterable[tuple[str, str] | Policy]) -> str:
    """A tool's side-effect class by policies (section 8): Policy objects, or (pattern, class) pairs
    of site-wide policies; an exact name wins, then the longest matching pattern; "unknown" when none matches."""
    return policies_side_effect_class(
        tool_name, [p if isinstance(p, Policy) else Policy(pattern=p[0], side_effect=p[1]) for p in policies]
    )
