from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from sessions_app.log import clock

RECEIVED = datetime(2026, 12, 4, 14, 0, tzinfo=UTC)


def test_a_clock_ahead_or_behind_is_worded_in_its_largest_unit():
    assert clock.skew_note(RECEIVED + timedelta(days=178, hours=5), RECEIVED, 300) == "clock ahead by 178 d"
    assert clock.skew_note(RECEIVED - timedelta(days=3 * 365 + 40), RECEIVED, 300) == "clock behind by 3 y"
    assert clock.skew_note(RECEIVED - timedelta(minutes=6, seconds=59), RECEIVED, 300) == "clock behind by 6 min"
    assert clock.skew_note(RECEIVED + timedelta(hours=2), RECEIVED, 300) == "clock ahead by 2 h"


def test_within_the_tolerance_or_unknown_there_is_nothing_to_say():
    assert clock.skew_note(RECEIVED + timedelta(seconds=300), RECEIVED, 300) == ""
    assert clock.skew_note(RECEIVED - timedelta(seconds=300), RECEIVED, 300) == ""
    assert clock.skew_note(RECEIVED, None, 0) == "" and clock.skew_note(None, RECEIVED, 0) == ""
    assert clock.skew_note(RECEIVED + timedelta(seconds=1), RECEIVED, 0) == "clock ahead by 1 s"


@given(st.integers(min_value=-10**10, max_value=10**10), st.integers(min_value=0, max_value=10**6))
def test_the_note_appears_exactly_past_the_tolerance_and_points_the_right_way(offset, tolerance):
    note = clock.skew_note(RECEIVED + timedelta(seconds=offset), RECEIVED, tolerance)
    assert bool(note) == (abs(offset) > tolerance)
    if note:
        assert note.startswith("clock ahead by " if offset > 0 else "clock behind by ")
