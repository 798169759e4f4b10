"""A project's own settings on its page (its admins): whether the worker recovers settled crashes on its own."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from dashboard.pages.projects import project_admin_page
from sessions_app.services import project_settings as settings_service


@project_admin_page
@require_POST
def project_settings(request, project):
    """The project page's settings form: a checkbox sends "on" when ticked and nothing when not."""
    enabled = request.POST.get("auto_recover_settled") == "on"
    before = project.auto_recover_settled
    settings_service.set_auto_recover_settled(project=project, enabled=enabled, actor=request.user)
    if before != enabled:
        messages.success(
            request,
            "Crashes whose every unknown call a reconciler settled are now recovered automatically."
            if enabled
            else "Settled crashes now wait for a person to recover them.",
        )
    return redirect("project_members", project.slug)
