"""The reads behind the transcript, the raw log and fork spots: indexed lookups whose cost
follows what a page shows, not the log's length."""

from __future__ import annotations

from datetime import datetime

from sessions_app.log import events as log_events
from sessions_app.models import CallSighting, Event, Session
from sessions_app.selectors.events import placed_log_events, to_log_events

Placement = dict[int, tuple[int | None, int | None]]  # seq -> (turn_seq, step_seq)


# The transcript's blocks ---------------------------------------------------


def latest_block_starts(session: Session, *, before: int | None, count: int) -> list[int]:
    """Seqs of the last `count` block starts before `before`, newest first.

    A block starts at an event outside any turn or at a turn's own turn_start.
    Read backwards in growing seq ranges of the unique (session, seq) index,
    a few small columns at a time, so the cost follows the blocks shown, not
    the length of the log.
    """
    end = session.event_count if before is None else min(before, session.event_count)
    starts: list[int] = []
    span = 256
    while end > 0 and len(starts) < count:
        low = max(end - span, 0)
        rows = Event.objects.filter(session=session, seq__gte=low, seq__lt=end).order_by("-seq")
        starts += [seq for seq, type_, turn_seq in rows.values_list("seq", "type", "turn_seq") if turn_seq is None or (type_ == "turn_start" and turn_seq == seq)]
        end, span = low, span * 2
    return starts[:count]


def placed_events_from(session: Session, first: int, *, before: int | None = None) -> tuple[list[log_events.Event], Placement]:
    """The events from seq `first` on (before seq `before`), in seq order, and where each stands."""
    window = Event.objects.filter(session=session, seq__gte=first)
    if before is not None:
        window = window.filter(seq__lt=before)
    return placed_log_events(window.order_by("seq"))


def events_of_blocks_touched(session: Session, events: list[log_events.Event]) -> tuple[list[log_events.Event], Placement]:
    """Every stored event of the whole blocks that `events` touch, in seq order, and where each stands.

    A tool_result also touches the block where its call was made, so a late
    result updates that card.
    """
    seqs = [e.seq for e in events]
    placed = dict(Event.objects.filter(session=session, seq__in=seqs).values_list("seq", "turn_seq"))
    call_ids = {log_events.call_id(e.data) for e in events if e.type == "tool_result"} - {None}
    sighted = CallSighting.objects.filter(session=session, call_id__in=call_ids).values_list("seq", flat=True)
    for seq, turn_seq in Event.objects.filter(session=session, seq__in=list(sighted)).values_list("seq", "turn_seq"):
        placed[seq] = turn_seq
    for start, stop in {r for e in events if e.type in log_events.SURFACE_TYPES and (r := log_events.replace_range(e.data))}:
        # A new summary changes the blocks of the range it compacts.
        placed.update(Event.objects.filter(session=session, seq__gte=start, seq__lte=stop).values_list("seq", "turn_seq"))
    turns = {t for t in placed.values() if t is not None}
    loose = {seq for seq, t in placed.items() if t is None}
    # Two index lookups (by turn, by seq), merged here: an OR would scan the log.
    # A turn_start is in its own turn (turn_seq = seq): only events outside any turn need a second lookup.
    in_turns, in_turns_placed = placed_log_events(Event.objects.filter(session=session, turn_seq__in=turns))
    own, own_placed = placed_log_events(Event.objects.filter(session=session, seq__in=loose)) if loose else ([], {})
    touched = {e.seq: e for e in [*in_turns, *own]}
    return sorted(touched.values(), key=lambda e: e.seq), {**in_turns_placed, **own_placed}


def turn_starts_at(session: Session, seqs: list[int]) -> list[log_events.Event]:
    """The turn_starts at `seqs` (a session's or a recovery plan's open turns), in no particular order."""
    return to_log_events(Event.objects.filter(session=session, seq__in=seqs))


def events_at(session: Session, seqs: list[int]) -> list[log_events.Event]:
    """The stored events at `seqs` (those a note is pinned to), in no particular order."""
    return to_log_events(Event.objects.filter(session=session, seq__in=seqs))


def compactions(session: Session) -> list[tuple[int, int, int]]:
    """(seq, start, stop) of every compaction summary of the session (indexed; few)."""
    rows = Event.objects.filter(session=session, replace_start__isnull=False)
    return list(rows.values_list("seq", "replace_start", "replace_stop"))


# Where a fork may end ------------------------------------------------------


def enclosing_turns(session: Session, turns: set[int], *, steps: int = 4) -> dict[int, int]:
    """For each turn opened at a seq in `turns`, the innermost turn it is nested in (absent: none).

    The stack before a turn is the stack after the event just before it: that
    event's own turn, unless it is a turn_end, after which the stack is the
    one before the turn it closed. So this walks back over closed turns, one
    indexed query a step; the few turns still undecided after `steps` steps
    are decided by the turn_ends after them instead.
    """
    nested: dict[int, int] = {}
    asking = {turn: turn for turn in turns}  # turn -> the turn_start whose predecessor decides it
    for _ in range(steps):
        if not asking:
            return nested
        rows = Event.objects.filter(session=session, seq__in={start - 1 for start in asking.values()})
        before = {seq: (type_, turn) for seq, type_, turn in rows.values_list("seq", "type", "turn_seq")}
        walking = {}
        for turn, start in asking.items():
            type_, outer = before.get(start - 1, ("", None))
            if type_ == "turn_end" and outer is not None:
                walking[turn] = outer
            elif outer is not None:
                nested[turn] = outer
        asking = walking
    if asking:
        later_ends = Event.objects.filter(session=session, type="turn_end", seq__gt=min(asking), turn_seq__lt=max(asking))
        spans = [*later_ends.values_list("turn_seq", "seq"), *((t, None) for t in session.turn_stack)]
        for turn in asking:
            opened = [start for start, end in spans if start < turn and (end is None or end > turn)]
            if opened:
                nested[turn] = max(opened)
    return nested


def turn_start_data(session: Session, turns: set[int]) -> list[tuple[int, object]]:
    """(seq, data) of the turn_starts that opened `turns`."""
    return list(Event.objects.filter(session=session, seq__in=turns).values_list("seq", "data"))


def turns_closed_at(session: Session, turns: set[int]) -> dict[int, int]:
    """turn -> the seq of the turn_end that closed it, for those of `turns` that are closed."""
    return dict(Event.objects.filter(session=session, type="turn_end", turn_seq__in=turns).values_list("turn_seq", "seq"))


# The raw log ---------------------------------------------------------------


def stored_columns(session: Session, seqs: set[int]) -> dict[int, tuple[str, int | None, datetime | None]]:
    """seq -> (type, turn_seq, received_at) of the stored events at `seqs`, read as one seq range of the index."""
    in_range = Event.objects.filter(session=session, seq__gte=min(seqs, default=0), seq__lte=max(seqs, default=-1))
    return {seq: (t, turn, received) for seq, t, turn, received in in_range.values_list("seq", "type", "turn_seq", "received_at") if seq in seqs}


def turns_closed_by(session: Session, turn_ends: list[int]) -> set[int]:
    """The turns that the turn_ends at seqs `turn_ends` close (nothing read when there are none)."""
    if not turn_ends:
        return set()
    return set(Event.objects.filter(session=session, seq__in=turn_ends).values_list("turn_seq", flat=True)) - {None}
