from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from sessions_app import selectors


@login_required
def session_list(request):
    page = selectors.list_sessions(limit=50, cursor=request.GET.get("cursor") or None)
    return render(request, "sessions/list.html", {"page": page})
