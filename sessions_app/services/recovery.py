"""Recovery: closing a crashed session's open turns (by a person or the worker) and the dangling-call patch."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from sessions_app.lib import instruments
from sessions_app.lib.errors import RecoveryFirst, StalePlan
from sessions_app.log import events as log_events
from sessions_app.log import recovery as log_recovery
from sessions_app.log import strategy as log_strategy
from sessions_app.log import values as log_values
from sessions_app.models import HELD, RECOVERED, AuditEntry, AutoRecoveryPolicy, RecoveryRecord, Session
from sessions_app.selectors import dangling_patch, recovery_plan, recovery_strategies
from sessions_app.services import ledger, reconcilers
from sessions_app.services.notify import transitions

from .audit_log import WORKER, audit
from .event_rows import StoredEvent, count_for_agent, locked_session, store_events
from .publishing import publish_session_changed_on_commit


@dataclass(frozen=True)
class RepairResult:
    appended: list[StoredEvent]
    next_seq: int
    record: RecoveryRecord | None


def recover(
    *,
    session_id: str,
    user,
    digest: str | None = None,
    note: str = "",
    context: bool = False,
    abandon: bool = False,
) -> RepairResult:
    """Apply the session's recovery plan, if `digest` (when given) still matches it.

    Plan, check and append happen under the session's lock, so of two people
    confirming one plan exactly one appends; the other gets StalePlan with
    the fresh (empty) plan. A clean session appends nothing. The strategies
    are recomputed under the lock and recorded (section 8.1); `abandon`
    records that the person chose to abandon the turns instead, `context`
    appends the recovery-context system_message right after the plan.
    """
    log_values.check(note, prefix="note")
    with transaction.atomic():
        session = locked_session(session_id)
        plan = recovery_plan(session)
        return _apply_recovery(session, plan, user=user, digest=digest, note=note, context=context, abandon=abandon)


def recover_automatically(*, session_id: str, policy: AutoRecoveryPolicy, now: datetime | None = None) -> RepairResult | None:
    """The worker's recovery: only a session quiet for the policy's time whose every open turn is restart_turn.

    Everything is decided again under the session's lock (two workers, or a
    person, may have got there first; the agent may have come back). None
    when it is not (or no longer) safe, or the agent is past its hourly
    limit: then the session is flagged "repeated failures" for a person.
    """
    now = now or timezone.now()
    with transaction.atomic():
        # The policy row serialises its agents' automatic recoveries, so the hourly count cannot race.
        policy = AutoRecoveryPolicy.objects.select_for_update().get(pk=policy.pk)
        session = locked_session(session_id)
        quiet = (now - session.last_activity_at).total_seconds()
        if not policy.enabled or not session.turn_stack or quiet < policy.quiet_seconds:
            return None
        plan = recovery_plan(session)
        turns = recovery_strategies(plan, session=session)
        # A verdict may turn an unknown call into a safe one (section 8.2): that crash is not this path's, but a
        # person's, or services.settled_recovery's where the project chose so (with the context message).
        settled = any(c.settled and c.call.state == log_recovery.TOOL_OUTCOME_UNKNOWN and c.risky for t in turns for c in t.calls)
        if any(t.strategy != log_strategy.RESTART_TURN for t in turns) or settled:
            session.auto_checked_count = session.event_count
            session.save(update_fields=["auto_checked_count"])
            return None
        # An agent is its name within its project: another team's agent of the same name has its own count.
        recent = automatic_recoveries_in_the_hour(session, now)
        if recent >= policy.max_per_hour:
            hold(session, plan, turns, pattern=policy.agent_pattern, limit=policy.max_per_hour, now=now)
            return None
        return _apply_recovery(session, plan, user=None, digest=None, note="", policy=policy, now=now, turns=turns)


def automatic_recoveries_in_the_hour(session: Session, now: datetime) -> int:
    """The worker's recoveries of the session's agent in the hour before `now` (an agent is its name within its project)."""
    return RecoveryRecord.objects.filter(
        automatic=True, agent_name=session.agent_name, session__project_id=session.project_id, created_at__gt=now - timedelta(hours=1)
    ).count()


def hold(session: Session, plan, turns, *, pattern: str, limit: int, now: datetime) -> None:
    """The agent passed its hourly limit: the session is flagged "repeated failures" for a person (once)."""
    if session.repeated_failures_at is not None:
        return
    session.repeated_failures_at = now
    session.save(update_fields=["repeated_failures_at"])
    audit(
        project=session.project_id,
        actor=None,
        action=AuditEntry.AUTO_RECOVERY_HELD,
        target=session.id,
        detail={"agent_name": session.agent_name, "policy": pattern, "limit": limit},
        actor_name=WORKER,
    )
    transitions.record(session, HELD, at=now, plan=plan, turns=turns, detail={"policy": pattern, "limit": limit})
    publish_session_changed_on_commit(session.id)
    transaction.on_commit(instruments.RECOVERIES.labels(instruments.HELD).inc)


def _apply_recovery(
    session: Session,
    plan: log_recovery.Plan,
    *,
    user,
    digest: str | None,
    note: str,
    context: bool = False,
    abandon: bool = False,
    policy: AutoRecoveryPolicy | None = None,
    now: datetime | None = None,
    turns: list[log_strategy.TurnStrategy] | None = None,
    automatic: str | None = None,
) -> RepairResult:
    """`automatic`: the worker's name for a recovery it made under no auto-recovery policy (a settled crash)."""
    turns = recovery_strategies(plan, session=session) if turns is None else turns
    extra = []
    if context and plan.repairs:
        extra = [log_recovery.Repair("system_message", log_strategy.context_message(turns, abandoned=abandon), None)]
    recorded = {
        "strategies": [t.as_wire() for t in turns],
        "abandoned": abandon,
        "automatic": policy is not None or automatic is not None,
        "policy": policy,
        "worker": automatic or (f"automatic ({policy.agent_pattern})" if policy is not None else None),
        "turns_closed": len(plan.open_turns),
        "quiet_seconds": ((now or timezone.now()) - session.last_activity_at).total_seconds(),
    }
    result = _apply_repairs(session, plan.repairs, plan, RecoveryRecord.RECOVERY, user, digest, note, extra=extra, recorded=recorded)
    if result.record is not None:
        # The calls it answered as tool_outcome_unknown get their reconciler's check (where a policy names one).
        reconcilers.schedule_answered(session, [r.call for r in plan.repairs if r.call is not None], now=now)
        count_for_agent(session, at=result.record.created_at, crashed_turns=len(plan.open_turns))
        record = result.record
        detail = {"recovered_by": record.username, "automatic": record.automatic, "abandoned": record.abandoned, "record_id": record.pk}
        # The plan as it was before the recovery appended: what was owed, and what was recommended.
        transitions.record(session, RECOVERED, at=record.created_at, plan=plan, turns=turns, detail=detail)
        transaction.on_commit(instruments.RECOVERIES.labels(instruments.AUTOMATIC if record.automatic else instruments.MANUAL).inc)
    return result


