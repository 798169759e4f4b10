"""A call card's "Check now": its reconciler asked again at the worker's next pass (services.reconcilers.queue_check,
which checks the recover permission). htmx gets 204 (the card follows live); without JavaScript, a redirect back
to the card."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from sessions_app.lib import errors
from sessions_app.selectors import access
from sessions_app.services import reconcilers

from .blocks import card_anchor


@login_required
@require_POST
def check_call(request, session_id: str, call_id: str):
    try:
        reconcilers.queue_check(actor=access.actor_of(request), session_id=session_id, call_id=call_id)
    except (errors.SessionNotFound, errors.CallNotFound) as missing:
        raise Http404(str(missing)) from None
    except access.Forbidden as refused:
        raise PermissionDenied(refused.detail) from None
    except errors.NoReconciler as none:
        return HttpResponse(str(none), status=409, content_type="text/plain; charset=utf-8")
    if request.htmx:
        return HttpResponse(status=204)
    return redirect(reverse("session_detail", args=[session_id]) + "#" + card_anchor(call_id))
