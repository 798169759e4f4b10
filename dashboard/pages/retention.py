"""Retention's pages: a project's retention setting with the sessions kept past it (its admins' Retention tab),
and a session's delete action (a confirmation, then sessions_app.services.retention.delete_session).

Both are for the project's admins: a member below admin gets a 403 page saying so.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from dashboard.pages.projects import project_admin_page
from dashboard.pages.sessions import session_or_404
from sessions_app import selectors
from sessions_app.lib import errors
from sessions_app.selectors import access
from sessions_app.services import retention


class RetentionForm(forms.Form):
    retention_days = forms.IntegerField(
        required=False, min_value=1, max_value=retention.RETENTION_DAYS_MAX, label="Keep sessions for (days)",
        help_text="after they were last written to, annotated, recovered or imported; leave empty to keep them forever",
    )  # fmt: skip


@project_admin_page
@require_http_methods(["GET", "POST"])
def project_retention(request, project):
    """How long the project keeps its sessions; POST changes it. Lists the sessions past it that are kept, and why."""
    form = RetentionForm(request.POST if request.method == "POST" else None, initial={"retention_days": project.retention_days})
    if request.method == "POST":
        if form.is_valid():
            days = form.cleaned_data["retention_days"]
            retention.set_retention(project=project, days=days, actor=request.user)
            kept = f"Sessions are kept {days} days after they were last written to, annotated, recovered or imported."
            messages.success(request, kept if days else "Sessions are kept forever.")
            return redirect("project_retention", project.slug)
        return retention_page(request, project, form, status=422)
    return retention_page(request, project, form)


def retention_page(request, project, form, *, status: int = 200):
    context = {"project": project, "tab": "retention", "form": form, "held": retention.held_sessions(projects=[project.pk])}
    return render(request, "projects/retention.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def delete_session(request, session_id: str):
    """GET: what deleting the session removes, and a confirmation; POST: delete it, then the project's sessions."""
    session = session_or_404(request, session_id, access.ADMIN)
    context = {"session": session, "forks": selectors.forks_of(session)}
    if request.method != "POST":
        return render(request, "sessions/delete.html", context, status=409 if context["forks"] else 200)
    try:
        gone = retention.delete_session(session_id=session.id, actor=request.user)
    except errors.SessionHasForks:
        return render(request, "sessions/delete.html", {**context, "forks": selectors.forks_of(session)}, status=409)
    except errors.SessionNotFound:  # deleted meanwhile: what the person wanted
        gone = None
    events = f" and its {gone.events} event{'s' if gone.events != 1 else ''}" if gone else ""
    messages.success(request, f"Deleted session {session.id}{events}.")
    return redirect(reverse("session_list") + f"?project={session.project.slug}")
