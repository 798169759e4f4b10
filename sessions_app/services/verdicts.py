"""Verdicts: recording, replacing and withdrawing what a person or a reconciler found out about a call.

A verdict lives beside the log (session-log.md 8.2): each write here changes the
verdicts table, the call ledger's copy of the current verdict, the audit log and
what retention counts from (Session.retained_from), never an event. A call has at
most one current verdict: a new one withdraws the one before it, stamped with the
new one's time and author. People need the recover permission; a reconciler's
verdicts come from the worker (`by` "reconciler:<policy pattern>").
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from sessions_app.lib.errors import CallNotFound, InvalidVerdict, VerdictNotFound
from sessions_app.log import events as log_events
from sessions_app.models import AuditEntry, LedgerCall, Session, Verdict
from sessions_app.models.verdicts import NOT_HAPPENED, OUTCOMES, PERSON, RECONCILER
from sessions_app.selectors import access
from sessions_app.selectors.ledger import inherited_rows

from .audit_log import WORKER, audit
from .event_rows import locked_session, retain_from
from .publishing import publish_notes_changed_on_commit, publish_session_changed_on_commit

# The limits of docs/api.md, Verdicts.
EVIDENCE_MAX = 4000  # characters
EXTERNAL_REF_MAX = 500
REASON_MAX = 4000
prep_call_id = LedgerCall._meta.get_field("call_id").get_prep_value


def checked_outcome(outcome: object) -> str:
    if outcome not in OUTCOMES:
        raise InvalidVerdict(
            "outcome", "invalid_outcome", f"outcome must be \"happened\" or \"not_happened\", not {log_events.show_json(outcome)}"
        )
    return outcome


def checked_evidence(evidence: object) -> str:
    if not isinstance(evidence, str):
        raise InvalidVerdict("evidence", "not_text", f"evidence must be a string, not {log_events.show_json(evidence)}")
    if not evidence.strip():
        raise InvalidVerdict("evidence", "empty", "evidence is empty: say what you found and where")
    if len(evidence) > EVIDENCE_MAX:
        raise InvalidVerdict("evidence", "too_long", f"evidence has {len(evidence)} characters; at most {EVIDENCE_MAX}")
    if "\x00" in evidence:
        raise InvalidVerdict("evidence", "invalid_text", "evidence holds NUL, which is not allowed")
    return evidence


def checked_external_ref(ref: object) -> str:
    if ref is None:
        return ""
    if not isinstance(ref, str):
        raise InvalidVerdict("external_ref", "not_text", f"external_ref must be a string, not {log_events.show_json(ref)}")
    if len(ref) > EXTERNAL_REF_MAX:
        raise InvalidVerdict("external_ref", "too_long", f"external_ref has {len(ref)} characters; at most {EXTERNAL_REF_MAX}")
    if "\x00" in ref:
        raise InvalidVerdict("external_ref", "invalid_text", "external_ref holds NUL, which is not allowed")
    return ref.strip()


def checked_reason(reason: object) -> None:
    if reason is None:
        return
    if not isinstance(reason, str):
        raise InvalidVerdict("reason", "not_text", f"reason must be a string, not {log_events.show_json(reason)}")
    if len(reason) > REASON_MAX:
        raise InvalidVerdict("reason", "too_long", f"reason has {len(reason)} characters; at most {REASON_MAX}")
    if "\x00" in reason:
        raise InvalidVerdict("reason", "invalid_text", "reason holds NUL, which is not allowed")


def _ledger_row(session: Session, call_id: str) -> LedgerCall:
    """The session's own ledger row of the call (a fork's inherited call copied in), or CallNotFound."""
    key = prep_call_id(call_id)
    row = LedgerCall.objects.filter(session=session, call_id=key).first()
    if row is None and session.seed_length:
        row = inherited_rows(session, {key}).get(key)
        if row is not None:
            row.save()
    if row is None:
        raise CallNotFound(session.id, call_id)
    return row


def _set_current(row: LedgerCall, verdict: Verdict | None) -> None:
    row.verdict = verdict.outcome if verdict is not None else None
    row.verdict_ref = (verdict.external_ref or None) if verdict is not None else None
    row.save(update_fields=["verdict", "verdict_ref"])


def _withdraw_current(session: Session, key: str, *, at: datetime, by: str, reason: str = "") -> Verdict | None:
    current = Verdict.objects.select_for_update().filter(session=session, call_id=key, withdrawn_at__isnull=True).first()
    if current is not None:
        current.withdrawn_at, current.withdrawn_by, current.withdraw_reason = at, by, reason
        current.save(update_fields=["withdrawn_at", "withdrawn_by", "withdraw_reason"])
    return current


def _store(
    session: Session, call_id: str, *, outcome: str, evidence: str, external_ref: str, source: str, by: str, user, now: datetime
) -> Verdict:
    row = _ledger_row(session, call_id)
    replaced = _withdraw_current(session, row.call_id, at=now, by=by)
    verdict = Verdict.objects.create(
        session=session, call_id=row.call_id, outcome=outcome, evidence=evidence, external_ref=external_ref,
        source=source, by=by, user=user, at=now,
    )  # fmt: skip
    _set_current(row, verdict)
    retain_from(session, now)
    audit(
        project=session.project_id,
        actor=user,
        action=AuditEntry.VERDICT_RECORDED,
        target=session.id,
        detail={
            "call_id": call_id, "outcome": outcome, "evidence": evidence, "external_ref": external_ref, "by": by,
            "replaced": replaced.outcome if replaced is not None else None,
        },
        actor_name=WORKER if source == RECONCILER else "cli",
    )  # fmt: skip
    _publish(session, row)
    return verdict


def _publish(session: Session, row: LedgerCall) -> None:
    # The pages re-render the call's card and the ledger (as for a note at its sighting), and the lists its row.
    seqs = [row.seq] + ([row.result_seq] if row.result_seq is not None else [])
    publish_notes_changed_on_commit(session.id, seqs)
    publish_session_changed_on_commit(session.id)


def record_verdict(
    *, actor: access.Actor, session_id: str, call_id: object, outcome: object, evidence: object, external_ref: object = None
) -> Verdict:
    """A person's finding for one call of the session (they need RECOVER there); it replaces the current one."""
    session = access.session_for(actor, session_id, access.RECOVER, related=False)
    if not isinstance(call_id, str) or not call_id or "\x00" in call_id:  # no call id holds NUL
        raise CallNotFound(session_id, str(call_id))
    outcome, evidence, external_ref = checked_outcome(outcome), checked_evidence(evidence), checked_external_ref(external_ref)
    now = timezone.now()
    with transaction.atomic():
        session = locked_session(session.pk)
        user = actor.user if actor.user is not None and actor.user.is_authenticated else None
        return _store(
            session, call_id, outcome=outcome, evidence=evidence, external_ref=external_ref,
            source=PERSON, by=actor.name, user=user, now=now,
        )  # fmt: skip


