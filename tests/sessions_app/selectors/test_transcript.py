"""The transcript's reads, directly: what the page tests (tests/dashboard/pages/) do not reach.

A turn longer than the first range read backwards, and which stored events a new
event touches: a late result the block of its call, a summary the range it compacts.
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app import selectors, services
from sessions_app.log.events import validate_batch
from tests.sessions_app import factories as f

pytestmark = pytest.mark.django_db


def stored(events: list[dict]):
    session = services.create_session(session_id="s")
    services.append_events(session_id="s", events=validate_batch(events))
    session.refresh_from_db()
    return session


@pytest.mark.parametrize("length", [300, 3000])
def test_block_starts_are_found_past_a_long_turn_in_three_reads_whatever_its_length(length):
    # seq 0 a message, then one turn, then a message: three blocks.
    session = stored([f.user(), f.event("turn_start", turn=1), *(f.user(str(i)) for i in range(length)), f.event("turn_end", turn=1), f.user()])
    last = length + 3
    with CaptureQueriesContext(connection) as reads:
        assert selectors.latest_block_starts(session, before=None, count=3) == [last, 1, 0]
    assert len(reads) == 3  # the latest rows; the turns nested in the one they are in (none); from its start back
    with CaptureQueriesContext(connection) as reads:
        assert selectors.latest_block_starts(session, before=None, count=1) == [last]
    assert len(reads) == 1
    assert selectors.latest_block_starts(session, before=1, count=3) == [0]
    assert selectors.latest_block_starts(session, before=0, count=3) == []


def test_turns_nested_in_a_turn_are_blocks_of_their_own():
    session = stored([
        f.event("turn_start", turn=1),  # 0
        f.user("a"),                     # 1
        f.event("turn_start", turn=2),  # 2: nested
        f.user("b"),                     # 3
        f.event("turn_end", turn=2),    # 4
        f.user("c"),                     # 5: back in turn 1
        f.event("turn_end", turn=1),    # 6
    ])  # fmt: skip
    assert selectors.latest_block_starts(session, before=None, count=5) == [2, 0]


def test_a_late_result_touches_the_block_where_its_call_was_made():
    session = stored([
        f.user(),                                # 0
        f.event("turn_start", turn=1),           # 1
        f.assistant(calls=["c1"]),               # 2
        f.event("turn_end", turn=1),             # 3
        f.user("later"),                         # 4
        f.tool_result("c1"),                     # 5: outside the turn its call was made in
    ])
    result = selectors.session_log(session)[5]
    events, placement = selectors.events_of_blocks_touched(session, [result])
    assert [e.seq for e in events] == [1, 2, 3, 5]
    assert placement == {1: (1, None), 2: (1, None), 3: (1, None), 5: (None, None)}


def test_a_summary_touches_the_blocks_of_the_range_it_compacts():
    summary = f.event("user_message", content="summary", name=None, metadata={}, surface_op=["replace", 0, 1])
    session = stored([f.user("a"), f.user("b"), f.user("c"), summary])
    events, _ = selectors.events_of_blocks_touched(session, [selectors.session_log(session)[3]])
    assert [e.seq for e in events] == [0, 1, 3]
    assert selectors.compactions(session) == [(3, 0, 1)]


def test_no_turn_end_among_new_events_reads_nothing():
    session = stored([f.user(), f.event("turn_start", turn=1), f.event("turn_end", turn=1)])
    with CaptureQueriesContext(connection) as reads:
        assert selectors.turns_closed_by(session, []) == set()
    assert len(reads) == 0
    assert selectors.turns_closed_by(session, [2]) == {1}
