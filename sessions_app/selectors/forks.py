"""Forks: where a session may be forked, a free id for the fork, and the tree of parents and forks."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sessions_app.log import events as log_events
from sessions_app.log import fork
from sessions_app.models import Event, Session
from sessions_app.selectors.events import steps_open_at, to_log_events


@dataclass(frozen=True)
class ForkPoint:
    """A resolved, allowed fork boundary of a session."""

    seed_length: int
    step_stack: list[int]  # steps still open after the last inherited event


def fork_point(session: Session, boundary: object) -> ForkPoint:
    """Resolve `boundary` against the stored log; raise fork.ForkRefused as section 5 says.

    Uses the structural columns (which turn_end closed which turn_start), so
    the check does not read the events themselves.
    """
    seed_length = fork.resolve_boundary(boundary, session.event_count)
    unclosed = open_turn_starts_before(session, seed_length)
    if unclosed:
        innermost = unclosed[-1]
        refusal = fork.open_turn_refusal(seed_length - 1, innermost, turn_closed_at(session, innermost.seq))
        refusal.fields["valid_boundaries"] = valid_boundaries_around(session, unclosed[0].seq)
        raise refusal
    return ForkPoint(seed_length=seed_length, step_stack=steps_open_at(session, seed_length))


def open_turn_starts_before(session: Session, seq: int) -> list[log_events.Event]:
    """turn_start events before `seq` still open there, outermost first.

    As for steps (steps_open_at): still open now, or closed by a turn_end at
    or after `seq`; so the cost follows what comes after `seq`, not the log.
    """
    events = Event.objects.filter(session=session)
    closed_later = events.filter(type="turn_end", seq__gte=seq, turn_seq__lt=seq).values_list("turn_seq", flat=True)
    open_seqs = {t for t in session.turn_stack if t < seq} | set(closed_later)
    return to_log_events(events.filter(seq__in=open_seqs).order_by("seq")) if open_seqs else []


def valid_boundaries_around(session: Session, outermost_open: int) -> dict:
    """The nearest allowed boundaries around a turn open at a boundary.

    Before: the event just before the outermost open turn began (nothing is
    open there). After: the turn_end that closes that turn, if any.
    """
    return {"before": outermost_open - 1 if outermost_open > 0 else None, "after": turn_closed_at(session, outermost_open)}


def turn_closed_at(session: Session, turn_seq: int) -> int | None:
    """The seq of the turn_end that closed the turn opened at `turn_seq` (None: still open)."""
    closing = Event.objects.filter(session=session, type="turn_end", turn_seq=turn_seq)
    return closing.order_by("seq").values_list("seq", flat=True).first()


def unused_fork_id(parent: Session, seq: int) -> str:
    """A readable id, not taken yet, for a fork of `parent` ending at `seq`: "<parent>-fork-<seq>",
    then "-2", "-3"...; the parent's part is cut so that it fits the 128-character id rule."""
    suffix = f"-fork-{seq}" if seq >= 0 else "-fork"
    stem = parent.id[: 128 - len(suffix) - 8] + suffix  # room for "-<n>"
    taken = set(Session.objects.filter(id__startswith=stem).values_list("id", flat=True))
    return next(name for n in itertools.count(1) if (name := stem if n == 1 else f"{stem}-{n}") not in taken)


@dataclass(frozen=True)
class Lineage:
    ancestors: list[Session]  # root first, the immediate parent last
    descendants: list[tuple[Session, int]]  # depth-first, with depth (1 = a direct fork)


def forks_of(session: Session) -> list[Session]:
    """The session's direct forks, oldest first (the header lists them)."""
    return list(session.forks.order_by("created_at", "id"))


def lineage(session: Session) -> Lineage:
    """The chain of parents and the tree of forks around a session (one query per node)."""
    ancestors, current = [], session
    while current.parent_id is not None:
        current = Session.objects.get(pk=current.parent_id)
        ancestors.append(current)
    descendants: list[tuple[Session, int]] = []

    def visit(node: Session, depth: int) -> None:
        for child in Session.objects.filter(parent=node).order_by("created_at", "id"):
            descendants.append((child, depth))
            visit(child, depth + 1)

    visit(session, 1)
    return Lineage(ancestors=ancestors[::-1], descendants=descendants)
