"""The calls a session page's ledger panel shows, read by index: the cost follows the calls shown, not the log.

`session_calls` (selectors.calls) states every call from one scan of the whole
log; a page of a 100,000-event session cannot afford that on each load and
each live frame. Here the same rows (the same CallRow, the state from
log.ledger.decide, as the cards take it) are built for the calls that matter
most: every call an open turn owes or a recovery or a dangling-call patch
answered (those are the unknown outcomes and the superseded ones), and the
latest calls, found by reading the log backwards in growing seq ranges of
its (session, seq) index, at most `scan` events back. Each call is then read
by its id (call_lookups: its sightings, dispatches and results, wherever
they are), so its state is the one the whole log gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessions_app.log import calls as log_calls
from sessions_app.log import events as log_events
from sessions_app.log import ledger
from sessions_app.models import Event, RecoveryRecord, Session
from sessions_app.selectors.calls import CHECKED_CLASSES, CallRow, patch_seqs
from sessions_app.selectors.events import call_lookups, placed_log_events, to_log_events
from sessions_app.selectors.notes import notes_by_seq
from sessions_app.selectors.recovery import recovery_plan, side_effect_classes


@dataclass(frozen=True)
class RecentCalls:
    rows: list[CallRow]  # in order of first sighting
    complete: bool  # every call of the session is in `rows` (the scan reached seq 0 and no row was left out)


def recent_calls(session: Session, *, all_classes: bool, limit: int, scan: int) -> RecentCalls:
    """The owed and recovered calls, and the latest `limit` others (of the classes asked), as session_calls states them."""
    owed = {r.call.id: r.call.risk for r in recovery_plan(session).repairs if r.call is not None}
    answered = _answered_by_recovery(session)
    latest, reached_start = _latest_call_ids(session, scan=scan)
    ids = set(owed) | answered | set(latest)
    if not ids:
        return RecentCalls(rows=[], complete=reached_start)
    lookups = call_lookups(session, ids)
    results: dict[str, list[log_events.Event]] = {}
    dispatches: dict[str, list[int]] = {}
    for event in lookups.events:
        cid = log_events.call_id(event.data)
        if event.type == "tool_result":
            results.setdefault(cid, []).append(event)
        else:
            dispatches.setdefault(cid, []).append(event.seq)
    first_seq = {
        cid: min([*lookups.sightings.get(cid, ()), *dispatches.get(cid, ())]) for cid in ids if lookups.sightings.get(cid) or dispatches.get(cid)
    }  # fmt: skip
    sighting_events, placement = placed_log_events(Event.objects.filter(session=session, seq__in=set(first_seq.values())))
    at = {e.seq: e for e in sighting_events}
    placed = {cid: _call_at(at[seq], cid) for cid, seq in first_seq.items() if seq in at}
    calls = {cid: call for cid, (call, _) in placed.items()}
    classes = side_effect_classes(log_calls.call_name(call) for call in calls.values())
    status, patched = session.status, patch_seqs(session) if results else set()
    notes_at = notes_by_seq(session)
    rows = []
    for cid, seq in sorted(first_seq.items(), key=lambda item: (item[1], placed[item[0]][1] if item[0] in placed else 0)):
        if cid not in calls:
            continue
        side_effect = classes[log_events.tool_name(log_calls.call_name(calls[cid]))]
        if not all_classes and side_effect not in CHECKED_CLASSES:
            continue
        turn_seq = placement[seq][0]
        state, result_seq = ledger.decide(
            results.get(cid, ()), turn_seq=turn_seq, owed_risk=owed.get(cid), patch_seqs=patched,
            running=status == "running", active=status == "active",
        )  # fmt: skip
        call = ledger.CallState(cid, log_calls.call_name(calls[cid]), log_calls.call_arguments(calls[cid]), seq, turn_seq, state, result_seq)
        note_seqs = dict.fromkeys([seq, *dispatches.get(cid, ()), *(r.seq for r in results.get(cid, ()))])
        notes = sorted((n for s in note_seqs for n in notes_at.get(s, ())), key=lambda n: (n.created_at, n.pk))
        rows.append(CallRow(session=session, call=call, side_effect=side_effect, time=at[seq].time, notes=notes))
    kept = _keep(rows, set(owed) | answered, limit)
    return RecentCalls(rows=kept, complete=reached_start and len(kept) == len(rows))


def _answered_by_recovery(session: Session) -> set[str]:
    """The ids recoveries' and dangling-call patches' results answered (each record holds its seq range)."""
    ids: set[str] = set()
    for first, last in RecoveryRecord.objects.filter(session=session).values_list("first_seq", "last_seq"):
        answers = Event.objects.filter(session=session, seq__gte=first, seq__lte=last, call_id__isnull=False)
        ids |= {log_events.call_id(e.data) for e in to_log_events(answers) if e.type == "tool_result"} - {None}
    return ids


def _latest_call_ids(session: Session, *, scan: int) -> tuple[dict[str, int], bool]:
    """Call ids sighted in the last `scan` events (newest first, by the seq that named them), and whether that is the whole log."""
    end = session.event_count
    low = max(end - scan, 0)
    named: dict[str, int] = {}
    window = Event.objects.filter(session=session, seq__gte=low, seq__lt=end, type__in=("assistant_message", "tool_call"))
    for event in sorted(to_log_events(window), key=lambda e: -e.seq):
        found = log_events.tool_calls_of(event.data) if event.type == "assistant_message" else [event.data]
        for call in found:
            if (cid := log_events.call_id(call)) is not None:
                named.setdefault(cid, event.seq)
    return named, low == 0


def _call_at(event: log_events.Event, cid: str) -> tuple[dict, int]:
    """The call as its first sighting holds it (a tool_call event's data, or the assistant message's first entry
    naming it) and its place there: the calls of one message are sighted in their order."""
    if event.type == "tool_call":
        return event.data, 0
    entries = log_events.tool_calls_of(event.data)
    return next(((call, i) for i, call in enumerate(entries) if log_events.call_id(call) == cid), ({}, 0))


def _keep(rows: list[CallRow], answered_or_owed: set[str], limit: int) -> list[CallRow]:
    """Every owed or recovered call, and the latest others up to `limit` rows in all, in order of first sighting."""
    others = [row for row in rows if row.call.call_id not in answered_or_owed]
    room = max(limit - (len(rows) - len(others)), 0)
    latest = {id(row) for row in others[len(others) - room :]} if room else set()
    return [row for row in rows if row.call.call_id in answered_or_owed or id(row) in latest]
