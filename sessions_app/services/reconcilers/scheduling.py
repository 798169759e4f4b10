"""Which calls a reconciler is asked about, and when: a CallCheck per call whose state is tool_outcome_unknown
(its session stalled with the call owed, or a recovery answered it so) and whose tool's policy names a check_url,
unless a verdict settled it already; and "Check now", which asks again at once."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from sessions_app.lib.errors import CallNotFound, NoReconciler
from sessions_app.log import policies as log_policies
from sessions_app.log import recovery as log_recovery
from sessions_app.models import CallCheck, LedgerCall, Project, Session, ToolPolicy
from sessions_app.selectors import access
from sessions_app.selectors.fleet_calls import state_expression
from sessions_app.selectors.ledger import inherited_rows
from sessions_app.selectors.policies import policies_by_project, project_policies

from ..publishing import publish_session_changed_on_commit

SCHEDULE_LIMIT = 500  # new checks per project and round, oldest calls first; the rest next round
prep_call_id = LedgerCall._meta.get_field("call_id").get_prep_value


def check_policy(tool: str | None, policies: list[log_policies.Policy]) -> log_policies.Policy | None:
    """The policy that decides for the tool, when it names a check endpoint; None otherwise."""
    policy = log_policies.matching(tool, policies)
    return policy if policy is not None and policy.check_url else None


def any_reconciler() -> bool:
    """Whether any tool policy names a check endpoint (with none, there is nothing to schedule or ask)."""
    return ToolPolicy.objects.exclude(check_url="").exists()


def schedule_checks(*, now: datetime | None = None, limit: int = SCHEDULE_LIMIT, known: bool = False) -> list[tuple[str, str]]:
    """The worker's part: a pending check, due now, for each call that reads tool_outcome_unknown now, has no
    current verdict and no check yet, and whose tool's policy names a check_url. The (session, call) of each.
    `known`: the caller found any_reconciler() true already."""
    now = now or timezone.now()
    with_url = ToolPolicy.objects.exclude(check_url="")
    if not known and not any_reconciler():
        return []
    if with_url.filter(project__isnull=True).exists():
        project_ids = list(Project.objects.values_list("pk", flat=True))
    else:
        project_ids = list(with_url.values_list("project_id", flat=True).distinct())
    made: list[tuple[str, str]] = []
    for project_id, policies in sorted(policies_by_project(project_ids).items()):
        if not any(p.check_url for p in policies):
            continue
        # The tool names this project's calls use that a policy with a check endpoint decides (index project, tool).
        names = LedgerCall.objects.filter(project_id=project_id, tool__isnull=False).values_list("tool", flat=True).distinct()
        checked = {name: policy for name in names.order_by() if (policy := check_policy(name, policies)) is not None}
        if not checked:
            continue
        has_check = CallCheck.objects.filter(session_id=OuterRef("session_id"), call_id=OuterRef("call_id"))
        rows = (
            LedgerCall.objects.filter(project_id=project_id, tool__in=list(checked), verdict__isnull=True)
            .annotate(state=state_expression(now))
            .filter(state=log_recovery.TOOL_OUTCOME_UNKNOWN)
            .exclude(Exists(has_check))
            .order_by("sighted_at", "id")
            .values_list("session_id", "call_id", "tool")[:limit]
        )
        new = [
            CallCheck(session_id=sid, project_id=project_id, call_id=cid, policy_id=checked[tool].id, next_at=now, created_at=now)
            for sid, cid, tool in rows
        ]
        CallCheck.objects.bulk_create(new, ignore_conflicts=True)  # a second worker's row stands
        made += [(c.session_id, c.call_id) for c in new]
    return made


def schedule_answered(session: Session, calls: Iterable[log_recovery.OwedCall], *, now: datetime | None = None) -> None:
    """A recovery's part, in its transaction: a check for each call it answered as tool_outcome_unknown (when its
    tool's policy names a check endpoint), so the worker asks at its next round."""
    unknown = [c for c in calls if c.risk == log_recovery.TOOL_OUTCOME_UNKNOWN and isinstance(c.name, str)]
    if not unknown:
        return
    policies = project_policies(session.project_id)
    now = now or timezone.now()
    new = [
        CallCheck(session_id=session.pk, project_id=session.project_id, call_id=prep_call_id(c.id), policy_id=policy.id, next_at=now, created_at=now)
        for c in unknown
        if (policy := check_policy(c.name, policies)) is not None
    ]
    if new:
        CallCheck.objects.bulk_create(new, ignore_conflicts=True)


def queue_check(*, actor: access.Actor, session_id: str, call_id: object) -> CallCheck:
    """"Check now": the call's reconciler asked at the worker's next pass (RECOVER on the session). A check that
    gave up or settled is made pending again (its attempts are kept, and it gets a full set more); NoReconciler
    when the call's tool has no policy with a check_url, CallNotFound for no such call."""
    session = access.session_for(actor, session_id, access.RECOVER, related=False)
    if not isinstance(call_id, str) or not call_id or "\x00" in call_id:  # no call id holds NUL
        raise CallNotFound(session_id, str(call_id))
    key = prep_call_id(call_id)
    tools = list(LedgerCall.objects.filter(session=session, call_id=key).values_list("tool", flat=True)[:1])
    inherited = None
    if not tools and session.seed_length and (inherited := inherited_rows(session, {key}).get(key)) is not None:
        tools = [inherited.tool]
    if not tools:
        raise CallNotFound(session_id, call_id)
    policy = check_policy(tools[0], project_policies(session.project_id))
    if policy is None:
        raise NoReconciler(session_id, call_id, tools[0])
    now = timezone.now()
    with transaction.atomic():
        if inherited is not None and not LedgerCall.objects.filter(session=session, call_id=key).exists():
            # A fork's call from before the fork gets its own row, as a verdict on it does: only once the check is
            # queued (a refused one stores nothing, and a row of its own would list the call under the fork too).
            inherited.save()
        check, created = CallCheck.objects.select_for_update().get_or_create(
            session=session, call_id=key, defaults={"project_id": session.project_id, "policy_id": policy.id, "next_at": now, "created_at": now}
        )
        if not created:
            # A claimed check is being asked right now: it keeps its claim, and is asked again once it is back.
            # created_at becomes when it was last queued: a verdict older than that does not stop the asking.
            check.state, check.next_at, check.created_at, check.policy_id, check.attempts = CallCheck.PENDING, now, now, policy.id, 0
            check.save(update_fields=["state", "next_at", "created_at", "policy", "attempts"])
        publish_session_changed_on_commit(session.pk)
    return check
