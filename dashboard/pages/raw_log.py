"""The raw log tab: the session's events as stored, a page at a time, each with the
summary that shadows it and whether a fork may end there."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dashboard.pages.blocks import Value, cut_at_word
from dashboard.pages.fork_spots import ForkSpot, fork_spots
from dashboard.pages.transcript import shadowed_by
from sessions_app import selectors
from sessions_app.log.events import Event
from sessions_app.models import Session

RAW_PAGE = 200
RAW_PREVIEW_CHARS = 120
RESHADOW_ROWS = 5000


@dataclass
class RawRow:
    event: Event
    data: Value
    shadowed_by: int | None
    fork: ForkSpot

    @property
    def preview(self) -> str:
        """The start of the data on one line, cut at a word."""
        cut = cut_at_word(self.data.text, RAW_PREVIEW_CHARS)
        return cut if len(cut) == len(self.data.text) else cut + "…"


@dataclass
class RawPage:
    rows: list[RawRow]
    first_seq: int  # of the page (its end when empty)
    earlier_before: int | None  # where the previous page ends; None at the start of the log
    live: bool  # the latest page follows new events


def raw_rows(session: Session, events: list[Event], replaces: list[tuple[int, int, int]]) -> list[RawRow]:
    """The rows of `events`, with their receive times from storage (a live frame's events come from the wire, which has none)."""
    seqs = {e.seq for e in events}
    stored = selectors.stored_columns(session, seqs)
    spots = fork_spots(session, {seq: (t, turn) for seq, (t, turn, _) in stored.items()})
    return [
        RawRow(replace(e, received_at=stored[e.seq][2]), Value.of(e.data), shadowed_by(e, replaces), spots[e.seq])
        for e in events
    ]


def raw_page(session: Session, *, before: int | None = None) -> RawPage:
    """RAW_PAGE events ending before `before` (default: the latest ones, which follow the log live)."""
    end = session.event_count if before is None else max(0, min(before, session.event_count))
    start = max(end - RAW_PAGE, 0)
    rows = raw_rows(session, selectors.events_since(session, since=start, limit=end - start), selectors.compactions(session))
    return RawPage(rows, start, start if start > 0 else None, live=end == session.event_count)


def raw_frame_rows(session: Session, new_events: list[Event], *, first_shown: int, shown_through: int) -> tuple[list[RawRow], list[RawRow]]:
    """The rows of new_events, and the rows already on a raw page (seqs
    first_shown..shown_through) that a summary among new_events now shadows,
    or whose turn a turn_end among them closes (their fork label names it).

    Only the latest RESHADOW_ROWS rows are checked, whatever `first_shown` a
    client claims; older rows of a page left open for long keep their badge
    until it is reloaded.
    """
    replaces = selectors.compactions(session)
    rows = raw_rows(session, new_events, replaces)
    new = {seq: start for seq, start, _ in replaces if seq >= new_events[0].seq}
    ends = [e.seq for e in new_events if e.type == "turn_end"]
    closed = selectors.turns_closed_by(session, ends)
    # A row's position is its seq, or a summary's own range start (never after its seq).
    since = max(first_shown, min([*new.values(), *closed], default=shown_through + 1), shown_through + 1 - RESHADOW_ROWS)
    if since > shown_through:
        return rows, []
    shown = selectors.events_since(session, since=since, limit=shown_through - since + 1)
    return rows, [row for row in raw_rows(session, shown, replaces) if row.shadowed_by in new or row.fork.turn_seq in closed]
