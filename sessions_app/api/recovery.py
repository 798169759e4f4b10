"""Recovery over HTTP (api.md, Recovery): the plan and the dangling-call patch,
previewed and applied."""

from __future__ import annotations

import dataclasses

from ninja import Router

from sessions_app import selectors, services
from sessions_app.api.checks import readable
from sessions_app.api.schemas import (
    BODY_ERRORS,
    DanglingPatchOut,
    ErrorOut,
    PlanOut,
    RecoverIn,
    RepairAppliedOut,
    RepairIn,
)
from sessions_app.log import events as log_events
from sessions_app.log import recovery as log_recovery
from sessions_app.selectors import access

router = Router(tags=["recovery"])


def plan_to_wire(plan, session) -> dict:
    """The Plan of api.md ("Recovery"), `next_seq` the session's event count as the plan was read."""
    next_seq = session.event_count
    owed = [r.call for r in plan.repairs if r.call is not None]
    side_effects = selectors.side_effect_classes((call.name for call in owed), project_id=session.project_id)
    return {
        "interrupted": plan.interrupted,
        "open_turns": plan.open_turns,
        "next_seq": next_seq,
        "repairs": [{"type": r.type, "data": r.data} for r in plan.repairs],
        "warnings": plan.warnings,
        "digest": plan.digest(next_seq),
        "owed_calls": [
            {**dataclasses.asdict(call), "evidence": list(call.evidence), "side_effect": side_effects[log_events.tool_name(call.name)]}
            for call in owed
        ],
        "strategies": [turn.as_wire() for turn in selectors.recovery_strategies(plan, session=session)],
    }


@router.get("/sessions/{session_id:session_id}/recovery-plan", response={200: PlanOut, 403: ErrorOut, 404: ErrorOut}, by_alias=True)
def get_recovery_plan(request, session_id: str):
    """What recovery would append now, and why; confirm it with its digest."""
    session = readable(request, session_id)
    return plan_to_wire(selectors.recovery_plan(session), session)


@router.get("/sessions/{session_id:session_id}/dangling-calls", response={200: DanglingPatchOut, 403: ErrorOut, 404: ErrorOut})
def get_dangling_calls(request, session_id: str):
    """What the turn-blind patch would append (only applicable once no turn is open)."""
    session = readable(request, session_id)
    repairs = selectors.dangling_patch(session)
    return {
        "blocked_by_open_turns": session.open_turns,
        "next_seq": session.event_count,
        "repairs": [{"type": r.type, "data": r.data} for r in repairs],
        "digest": log_recovery.repairs_digest(session.event_count, repairs),
    }


@router.post(
    "/sessions/{session_id:session_id}/recover",
    response={200: RepairAppliedOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, **BODY_ERRORS},
)
def recover_session(request, session_id: str, payload: RecoverIn):
    """Append the recovery plan; with `digest`, only if it is still the plan previewed. Needs the operator role (and a token's `recover` scope).

    Without `context` it appends exactly the plan; with it, one recovery-context system_message follows.
    """
    access.session_for(access.actor_of(request), session_id, access.RECOVER)
    return applied(
        services.recover(
            session_id=session_id,
            user=request.user,
            digest=payload.digest,
            note=payload.note,
            context=payload.context,
            abandon=payload.abandon,
        )
    )


@router.post(
    "/sessions/{session_id:session_id}/patch-dangling-calls",
    response={200: RepairAppliedOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, **BODY_ERRORS},
)
def patch_dangling_calls(request, session_id: str, payload: RepairIn):
    """The turn-blind patch for calls outside turns; refused (409 recovery_first) while a turn is open. Needs the operator role."""
    access.session_for(access.actor_of(request), session_id, access.RECOVER)
    return applied(
        services.patch_dangling_calls(session_id=session_id, user=request.user, digest=payload.digest, note=payload.note)
    )


def applied(result: services.RepairResult) -> dict:
    return {"appended": [log_events.event_to_wire(e.to_log_event()) for e in result.appended], "next_seq": result.next_seq}