def patch_dangling_calls(*, session_id: str, user, digest: str | None = None, note: str = "") -> RepairResult:
    """The turn-blind patch (session-log.md section 4), only once no turn is open."""
    log_values.check(note, prefix="note")
    with transaction.atomic():
        session = locked_session(session_id)
        if session.turn_stack:
            raise RecoveryFirst(session.open_turns)
        repairs = dangling_patch(session)
        return _apply_repairs(session, repairs, None, RecoveryRecord.DANGLING_PATCH, user, digest, note)


def _apply_repairs(session, repairs, plan, kind, user, digest, note, *, extra=(), recorded=None) -> RepairResult:
    """Append the repairs (then `extra`, outside the digest) if the digest still matches; record who did it.

    `user` None is the automatic worker (recorded under its policy).
    """
    current = log_recovery.repairs_digest(session.event_count, repairs)
    if digest is not None and digest != current:
        raise StalePlan(plan or log_recovery.Plan([], list(repairs), []), session)
    if not repairs:
        return RepairResult(appended=[], next_seq=session.event_count, record=None)
    rows = store_events(session, [log_events.NewEvent(r.type, r.data, None) for r in [*repairs, *extra]], received_at=timezone.now())
    recorded = dict(recorded or {})
    worker = recorded.pop("worker", None)  # the worker's name on the record, when it recovered
    if kind == RecoveryRecord.RECOVERY:
        session.recovered_at = timezone.now()
        session.save(update_fields=["recovered_at"])
    policy = recorded.get("policy")
    record = RecoveryRecord.objects.create(
        session=session,
        kind=kind,
        user=user,
        username=user.get_username() if user is not None else worker or "cli",
        note=note,
        digest=current,
        first_seq=rows[0].seq,
        last_seq=rows[-1].seq,
        agent_name=session.agent_name,
        context_seq=rows[-1].seq if extra else None,
        **recorded,
    )
    if kind == RecoveryRecord.DANGLING_PATCH:  # its results are stand-ins, known only from this record
        ledger.track_patch(session, seqs=range(record.first_seq, record.last_seq + 1))
    detail = {"first_seq": record.first_seq, "last_seq": record.last_seq, "digest": current, "note": note}
    if kind == RecoveryRecord.RECOVERY:
        detail |= {
            "strategies": record.strategy_names,
            "abandoned": record.abandoned,
            "automatic": record.automatic,
            "context": record.context_seq is not None,  # a recovery note for the agent was appended
        }
        if policy is not None:
            detail["policy"] = policy.agent_pattern
        if worker is not None and note:
            detail["why"] = note  # what the worker decided on (a settled crash: which reconciler found what)
    audit(
        project=session.project_id,
        actor=user,
        action=AuditEntry.RECOVERY if kind == RecoveryRecord.RECOVERY else AuditEntry.DANGLING_PATCH,
        target=session.id,
        detail=detail,
        actor_name=WORKER if worker is not None else "cli",
    )
    return RepairResult(appended=rows, next_seq=session.event_count, record=record)
