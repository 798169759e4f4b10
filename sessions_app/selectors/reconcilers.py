"""Reconcilers' work as people see it: each call's check and its attempts (the call's card), and the attempts
made under one tool policy (the policy's page)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Exists, OuterRef

from sessions_app.log import events as log_events
from sessions_app.log import policies as log_policies
from sessions_app.models import CallCheck, CheckAttempt, LedgerCall, Session, ToolPolicy
from sessions_app.selectors.policies import project_policies

POLICY_ATTEMPTS = 100  # the newest shown on a policy's page
prep_call_id = LedgerCall._meta.get_field("call_id").get_prep_value


@dataclass(frozen=True)
class CallChecks:
    """One call's reconciler: the policy that names its endpoint now (None: none does), its check, its attempts."""

    policy: log_policies.Policy | None
    state: str | None = None  # pending | settled | gave_up; None when never queued
    next_at: datetime | None = None
    attempts: list[CheckAttempt] = field(default_factory=list)

    @property
    def can_check(self) -> bool:
        return self.policy is not None


@dataclass(frozen=True)
class SessionChecks:
    """The checks and attempts of some calls of a session, read at once (a page of cards)."""

    policies: list[log_policies.Policy]
    checks: dict[str, CallCheck]  # by the column's form of the call id
    attempts: dict[str, list[CheckAttempt]]

    def for_call(self, call_id: str | None, tool_name: object) -> CallChecks | None:
        """The call's reconciler, or None when it has none: no endpoint, no check and no attempt."""
        if call_id is None:
            return None
        key = prep_call_id(call_id)
        policy = log_policies.matching(log_events.tool_name(tool_name), self.policies)
        policy = policy if policy is not None and policy.check_url else None
        check, attempts = self.checks.get(key), self.attempts.get(key, [])
        if policy is None and check is None and not attempts:
            return None
        return CallChecks(policy, check.state if check else None, check.next_at if check else None, attempts)


def session_checks(session: Session, call_ids: Iterable[str]) -> SessionChecks:
    """Three reads whatever the number of calls: the policies, the checks and the attempts of `call_ids`."""
    keys = {prep_call_id(cid) for cid in call_ids}
    policies = project_policies(session.project_id)
    if not keys:
        return SessionChecks(policies, {}, {})
    checks = {c.call_id: c for c in CallCheck.objects.filter(session=session, call_id__in=keys)}
    attempts: dict[str, list[CheckAttempt]] = {}
    for attempt in CheckAttempt.objects.filter(session=session, call_id__in=keys).order_by("at", "id"):
        attempts.setdefault(attempt.call_id, []).append(attempt)
    return SessionChecks(policies, checks, attempts)


def call_checks(session: Session, call_id: str, tool_name: object) -> CallChecks | None:
    return session_checks(session, [call_id]).for_call(call_id, tool_name)


def policy_attempts(policy: ToolPolicy, *, limit: int = POLICY_ATTEMPTS) -> list[CheckAttempt]:
    """The newest attempts of the checks this policy's endpoint was asked for, newest first (with their session)."""
    under = CallCheck.objects.filter(session_id=OuterRef("session_id"), call_id=OuterRef("call_id"), policy=policy)
    rows = CheckAttempt.objects.filter(pattern=policy.pattern).filter(Exists(under)).select_related("session")
    return list(rows.order_by("-at", "-id")[:limit])


def project_attempts(project_id: int, *, limit: int = POLICY_ATTEMPTS) -> list[CheckAttempt]:
    """The newest reconciler attempts for the calls of one project's sessions, newest first (the Tools page)."""
    rows = CheckAttempt.objects.filter(session__project_id=project_id).select_related("session")
    return list(rows.order_by("-at", "-id")[:limit])
