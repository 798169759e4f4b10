"""dashboard.pages.session: the header's inputs, and what of them changes with no event."""

import pytest

from dashboard.pages import session as session_page
from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.selectors import ACTIVE, CLEAN, RECOVERED, RUNNING, STALLED

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("before", "after", "follow"),
    [
        (RUNNING, ACTIVE, False),  # a busy session: its cards read alike either way
        (ACTIVE, RUNNING, False),
        (RUNNING, STALLED, True),  # an open turn's owed calls read as recovery classifies them
        (ACTIVE, CLEAN, True),  # a call outside turns nothing will answer now: "no result"
        (CLEAN, ACTIVE, True),
        (STALLED, RECOVERED, True),
        (CLEAN, RECOVERED, False),
    ],
)
def test_blocks_follow_only_the_status_changes_that_change_how_cards_read(before, after, follow):
    assert session_page.blocks_follow(before, after) is follow


def test_the_fingerprint_changes_with_a_fork_and_with_no_event_of_the_session():
    services.create_session(session_id="parent")
    services.append_events(session_id="parent", events=validate_batch([{"type": "user_message", "data": {"content": "hi"}}]))
    before = session_page.header_fingerprint("parent")
    assert session_page.header_fingerprint("parent") == before
    services.fork(session_id="parent", new_session_id="child")
    assert session_page.header_fingerprint("parent") != before


def test_the_header_context_is_what_the_header_and_tabs_read():
    services.create_session(session_id="parent")
    services.append_events(session_id="parent", events=validate_batch([{"type": "user_message", "data": {"content": "hi"}}]))
    services.fork(session_id="parent", new_session_id="child")
    context = session_page.header_context(session_page.page_session("parent"), can_fork=True, tab=session_page.RAW)
    assert [child.id for child in context["forks"]] == ["child"]
    assert context["recoveries"] == [] and context["status"] == ACTIVE
    assert context["tab"] == context["view"] == "raw" and context["can_fork"] is True
    assert context["header_state"] == session_page.header_fingerprint("parent") == "active 1 -"
