"""Verdicts as they stand: a call's current one, every one of a session, a call's history and its reconciler's attempts."""

from __future__ import annotations

from django.db.models import Count, Q

from sessions_app.log.recovery import TOOL_OUTCOME_UNKNOWN
from sessions_app.models import CheckAttempt, LedgerCall, Session, Verdict

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


def session_verdicts(session: Session | str) -> list[Verdict]:
    """Every verdict of the session, withdrawn ones included, oldest first (what an export carries)."""
    session_id = session.pk if isinstance(session, Session) else session
    return list(Verdict.objects.filter(session_id=session_id).order_by("at", "id"))


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


def unknown_calls_settled(sessions) -> dict[str, bool]:
    """Session id -> whether every call of it whose state is tool_outcome_unknown has a current verdict (True) or
    some has none (False); a session with no such call is left out. Read from the ledger's columns, one query for
    them all: a recovery's synthetic result settles the state (settled_state), an open turn of a session no longer
    running owes it (owed_risk). A fork's calls inherited and never copied are its ancestors' (not counted here)."""
    sessions = list(sessions)
    if not sessions:
        return {}
    not_running = [s.pk for s in sessions if s.status != "running"]
    unknown = Q(settled_state=TOOL_OUTCOME_UNKNOWN) | Q(settled_state__isnull=True, owed_risk=TOOL_OUTCOME_UNKNOWN, session_id__in=not_running)
    counts = (
        LedgerCall.objects.filter(unknown, session_id__in=[s.pk for s in sessions])
        .values("session_id")
        .annotate(total=Count("id"), open=Count("id", filter=Q(verdict__isnull=True)))
    )
    return {row["session_id"]: row["open"] == 0 for row in counts if row["total"]}


def mark_unknown_settled(sessions) -> None:
    """Set each session's `all_unknown_settled` (the header's and the list row's badge): True when it has unknown
    calls and each has a current verdict."""
    sessions = list(sessions)
    flags = unknown_calls_settled(sessions)
    for session in sessions:
        session.all_unknown_settled = flags.get(session.pk, False)
