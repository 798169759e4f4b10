"""Verdicts in and out of a blob: an export's additive "verdicts" list, kept by an import (api.md, Verdicts)."""

from __future__ import annotations

from datetime import datetime

from sessions_app.lib.errors import InvalidVerdict
from sessions_app.log import events as log_events
from sessions_app.models import LedgerCall, Session, Verdict
from sessions_app.models.verdicts import PERSON, RECONCILER

from .verdicts import checked_evidence, checked_external_ref, checked_outcome, prep_call_id

BY_MAX = Verdict._meta.get_field("by").max_length


def verdict_to_wire(verdict: Verdict) -> dict:
    """A verdict as the API's Call carries it (api.md, "Verdicts, receipts and reconcilers")."""
    return {
        "outcome": verdict.outcome,
        "evidence": verdict.evidence,
        "external_ref": verdict.external_ref or None,
        "by": verdict.by,
        "source": verdict.source,
        "at": log_events.format_time(verdict.at),
    }


def verdict_to_blob(verdict: Verdict) -> dict:
    """One verdict as an export carries it (withdrawn ones too)."""
    return {
        "call_id": verdict.call_id,
        **verdict_to_wire(verdict),
        "withdrawn_at": log_events.format_time(verdict.withdrawn_at) if verdict.withdrawn_at is not None else None,
        "withdrawn_by": verdict.withdrawn_by or None if verdict.withdrawn_at is not None else None,
        "withdraw_reason": verdict.withdraw_reason or None if verdict.withdrawn_at is not None else None,
    }


def import_verdicts(session: Session, verdicts: object, warnings: list[str], *, now: datetime) -> list[Verdict]:
    """Store an imported blob's verdicts on `session` (inside the import's transaction, after its events).

    Authors are kept as text, never matched to a local user. A verdict naming a call the session
    does not hold, or breaking the limits, is dropped with a warning. Of two current verdicts of one
    call the later stays current (the earlier is withdrawn by it, as recording would have done).
    The call ledger's verdict columns follow the current ones.
    """
    if verdicts is None:
        return []
    if not isinstance(verdicts, list):
        warnings.append(f"verdicts {log_events.show_json(verdicts)} is not a list; imported without verdicts")
        return []
    found = [row for index, item in enumerate(verdicts) if (row := _imported(index, item, warnings, now)) is not None]
    known = set(LedgerCall.objects.filter(session=session, call_id__in={v.call_id for v in found}).values_list("call_id", flat=True))
    kept = []
    for verdict in sorted(found, key=lambda v: v.at):
        if verdict.call_id not in known:
            warnings.append(f"the verdict on call {verdict.call_id!r} names no call of this session; dropped")
            continue
        verdict.session = session
        kept.append(verdict)
    current: dict[str, Verdict] = {}
    for verdict in kept:
        if verdict.withdrawn_at is None:
            if (earlier := current.get(verdict.call_id)) is not None:
                earlier.withdrawn_at, earlier.withdrawn_by = verdict.at, verdict.by
            current[verdict.call_id] = verdict
    stored = Verdict.objects.bulk_create(kept)
    for call_id, verdict in current.items():
        if verdict.withdrawn_at is None:
            LedgerCall.objects.filter(session=session, call_id=call_id).update(verdict=verdict.outcome, verdict_ref=verdict.external_ref or None)
    return stored


def _imported(index: int, item: object, warnings: list[str], now: datetime) -> Verdict | None:
    name = f"verdicts[{index}]"
    if not isinstance(item, dict):
        warnings.append(f"{name} dropped: not an object")
        return None
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id or "\x00" in call_id:
        warnings.append(f"{name} dropped: call_id {log_events.show_json(call_id)} is not a call id")
        return None
    try:
        outcome, evidence = checked_outcome(item.get("outcome")), checked_evidence(item.get("evidence"))
        external_ref = checked_external_ref(item.get("external_ref"))
    except InvalidVerdict as exc:
        warnings.append(f"{name} dropped: {exc.detail}")
        return None
    by = _author(item.get("by"), f"{name}: by", warnings)
    source = item.get("source") if item.get("source") in (PERSON, RECONCILER) else PERSON
    at = _time_or(now, item.get("at"))
    withdrawn_at = _time_or(None, item.get("withdrawn_at"))
    withdrawn_by = _author(item.get("withdrawn_by"), f"{name}: withdrawn_by", warnings) if withdrawn_at is not None else ""
    reason = item.get("withdraw_reason")
    reason = reason if withdrawn_at is not None and isinstance(reason, str) and "\x00" not in reason else ""
    return Verdict(
        call_id=prep_call_id(call_id), outcome=outcome, evidence=evidence, external_ref=external_ref, source=source, by=by,
        user=None, at=at, withdrawn_at=withdrawn_at, withdrawn_by=withdrawn_by, withdraw_reason=reason,
    )  # fmt: skip


def _author(value: object, name: str, warnings: list[str]) -> str:
    if isinstance(value, str) and value.strip() and len(value) <= BY_MAX and "\x00" not in value:
        return value
    warnings.append(f"{name} {log_events.show_json(value)} is not a text of 1 to {BY_MAX} characters; kept as 'unknown'")
    return "unknown"


def _time_or(default, value: object):
    if value is None:
        return default
    try:
        return log_events.coerce_time(value)
    except ValueError:
        return default
