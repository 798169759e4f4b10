"""Asking a reconciler again: a person queues a check of one call (api.md, POST .../check).

The check is a CallCheck row due now; the worker's reconciler loop asks the policy's
check endpoint and records what it answers (an attempt, and a verdict when it knows).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from sessions_app.lib.errors import CallNotFound, NoReconciler
from sessions_app.log import policies as log_policies
from sessions_app.models import CallCheck
from sessions_app.selectors import access
from sessions_app.selectors.policies import project_policies

from .event_rows import locked_session
from .verdicts import ledger_row


def queue_check(*, actor: access.Actor, session_id: str, call_id: object) -> CallCheck:
    """A check of the call due now (a pending one restarts; one that settled or gave up is asked again).

    Needs RECOVER; NoReconciler when no policy that applies to the call's tool has a check_url.
    """
    session = access.session_for(actor, session_id, access.RECOVER, related=False)
    if not isinstance(call_id, str) or not call_id:
        raise CallNotFound(session_id, str(call_id))
    now = timezone.now()
    with transaction.atomic():
        session = locked_session(session.pk)
        row = ledger_row(session, call_id)
        tool = row.tool
        with_endpoint = [p for p in project_policies(session.project_id) if p.check_url]
        policy = log_policies.matching(tool, with_endpoint)
        if policy is None:
            raise NoReconciler(session.id, call_id, tool)
        check, _ = CallCheck.objects.update_or_create(
            session=session,
            call_id=row.call_id,
            defaults={
                "project_id": session.project_id, "policy_id": policy.id, "state": CallCheck.PENDING,
                "attempts": 0, "next_at": now, "claimed_until": None,
            },
            create_defaults={
                "project_id": session.project_id, "policy_id": policy.id, "state": CallCheck.PENDING,
                "attempts": 0, "next_at": now, "created_at": now,
            },
        )  # fmt: skip
        return check
