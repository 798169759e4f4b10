"""Verdicts over HTTP (api.md, "Verdicts, receipts and reconcilers"): recording and withdrawing what a
person found out about a call, reading a call's verdicts and its reconciler's attempts, asking the
reconciler again.

Verdicts sit beside the log: none of these endpoints changes an event or a call's state.
`{call_id}` is one percent-encoded path segment (converters.CallIdConverter).
"""

from __future__ import annotations

from typing import Literal

from ninja import Field, Router, Schema, Status
from pydantic import StrictStr

from sessions_app.api.calls import call_to_wire
from sessions_app.api.checks import readable
from sessions_app.api.schemas import BODY_ERRORS, CallOut, ErrorOut, VerdictOut
from sessions_app.log import events as log_events
from sessions_app.selectors import access
from sessions_app.selectors import verdicts as verdict_reads
from sessions_app.selectors.call_detail import call_row, prep_call_id
from sessions_app.services import reconcilers
from sessions_app.services import verdicts as verdict_writes
from sessions_app.services.verdict_transfer import verdict_to_wire

router = Router(tags=["verdicts"])
CALL_PATH = "/sessions/{session_id:session_id}/calls/{call_id:call_id}"


class VerdictIn(Schema):
    outcome: Literal["happened", "not_happened"] = Field(..., description="what was found in the outside system")
    # The lengths are the service's to check, so that a limit broken is `invalid_verdict` naming the field and the reason.
    evidence: StrictStr = Field(..., description=f"what was found and where: 1 to {verdict_writes.EVIDENCE_MAX} characters, not blank")
    external_ref: StrictStr | None = Field(
        None, description=f"the outside system's reference (a charge id, a message id), at most {verdict_writes.EXTERNAL_REF_MAX} characters"
    )


class WithdrawIn(Schema):
    reason: StrictStr | None = Field(
        None, description=f"why it is withdrawn (kept in the history), at most {verdict_writes.REASON_MAX} characters"
    )


class VerdictHistoryOut(VerdictOut):
    withdrawn_at: str | None = Field(..., description="when it was withdrawn or replaced by a newer verdict; null while current")
    withdrawn_by: str | None = Field(..., description="who withdrew it (a newer verdict's author when it was replaced)")


class CheckAttemptOut(Schema):
    at: str
    status: int | None = Field(..., description="the HTTP status the check endpoint answered; null when none came back")
    outcome: str | None = Field(..., description='"happened", "not_happened", "unknown", or null when the answer held none')
    error: str | None = Field(..., description="why the attempt settled nothing, or null")


class VerdictsOut(Schema):
    verdicts: list[VerdictHistoryOut]
    attempts: list[CheckAttemptOut]


class CheckQueuedOut(Schema):
    call_id: str
    policy: str = Field(..., description="the pattern of the tool policy whose check endpoint will be asked")
    next_at: str


def history_to_wire(verdict) -> dict:
    return verdict_to_wire(verdict) | {
        "withdrawn_at": log_events.format_time(verdict.withdrawn_at) if verdict.withdrawn_at is not None else None,
        "withdrawn_by": verdict.withdrawn_by or None if verdict.withdrawn_at is not None else None,
    }


def attempt_to_wire(attempt) -> dict:
    return {"at": log_events.format_time(attempt.at), "status": attempt.status, "outcome": attempt.outcome or None, "error": attempt.error or None}


@router.put(f"{CALL_PATH}/verdict", response={200: CallOut, 403: ErrorOut, 404: ErrorOut, **BODY_ERRORS}, by_alias=True)
def record_verdict(request, session_id: str, call_id: str, payload: VerdictIn):
    """Record what you found out about the call (the recover permission); it replaces the call's current verdict."""
    actor = access.actor_of(request)
    verdict_writes.record_verdict(
        actor=actor, session_id=session_id, call_id=call_id,
        outcome=payload.outcome, evidence=payload.evidence, external_ref=payload.external_ref,
    )  # fmt: skip
    return call_to_wire(call_row(readable(request, session_id), call_id))


@router.delete(f"{CALL_PATH}/verdict", response={200: CallOut, 403: ErrorOut, 404: ErrorOut, **BODY_ERRORS}, by_alias=True)
def withdraw_verdict(request, session_id: str, call_id: str, payload: WithdrawIn | None = None):
    """Withdraw the call's current verdict (the recover permission); it stays in the call's history. The body may be empty."""
    verdict_writes.withdraw_verdict(actor=access.actor_of(request), session_id=session_id, call_id=call_id, reason=payload.reason if payload is not None else None)
    return call_to_wire(call_row(readable(request, session_id), call_id))


@router.get(f"{CALL_PATH}/verdicts", response={200: VerdictsOut, 403: ErrorOut, 404: ErrorOut})
def list_verdicts(request, session_id: str, call_id: str):
    """Every verdict of the call, oldest first (withdrawn and replaced ones included), and its reconciler's attempts."""
    session = readable(request, session_id, related=False)
    call_row(session, call_id)  # 404 for a call the session never sighted
    stored = prep_call_id(call_id)
    return {
        "verdicts": [history_to_wire(v) for v in verdict_reads.verdict_history(session, stored)],
        "attempts": [attempt_to_wire(a) for a in verdict_reads.check_attempts(session, stored)],
    }


@router.post(f"{CALL_PATH}/check", response={202: CheckQueuedOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut})
def queue_check(request, session_id: str, call_id: str):
    """Ask the call's reconciler (its tool policy's check endpoint) again, now (the recover permission)."""
    check = reconcilers.queue_check(actor=access.actor_of(request), session_id=session_id, call_id=call_id)
    return Status(202, {"call_id": call_id, "policy": check.policy.pattern, "next_at": log_events.format_time(check.next_at)})
