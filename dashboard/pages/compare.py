"""The comparison page: a session against its parent (or any session the user can read, ?with=): the
shared prefix in one line, the two continuations side by side by turn with the first difference marked,
and the calls each continuation made, those made in both flagged (selectors.compare, log.compare)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from dashboard.pages.blocks import SIDE_EFFECT_LABELS, cut_at_word
from dashboard.pages.sessions import session_or_404
from sessions_app import selectors
from sessions_app.lib import errors
from sessions_app.log import compare as log_compare
from sessions_app.log.events import Event, json_integer
from sessions_app.log.search_text import event_searchable
from sessions_app.models import SESSION_ID_PATTERN
from sessions_app.selectors import access
from sessions_app.selectors import compare as comparing

GIST_CHARS = 160
ARGUMENTS_CHARS = 200
STRUCTURE = ("turn_start", "turn_end", "step_start", "step_end")


@dataclass(frozen=True)
class EventLine:
    event: Event
    gist: str
    first: bool  # the first event after the shared prefix (the first difference)


@dataclass(frozen=True)
class Cell:
    session_id: str
    line: EventLine | None


@dataclass(frozen=True)
class RowView:
    cells: tuple[Cell, Cell]  # left, right
    same: bool
    anchor: bool = False  # the first row holding a first difference (the page's #first-difference)

    @property
    def first(self) -> bool:
        return any(cell.line is not None and cell.line.first for cell in self.cells)


@dataclass(frozen=True)
class TurnView:
    left_label: str | None
    right_label: str | None
    rows: list[RowView]


@dataclass(frozen=True)
class EffectView:
    effect: log_compare.Effect
    arguments: str
    side_effect: str


@dataclass(frozen=True)
class EffectRowView:
    cells: tuple[EffectView | None, EffectView | None]  # left, right
    in_both: bool
    note: str | None


def gist(event: Event) -> str:
    """An event on one line: its text (message content, a call's name and arguments), or its turn and step numbers."""
    if event.type in STRUCTURE:
        parts = [f"{key} {n}" for key in ("turn", "step") if (n := json_integer(event.data.get(key))) is not None]
        parts += [str(event.data[key]) for key in ("reason", "outcome") if isinstance(event.data.get(key), str)]
        return " · ".join(parts)
    text = " ".join(event_searchable(event.type, event.data).text.split())
    cut = cut_at_word(text, GIST_CHARS)
    return cut if len(cut) == len(text) else cut + "…"


def one_line(value: object, limit: int) -> str:
    text = value if isinstance(value, str) else log_compare.canonical(value)
    cut = cut_at_word(text, limit)
    return cut if len(cut) == len(text) else cut + "…"


def compare_context(found: comparing.SessionComparison) -> dict:
    comparison = found.comparison
    left_id, right_id = found.left.session.id, found.right.session.id

    def line(event: Event | None) -> EventLine | None:
        if event is None:
            return None
        return EventLine(event, gist(event), comparison.parted and event.seq == comparison.prefix)

    def effect(value: log_compare.Effect | None) -> EffectView | None:
        if value is None:
            return None
        return EffectView(value, one_line(value.arguments, ARGUMENTS_CHARS), SIDE_EFFECT_LABELS.get(value.side_effect, value.side_effect))

    anchored = False

    def row_view(row) -> RowView:
        nonlocal anchored
        view = RowView((Cell(left_id, line(row.left)), Cell(right_id, line(row.right))), row.same)
        if view.first and not anchored:
            anchored = True
            return RowView(view.cells, view.same, anchor=True)
        return view

    turns = [
        TurnView(pair.left.label if pair.left else None, pair.right.label if pair.right else None, [row_view(row) for row in pair.rows])
        for pair in comparison.turns
    ]
    effects = [
        EffectRowView((effect(row.left), effect(row.right)), row.in_both, row.repeat_note(found.left.name, found.right.name))
        for row in comparison.effects
    ]
    return {"found": found, "comparison": comparison, "turns": turns, "effects": effects, "repeated": sum(row.in_both for row in effects),
            "scan_limit": comparing.SCAN_LIMIT}  # fmt: skip


@login_required
def session_compare(request, session_id: str):
    """?with=<session id> (default: the session's parent)."""
    session = session_or_404(request, session_id)
    context = {"session": session, "tab": "compare"}
    other_id = request.GET.get("with", "").strip()
    if not other_id:
        if session.parent_id is None:  # nothing to compare with yet: the form alone
            return render(request, "sessions/compare.html", {**context, "choose": True})
        other_id = session.parent_id
    refusal, status = None, 200
    if not re.fullmatch(SESSION_ID_PATTERN, other_id):
        refusal, status = f"?with= must be a session id (1 to 128 characters of A-Z a-z 0-9 . _ : -), not {other_id[:140]!r}", 400
    elif other_id == session.id:
        refusal, status = "?with= names this session itself: give another session to compare it with", 400
    else:
        try:
            other = access.session_for(access.actor_of(request), other_id)
        except (errors.SessionNotFound, access.Forbidden):  # unreadable reads as absent, as every page does
            refusal, status = f"?with=: there is no session {other_id!r} you can read", 404
    if refusal:
        return render(request, "sessions/compare.html", {**context, "refusal": refusal, "other_id": other_id}, status=status)
    found = selectors.compare_sessions(other, session)
    return render(request, "sessions/compare.html", {**context, "other_id": other_id, **compare_context(found)})
