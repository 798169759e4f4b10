"""The reads behind a session's timeline: a few indexed columns of each event, and of `data` only what bars show.

Every event's seq, type, time, turn and step and call id (no `data`); an assistant message's `metadata` alone
(its usage and model), tool names from the call sightings (and a dispatch's `name` when no message named
it), a turn_end's `reason`, and which results recovery wrote, only in the turns it closed. A zoom into a
turn reads that turn's events along the (session, turn_seq, seq) index.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Max, Min, Q

from sessions_app.log.timeline import Mark
from sessions_app.log.usage import Usage, normalised
from sessions_app.models import CallSighting, Event, Session, UsageSum
from sessions_app.selectors.usage import KINDS, usage_of_row

IN_BATCH = 500


def turn_exists(session: Session, turn: int) -> bool:
    return Event.objects.filter(session=session, seq=turn, type="turn_start", turn_seq=turn).exists()


def timeline_marks(session: Session, *, turn: int | None = None) -> list[Mark]:
    """The session's events (or one turn's) as the timeline reads them, in seq order."""
    rows = Event.objects.filter(session=session)
    if turn is not None:
        rows = rows.filter(turn_seq=turn)
    columns = list(rows.order_by("seq").values_list("seq", "type", "time", "turn_seq", "step_seq", "call_id"))
    if not columns:
        return []
    first, last = columns[0][0], columns[-1][0]
    typed = {t: rows.filter(type=t) for t in ("assistant_message", "tool_call", "turn_end")}
    metadata = dict(typed["assistant_message"].values_list("seq", "data__metadata"))
    dispatch_names = dict(typed["tool_call"].values_list("seq", "data__name"))
    reasons = dict(typed["turn_end"].values_list("seq", "data__reason"))
    sightings: dict[int, list[tuple[str, str | None]]] = {}
    for seq, cid, name in CallSighting.objects.filter(session=session, seq__gte=first, seq__lte=last).order_by("seq", "id").values_list("seq", "call_id", "tool_name"):
        if seq in metadata:
            sightings.setdefault(seq, []).append((cid, name or None))
    crashed = {turn_seq for seq, _, _, turn_seq, _, _ in columns if reasons.get(seq) == "interrupted" and turn_seq is not None}
    synthetic = set()
    if crashed:
        synthetic = set(Event.objects.filter(session=session, turn_seq__in=crashed, type="tool_result", data__metadata__synthetic=True).values_list("seq", flat=True))
    marks = []
    for seq, type_, time, turn_seq, step_seq, call_id in columns:
        meta = metadata.get(seq)
        name = dispatch_names.get(seq)
        reason = reasons.get(seq)
        marks.append(Mark(
            seq, type_, time, turn_seq, step_seq, call_id,
            name=name if isinstance(name, str) else None,
            usage=normalised(meta.get("usage"), meta) if isinstance(meta, dict) else None,
            model=meta.get("model") if isinstance(meta, dict) and isinstance(meta.get("model"), str) else None,
            calls=tuple(sightings.get(seq, ())),
            reason=reason if isinstance(reason, str) else None,
            synthetic=seq in synthetic,
        ))  # fmt: skip
    return marks


def turn_starts(session: Session) -> list[tuple[int, datetime]]:
    """(seq, time) of every turn_start of the session."""
    return list(Event.objects.filter(session=session, type="turn_start").order_by("seq").values_list("seq", "time"))


def turn_summaries(session: Session) -> list[dict]:
    """One row per turn, grouped along the (session, turn_seq, seq) index with no `data` read: its first and last
    times, its turn_end's seq and time (None while open), how many events, steps and dispatches it holds."""
    rows = Event.objects.filter(session=session, turn_seq__isnull=False).values("turn_seq").annotate(
        first=Min("time"), last=Max("time"), events=Count("seq"),
        end_seq=Max("seq", filter=Q(type="turn_end")), ended=Max("time", filter=Q(type="turn_end")),
        steps=Count("seq", filter=Q(type="step_start")), calls=Count("seq", filter=Q(type="tool_call")),
    )  # fmt: skip
    return list(rows.order_by("turn_seq"))


def turn_end_reasons(session: Session, seqs: list[int]) -> dict[int, object]:
    """seq -> the `reason` of the turn_ends at `seqs`."""
    found = {}
    for i in range(0, len(seqs), IN_BATCH):
        found.update(Event.objects.filter(session=session, seq__in=seqs[i : i + IN_BATCH]).values_list("seq", "data__reason"))
    return found


def turn_usages(session: Session, turns: list[int]) -> dict[int, list[tuple[Usage, datetime]]]:
    """turn -> its usage kept at append time, by model, provider and hour (never a log re-read): priced by the
    timeline only for the bars it draws."""
    found: dict[int, list[tuple[Usage, datetime]]] = {}
    fields = ("turn_seq", "model", "provider", "hour", *KINDS)
    for i in range(0, len(turns), IN_BATCH):
        for row in UsageSum.objects.filter(session_id=session.pk, turn_seq__in=turns[i : i + IN_BATCH]).order_by("turn_seq", "hour").values(*fields):
            found.setdefault(row["turn_seq"], []).append((usage_of_row(row), row["hour"]))
    return found
