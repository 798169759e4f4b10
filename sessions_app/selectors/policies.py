"""Tool policies as they apply in a project now (sessions_app.log.policies decides among them)."""

from __future__ import annotations

from django.db.models import Q

from sessions_app.lib import statements
from sessions_app.log import policies as log_policies
from sessions_app.models import ToolPolicy


def _policy(row: ToolPolicy) -> log_policies.Policy:
    return log_policies.Policy(
        pattern=row.pattern,
        side_effect=row.side_effect,
        receipt_pointer=row.receipt_pointer,
        check_url=row.check_url,
        scope=row.scope,
        id=row.pk,
        note=row.note,
    )


COLUMNS = ("pattern", "side_effect", "receipt_pointer", "check_url", "project_id", "id", "note")


def project_policies(project_id: int | None) -> list[log_policies.Policy]:
    """The policies that apply in the project: its own, and the site's whose pattern it does not redefine."""
    if project_id is None:
        rows = ToolPolicy.objects.filter(project__isnull=True).order_by("pattern", "id").values_list(*COLUMNS)
    else:
        # Compiled once: every append with a result reads them (building the query cost 0.3 ms on SQLite).
        rows = statements.rows("project-policies", _applying, [project_id])
    return log_policies.effective(
        log_policies.Policy(pattern, side_effect, pointer, check_url, log_policies.SITE if project is None else log_policies.PROJECT, pk, note)
        for pattern, side_effect, pointer, check_url, project, pk, note in rows
    )


def _applying(project_id: int):
    return ToolPolicy.objects.filter(Q(project__isnull=True) | Q(project_id=project_id)).order_by("pattern", "id").values_list(*COLUMNS)


def policies_by_project(project_ids) -> dict[int, list[log_policies.Policy]]:
    """project_policies of each project, in one query."""
    ids = set(project_ids)
    rows = list(ToolPolicy.objects.filter(Q(project__isnull=True) | Q(project_id__in=ids)).order_by("pattern", "id"))
    site = [_policy(r) for r in rows if r.project_id is None]
    return {pid: log_policies.effective([*site, *(_policy(r) for r in rows if r.project_id == pid)]) for pid in ids}


def tool_class(tool_name: str | None, policies: list[log_policies.Policy]) -> str:
    return log_policies.side_effect_class(tool_name, policies)