def record_reconciler_verdict(
    *, session_id: str, call_id: str, pattern: str, outcome: str, evidence: str, external_ref: str = "", now: datetime | None = None
) -> Verdict:
    """A reconciler's answer for one call (the worker checked the answer's shape first)."""
    outcome, evidence, external_ref = checked_outcome(outcome), checked_evidence(evidence), checked_external_ref(external_ref)
    with transaction.atomic():
        session = locked_session(session_id)
        return _store(
            session, call_id, outcome=outcome, evidence=evidence, external_ref=external_ref,
            source=RECONCILER, by=f"reconciler:{pattern}", user=None, now=now or timezone.now(),
        )  # fmt: skip


def withdraw_verdict(*, actor: access.Actor, session_id: str, call_id: object, reason: object = None) -> LedgerCall:
    """Withdraw the call's current verdict (kept in its history); VerdictNotFound when there is none."""
    session = access.session_for(actor, session_id, access.RECOVER, related=False)
    checked_reason(reason)
    if not isinstance(call_id, str) or not call_id or "\x00" in call_id:  # no call id holds NUL
        raise CallNotFound(session_id, str(call_id))
    now = timezone.now()
    with transaction.atomic():
        session = locked_session(session.pk)
        row = _ledger_row(session, call_id)
        withdrawn = _withdraw_current(session, row.call_id, at=now, by=actor.name, reason=reason or "")
        if withdrawn is None:
            raise VerdictNotFound(session_id, call_id)
        _set_current(row, None)
        retain_from(session, now)
        user = actor.user if actor.user is not None and actor.user.is_authenticated else None
        audit(
            project=session.project_id, actor=user, action=AuditEntry.VERDICT_WITHDRAWN, target=session.id,
            detail={"call_id": call_id, "outcome": withdrawn.outcome, "reason": reason or ""},
        )  # fmt: skip
        _publish(session, row)
        return row


ledger_row = _ledger_row  # for the other writes about one call (services.checks)

__all__ = ["NOT_HAPPENED", "ledger_row", "record_verdict", "record_reconciler_verdict", "withdraw_verdict"]
