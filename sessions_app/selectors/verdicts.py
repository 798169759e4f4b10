"""Verdicts as they stand: a call's current one, every one of a session, a call's history and its reconciler's attempts."""

from __future__ import annotations

from sessions_app.models import CheckAttempt, Session, Verdict

IN_BATCH = 500  # values per IN (...) list: SQLite's variable limit


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


def verdicts_of_calls(session: Session | str, keys) -> dict[str, list[Verdict]]:
    """Stored call id -> every verdict of that call, oldest first (the current one last, if any): one query for a page's calls."""
    session_id = session.pk if isinstance(session, Session) else session
    keys = sorted(set(keys))
    found: dict[str, list[Verdict]] = {}
    batches = [Verdict.objects.filter(session_id=session_id)] if len(keys) > IN_BATCH else [Verdict.objects.filter(session_id=session_id, call_id__in=keys)]
    for batch in batches:
        for verdict in batch.order_by("at", "id"):
            found.setdefault(verdict.call_id, []).append(verdict)
    return found


def current_verdicts_of(pairs) -> dict[tuple[str, str], Verdict]:
    """(session id, stored call id) -> its current verdict, for calls of several sessions: one query per IN_BATCH sessions."""
    wanted = set(pairs)
    sessions = sorted({sid for sid, _ in wanted})
    found: dict[tuple[str, str], Verdict] = {}
    for i in range(0, len(sessions), IN_BATCH):
        rows = Verdict.objects.filter(session_id__in=sessions[i : i + IN_BATCH], withdrawn_at__isnull=True, call_id__in=sorted({k for _, k in wanted}))
        found.update({(v.session_id, v.call_id): v for v in rows if (v.session_id, v.call_id) in wanted})
    return found
