"""A project's tools: every tool name its sessions' calls used, how many calls and how many with an unknown
outcome, and the policy that classes each now (api.md, GET /api/v1/projects/{slug}/tools; the Tools page)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from django.db.models import Case, Count, IntegerField, Sum, Value, When
from django.db.models.lookups import Exact
from django.utils import timezone

from sessions_app.log import policies as log_policies
from sessions_app.log.recovery import TOOL_OUTCOME_UNKNOWN
from sessions_app.models import LedgerCall, Project
from sessions_app.selectors.fleet_calls import state_expression
from sessions_app.selectors.policies import project_policies


@dataclass(frozen=True)
class ToolRow:
    name: str
    calls: int
    unknown_calls: int  # whose state is tool_outcome_unknown now (verdicts do not change a state)
    side_effect: str  # the class: the policy's, or "unknown" with none
    policy: log_policies.Policy | None

    @property
    def no_policy(self) -> bool:
        return self.policy is None


@dataclass(frozen=True)
class ProjectTools:
    tools: list[ToolRow]  # by name
    policies: list[log_policies.Policy]  # those that apply in the project (its own and the site's), by pattern


def project_tools(project: Project, *, now: datetime | None = None) -> ProjectTools:
    """One grouped read of the project's call ledger (calls that name no tool are left out), classed by the policies now."""
    now = now or timezone.now()
    unknown = Case(When(Exact(state_expression(now), Value(TOOL_OUTCOME_UNKNOWN)), then=1), default=0, output_field=IntegerField())
    counts = (
        LedgerCall.objects.filter(project_id=project.pk, tool__isnull=False)
        .order_by()
        .values("tool")
        .annotate(calls=Count("pk"), unknown_calls=Sum(unknown))
        .values_list("tool", "calls", "unknown_calls")
    )
    policies = project_policies(project.pk)
    tools = []
    for name, calls, unknown_calls in sorted(counts):
        policy = log_policies.matching(name, policies)
        side_effect = policy.side_effect if policy is not None else log_policies.UNKNOWN_CLASS
        tools.append(ToolRow(name=name, calls=calls, unknown_calls=unknown_calls or 0, side_effect=side_effect, policy=policy))
    return ProjectTools(tools=tools, policies=sorted(policies, key=lambda p: (p.pattern, p.scope != log_policies.PROJECT)))


def project_policy(project: Project, pattern: str) -> log_policies.Policy | None:
    """The project's own policy with this pattern, if any."""
    return next((p for p in project_policies(project.pk) if p.pattern == pattern and p.scope == log_policies.PROJECT), None)


def reconciler_host(url: str) -> str:
    """The host a reconciler's address names, as the Tools page shows it."""
    return (urlsplit(url).hostname or "") if url else ""
