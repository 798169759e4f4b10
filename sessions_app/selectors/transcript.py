"""The reads behind the transcript, the raw log and fork spots: indexed lookups whose cost
follows what a page shows, not the log's length."""

from __future__ import annotations

from datetime import datetime

from collections.abc import Callable, Iterable

from django.db.models import Max, OuterRef, Subquery

from sessions_app.log import events as log_events
from sessions_app.log.recovery import TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN
from sessions_app.models import CallSighting, Event, LedgerCall, Session
from sessions_app.selectors.events import placed_log_events, to_log_events

IN_BATCH = 500  # values per IN (...) list: SQLite's variable limit
CHUNK = 256  # rows of a few small columns read at a time, backwards

Placement = dict[int, tuple[int | None, int | None]]  # seq -> (turn_seq, step_seq)


# The transcript's blocks ---------------------------------------------------


def latest_block_starts(session: Session, *, before: int | None, count: int) -> list[int]:
    """Seqs of the last `count` block starts before `before`, newest first.

    A block starts at an event outside any turn or at a turn's own turn_start.
    Read backwards a few small columns at a time along the unique (session, seq)
    index; an event inside a turn jumps to that turn's start, past the turns
    nested in it (found on the (session, turn_seq, seq) index), so the cost
    follows the blocks found, not the length of the log or of a turn.
    """
    end = session.event_count if before is None else min(before, session.event_count)
    starts: list[int] = []
    while end > 0 and len(starts) < count:
        rows = Event.objects.filter(session=session, seq__lt=end).order_by("-seq").values_list("seq", "type", "turn_seq")[:CHUNK]
        rows = list(rows)
        if not rows:
            break
        lowest = rows[-1][0]
        for seq, type_, turn_seq in rows:
            if seq >= end:
                continue  # passed over by a jump
            if turn_seq is None or (type_ == "turn_start" and turn_seq == seq):
                starts.append(seq)
            elif turn_seq < lowest:  # inside a turn begun before these rows: its nested turns are blocks, then the turn
                nested = Event.objects.filter(session=session, turn_seq__gt=turn_seq, turn_seq__lt=seq).values_list("turn_seq", flat=True)
                starts += sorted(set(nested), reverse=True) + [turn_seq]
                seq = turn_seq
            end = seq
            if len(starts) >= count:
                break
    return starts[:count]


def placed_events_from(session: Session, first: int, *, before: int | None = None) -> tuple[list[log_events.Event], Placement]:
    """The events from seq `first` on (before seq `before`), in seq order, and where each stands."""
    window = Event.objects.filter(session=session, seq__gte=first)
    if before is not None:
        window = window.filter(seq__lt=before)
    return placed_log_events(window.order_by("seq"))


def block_start_columns(session: Session, seqs: set[int]) -> dict[int, tuple[str, int | None]]:
    """seq -> (type, turn_seq) of the events at `seqs`."""
    rows = Event.objects.filter(session=session, seq__in=seqs).values_list("seq", "type", "turn_seq")
    return {seq: (type_, turn_seq) for seq, type_, turn_seq in rows}


def turns_of(session: Session, seqs: Iterable[int]) -> dict[int, int | None]:
    """seq -> turn_seq (None outside every turn) of the stored events at `seqs`."""
    wanted = sorted(set(seqs))
    found: dict[int, int | None] = {}
    for i in range(0, len(wanted), IN_BATCH):
        found.update(Event.objects.filter(session=session, seq__in=wanted[i : i + IN_BATCH]).values_list("seq", "turn_seq"))
    return found


def turn_last_seqs(session: Session, turns: Iterable[int]) -> dict[int, int]:
    """turn -> its last seq: its turn_end's, or for an open turn its latest event's (the (session, turn_seq, seq) index)."""
    turns = sorted(set(turns))
    if not turns:
        return {}
    # A closed turn's turn_end is its last event: one end of the index range each, read by a subquery per turn_start.
    latest = Event.objects.filter(session=session, turn_seq=OuterRef("seq")).order_by("-seq").values("seq")[:1]
    rows = Event.objects.filter(session=session, seq__in=turns).annotate(last=Subquery(latest)).values_list("seq", "last")
    return {turn: last for turn, last in rows if last is not None}


def merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive seq ranges, sorted, touching ones joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(r for r in ranges if r[0] <= r[1]):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def placed_events_in(session: Session, ranges: Iterable[tuple[int, int]]) -> tuple[list[log_events.Event], Placement]:
    """The events in the inclusive seq ranges, in seq order, and where each stands: one range read of the
    (session, seq) index per run of touching ranges."""
    events: list[log_events.Event] = []
    placement: Placement = {}
    for first, last in merged(ranges):
        found, placed = placed_log_events(Event.objects.filter(session=session, seq__gte=first, seq__lte=last).order_by("seq"))
        events += found
        placement |= placed
    return events, placement


