"""Where a fork may end: a ForkSpot for each event the transcript or the raw log shows.

A fork may end only outside every turn (session-log.md section 5); an event
inside one is named with the turn that encloses it and where that turn closes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessions_app import selectors
from sessions_app.log import fork as log_fork
from sessions_app.log.events import Event
from sessions_app.models import Session


@dataclass(frozen=True)
class ForkSpot:
    """Whether a fork may end at an event: only outside every turn (session-log.md section 5)."""

    seq: int
    turn_seq: int | None = None  # the innermost turn still open after the event; None: a fork may end here
    turn_number: object = None
    closed_at: int | None = None  # the turn_end closing that turn; None: still open

    @property
    def allowed(self) -> bool:
        return self.turn_seq is None

    @property
    def reason(self) -> str:
        return log_fork.inside_turn_reason(self.seq, self.turn_seq, self.turn_number, self.closed_at) + "."


def fork_spots(session: Session, placed: dict[int, tuple[str, int | None]], *, known: list[Event] = ()) -> dict[int, ForkSpot]:
    """Where a fork may end, for events placed as {seq: (type, turn_seq)}.

    An event outside any turn is a boundary, and so is a turn_end closing an
    outermost turn; anything else is inside a turn, named with where it
    closes. Reads the structural columns of the turns concerned, not the log,
    and only for the turns whose start or end the `known` events (those of
    `placed` already read) do not settle: a live frame holds its whole turn.
    """
    inside = {seq: turn for seq, (type_, turn) in placed.items() if turn is not None and type_ != "turn_end"}
    closing = {seq: turn for seq, (type_, turn) in placed.items() if turn is not None and type_ == "turn_end"}
    enclosing = selectors.enclosing_turns(session, set(closing.values()))
    inside |= {seq: enclosing[turn] for seq, turn in closing.items() if turn in enclosing}
    turns = set(inside.values())
    known_starts = {e.seq: e.data for e in known if e.seq in turns}
    # An open turn has no turn_end yet; a closed one's is known when it was read.
    closed_at: dict[int, int] = {closing[e.seq]: e.seq for e in known if e.seq in closing}
    settled = {turn for turn in turns if turn in closed_at or turn in session.turn_stack}
    starts = known_starts.items()
    if unread := turns - known_starts.keys():
        starts = [*starts, *selectors.turn_start_data(session, unread)]
    numbers = {seq: data.get("turn") for seq, data in starts if isinstance(data, dict)}
    if unsettled := turns - settled:
        closed_at |= selectors.turns_closed_at(session, unsettled)
    return {
        seq: ForkSpot(seq, inside[seq], numbers.get(inside[seq]), closed_at.get(inside[seq])) if seq in inside else ForkSpot(seq)
        for seq in placed
    }
