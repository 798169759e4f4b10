"""The recovery preview as people read it: the open turns, the calls they owe (what a
person must check first comes first) and the events a confirm appends; and the
strategy the session header recommends."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from dashboard.pages.blocks import SIDE_EFFECT_LABELS, Row, Value
from sessions_app import selectors
from sessions_app.log import events as log_events
from sessions_app.log import recovery
from sessions_app.log import strategy as log_strategy
from sessions_app.log.policies import LOUD_CLASSES
from sessions_app.log.events import Event
from sessions_app.models import Session

# A tool without a policy ranks with external effects: it may have acted outside too.
SIDE_EFFECT_RANK = {"external_effect": 0, "unknown": 0, "idempotent": 2, "read_only": 3}


@dataclass
class OwedCallView:
    call: recovery.OwedCall
    side_effect: str
    arguments: Value | None
    reason: str
    evidence: list[tuple[int, str]]  # (seq, what it shows)

    @property
    def loud(self) -> bool:
        return self.side_effect in LOUD_CLASSES and self.call.risk == recovery.TOOL_OUTCOME_UNKNOWN

    @property
    def side_effect_label(self) -> str:
        return SIDE_EFFECT_LABELS[self.side_effect]

    @property
    def risk_headline(self) -> str:
        return recovery.RISK_HEADLINES[self.call.risk]


@dataclass
class OpenTurnView:
    turn_start: Event
    quiet_seconds: float  # since the session's last event
    may_be_running: bool  # that silence is shorter than the stall threshold

    @property
    def number(self) -> object:
        return self.turn_start.data.get("turn")

    @property
    def label(self) -> str:
        return recovery.open_turn_label(self.number, self.turn_start.seq)


def innermost_strategy(session: Session) -> log_strategy.TurnStrategy | None:
    """The session header's recommendation: the innermost open turn's strategy (stalled sessions only)."""
    if not session.turn_stack:
        return None
    turns = selectors.recovery_strategies(selectors.recovery_plan(session), session=session)
    return turns[0] if turns else None


@dataclass
class RecoveryPreview:
    open_turns: list[OpenTurnView]
    owed: list[OwedCallView]  # what a person must check first comes first
    appended: list[Row]  # the exact events confirming appends, as transcript rows
    strategies: list[log_strategy.TurnStrategy] = field(default_factory=list)  # innermost open turn first


def recovery_preview(session: Session, plan: recovery.Plan) -> RecoveryPreview:
    now = timezone.now()
    starts = {e.seq: e for e in selectors.turn_starts_at(session, plan.open_turns)}
    quiet = (now - session.last_activity_at).total_seconds()
    open_turns = [
        OpenTurnView(turn_start=starts[seq], quiet_seconds=quiet, may_be_running=quiet < settings.TURNLOG_STALL_SECONDS)
        for seq in plan.open_turns
    ]
    calls = [r.call for r in plan.repairs if r.call is not None]
    side_effects = selectors.side_effect_classes((c.name for c in calls), project_id=session.project_id)
    owed = [
        OwedCallView(
            call=call,
            side_effect=side_effects[log_events.tool_name(call.name)],
            arguments=Value.of(call.arguments),
            reason=recovery.rule_reason(call.rule, inferred=call.inferred),
            evidence=evidence_of(call),
        )
        for call in calls
    ]
    owed.sort(key=lambda v: (v.call.risk != recovery.TOOL_OUTCOME_UNKNOWN, SIDE_EFFECT_RANK[v.side_effect]))
    appended = [
        Row(
            event=Event(session.event_count + i, repair.type, now, repair.data),
            role="tool" if repair.type == "tool_result" else None,
            content=Value.of(repair.data.get("content")),
            answers=repair.data.get("tool_call_id"),
            card_seq=repair.call.sighted_seq if repair.call else None,
        )
        for i, repair in enumerate(plan.repairs)
    ]
    return RecoveryPreview(open_turns=open_turns, owed=owed, appended=appended, strategies=selectors.recovery_strategies(plan, session=session))


def evidence_of(call: recovery.OwedCall) -> list[tuple[int, str]]:
    label = {
        1: "tool_call inferred from the model's request" if call.inferred else "tool_call: this call was dispatched",
        2: "tool_call of another call in this turn",
        3: "step_end: the call's step closed",
    }.get(call.rule)
    return [(call.sighted_seq, "where the model asked for the call")] + [(seq, label) for seq in call.evidence]
