"""Verdicts from a call's card: a person who may recover the session records what they found out, or withdraws it.

Every write goes through sessions_app.services.verdicts (which checks the recover
permission and publishes on commit, so every open page of the session re-renders
the card and the ledger panel). The form is posted with htmx; the answer is the
call's card as a reload shows it, or with a refused input the card again with
the form holding what was typed and the reason beside its field (200: htmx swaps
only 2xx answers; 422 without htmx). Nothing is stored then.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_POST

from dashboard.pages import notes, transcript
from dashboard.pages.blocks import Block, ToolCard
from sessions_app import selectors
from sessions_app.lib import errors
from sessions_app.models import Session
from sessions_app.selectors import access
from sessions_app.services.verdicts import record_verdict, withdraw_verdict

RECORD, WITHDRAW = "record", "withdraw"


def card_of(session: Session, call_id: str) -> tuple[Block, ToolCard] | None:
    """The call's card in its block, as a reload (or the page of its turn opened) shows it; None if it has none."""
    calls = selectors.call_lookups(session, {call_id})
    dispatched = [e.seq for e in calls.events if e.type == "tool_call"]
    seq = min([*calls.sightings.get(call_id, ()), *dispatched], default=None)
    if seq is None:
        return None
    turn = selectors.turns_of(session, {seq}).get(seq)
    seqs, layouts, pages = {seq}, None, None
    if turn is not None:
        layouts = {t: transcript.TurnLayout(t, last) for t, last in selectors.turn_last_seqs(session, {turn}).items()}
        pages = {turn: transcript.pages_shown(layouts[turn].page_count) | {transcript.page_number(turn, seq)}}
        answers = {e.seq for e in calls.events}
        seqs |= {s for s, t in selectors.turns_of(session, answers).items() if t == turn and transcript.page_number(turn, s) in pages[turn]}
    events, placement = selectors.placed_events_at(session, seqs)
    for block in transcript.Builder(session).build(events, placement, layouts=layouts, pages=pages):
        for card in block.cards:
            if card.id == call_id:
                return block, card
    return None


@login_required
@require_POST
def call_verdict(request, session_id: str):
    """POST call_id and action (record: outcome, evidence, external_ref; withdraw: reason): the call's card again."""
    actor = access.actor_of(request)
    try:
        session = access.session_for(actor, session_id, access.READ)
    except errors.SessionNotFound:
        raise Http404(f"No session {session_id!r}") from None
    call_id = request.POST.get("call_id", "")
    action = request.POST.get("action", RECORD)
    typed = {
        "outcome": request.POST.get("outcome", ""), "evidence": request.POST.get("evidence", ""),
        "external_ref": request.POST.get("external_ref", ""), "reason": request.POST.get("reason", ""), "action": action,
    }  # fmt: skip
    refused = None
    try:
        if action == WITHDRAW:
            withdraw_verdict(actor=actor, session_id=session_id, call_id=call_id, reason=typed["reason"].strip() or None)
        elif action == RECORD:
            record_verdict(
                actor=actor, session_id=session_id, call_id=call_id, outcome=typed["outcome"] or None,
                evidence=typed["evidence"], external_ref=typed["external_ref"] or None,
            )  # fmt: skip
        else:
            refused = errors.InvalidVerdict("action", "invalid_action", f"action must be {RECORD} or {WITHDRAW}")
    except access.Forbidden as forbidden:
        raise PermissionDenied(forbidden.detail) from None
    except (errors.CallNotFound, errors.SessionNotFound) as missing:
        raise Http404(str(missing)) from None
    except errors.InvalidVerdict as invalid:
        refused = invalid
    except errors.VerdictNotFound as gone:  # withdrawn meanwhile (another tab): the card says how it stands now
        refused = errors.InvalidVerdict("action", "no_current_verdict", str(gone))
    found = card_of(session, call_id)
    if found is None:
        raise Http404(f"No card for call {call_id!r} in session {session_id!r}")
    block, card = found
    if refused is not None:
        card.verdict_form = {**typed, "error": refused}
    context = {
        "session": session,
        "can_fork": actor.can(session.project_id, access.FORK),
        "note_rights": notes.note_rights(actor, session.project_id),
        "highlight": range(0),
        "block": block,
        "card": card,
    }
    status = 422 if refused is not None and not request.htmx else 200
    return render(request, "sessions/detail.html#tool-card", context, status=status)
