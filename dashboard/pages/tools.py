"""A project's Tools page: every tool its calls used, with its class, receipt pointer, reconciler and counts,
and the policies that apply there. Every member reads it; its admins add, change and delete the project's
own policies (sessions_app.services.tool_policies), and see a reconciler's secret once, after saving it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods

from dashboard.pages.blocks import SIDE_EFFECT_LABELS, card_anchor
from dashboard.pages.projects import members_read_admins_change
from sessions_app.lib.errors import InvalidPolicy, PolicyNotFound
from sessions_app.log import policies as log_policies
from sessions_app.log.ledger import STATES
from sessions_app.log.recovery import TOOL_OUTCOME_UNKNOWN
from sessions_app.models import ToolPolicy
from sessions_app.selectors import project_attempts
from sessions_app.selectors import tools as tool_selectors
from sessions_app.services import tool_policies

NO_POLICY = "no policy: treated as unknown, checked like an external effect"


class PolicyForm(forms.Form):
    pattern = forms.CharField(max_length=tool_policies.PATTERN_MAX, help_text="a tool's name, or a pattern such as send_* or *")
    side_effect = forms.ChoiceField(choices=ToolPolicy.CLASSES, label="Class")
    note = forms.CharField(required=False, max_length=tool_policies.NOTE_MAX)
    receipt_pointer = forms.CharField(
        required=False, max_length=tool_policies.POINTER_MAX, help_text="an RFC 6901 pointer into a result's content, such as /id"
    )
    check_url = forms.CharField(
        required=False, max_length=tool_policies.CHECK_URL_MAX, label="Reconciler URL",
        help_text="asked, signed, whether a call whose outcome is unknown took effect; empty: none",
    )  # fmt: skip


@dataclass(frozen=True)
class ToolLine:
    tool: tool_selectors.ToolRow
    calls_url: str
    unknown_url: str

    @property
    def label(self) -> str:
        return SIDE_EFFECT_LABELS[self.tool.side_effect]

    @property
    def reconciler(self) -> str:
        return tool_selectors.reconciler_host(self.tool.policy.check_url) if self.tool.policy else ""


@login_required
@require_http_methods(["GET", "POST"])
def project_tools(request, slug: str):
    """GET: the page (?edit=PATTERN fills the form with that policy); POST (admins): save or delete a policy."""
    found = members_read_admins_change(request, slug)
    if not isinstance(found, tuple):
        return found
    actor, project, is_admin = found
    if request.method != "POST":
        return tools_page(request, project, is_admin, PolicyForm(initial=_editing(project, request.GET.get("edit"))))
    if request.POST.get("action") == "delete":
        pattern = request.POST.get("pattern", "")
        try:
            tool_policies.delete_policy(actor=actor, project_slug=project.slug, pattern=pattern)
            messages.success(request, f"Deleted the policy for {pattern}.")
        except PolicyNotFound:
            messages.info(request, f"There was no policy for {pattern} in this project.")
        return redirect("project_tools", project.slug)
    form = PolicyForm(request.POST)
    if not form.is_valid():
        return tools_page(request, project, is_admin, form, status=422)
    values = form.cleaned_data
    try:
        policy, secret = tool_policies.save_policy(actor=actor, project_slug=project.slug, **values)
    except InvalidPolicy as refused:
        form.add_error(refused.field if refused.field in form.fields else None, refused.detail)
        return tools_page(request, project, is_admin, form, status=422)
    if secret is None:
        messages.success(request, f"Saved the policy for {policy.pattern}.")
        return redirect("project_tools", project.slug)
    response = tools_page(request, project, is_admin, PolicyForm(), saved=policy, secret=secret)
    add_never_cache_headers(response)  # the only copy of the secret: no cache keeps it
    return response


def _editing(project, pattern: str | None) -> dict:
    policy = tool_selectors.project_policy(project, pattern) if pattern else None
    if policy is None:
        return {"side_effect": ToolPolicy.EXTERNAL_EFFECT}
    fields = ("pattern", "side_effect", "note", "receipt_pointer", "check_url")
    return {name: getattr(policy, name) for name in fields}


def tools_page(request, project, is_admin: bool, form, *, status: int = 200, saved=None, secret: str | None = None):
    found = tool_selectors.project_tools(project)
    calls = reverse("fleet_calls")

    def url(tool: str, states) -> str:
        return calls + "?" + urlencode({"project": project.slug, "tool": tool, "state": list(states)}, doseq=True)

    lines = [ToolLine(t, url(t.name, STATES), url(t.name, [TOOL_OUTCOME_UNKNOWN])) for t in found.tools]
    policies = [(p, tool_selectors.reconciler_host(p.check_url)) for p in found.policies]
    attempts = [(a, reverse("session_detail", args=[a.session_id]) + "#" + card_anchor(a.call_id)) for a in project_attempts(project.pk)]
    context = {
        "project": project, "tab": "tools", "is_admin": is_admin, "lines": lines, "policies": policies, "form": form,
        "saved": saved, "secret": secret, "no_policy": NO_POLICY, "project_scope": log_policies.PROJECT,
        "unflagged": sum(1 for t in found.tools if t.no_policy), "attempts": attempts,
    }  # fmt: skip
    return render(request, "projects/tools.html", context, status=status)
