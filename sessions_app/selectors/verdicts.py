"""Verdicts as they stand: a call's current one, every one of a session, a call's history and its reconciler's attempts."""

from __future__ import annotations

from sessions_app.models import CheckAttempt, Session, Verdict


def current_verdicts(session: Session | str) -> dict[str, Verdict]:
    """The session's current verdicts by stored call id."""
    session_id = session.pk if isinstance(session, Session) else session
    return {v.call_id: v for v in Verdict.objects.filter(session_id=session_id, withdrawn_at__isnull=True)}


def current_verdict(session: Session | str, call_id: str) -> Verdict | None:
    session_id = session.pk if isinstance(session, Session) else session
    return Verdict.objects.filter(session_id=session_id, call_id=call_id, withdrawn_at__isnull=True).first()


def verdict_history(session: Session | str, call_id: str) -> list[Verdict]:
    """Every verdict of the call, oldest first (the current one last, if any)."""
    session_id = session.pk if isinstance(session, Session) else session
    return list(Verdict.objects.filter(session_id=session_id, call_id=call_id).order_by("at", "id"))


def check_attempts(session: Session | str, call_id: str) -> list[CheckAttempt]:
    """The reconciler's attempts for the call, oldest first."""
    session_id = session.pk if isinstance(session, Session) else session
    return list(CheckAttempt.objects.filter(session_id=session_id, call_id=call_id).order_by("at", "id"))


def session_verdicts(session: Session | str) -> list[Verdict]:
    """Every verdict of the session, withdrawn ones included, oldest first (what an export carries)."""
    session_id = session.pk if isinstance(session, Session) else session
    return list(Verdict.objects.filter(session_id=session_id).order_by("at", "id"))
