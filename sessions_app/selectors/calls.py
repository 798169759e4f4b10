"""Calls: every sighted tool call of one session as the ledger states it (api.md, "Calls, notes and search").

The state is log.ledger's (the one reading every view gives); this room adds what storage
knows and the log does not: which results a dangling-call patch wrote (its RecoveryRecords'
seq ranges, and those a fork or an import carried over), the session's status, the tool
policies as they are now, and the notes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sessions_app.log import events as log_events
from sessions_app.log import ledger, recovery
from sessions_app.log import policies as log_policies
from sessions_app.log import receipts as log_receipts
from sessions_app.models import Note, RecoveryRecord, Session, ToolPolicy, Verdict
from sessions_app.models.sessions import CallIdField
from sessions_app.selectors.events import session_log
from sessions_app.selectors.notes import notes_by_seq
from sessions_app.selectors.policies import project_policies
from sessions_app.selectors.verdicts import current_verdicts

# The classes the list shows by default: the calls a person may have to check.
CHECKED_CLASSES = frozenset({ToolPolicy.EXTERNAL_EFFECT, "unknown"})


@dataclass(frozen=True)
class CallRow:
    session: Session
    call: ledger.CallState
    side_effect: str  # the tool's class by the policies as they are now
    time: datetime  # the time the first-sighting event claims
    notes: list[Note]  # pinned to the first sighting or to one of the call's dispatches (tool_call events) or results
    idempotency_key: str | None = None  # as section 1 reads it
    receipt: str | None = None  # where the tool policy's receipt pointer points in the first real result
    verdict: Verdict | None = None  # the current verdict (session-log.md 8.2)


def patch_seqs(session: Session) -> set[int]:
    """The seqs of the results dangling-call patches wrote: the session's own (each record holds
    only them) and those it carried over from its parent or an imported blob."""
    ranges = RecoveryRecord.objects.filter(session=session, kind=RecoveryRecord.DANGLING_PATCH).values_list("first_seq", "last_seq")
    return {seq for first, last in ranges for seq in range(first, last + 1)} | set(session.carried_patch_seqs)


def session_calls(session: Session, *, all_classes: bool) -> list[CallRow]:
    """The session's calls in order of first sighting; without `all_classes`, external_effect and unknown only."""
    events = session_log(session)
    status = session.status
    patches = patch_seqs(session)
    states = ledger.call_states(events, running=status == "running", active=status == "active", patch_seqs=patches)
    policies = project_policies(session.project_id)
    classes = {name: recovery.side_effect_class(name, policies) for name in {log_events.tool_name(c.name) for c in states}}
    rows = [(call, classes[log_events.tool_name(call.name)]) for call in states]
    if not all_classes:
        rows = [(call, cls) for call, cls in rows if cls in CHECKED_CLASSES]
    if not rows:
        return []
    results = recovery.calls_seen(events).results  # the same scan the ledger made, in memory
    dispatches: dict[str, list[int]] = {}
    for event in events:
        if event.type == "tool_call" and (cid := log_events.call_id(event.data)) is not None:
            dispatches.setdefault(cid, []).append(event.seq)
    notes_at = notes_by_seq(session)
    verdict_of = current_verdicts(session)  # by stored call id (a long id is kept as its digest)
    prep = CallIdField(max_length=255).get_prep_value
    keys = log_receipts.keys_of_log(events)
    out = []
    for call, cls in rows:
        seqs = [call.seq, *dispatches.get(call.call_id, ()), *(r.seq for r in results.get(call.call_id, ()))]
        notes = sorted((n for seq in dict.fromkeys(seqs) for n in notes_at.get(seq, ())), key=lambda n: (n.created_at, n.pk))
        verdict = verdict_of.get(prep(call.call_id)) if verdict_of else None
        key = keys.get(call.call_id)
        receipt = _receipt(call, results.get(call.call_id, ()), patches, policies)
        out.append(CallRow(session=session, call=call, side_effect=cls, time=events[call.seq].time, notes=notes,
                           idempotency_key=None if key is None else key[1], receipt=receipt, verdict=verdict))  # fmt: skip
    return out


def _receipt(call: ledger.CallState, results, patches: set[int], policies) -> str | None:
    """What the tool's policy points at in the call's first real result (log.receipts)."""
    policy = log_policies.matching(log_events.tool_name(call.name), policies)
    if policy is None or not policy.receipt_pointer:
        return None
    real = next((r for r in results if ledger.result_kind(r, patches) == ledger.REAL), None)
    return None if real is None else log_receipts.receipt(real.data, policy.receipt_pointer)
