"""What should happen after a crash: a recommendation beside the recovery plan (spec section 8.1).

The plan says what recovery appends; a strategy says what the person (or the
automatic worker) should do next, from what each call of an open turn shows
and its tool's side-effect class. A strategy never changes the plan, its
digest or any risk.
"""

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .calls import name_text
from .recovery import COMPLETED, HAPPENED, NOT_HAPPENED, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, Plan, TurnCall, Verdict, open_turn_label

READ_ONLY, IDEMPOTENT, EXTERNAL_EFFECT, UNKNOWN = "read_only", "idempotent", "external_effect", "unknown"
# Classes whose effects reach outside the agent, or may: they decide a strategy.
RISKY_CLASSES = frozenset({EXTERNAL_EFFECT, UNKNOWN})

MANUAL_CHECK, RESUME_AFTER_EFFECTS, RESTART_TURN = "manual_check", "resume_after_effects", "restart_turn"
STRATEGIES = (MANUAL_CHECK, RESUME_AFTER_EFFECTS, RESTART_TURN)
ABANDON = "abandon"  # never recommended; a person's choice, recorded with the recovery

HEADLINES = {
    MANUAL_CHECK: "Check by hand before anything is retried",
    RESUME_AFTER_EFFECTS: "Resume after the effects that happened",
    RESTART_TURN: "Safe to restart the turn",
    ABANDON: "Abandoned",
}
ADVICE = {
    MANUAL_CHECK: "Verify in the outside system whether these calls took effect before anything is retried.",
    RESUME_AFTER_EFFECTS: "These effects happened: done, never repeat them. Calls still owed may be retried.",
    RESTART_TURN: "Only read-only and idempotent tools ran or may have run: the turn can run again from its start.",
    ABANDON: "The turn is closed and will not be resumed.",
}
# What a page says beside each call that decided a strategy (section 8.1's last column).
UNVERIFIED_WORDS = "outcome unknown: verify in the outside system before retrying"
EFFECT_WORDS = "already happened: done, never repeat"
CONTEXT_RESULT_CHARS = 200  # a completed effect's result, as the context message quotes it


def counted_state(state: str, verdict: str | None) -> str:
    """The state a call counts as in the table (section 8.2): an unknown outcome a verdict settled
    reads as completed (happened) or not started (not_happened); every other state as the log has it."""
    if state == TOOL_OUTCOME_UNKNOWN and verdict == HAPPENED:
        return COMPLETED
    if state == TOOL_OUTCOME_UNKNOWN and verdict == NOT_HAPPENED:
        return TOOL_NOT_STARTED
    return state


@dataclass(frozen=True)
class ClassedCall:
    call: TurnCall
    side_effect: str

    @property
    def risky(self) -> bool:
        return self.side_effect in RISKY_CLASSES

    @property
    def verdict(self) -> Verdict | None:
        return self.call.verdict

    @property
    def counted_state(self) -> str:
        """The state the strategy reads (the log's `call.state`, amended by a verdict as section 8.2 says)."""
        return counted_state(self.call.state, self.verdict.outcome if self.verdict is not None else None)

    @property
    def completed(self) -> bool:
        return self.counted_state == COMPLETED

    @property
    def outcome_unknown(self) -> bool:
        return self.counted_state == TOOL_OUTCOME_UNKNOWN

    @property
    def settled(self) -> bool:
        """An owed call whose outcome a verdict states."""
        return self.verdict is not None and self.call.state != COMPLETED


@dataclass(frozen=True)
class TurnStrategy:
    turn_seq: int
    turn_number: object  # the turn_start's data.turn, as logged
    strategy: str
    calls: tuple[ClassedCall, ...]  # every call the turn shows, in sighting order

    @property
    def label(self) -> str:
        return open_turn_label(self.turn_number, self.turn_seq)

    @property
    def headline(self) -> str:
        return HEADLINES[self.strategy]

    @property
    def advice(self) -> str:
        return ADVICE[self.strategy]

    unverified_words = UNVERIFIED_WORDS
    effect_words = EFFECT_WORDS

    @property
    def unverified(self) -> list[ClassedCall]:
        """Owed calls with no verdict that may have had an effect outside: the person must check them (row 1)."""
        return [c for c in self.calls if c.risky and c.outcome_unknown]

    @property
    def effects(self) -> list[ClassedCall]:
        """Calls with effects outside that happened (a real result, or a verdict): never repeat them (row 2)."""
        return [c for c in self.calls if c.risky and c.completed]

    @property
    def settled(self) -> list[ClassedCall]:
        """Owed calls a verdict settled, whatever their class (the context message says what was found)."""
        return [c for c in self.calls if c.settled]

    @property
    def deciding(self) -> list[ClassedCall]:
        """The calls that decided the strategy (none for restart_turn)."""
        return {MANUAL_CHECK: self.unverified, RESUME_AFTER_EFFECTS: self.effects}.get(self.strategy, [])

    def as_wire(self) -> dict:
        """api.md's form: `calls` lists the calls whose class is external_effect or unknown."""
        return {
            "turn_seq": self.turn_seq,
            "strategy": self.strategy,
            "calls": [
                {
                    "id": c.call.id, "name": c.call.name, "seq": c.call.sighted_seq, "class": c.side_effect, "state": c.call.state,
                    "verdict": c.verdict.outcome if c.verdict is not None else None,
                }  # fmt: skip
                for c in self.calls
                if c.risky
            ],
        }


