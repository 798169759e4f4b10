"""The Timeline tab's live frame: the timeline partial re-rendered with the inputs a reload takes
(dashboard.pages.timeline.timeline_context), swapped out of band, then the header, tab bar and cursor.

The simplest honest design: every commit (and every status change no event carries, an open turn turning
stalled) re-renders the whole drawing, so a page kept open is a reload of it. Its size is bounded by the
drawing's aggregation (at most PER_COLUMN bars a column of each lane), whatever the log's length.
"""

from __future__ import annotations

from django.template.loader import render_to_string

from dashboard.live.frames import frame_end, pack
from dashboard.pages import session as session_page
from dashboard.pages import timeline as timeline_page


def render_timeline_frame(session_id: str, wires: list[dict] | None, turn: int | None, can_fork: bool) -> list[str]:
    """The messages for new events (`wires`), or for a change of status (None): the timeline, then the header."""
    session = session_page.page_session(session_id)
    context = {
        **session_page.header_context(session, can_fork=can_fork, tab=timeline_page.TAB),
        **timeline_page.timeline_context(session, turn=turn),
        "timeline_oob": True,
    }
    drawing = render_to_string("sessions/timeline.html#timeline", context).strip()
    return pack([drawing], last=frame_end(context, wires) if wires else session_page.header_swaps(context))
