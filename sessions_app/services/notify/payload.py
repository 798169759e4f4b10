"""What a webhook says: the project, the session, its open turns, the owed calls with their risk and side-effect
class, the recommended strategy and a link to the recovery preview, all from the recovery plan's own code
(selectors.recovery_plan, recovery_strategies, side_effect_classes): nothing is decided again here."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.urls import reverse

from sessions_app.log import events as log_events
from sessions_app.log import recovery as log_recovery
from sessions_app.log import strategy as log_strategy
from sessions_app.models import HELD, RECOVERED, STALLED, Session
from sessions_app.selectors import recovery_plan, recovery_strategies, side_effect_classes

HEADLINES = {STALLED: "stalled (likely crashed)", RECOVERED: "was recovered", HELD: "is held for a person (repeated failures)"}


def build(
    session: Session,
    kind: str,
    *,
    at: datetime,
    plan: log_recovery.Plan | None = None,
    turns: list[log_strategy.TurnStrategy] | None = None,
    detail: dict | None = None,
) -> dict:
    """The JSON body of a notification. `plan` and `turns`: a recovery's own, read before it appended (else read now)."""
    plan = recovery_plan(session) if plan is None else plan
    turns = recovery_strategies(plan, session=session) if turns is None else turns
    owed = [r.call for r in plan.repairs if r.call is not None]
    found = {r.call.id: r.data["metadata"].get("verdict") for r in plan.repairs if r.call is not None}
    classes = side_effect_classes((call.name for call in owed), project_id=session.project_id)
    strategies = [t.as_wire() for t in turns]
    recommended = min((t.strategy for t in turns), key=log_strategy.STRATEGIES.index, default=None)
    base = settings.TURNLOG_BASE_URL
    project = session.project
    return {
        "type": f"session.{kind}",
        "timestamp": at.isoformat(),
        "project": {"slug": project.slug, "name": project.name},
        "session": {
            "id": session.id,
            "agent_name": session.agent_name,
            "event_count": session.event_count,
            "last_activity_at": session.last_activity_at.isoformat(),
            "url": base + reverse("session_detail", args=[session.id]),
        },
        "open_turns": [
            {"seq": seq, "label": log_recovery.open_turn_label(plan.turn_numbers.get(seq), seq)} for seq in plan.open_turns
        ],
        "owed_calls": [
            {
                "id": call.id,
                "name": call.name,
                "turn_seq": call.turn_seq,
                "sighted_seq": call.sighted_seq,
                "risk": call.risk,
                "rule": call.rule,
                "side_effect": classes[log_events.tool_name(call.name)],
                "verdict": found.get(call.id),  # what a person or a reconciler found out (session-log.md 8.2), or None
            }
            for call in owed
        ],
        "strategies": strategies,
        "recommended_strategy": recommended,
        "recovery_preview_url": base + reverse("recovery_preview", args=[session.id]),
        **({"detail": detail} if detail else {}),
    }


def slack_text(payload: dict) -> dict:
    """The Slack-compatible body ({"text": ...}) of a notification's payload."""
    kind = payload["type"].removeprefix("session.")
    session = payload["session"]
    agent = f" (agent {session['agent_name']})" if session["agent_name"] else ""
    lines = [f"Turnlog: session {session['id']}{agent} in project {payload['project']['slug']} {HEADLINES.get(kind, kind)}."]
    if payload["open_turns"]:
        lines.append("Open turns: " + ", ".join(t["label"] for t in payload["open_turns"]))
    for call in payload["owed_calls"]:
        verdict = call.get("verdict")
        found = f", {log_strategy.verdict_label(verdict['outcome'], verdict['by'], verdict['evidence'])}" if verdict else ""
        lines.append(f"Owed call {call['name']} ({call['id']}): {call['risk']}{found}, {call['side_effect']}")
    if payload["recommended_strategy"]:
        lines.append(f"Recommended: {payload['recommended_strategy']}")
    lines.append(f"Recovery preview: {payload['recovery_preview_url']}")
    return {"text": "\n".join(lines)}