def deciding_in_wire(wire: object) -> list[dict]:
    """The calls of a recorded strategy (TurnStrategy.as_wire, as RecoveryRecord keeps it) that
    decided it: the unverified calls of manual_check, the completed effects of resume_after_effects
    (a call's `verdict` amends its state as section 8.2 says; records made before verdicts have none)."""
    if not isinstance(wire, dict) or not isinstance(wire.get("calls"), list):
        return []
    state = {MANUAL_CHECK: TOOL_OUTCOME_UNKNOWN, RESUME_AFTER_EFFECTS: COMPLETED}.get(wire.get("strategy"))
    return [
        c for c in wire["calls"] if isinstance(c, dict) and state is not None and counted_state(c.get("state"), c.get("verdict")) == state
    ]


def choose(calls: Sequence[ClassedCall]) -> str:
    """The first row of section 8.1's table that matches."""
    if any(c.risky and c.outcome_unknown for c in calls):
        return MANUAL_CHECK
    if any(c.risky and c.completed for c in calls):
        return RESUME_AFTER_EFFECTS
    return RESTART_TURN


def strategies(plan: Plan, side_effect_of: Callable[[object], str]) -> list[TurnStrategy]:
    """One strategy per open turn, innermost first; `side_effect_of` maps a call's name to its class."""
    found = []
    for turn_seq in plan.open_turns:
        calls = tuple(ClassedCall(call, side_effect_of(call.name)) for call in plan.turn_calls.get(turn_seq, ()))
        found.append(TurnStrategy(turn_seq, plan.turn_numbers.get(turn_seq), choose(calls), calls))
    return found


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= CONTEXT_RESULT_CHARS else text[: CONTEXT_RESULT_CHARS - 1] + "…"


def _call_name(call: TurnCall) -> str:
    return name_text(call.name) or "an unnamed tool"


def verdict_label(outcome: str, by: str, evidence: str) -> str:
    """A verdict beside a call's risk, as the CLI and pages say it: "verified not happened (vera: bank portal, no wire)"."""
    return f"verified {'happened' if outcome == HAPPENED else 'not happened'} ({by}: {_short(evidence)})"


def settled_words(c: ClassedCall) -> str:
    """What a verdict found about an owed call, as the context message says it:
    "charge_card (seq 41): verified happened by reconciler:charge_* (ref ch_3Px): do not repeat it"."""
    verdict = c.verdict
    if verdict is None:
        return ""
    happened = verdict.outcome == HAPPENED
    ref = f" (ref {verdict.external_ref})" if verdict.external_ref else ""
    advice = "do not repeat it" if happened else "it may be retried"
    return (
        f"{_call_name(c.call)} (call {c.call.id}, seq {c.call.sighted_seq}): verified {'happened' if happened else 'not happened'}"
        f" by {verdict.by}{ref}: {advice}. Evidence: {_short(verdict.evidence)}"
    )


def context_content(turns: Sequence[TurnStrategy], *, abandoned: bool) -> str:
    """What the recovery-context system_message tells the agent resumed from this log."""
    lines = ["Recovery note: this session was interrupted and its open turns were closed as interrupted."]
    for turn in turns:
        decision = "abandoned by a person: do not resume it" if abandoned else f"strategy {turn.strategy}: {ADVICE[turn.strategy]}"
        lines.append(f"{turn.label[0].upper()}{turn.label[1:]}: {decision}")
        for c in turn.settled:
            lines.append(f"- {settled_words(c)}")
        for c in turn.effects:
            if c.call.state != COMPLETED:
                continue  # a verdict's, said above
            lines.append(
                f"- Completed, never repeat: {_call_name(c.call)} (call {c.call.id}, seq {c.call.sighted_seq}),"
                f" result at seq {c.call.result_seq}: {_short(c.call.result)}"
            )
        for c in turn.unverified:
            lines.append(
                f"- Outcome unknown, verify before retrying: {_call_name(c.call)} (call {c.call.id}, seq {c.call.sighted_seq})"
            )
    return "\n".join(lines)


def context_message(turns: Sequence[TurnStrategy], *, abandoned: bool) -> dict:
    """The system_message data appended after the plan when the recovery asks for context."""
    return {
        "content": context_content(turns, abandoned=abandoned),
        "name": None,
        "metadata": {"synthetic": True, "recovery_context": True},
    }
