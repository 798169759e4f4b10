"""Comparing two sessions (log.compare): the prefix they share, their continuations and the calls each made.

The cost follows the continuations, never the prefix: what a fork inherited is known from its
`parent`/`seed_length` (a fork's first events are its ancestor's, copied), so a fork of a 100,000-event
parent reads only what each wrote after the fork. Past what the lineage vouches for (all of it, for two
unrelated sessions) the two logs are read side by side CHUNK events at a time until they differ, and no
further than SCAN_LIMIT events (then the comparison says so). Each continuation is shown up to WINDOW
events, and up to EFFECTS calls of each are listed.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from sessions_app.log import compare as log_compare
from sessions_app.models import LedgerCall, Session
from sessions_app.selectors.events import events_since
from sessions_app.selectors.forks import open_turn_starts_before
from sessions_app.selectors.ledger import as_of, call_rows, levels_of
from sessions_app.selectors.policies import project_policies

CHUNK = 500  # events of each log read at a time while looking for where they part
SCAN_LIMIT = 20_000  # events compared past what the lineage vouches for
WINDOW = 500  # events of each continuation shown
EFFECTS = 200  # calls of each continuation listed


@dataclass(frozen=True)
class Side:
    session: Session
    name: str  # how the page calls it: "the parent", "the fork", or the session's id
    shown: int  # events of its continuation shown
    more: int  # events of its continuation past those shown
    effects_cut: bool  # it made more calls than are listed


@dataclass(frozen=True)
class SessionComparison:
    left: Side
    right: Side
    inherited: int  # how many events of the prefix the lineage vouches for (0 for unrelated sessions)
    scan_capped: bool  # the logs still agreed after SCAN_LIMIT events compared: the prefix may be longer
    comparison: log_compare.Comparison

    @property
    def prefix(self) -> int:
        return self.comparison.prefix


def inherited_length(a: Session, b: Session) -> int:
    """How many first events `a` and `b` share by descent: the events of their nearest common ancestor (or of
    one of them) that both hold as copies. One query per ancestor."""
    chain_a, chain_b = _chain(a), _chain(b)
    for session_id, bound in chain_a.items():
        if session_id in chain_b:
            return min(bound, chain_b[session_id])
    return 0


def _chain(session: Session) -> dict[str, int]:
    """The session and its ancestors, nearest first, each with how many of its first events this session holds."""
    chain = {session.id: session.event_count}
    parent_id, bound = session.parent_id, session.seed_length
    while parent_id is not None and parent_id not in chain:
        chain[parent_id] = bound
        found = Session.objects.filter(pk=parent_id).values_list("parent_id", "seed_length").first()
        if found is None:
            break
        parent_id, bound = found[0], min(bound, found[1])
    return chain


def side_names(left: Session, right: Session) -> tuple[str, str]:
    if right.parent_id == left.id:
        return "the parent", "the fork"
    if left.parent_id == right.id:
        return "the fork", "the parent"
    return left.id, right.id


def compare_sessions(left: Session, right: Session) -> SessionComparison:
    """`right` (the page's session) compared with `left` (its parent, or the session asked for)."""
    inherited = inherited_length(left, right)
    prefix, capped, left_read, right_read = _parting(left, right, inherited)
    left_events, right_events = _window(left, prefix, left_read), _window(right, prefix, right_read)
    # A prefix the lineage vouches for ends where a fork may: outside every turn (log.fork).
    open_turns = 0 if prefix == inherited else len(open_turn_starts_before(right, prefix))
    # Every call either wrote itself happened in it, even past the lineage while the logs still agree (a fork
    # that made its parent's call again): only the inherited calls, made once, are left out.
    left_effects, left_cut = continuation_effects(left, inherited)
    right_effects, right_cut = continuation_effects(right, inherited)
    comparison = log_compare.compare(
        prefix, left_events, right_events, open_turns=open_turns, left_effects=left_effects, right_effects=right_effects
    )
    names = side_names(left, right)
    sides = [
        Side(session, name, len(events), max(0, session.event_count - prefix - len(events)), cut)
        for session, name, events, cut in ((left, names[0], left_events, left_cut), (right, names[1], right_events, right_cut))
    ]
    return SessionComparison(sides[0], sides[1], inherited, capped, comparison)


def _parting(left: Session, right: Session, start: int) -> tuple[int, bool, list, list]:
    """Where the two logs part, from `start` on: read CHUNK events of each at a time (never both logs
    whole), stopping at the first difference, at the end of either, or after SCAN_LIMIT events (capped).
    With the events of each already read from there on (the start of each continuation)."""
    position = start
    while True:
        if position - start >= SCAN_LIMIT:
            return position, True, [], []
        size = min(CHUNK, start + SCAN_LIMIT - position)
        a = events_since(left, since=position, limit=size)
        b = events_since(right, since=position, limit=size)
        same = log_compare.common_length(a, b)
        position += same
        if same < size or len(a) < size or len(b) < size:
            return position, False, a[same:], b[same:]


def _window(session: Session, since: int, read: list) -> list:
    """WINDOW events of the session from `since`, those already read first."""
    rest = since + len(read)
    if len(read) >= WINDOW or rest >= session.event_count:
        return read[:WINDOW]
    return read + events_since(session, since=rest, limit=WINDOW - len(read))


def continuation_effects(session: Session, since: int) -> tuple[list[log_compare.Effect], bool]:
    """The first EFFECTS calls first sighted at `since` or later, each with its state as the ledger reads it,
    and whether there are more. A fork's calls below its seed are its ancestors' rows, read as it inherited them."""
    rows = _ledger_rows_from(session, since, EFFECTS + 1)
    policies = project_policies(session.project_id)
    listed = call_rows(session, rows[:EFFECTS], session.status, True, policies)
    effects = [
        log_compare.Effect(row.call.seq, row.call.call_id, row.call.name, row.call.arguments, row.call.state, row.side_effect)
        for row in listed
    ]
    return effects, len(rows) > EFFECTS


def _ledger_rows_from(session: Session, since: int, limit: int) -> list[LedgerCall]:
    """The call ledger's rows of the session's calls first sighted at `since` or later, oldest first, at most `limit`:
    its own, and for a fork its ancestors' below its seed (those it holds no copy of), by the (session, seq) index."""
    levels = levels_of(session)
    streams = []
    for k, level in enumerate(levels):
        rows = LedgerCall.objects.filter(session_id=level.session_id, seq__gte=since)
        if level.boundary is not None:
            if level.boundary <= since:
                break
            rows = rows.filter(seq__lt=level.boundary)
            # The calls a nearer session holds its own row of (a fork's copies on write: few).
            nearer = LedgerCall.objects.filter(session_id__in=[n.session_id for n in levels[:k]], seq__gte=since, seq__lt=level.boundary)
            rows = rows.exclude(call_id__in=list(nearer.values_list("call_id", flat=True)))
        found = rows.order_by("seq", "id")[:limit]
        streams.append([row if level.boundary is None else as_of(row, level.boundary, session) for row in found])
    return list(heapq.merge(*streams, key=lambda row: row.seq))[:limit]
