"""A project's webhooks (its admins' Webhooks tab): the endpoints, a form to add one, and each endpoint's page with
its settings and its delivery history, every attempt with its time, status, latency and error.

Writes go through sessions_app.services.notify (checked, audited); a refused URL (a private address, a name that does not
resolve) is a form error, 422, and nothing is stored.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from dashboard.pages.projects import project_admin_page
from sessions_app import selectors
from sessions_app.models import KINDS
from sessions_app.services import notify


class EndpointForm(forms.Form):
    url = forms.URLField(max_length=2000, label="URL", assume_scheme="https", help_text="where Turnlog POSTs the alerts")
    agent_patterns = forms.CharField(
        max_length=500, initial="*", label="Agents", help_text="names or shell-style patterns separated by spaces; * for every agent"
    )
    kinds = forms.MultipleChoiceField(choices=KINDS, initial=[k for k, _ in KINDS], widget=forms.CheckboxSelectMultiple, label="Tell it when a session")
    enabled = forms.BooleanField(required=False, initial=True)
    slack = forms.BooleanField(required=False, label="Slack-compatible payload ({\"text\": ...})")

    def save(self, write):
        """Call `write` (a notify service) with the form's values; a refusal becomes the field's error. The endpoint, or None."""
        try:
            return write(**self.cleaned_data)
        except notify.EndpointRefused as refused:
            self.add_error(refused.field, refused.why)
            return None


@project_admin_page
@require_http_methods(["GET", "POST"])
def project_webhooks(request, project):
    """The project's endpoints; POST adds one (its signing secret is shown on its page)."""
    form = EndpointForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        endpoint = form.save(lambda **values: notify.create_endpoint(project=project, actor=request.user, **values))
        if endpoint is not None:
            messages.success(request, f"Added the webhook {endpoint.url}. Verify its deliveries with the signing secret below.")
            return redirect("project_webhook", project.slug, endpoint.pk)
    status = 422 if form.is_bound else 200
    context = {"project": project, "tab": "webhooks", "form": form, "endpoints": selectors.project_webhooks(project)}
    return render(request, "projects/webhooks.html", context, status=status)


@project_admin_page
@require_http_methods(["GET", "POST"])
def project_webhook(request, project, endpoint_id: int):
    """One endpoint: its settings (POST changes them, rotates its secret or deletes it) and its delivery history."""
    endpoint = selectors.project_webhook(project, endpoint_id)
    if endpoint is None:
        raise Http404(f"webhook {endpoint_id} is not one of project {project.slug}'s")
    initial = {"url": endpoint.url, "agent_patterns": endpoint.agent_patterns, "kinds": endpoint.kinds, "enabled": endpoint.enabled, "slack": endpoint.slack}
    action = request.POST.get("action", "save")
    form = EndpointForm(request.POST if request.method == "POST" and action == "save" else None, initial=initial)
    if request.method == "POST":
        if action == "delete":
            notify.delete_endpoint(endpoint=endpoint, actor=request.user)
            messages.success(request, f"Deleted the webhook {endpoint.url} and its delivery history.")
            return redirect("project_webhooks", project.slug)
        if action == "rotate":
            notify.update_endpoint(endpoint=endpoint, actor=request.user, rotate_secret=True)
            messages.success(request, "A new signing secret: receivers verify with it from now on.")
            return redirect("project_webhook", project.slug, endpoint.pk)
        if action != "save":
            return render(request, "projects/webhook.html", _context(project, endpoint, form, f"unknown action {action!r}"), status=400)
        if form.is_valid() and form.save(lambda **values: notify.update_endpoint(endpoint=endpoint, actor=request.user, **values)):
            messages.success(request, "Saved.")
            return redirect("project_webhook", project.slug, endpoint.pk)
        return render(request, "projects/webhook.html", _context(project, endpoint, form), status=422)
    return render(request, "projects/webhook.html", _context(project, endpoint, form))


def _context(project, endpoint, form, refusal: str = "") -> dict:
    return {
        "project": project, "tab": "webhooks", "endpoint": endpoint, "form": form, "refusal": refusal,
        "deliveries": selectors.delivery_history(endpoint),
    }  # fmt: skip