def placed_events_at(session: Session, seqs: Iterable[int]) -> tuple[list[log_events.Event], Placement]:
    """The events at `seqs`, in seq order, and where each stands."""
    return placed_log_events(Event.objects.filter(session=session, seq__in=sorted(set(seqs))).order_by("seq"))


def step_ends(session: Session, steps: Iterable[int]) -> dict[int, log_events.Event]:
    """step_start seq -> the step_end that closed it, for those of `steps` closed in their own turn (each read
    forwards from its step along the (session, turn_seq, seq) index, up to the first that closes it)."""
    found = {}
    turns = turns_of(session, steps)
    for step in sorted(set(steps)):
        rows = Event.objects.filter(session=session, turn_seq=turns.get(step), seq__gt=step, type="step_end", step_seq=step)
        if ended := to_log_events(rows.order_by("seq")[:1]):
            found[step] = ended[0]
    return found


def steps_closed_by(session: Session, step_ends: list[int]) -> set[int]:
    """The steps (their step_start seqs) that the step_ends at seqs `step_ends` close."""
    if not step_ends:
        return set()
    return set(Event.objects.filter(session=session, seq__in=step_ends).values_list("step_seq", flat=True)) - {None}


def last_seq_of_turn(session: Session, turn_seq: int, *, before: int) -> int | None:
    """The seq of the turn's latest event before seq `before`."""
    return Event.objects.filter(session=session, turn_seq=turn_seq, seq__lt=before).aggregate(last=Max("seq"))["last"]


def block_starts_in(session: Session, first: int, last: int) -> set[int]:
    """The first seqs of the blocks holding the events from `first` to `last`: their turns, or themselves outside every turn."""
    rows = Event.objects.filter(session=session, seq__gte=first, seq__lte=last).values_list("seq", "turn_seq")
    return {turn if turn is not None else seq for seq, turn in rows}


def steps_in_turn(session: Session, turn_seq: int) -> int:
    """How many step_starts a turn holds (read along the (session, turn_seq, seq) index)."""
    return Event.objects.filter(session=session, turn_seq=turn_seq, type="step_start").count()


def last_event_of_turn(session: Session, turn_seq: int, wanted: Callable[[log_events.Event], bool], *, chunk: int = 200) -> log_events.Event | None:
    """The turn's latest event that `wanted` accepts, read backwards `chunk` events at a time."""
    before = None
    while True:
        rows = Event.objects.filter(session=session, turn_seq=turn_seq)
        if before is not None:
            rows = rows.filter(seq__lt=before)
        page = to_log_events(rows.order_by("-seq")[:chunk])
        for event in page:
            if wanted(event):
                return event
        if len(page) < chunk:
            return None
        before = page[-1].seq


def owed_calls(session: Session, call_ids: Iterable[str]) -> dict[str, tuple[str, int]]:
    """call id -> (risk, rule) that recovery would answer now, for those of `call_ids` an open turn owes a result:
    the call ledger's facts read through log.recovery's risk table (rules 1 to 4)."""
    prep = LedgerCall._meta.get_field("call_id").get_prep_value
    ids = {prep(cid): cid for cid in call_ids}
    owed = {}
    keys = sorted(ids)
    for i in range(0, len(keys), IN_BATCH):
        rows = LedgerCall.objects.filter(session=session, call_id__in=keys[i : i + IN_BATCH], settled_state__isnull=True, owed_risk__isnull=False)
        for key, dispatched, turn_dispatched, step_seq, step_closed in rows.values_list("call_id", "dispatched", "turn_dispatched", "step_seq", "step_closed"):
            if dispatched:
                owed[ids[key]] = (TOOL_OUTCOME_UNKNOWN, 1)
            elif turn_dispatched:
                owed[ids[key]] = (TOOL_NOT_STARTED, 2)
            elif step_seq is not None and step_closed:
                owed[ids[key]] = (TOOL_NOT_STARTED, 3)
            else:
                owed[ids[key]] = (TOOL_OUTCOME_UNKNOWN, 4)
    return owed


def card_seq(session: Session, seq: int) -> int | None:
    """Where the card of the call a tool_result or tool_call at `seq` answers stands (its first sighting or
    dispatch); None for other events."""
    row = Event.objects.filter(session=session, seq=seq, type__in=("tool_result", "tool_call")).values_list("data", flat=True).first()
    cid = log_events.call_id(row) if isinstance(row, dict) else None
    if cid is None:
        return None
    sightings = CallSighting.objects.filter(session=session, call_id=cid).values_list("seq", flat=True)
    dispatches = Event.objects.filter(session=session, call_id=cid, type="tool_call").values_list("seq", flat=True)
    return min([*sightings, *dispatches], default=None)


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
