"""What changed since a page showed the recovery plan: the `#plan-change` banner's inputs.

The recovery page shows a plan bound to the log's length by its digest (the same digest
the confirm POST sends back). The page, its live frame (dashboard.live.recovery) and a
stale confirm's refusal render `sessions/_plan_change.html` from `plan_change_context`,
so all three tell the same story.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.template.loader import render_to_string

from sessions_app import selectors
from sessions_app.lib.params import decimal_int
from sessions_app.log import recovery as log_recovery
from sessions_app.models import Session

DIGEST = re.compile(r"[0-9a-f]{64}")
PARTIAL = "sessions/_plan_change.html"


@dataclass(frozen=True)
class PlanChange:
    """How the session's plan differs from the one a page showed (its next_seq and digest)."""

    interrupted: bool  # something to recover now
    was_interrupted: bool  # something to recover in the plan shown
    first_seq: int | None  # the events appended since: None when the page's next_seq is unknown
    last_seq: int | None
    recovered_by: list[str] = field(default_factory=list)  # who recovered or patched the session since
    # No event arrived, yet the digest differs: only a call's verdict (in the repairs' data) does that.
    verdict_changed: bool = False

    @property
    def count(self) -> int | None:
        return None if self.first_seq is None else self.last_seq - self.first_seq + 1

    @property
    def closed(self) -> bool:
        """The plan shown had a turn to recover, and now nothing is left to recover."""
        return self.was_interrupted and not self.interrupted


def plan_change(
    session: Session, *, shown_next_seq: int | None, shown_digest: str, plan: log_recovery.Plan | None = None
) -> PlanChange | None:
    """The change since a page showed the plan (`shown_next_seq`, `shown_digest`); None when it is still the plan.

    A `shown_next_seq` past the log's end (no page showed that) counts as unknown; the same length
    with another digest (no page of this log showed it) says no event arrived: the count is unknown too.
    """
    plan = plan if plan is not None else selectors.recovery_plan(session)
    if plan.digest(session.event_count) == shown_digest:
        return None
    if shown_next_seq is None or shown_next_seq > session.event_count:
        return PlanChange(interrupted=plan.interrupted, was_interrupted=False, first_seq=None, last_seq=None)
    appended = range(shown_next_seq, session.event_count)
    records = [r for r in selectors.recovery_history(session) if r.first_seq >= shown_next_seq]
    return PlanChange(
        interrupted=plan.interrupted,
        was_interrupted=bool(selectors.open_turn_starts_before(session, shown_next_seq)),
        first_seq=appended.start if appended else None,
        last_seq=appended[-1] if appended else None,
        recovered_by=sorted({r.username for r in records}),
        verdict_changed=not appended,
    )


def shown_plan(data) -> tuple[int | None, str]:
    """The plan a page or form says it showed: (next_seq, or None when absent or no seq; digest)."""
    text = data.get("next_seq", "")
    # A seq has at most 19 digits (bigint); int() would refuse a number of over 4,300 with an error.
    return (decimal_int(text, name="next_seq") if len(text) <= 19 else None), data.get("digest", "")


def plan_change_context(session: Session, *, shown_next_seq: int | None, shown_digest: str, plan=None) -> dict:
    """The inputs of `sessions/_plan_change.html` for the page and the live frame alike."""
    return {"session": session, "change": plan_change(session, shown_next_seq=shown_next_seq, shown_digest=shown_digest, plan=plan)}


def render_plan_change_frame(session_id: str, shown_next_seq: int, shown_digest: str, last_seq: int) -> str:
    """The banner as an out-of-band swap, then the cursor (last, as in the session page's frames)."""
    session = selectors.session_for_page(session_id)
    context = plan_change_context(session, shown_next_seq=shown_next_seq, shown_digest=shown_digest)
    banner = render_to_string(PARTIAL, {**context, "oob": True}).strip()
    return banner + f'<span id="live-cursor" data-last-seq="{last_seq}" hidden hx-swap-oob="true"></span>'
