"""Agents pages: failure history per agent name, over the projects the user can read.

The counts come from the summaries kept at append and recovery time
(selectors.agent_summaries), never from the logs. An agent name is free
text (up to 200 characters, '/', spaces, markup...), so an agent's page
takes it as a query parameter, `/agents/agent?name=...`, which round-trips
any name, the empty one included.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.pages import refusals
from sessions_app import selectors
from sessions_app.selectors import access


def readable_projects(request):
    """The user's readable projects, and the one `?project=` picks among them (None: all)."""
    projects = list(access.projects(access.actor_of(request)))
    project = next((p for p in projects if p.slug == request.GET.get("project")), None)
    return projects, project, [project.pk] if project else [p.pk for p in projects]


@login_required
@require_GET
def agent_list(request):
    projects, project, ids = readable_projects(request)
    context = {"agents": selectors.agent_summaries(ids), "usage": selectors.agent_usage(ids), "projects": projects, "project": project}
    return render(request, "agents/list.html", context)


@login_required
@require_GET
def agent_detail(request):
    name = request.GET.get("name")
    projects, project, ids = readable_projects(request)
    # An agent none of the user's projects has is as absent as one that never existed.
    if name is None or "\x00" in name or not selectors.agent_exists(ids, name):
        raise Http404("No such agent in your projects")
    try:
        crashes = selectors.agent_crashes(ids, name, before=request.GET.get("before") or None)
    except selectors.InvalidCursor as exc:
        return refusals.bad_request(request, parameter="before", detail=str(exc))
    summaries = selectors.agent_summaries(ids, agent_name=name)
    context = {
        "name": name,
        "summary": summaries[0] if summaries else None,
        "stalled": selectors.agent_stalled_sessions(ids, name),
        "usage": selectors.agent_usage(ids, agent_name=name),
        "crashes": crashes,
        "projects": projects,
        "project": project,
        "before": request.GET.get("before") or "",
    }
    return render(request, "agents/detail.html", context)
