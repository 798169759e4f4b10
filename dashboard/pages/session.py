"""The session pages' header and tab bar: the same inputs for a page load and for every live frame.

A live frame used to re-render pieces of the header from inputs of its own
(the status pill, the open-turn alert), so "last activity", "Fork whole
session", the recovery prompt and the Recovery tab's count kept what the page
had loaded while a reload told another story. Now the page view and
the frames both take the header and tab bar's inputs from `header_context`,
and frames send the whole header and tab bar as out-of-band swaps.

`header_fingerprint` is what of those inputs can change without any event
(a fork made of this session, the automatic recovery's "repeated failures"
flag, the status turning stalled with silence): the pages' status watch
re-sends the header when it changes.
"""

from __future__ import annotations

from django.template.loader import render_to_string

from dashboard.pages import transcript
from dashboard.pages.blocks import Block
from sessions_app import selectors
from sessions_app.log import pricing
from sessions_app.models import Session
from sessions_app.selectors import usage as usage_reads

TRANSCRIPT, RAW = "transcript", "raw"


def page_session(session_id: str) -> Session:
    """The session as the header shows it (its project's name read with it)."""
    return selectors.session_for_page(session_id)


def header_context(session: Session, *, can_fork: bool, tab: str) -> dict:
    """Everything _header.html and _tabs.html read, from the database."""
    forks = selectors.forks_of(session)
    selectors.mark_unknown_settled([session])  # the summary's "all unknown calls settled"
    return {
        "session": session,
        "status": session.status,
        "header_state": fingerprint(session, len(forks)),
        "forks": forks,
        "bill": session_bill(session),
        "recoveries": selectors.recovery_history(session),
        "can_fork": can_fork,
        "view": tab,
        "tab": tab,
    }


def session_bill(session: Session) -> pricing.Bill:
    """The session's usage priced now (a project's new price shows at once); no read for a session without usage."""
    if not session.tokens and not session.models_used:
        return pricing.Bill()
    return usage_reads.session_bill(session)


def header_swaps(context: dict) -> str:
    """The header and the tab bar as out-of-band swaps, rendered from `header_context`'s inputs."""
    swapped = {**context, "swap_oob": True}
    return render_to_string("sessions/_header.html", swapped).strip() + render_to_string("sessions/_tabs.html", swapped).strip()


def fingerprint(session: Session, forks_made: int) -> str:
    """What of the header can change with no event appended: its status, its forks, its flags.

    The header carries it (data-state), and the page's socket says which one its page shows.
    """
    held = session.repeated_failures_at.isoformat() if session.repeated_failures_at else "-"
    return f"{session.status} {forks_made} {held}"


def header_fingerprint(session_id: str) -> str:
    session = selectors.session_with_forks_made(session_id)
    return fingerprint(session, session.forks_made)


def status_in(state: str) -> str:
    """The status a fingerprint names."""
    return state.split(" ", 1)[0]


def status_blocks(session: Session) -> list[Block]:
    """The blocks whose rendering follows the session's status rather than its events: the open turns
    (pending calls, then what recovery would say) and the latest page's (a call with no result reads
    pending while the session is active, no_result once it went quiet), as a reload shows them."""
    blocks = {block.key: block for block in transcript.latest_window(session).blocks}
    blocks |= {block.key: block for block in transcript.read_blocks(session, list(session.turn_stack))}
    return sorted(blocks.values(), key=lambda block: block.first_seq)


def blocks_follow(before: str, after: str) -> bool:
    """Whether blocks render otherwise once the status went from `before` to `after` with no event.

    A card reads by whether the session may still answer its call (running or
    active) and, in an open turn, by whether it stalled (log.ledger.decide, api.md's rules 5 and 6).
    A busy session going between running and active changes neither: only its header is re-sent.
    """
    answering = (selectors.RUNNING, selectors.ACTIVE)
    return (before in answering, before == selectors.STALLED) != (after in answering, after == selectors.STALLED)
