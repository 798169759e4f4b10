"""The clock-skew note: where an event's claimed time and its receive time
differ by more than TURNLOG_CLOCK_SKEW_SECONDS, the session header and the event's rows say so,
on a page load and in the live frames alike; the claimed time is shown as given."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from sessions_app import services
from sessions_app.log.events import format_time, validate_batch
from sessions_app.models import Event
from tests.dashboard.conftest import WAIT
from tests.sessions_app import factories as f

AHEAD = timedelta(days=178, hours=1)
BEHIND = -timedelta(days=3 * 365 + 10)
HEADER_NOTE = re.compile(r'<p class="clock-skew note"><strong>Agent (clock (?:ahead|behind) by [^:]+):</strong>')
ROW_NOTE = re.compile(r'<span class="badge clock-skew"[^>]*>(clock (?:ahead|behind) by [^<]+)</span>')


def append_claiming(session_id: str, items: list[dict], skew: timedelta) -> str:
    """Append live (received now), every event claiming now + `skew`; the claimed time as sent."""
    claimed = format_time(timezone.now() + skew)
    services.append_events(session_id=session_id, events=validate_batch([{**item, "time": claimed} for item in items]))
    return claimed


@pytest.mark.django_db
@pytest.mark.parametrize(("skew", "note"), [(AHEAD, "clock ahead by 178 d"), (BEHIND, "clock behind by 3 y")], ids=["ahead", "behind"])
def test_the_header_and_each_row_note_a_skewed_clock_and_keep_the_claimed_time(viewer, skew, note):
    services.create_session(session_id="s")
    claimed = append_claiming("s", [f.user("hi"), f.event("turn_start", turn=1), f.assistant("thinking")], skew)
    iso = Event.objects.get(session_id="s", seq=0).time.isoformat()
    transcript = viewer.get("/sessions/s/").content.decode()
    assert HEADER_NOTE.findall(transcript) == [note]
    assert ROW_NOTE.findall(transcript) == [note] * 3  # the user message, the turn's head, the assistant's row
    assert f'datetime="{iso}"' in transcript, claimed  # the time shown is the claimed one
    raw = viewer.get("/sessions/s/?view=raw").content.decode()
    assert HEADER_NOTE.findall(raw) == [note] and ROW_NOTE.findall(raw) == [note] * 3


@pytest.mark.django_db
def test_no_note_within_the_tolerance_or_without_a_receive_time(viewer, settings):
    settings.TURNLOG_CLOCK_SKEW_SECONDS = 300
    services.create_session(session_id="s")
    append_claiming("s", [f.user()], timedelta(seconds=-240))  # four minutes late: within tolerance
    assert "clock-skew" not in viewer.get("/sessions/s/").content.decode()
    settings.TURNLOG_CLOCK_SKEW_SECONDS = 60
    assert ROW_NOTE.findall(viewer.get("/sessions/s/?view=raw").content.decode()) == ["clock behind by 4 min"]
    # An import has no receive times: nothing to compare its claimed times with.
    services.import_blob(blob={"version": 2, "events": [{"seq": 0, "type": "user_message", "time": "2031-01-01T00:00:00Z", "data": {"content": "x"}}]}, session_id="i")
    assert "clock-skew" not in viewer.get("/sessions/i/").content.decode()


@database_sync_to_async
def create_claiming(session_id: str, items: list[dict], skew: timedelta) -> None:
    services.create_session(session_id=session_id)
    append_claiming(session_id, items, skew)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
@pytest.mark.parametrize("view", ["", "view=raw&first=0&"], ids=["transcript", "raw"])
async def test_live_frames_carry_the_same_notes(sid, session_cookie, view):
    from tests.dashboard.live.test_sessions import browser_socket

    await create_claiming(sid, [f.user("on time")], timedelta(0))
    page = await browser_socket(f"/ws/sessions/{sid}/live?{view}after=0", session_cookie)
    await database_sync_to_async(append_claiming)(sid, [f.user("from the future"), f.event("turn_start", turn=1)], AHEAD)
    frame = await page.receive_from(timeout=WAIT)
    while 'data-last-seq="2"' not in frame:  # the two events may come in one frame or two
        frame += await page.receive_from(timeout=WAIT)
    assert "from the future" in frame
    assert set(ROW_NOTE.findall(frame)) == {"clock ahead by 178 d"}
    assert HEADER_NOTE.findall(frame)[-1] == "clock ahead by 178 d"  # the header's state, swapped in with the rows
    await page.disconnect()
