"""Verdicts in and out of a blob: an export's additive "verdicts" list, kept by an import (api.md, Verdicts)."""

from __future__ import annotations

from datetime import datetime

from sessions_app.lib.errors import InvalidVerdict
from sessions_app.log import events as log_events
from sessions_app.models import LedgerCall, Session, Verdict
from sessions_app.models.verdicts import PERSON, RECONCILER

from .verdicts import checked_evidence, checked_external_ref, checked_outcome, checked_reason, prep_call_id

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
            # Named as it was sent (a long id is stored as its digest) and by its place in the list.
            shown = repr(verdict.sent_id) if len(verdict.sent_id) <= 100 else f"{verdict.sent_id[:100]!r}..."
            warnings.append(f"verdicts[{verdict.index}] dropped: call {shown} is not a call of this session")
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
    source = item.get("source", PERSON)
    if source not in (PERSON, RECONCILER):
        warnings.append(f"{name}: source {log_events.show_json(source)} is not person or reconciler; kept as person")
        source = PERSON
    at = _time_or(now, item.get("at"))
    if at is None:
        warnings.append(f"{name}: at {log_events.show_json(item.get('at'))} is not a time with a UTC offset; kept at the import's time")
        at = now
    elif at > now:
        # A verdict from the future would stay current over one recorded here later, and sort after it.
        warnings.append(f"{name}: at {log_events.format_time(at)} is after the import's time; kept at the import's time")
        at = now
    withdrawn_at = _time_or(None, item.get("withdrawn_at"))
    if withdrawn_at is None and item.get("withdrawn_at") is not None:
        # Unreadable, but withdrawn: it must not become the call's current verdict.
        shown = log_events.show_json(item.get("withdrawn_at"))
        warnings.append(f"{name}: withdrawn_at {shown} is not a time with a UTC offset; kept as withdrawn at its at")
        withdrawn_at = at
    elif withdrawn_at is not None and withdrawn_at < at:
        warnings.append(f"{name}: withdrawn_at is before its at; kept as withdrawn at its at")
        withdrawn_at = at
    elif withdrawn_at is not None and withdrawn_at > now:
        warnings.append(f"{name}: withdrawn_at is after the import's time; kept as withdrawn at the import's time")
        withdrawn_at = now
    withdrawn_by = _author(item.get("withdrawn_by"), f"{name}: withdrawn_by", warnings) if withdrawn_at is not None else ""
    reason = item.get("withdraw_reason") if withdrawn_at is not None else None
    try:
        checked_reason(reason)
    except InvalidVerdict as exc:
        warnings.append(f"{name}: {exc.detail}; kept without its withdraw_reason")
        reason = None
    reason = reason or ""
    verdict = Verdict(
        call_id=prep_call_id(call_id), outcome=outcome, evidence=evidence, external_ref=external_ref, source=source, by=by,
        user=None, at=at, withdrawn_at=withdrawn_at, withdrawn_by=withdrawn_by, withdraw_reason=reason,
    )  # fmt: skip
    verdict.index, verdict.sent_id = index, call_id  # for the warning if it names no call
    return verdict


def _author(value: object, name: str, warnings: list[str]) -> str:
    if isinstance(value, str) and value.strip() and len(value) <= BY_MAX and "\x00" not in value:
        return value
    warnings.append(f"{name} {log_events.show_json(value)} is not a text of 1 to {BY_MAX} characters; kept as 'unknown'")
    return "unknown"


def _time_or(default, value: object):
    """The time `value` gives; `default` when it is absent (null); None when it is there but no time."""
    if value is None:
        return default
    try:
        return log_events.coerce_time(value)
    except (ValueError, TypeError):
        return None
