"""The calls a search names exactly: "which session made charge ch_3Px?" (api.md, "Verdicts, receipts and reconcilers").

A query that is exactly a call's receipt, idempotency key or current verdict's
reference finds that call (the ledger's indexed columns, selectors.fleet_calls
`ref`), whatever its state, beside the words the log and notes hold.
"""

from __future__ import annotations

from django.db.models import Q

from sessions_app.log import events as log_events
from sessions_app.log.receipts import REFERENCE_MAX
from sessions_app.models import Event
from sessions_app.selectors.calls import CallRow
from sessions_app.selectors.fleet_calls import fleet_calls

CALLS_SHOWN = 10


def reference_of(q: str) -> str:
    """The reference a query may be: itself without surrounding spaces ("" when it cannot be one)."""
    ref = q.strip()
    return ref if ref and len(ref) <= REFERENCE_MAX and "\x00" not in ref else ""


def reference_calls(q: str, projects: list[int], *, limit: int = CALLS_SHOWN) -> list[CallRow]:
    """The calls of `projects` whose receipt, idempotency key or current verdict's reference is exactly `q`, newest first."""
    ref = reference_of(q)
    if not ref or not projects:
        return []
    return fleet_calls(projects=projects, ref=ref, limit=limit).items


def sighting_types(rows: list[CallRow]) -> dict[tuple[str, int], str]:
    """The type of each call's first-sighting event, by (session, seq)."""
    at = Q()
    for row in rows:
        at |= Q(session_id=row.session.id, seq=row.call.seq)
    return {(sid, seq): type_ for sid, seq, type_ in Event.objects.filter(at).values_list("session_id", "seq", "type")}


def reference_snippet(row: CallRow, ref: str) -> tuple[str, list[tuple[int, int]]]:
    """'charge_card call c1 · key: order-42 · receipt: ch_3Px' with the matching values' offsets."""
    name = log_events.id_text(row.call.name) or "(no name)"
    parts = [f"{name} call {row.call.call_id}"]
    verdict_ref = row.verdict.external_ref if row.verdict is not None else None
    for label, value in (("key", row.idempotency_key), ("receipt", row.receipt), ("verdict", verdict_ref)):
        if value:
            parts.append(f"{label}: {value}")
    snippet = " · ".join(parts)
    highlights, offset = [], 0
    for part in parts[1:]:
        offset = snippet.index(part, offset)
        label_end = offset + part.index(": ") + 2
        if snippet[label_end : offset + len(part)] == ref:
            highlights.append((label_end, offset + len(part)))
        offset += len(part)
    return snippet, highlights
