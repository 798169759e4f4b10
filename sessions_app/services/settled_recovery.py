"""Recovering a settled crash with no person: a stalled session whose every owed call with an unknown outcome
(risk tool_outcome_unknown, of class external_effect or unknown) a reconciler has settled, in a project that
turned auto_recover_settled on (docs/guide/reconcilers.md).

The worker recovers it after the stall window, with the recovery-context message, so the agent is told what
the reconciler found. An auto-recovery policy matching the agent still rules: a disabled one keeps its
sessions for a person, an enabled one sets the quiet time and the hourly limit. With no policy matching, the
stall window and DEFAULT_PER_HOUR (the policies' own default) apply. The record and the audit entry say why.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from sessions_app.log import events as log_events
from sessions_app.log import recovery as log_recovery
from sessions_app.log import strategy as log_strategy
from sessions_app.log.calls import name_text
from sessions_app.models import AutoRecoveryPolicy, CallCheck, LedgerCall, Project, Session
from sessions_app.models.verdicts import RECONCILER
from sessions_app.selectors import recovery_plan, recovery_strategies
from sessions_app.selectors.policies import project_policies
from sessions_app.selectors.sessions import stalled_before
from sessions_app.selectors.verdicts import current_verdicts

from .event_rows import locked_session
from .recovery import RepairResult, _apply_recovery, automatic_recoveries_in_the_hour, hold

DEFAULT_PER_HOUR = AutoRecoveryPolicy._meta.get_field("max_per_hour").default
WORKER_NAME = "automatic (settled by reconciler)"
HELD_AS = "settled crash"  # the "policy" a hold names when no auto-recovery policy matched
prep_call_id = LedgerCall._meta.get_field("call_id").get_prep_value


def candidates(*, now: datetime, limit: int) -> list[tuple[str, str, datetime]]:
    """(id, agent name, last activity) of the stalled sessions of projects that recover settled crashes, with
    an owed unknown call that has a verdict and no check still waiting: indexed reads, no log read."""
    settled = LedgerCall.objects.filter(
        session_id=OuterRef("pk"), settled_state__isnull=True, turn_seq__isnull=False,
        owed_risk=log_recovery.TOOL_OUTCOME_UNKNOWN, verdict__isnull=False,
    )  # fmt: skip
    waiting = CallCheck.objects.filter(session_id=OuterRef("pk"), state=CallCheck.PENDING)
    rows = (
        Session.objects.filter(
            interrupted=True, repeated_failures_at__isnull=True, project__auto_recover_settled=True, last_activity_at__lte=stalled_before(now)
        )
        .filter(Exists(settled))
        .exclude(Exists(waiting))
        .order_by("last_activity_at", "id")
        .values_list("id", "agent_name", "last_activity_at")[:limit]
    )
    return list(rows)


def settled_why(session: Session, plan: log_recovery.Plan) -> str | None:
    """What settled the crash, in words for the record ("charge_card (c3) settled by reconciler:charge_*:
    happened, ch_3Px"); None unless it has an owed unknown external call and a reconciler settled every one."""
    policies = project_policies(session.project_id)
    unknown = [
        r.call for r in plan.repairs
        if r.call is not None and r.call.risk == log_recovery.TOOL_OUTCOME_UNKNOWN
        and log_recovery.side_effect_class(log_events.tool_name(r.call.name), policies) in log_strategy.RISKY_CLASSES
    ]  # fmt: skip
    if not unknown:
        return None  # nothing was unknown: not this path's to decide (an auto-recovery policy's)
    current = current_verdicts(session)
    said = []
    for call in unknown:
        verdict = current.get(prep_call_id(call.id))
        if verdict is None or verdict.source != RECONCILER:
            return None
        ref = f", {verdict.external_ref}" if verdict.external_ref else ""
        said.append(f"{name_text(call.name) or '(no name)'} ({call.id}) settled by {verdict.by}: {verdict.outcome}{ref}")
    return "; ".join(said)


def recover_settled(*, session_id: str, policy: AutoRecoveryPolicy | None, now: datetime | None = None) -> RepairResult | None:
    """The worker's recovery of a settled crash, everything decided again under the locks; None when it is not
    (or no longer) one, or the agent passed its hourly limit (then the session is held for a person)."""
    now = now or timezone.now()
    with transaction.atomic():
        if policy is not None:
            policy = AutoRecoveryPolicy.objects.select_for_update().get(pk=policy.pk)
            if not policy.enabled:
                return None
        session = locked_session(session_id)
        # The project row serialises its settled recoveries, so the hourly count cannot race without a policy row.
        if not Project.objects.select_for_update().filter(pk=session.project_id, auto_recover_settled=True).exists():
            return None
        quiet = (now - session.last_activity_at).total_seconds()
        if not session.turn_stack or quiet < (policy.quiet_seconds if policy is not None else settings.TURNLOG_STALL_SECONDS):
            return None
        plan = recovery_plan(session)
        why = settled_why(session, plan)
        if why is None:
            return None
        turns = recovery_strategies(plan, session=session)
        limit = policy.max_per_hour if policy is not None else DEFAULT_PER_HOUR
        if automatic_recoveries_in_the_hour(session, now) >= limit:
            hold(session, plan, turns, pattern=policy.agent_pattern if policy is not None else HELD_AS, limit=limit, now=now)
            return None
        return _apply_recovery(
            session, plan, user=None, digest=None, note=why, context=True, policy=policy, now=now, turns=turns,
            automatic=None if policy is not None else WORKER_NAME,
        )  # fmt: skip
