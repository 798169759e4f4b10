"""The browsers' HTML streams (dashboard.live.sessions), through the real ASGI application."""

from __future__ import annotations

import asyncio
import re

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import OperationalError, connection
from django.test import Client
from django.utils import timezone
from django.utils.http import urlencode
from websockets.asyncio.client import connect as websockets_connect
from websockets.exceptions import ConnectionClosed

from dashboard.asgi import application
from dashboard.live import sessions as live
from dashboard.live.session_list import SessionListConsumer
from dashboard.live.consumers import CLOSE_RENEW
from dashboard.pages import raw_log
from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import Role
from tests import dom
from tests.access import member
from tests.dashboard.conftest import QUIET, WAIT, down_for, opened
from tests.dashboard.live.test_consumers import append, append_sync, close, create, open_socket
from tests.dashboard.pages.test_fork_views import offered
from tests.servers import DaphneServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]
HOST = "127.0.0.1"  # the server the page and its sockets are served by
ORIGIN = f"http://{HOST}"


async def browser_socket(path: str, cookie: str | None, origin: str | None = ORIGIN) -> WebsocketCommunicator:
    headers = [(b"host", HOST.encode())] + ([(b"origin", origin.encode())] if origin else [])
    if cookie:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    opened.append(communicator)
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected
    return communicator


async def closed_with(communicator) -> int:
    message = await communicator.receive_output(timeout=WAIT)
    assert message["type"] == "websocket.close"
    return message["code"]


@database_sync_to_async
def append_events(session_id: str, events: list[dict]) -> None:
    services.append_events(session_id=session_id, events=validate_batch(events))


async def test_a_page_socket_needs_a_login_and_an_allowed_origin(sid, session_cookie, token):
    await create(sid, 1)
    assert await closed_with(await browser_socket(f"/ws/sessions/{sid}/live", None)) == 4401
    assert await closed_with(await browser_socket(f"/ws/sessions/{sid}/live", session_cookie, "https://evil.test")) == 4403
    assert await closed_with(await browser_socket("/ws/sessions/nope/live", session_cookie)) == 4404
    assert await closed_with(await browser_socket("/ws/sessions/live", None)) == 4401


async def test_a_page_socket_after_minus_one_follows_from_the_first_event_and_below_it_is_closed_4400(sid, session_cookie):
    await create(sid, 3)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=-1", session_cookie)
    frame = await page.receive_from(timeout=WAIT)
    assert '<section id="event-0"' in frame and 'data-last-seq="2"' in frame  # seqs 0 to 2, as without `after`
    await close(page)
    for after in ("-2", "-1.5", "-01"):
        assert await closed_with(await browser_socket(f"/ws/sessions/{sid}/live?after={after}", session_cookie)) == 4400


async def test_new_blocks_are_appended_and_new_rows_appended_where_they_stand(sid, session_cookie):
    await create(sid, 1)  # seq 0: a user message the page already shows
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)
    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}])
    frame = await page.receive_from(timeout=WAIT)
    assert '<div hx-swap-oob="beforeend:#blocks"><section id="turn-1"' in frame
    assert '<span id="live-cursor" data-last-seq="1" hidden hx-swap-oob="true">' in frame
    assert 'id="session-summary"' in frame and "2 events" in frame
    await append_events(sid, [{"type": "assistant_message", "data": {"content": "<b>hi</b>", "tool_calls": [{"id": "c1", "name": "t"}]}}])
    frame = await page.receive_from(timeout=WAIT)
    assert '<section id="turn-1"' not in frame  # the turn is not sent again: its new row is
    assert '<div hx-swap-oob="beforeend:#page-1-0"><article id="seq-2"' in frame
    assert "&lt;b&gt;hi&lt;/b&gt;" in frame and "<b>hi</b>" not in frame
    assert 'data-call-id="c1"' in frame and '<span class="badge state">pending</span> <span class="muted pending-detail">requested</span>' in frame
    assert await page.receive_nothing(QUIET)


async def test_a_late_result_re_renders_the_card_of_its_call(sid, session_cookie):
    await create(sid)
    await append_events(sid, [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"tool_calls": [{"id": "c1", "name": "t"}]}},
        {"type": "turn_end", "data": {"turn": 1, "steps": 0, "reason": "complete"}},
    ])  # fmt: skip
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=2", session_cookie)
    await append_events(sid, [{"type": "tool_result", "data": {"tool_call_id": "c1", "content": "finally"}}])
    frame = await page.receive_from(timeout=WAIT)
    card = by_id(frame, "call-" + frame.split('id="call-')[1].split('"')[0])
    assert 'data-state="completed"' in card and "finally" in card  # the call's card, now completed
    assert '<section id="turn-0"' not in frame
    assert '<div hx-swap-oob="beforeend:#blocks"><section id="event-3"' in frame  # where the result arrived


@database_sync_to_async
def frame_and_queries(session_id: str) -> tuple[str, list[str]]:
    """The live frame of the session's last event, and the SQL it ran."""
    from django.test.utils import CaptureQueriesContext

    from sessions_app.log.events import event_to_wire
    from sessions_app.selectors import get_session, session_log

    wires = [event_to_wire(session_log(get_session(session_id))[-1])]
    with CaptureQueriesContext(connection) as captured:
        frame = live.render_page_frame(session_id, wires, wires[0]["seq"] - 1, False)
    return frame, [q["sql"] for q in captured.captured_queries]


async def test_a_frame_in_the_open_turn_reads_only_its_pages(sid):
    """A new event of a live turn reads the turn's pages a page load shows, never the turn whole nor the log."""
    await create(sid, 1)
    await append_events(sid, [
        {"type": "turn_start", "data": {"turn": 1}},
        *[{"type": "user_message", "data": {"content": f"m{n}"}} for n in range(300)],
        {"type": "step_start", "data": {"turn": 1, "step": 1}},
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "charge_card"}]}},
        {"type": "tool_call", "data": {"id": "c1", "name": "charge_card"}},
    ])  # fmt: skip
    frame, queries = await frame_and_queries(sid)
    assert "If recovered now: <strong>Outcome unknown: it may have run</strong> (rule 1)" in "".join(frame)  # the plan's word on it
    ranged = [q for q in queries if '"sessions_app_event"."data"' in q and '"sessions_app_event"."seq" >=' in q]
    # The new event, then the turn's first page and its last two (each seq range at most three pages long).
    bounds = [tuple(map(int, re.findall(r'"seq" >= (\d+) AND "sessions_app_event"."seq" <= (\d+)', q)[0])) for q in ranged]
    assert bounds and all(last - first < 3 * 40 for first, last in bounds), bounds
    assert len(queries) <= 32, "\n".join(q[:250] for q in queries)

async def test_a_page_socket_is_closed_for_a_reconnect_before_it_gets_old(sid, session_cookie, settings):
    settings.TURNLOG_SOCKET_RENEW_SECONDS = 0.2
    await create(sid, 1)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)
    listing = await browser_socket("/ws/sessions/live", session_cookie)
    assert await closed_with(page) == CLOSE_RENEW == 4012  # the page reconnects after 4012
    assert await closed_with(listing) == CLOSE_RENEW


async def test_daphne_delivers_the_renewal_close_of_page_and_list_sockets(sid, session_cookie, tmp_path):
    """Daphne lets an application close only with 1000 or 3000-4999: with any
    other code (1012 was used) the close is refused and the socket stays open."""
    await create(sid, 1)
    server = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", TURNLOG_SOCKET_RENEW_SECONDS="0.5").start()
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={session_cookie}", "Origin": server.url}
    try:
        for path in (f"/ws/sessions/{sid}/live?after=0", "/ws/sessions/live"):
            async with websockets_connect(f"ws://127.0.0.1:{server.port}{path}", additional_headers=headers) as socket:
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(socket.recv(), timeout=WAIT + 2)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_RENEW, path
    finally:
        server.stop()


async def test_the_list_prepends_new_sessions_and_replaces_changed_rows(sid, session_cookie):
    await create(f"{sid}-old", 1)
    listing = await browser_socket("/ws/sessions/live", session_cookie)
    # The socket reads the rows it shows after accepting: a change of a shown row,
    # answered only once that is done, keeps the new session out of that first read.
    await append(f"{sid}-old", 1)
    frame = await listing.receive_from(timeout=WAIT)
    assert frame.startswith(f'<tr id="session-{sid}-old"') and 'hx-swap-oob="true"' in frame
    await create(sid)
    frame = await listing.receive_from(timeout=WAIT)
    assert frame.startswith('<tbody hx-swap-oob="afterbegin:#session-rows">') and sid in frame
    await append(sid, 1)
    frame = await listing.receive_from(timeout=WAIT)
    assert frame.startswith(f'<tr id="session-{sid}"') and 'hx-swap-oob="true"' in frame and "active" in frame


async def test_a_refused_list_socket_is_sent_no_row_and_does_not_fail(sid):
    listing = WebsocketCommunicator(application, "/ws/sessions/live", headers=[(b"origin", ORIGIN.encode())])
    assert (await listing.connect(timeout=WAIT))[0]
    assert (await listing.receive_output(timeout=WAIT)) == {"type": "websocket.close", "code": 4401}
    # Closed but not yet acknowledged by the client: a session changing now must neither reach it nor crash it.
    await create(sid, 1)
    with pytest.raises(asyncio.TimeoutError):  # receive_output would raise the consumer's own error instead
        await listing.receive_output(timeout=QUIET * 2)


async def test_a_filtered_list_ignores_sessions_outside_its_filter(sid, session_cookie):
    listing = await browser_socket("/ws/sessions/live?status=running", session_cookie)
    await create(sid, 1)  # clean: not shown
    assert await listing.receive_nothing(QUIET * 2)
    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}])  # now running
    frame = await listing.receive_from(timeout=WAIT)
    assert sid in frame and "running" in frame


async def test_a_running_row_turns_stalled_without_any_event(sid, session_cookie, monkeypatch, settings):
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    listing = await browser_socket("/ws/sessions/live", session_cookie)
    await create(sid)
    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}])
    frames = [await listing.receive_from(timeout=WAIT) for _ in range(2)]
    assert "running" in frames[-1]
    settings.TURNLOG_STALL_SECONDS = 0
    frame = await listing.receive_from(timeout=WAIT)
    assert "stalled" in frame
    await asyncio.sleep(0)


async def test_an_active_row_turns_clean_without_any_event(sid, session_cookie, monkeypatch, settings):
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    listing = await browser_socket("/ws/sessions/live", session_cookie)
    await create(sid)
    await append_events(sid, [{"type": "user_message", "data": {"content": "between turns"}}])
    frames = [await listing.receive_from(timeout=WAIT) for _ in range(2)]
    assert 'class="badge status-active"' in frames[-1]
    settings.TURNLOG_STALL_SECONDS = 0
    frame = await listing.receive_from(timeout=WAIT)
    assert 'class="badge status-clean"' in frame


async def test_a_new_summary_re_renders_the_blocks_it_compacts(sid, session_cookie):
    await create(sid)
    await append_events(sid, [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "turn_end", "data": {"turn": 1, "steps": 0, "reason": "complete"}},
    ])  # fmt: skip
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=1", session_cookie)
    await append_events(sid, [{"type": "user_message", "data": {"content": "summary", "surface_op": ["replace", 0, 1]}}])
    frame = await page.receive_from(timeout=WAIT)
    assert '<section id="turn-0" class="block turn compacted" hx-swap-oob="true">' in frame
    assert "<strong>Summary</strong> of seqs 0–1, standing here" in frame


async def test_the_header_follows_the_status_a_turn_opens_and_a_recovery_closes(sid, session_cookie, user):
    await create(sid, 1)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)
    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}])
    frame = await page.receive_from(timeout=WAIT)
    assert re.search(r'<header class="session-head" id="session-head" data-state="running [^"]*" hx-swap-oob="true">', frame)
    assert "<strong>Running:</strong> turn 1 (opened at seq 1) is open" in frame and "Preview recovery" in frame

    await database_sync_to_async(services.recover)(session_id=sid, user=user, note="checked <b>it</b>")
    frame = await page.receive_from(timeout=WAIT)
    state = frame[frame.index('<div id="session-state"') :]
    assert "Running:" not in state and "Preview recovery" not in state
    assert f"Recovery of open turns by <strong>{user.username}</strong>" in state
    assert "checked &lt;b&gt;it&lt;/b&gt;" in state  # the note is escaped
    assert 'class="badge status-recovered"' in frame


# Live equals reload: a frame's header, tab bar, blocks and rows are the page's -----------

SESSION_HEAD = re.compile(r'<header class="session-head" id="session-head".*?</header>', re.S)
SESSION_TABS = re.compile(r'<nav class="tabs" id="session-tabs".*?</nav>', re.S)


def header_and_tabs(html: str) -> tuple[str | None, str | None]:
    """The session header and tab bar of a page or frame, without the frame's swap attribute."""
    found = [pattern.search(html) for pattern in (SESSION_HEAD, SESSION_TABS)]
    return tuple(match and match.group(0).replace(' hx-swap-oob="true"', "") for match in found)


def by_id(html: str, dom_id: str) -> str | None:
    """The element with this id, normalized (tests.dom), without a frame's swap attribute."""
    found = dom.parse(html).by_id(dom_id)
    if found is not None:
        found.attrs.pop("hx-swap-oob", None)
    return dom.normalized(found)


def element(html: str, dom_id: str, tag: str) -> str | None:
    """The element with this id (no element of the same tag nested in it), without a frame's swap attribute."""
    match = re.search(rf'<{tag} id="{dom_id}"[^>]*>.*?</{tag}>', html, re.S)
    return match and re.sub(r'(<{0} id="{1}"[^>]*?) hx-swap-oob="true"'.format(tag, dom_id), r"\1", match.group(0))


@database_sync_to_async
def reload(user, session_id: str, query: str = "") -> str:
    client = Client()
    client.force_login(user)
    response = client.get(f"/sessions/{session_id}/{query}")
    assert response.status_code == 200
    return response.content.decode()


async def assert_header_as_reloaded(frame: str, user, session_id: str, query: str = "") -> tuple[str, str]:
    header, tabs = header_and_tabs(frame)
    assert header is not None and tabs is not None, frame
    assert (header, tabs) == header_and_tabs(await reload(user, session_id, query))
    return header, tabs


@pytest.mark.parametrize("query", ["", "?view=raw"])
async def test_a_frame_s_header_and_tab_bar_are_a_reload_s(sid, session_cookie, user, query):
    """Last activity moves, "Fork whole session" turns "not now" as a turn opens, the recovery
    prompt leaves and the Recovery tab counts the recovery: on both tabs of the page."""
    await create(sid, 1)
    socket = f"/ws/sessions/{sid}/live?after=0" + ("&view=raw&first=0" if query else "")
    page = await browser_socket(socket, session_cookie)
    first_header, _ = header_and_tabs(await reload(user, sid, query))
    await asyncio.sleep(0.01)  # a later time to show
    await append_events(sid, [{"type": "user_message", "data": {"content": "later"}}])
    header, _ = await assert_header_as_reloaded(await page.receive_from(timeout=WAIT), user, sid, query)
    assert re.findall(r'datetime="([^"]+)"', header)[-1] != re.findall(r'datetime="([^"]+)"', first_header)[-1]  # last activity
    assert "Fork whole session</a>" in header

    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}])
    header, _ = await assert_header_as_reloaded(await page.receive_from(timeout=WAIT), user, sid, query)
    assert "Fork whole session: not now" in header and "Preview recovery" in header

    await database_sync_to_async(services.recover)(session_id=sid, user=user)
    header, tabs = await assert_header_as_reloaded(await page.receive_from(timeout=WAIT), user, sid, query)
    assert "Preview recovery" not in header and "not now" not in header and "Fork whole session</a>" in header
    assert "Recovery (1)</a>" in tabs


async def test_a_fork_of_the_session_re_sends_its_header(sid, session_cookie, user, monkeypatch):
    """A fork appends nothing to its parent, whose header lists it: the page's check of what no event changes sends it."""
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    await create(sid, 2)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=1", session_cookie)
    await asyncio.sleep(0.5)  # the check has seen the session as it was
    await database_sync_to_async(services.fork)(session_id=sid, boundary=0, new_session_id=f"{sid}-fork", user=user)
    header, _ = await assert_header_as_reloaded(await page.receive_from(timeout=WAIT), user, sid)
    assert f"<code>{sid}-fork</code>" in header
    assert await page.receive_nothing(QUIET)  # once


async def test_a_socket_whose_page_shows_an_older_state_is_sent_the_header_at_once(sid, session_cookie, user, settings):
    """The session changed between the page's load and its socket (or while it reconnected): the page is set right,
    without waiting for the next check, and a page that shows the current state is sent nothing."""
    await create(sid, 1)
    shown = header_and_tabs(await reload(user, sid))[0]
    state = re.search(r'data-state="([^"]+)"', shown).group(1)
    assert state.startswith("active ")
    current = await browser_socket(f"/ws/sessions/{sid}/live?after=0&state={state.replace(' ', '+')}", session_cookie)
    assert await current.receive_nothing(QUIET)
    settings.TURNLOG_STALL_SECONDS = 0  # it went quiet since that load
    late = await browser_socket(f"/ws/sessions/{sid}/live?after=0&state={state.replace(' ', '+')}", session_cookie)
    frame = await late.receive_from(timeout=WAIT)
    header, _ = await assert_header_as_reloaded(frame, user, sid)
    assert 'data-state="clean 0 -"' in header


async def test_raw_rows_arriving_live_carry_their_fork_labels_and_follow_their_turn_closing(sid, session_cookie, user):
    await create(sid, 1)
    page = await browser_socket(f"/ws/sessions/{sid}/live?view=raw&first=0&after=0", session_cookie)
    await append_events(sid, [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "working"}},
    ])  # fmt: skip
    frame = await page.receive_from(timeout=WAIT)
    reloaded = await reload(user, sid, "?view=raw")
    for seq in (1, 2):
        row = element(frame, f"seq-{seq}", "div")
        assert "No fork here: " in row and "still open" in row  # in the permalink's description
        assert row == element(reloaded, f"seq-{seq}", "div")

    await append_events(sid, [{"type": "turn_end", "data": {"turn": 1, "steps": 0, "reason": "complete"}}])
    frame = await page.receive_from(timeout=WAIT)
    reloaded = await reload(user, sid, "?view=raw")
    for seq in (0, 1, 2, 3):
        assert element(frame, f"seq-{seq}", "div") == element(reloaded, f"seq-{seq}", "div") if seq else "seq-0" not in frame
    assert "closes at seq 3" in element(frame, "seq-2", "div") and "Fork here" in element(frame, "seq-3", "div")


async def test_a_call_outside_turns_reads_no_result_once_the_session_went_quiet(sid, session_cookie, user, monkeypatch, settings):
    """The cards that follow the status, not the events, are re-sent when it changes, as a reload shows them."""
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    await create(sid)
    await append_events(sid, [{"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "echo"}]}}])
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)
    assert await page.receive_nothing(QUIET)  # active
    settings.TURNLOG_STALL_SECONDS = 0
    frame = await page.receive_from(timeout=WAIT)
    anchor = "call-" + frame.split('id="call-')[1].split('"')[0]
    card = by_id(frame, anchor)
    assert '<span class="badge state">no_result</span>' in card
    assert card == by_id(await reload(user, sid), anchor)
    await assert_header_as_reloaded(frame, user, sid)


async def test_a_running_page_turns_stalled_without_any_event(sid, session_cookie, monkeypatch, settings):
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    await create(sid)
    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}])
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)
    assert await page.receive_nothing(QUIET)  # still running: nothing to re-send
    settings.TURNLOG_STALL_SECONDS = 0
    frame = await page.receive_from(timeout=WAIT)
    assert "<strong>Stalled:</strong>" in frame and 'class="badge status-stalled"' in frame
    assert await page.receive_nothing(QUIET)  # sent once, not on every check


async def test_a_stalled_page_re_renders_its_open_turns_cards_as_recovery_classifies_them(sid, session_cookie, monkeypatch, settings):
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    await create(sid)
    await append_events(sid, [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "echo"}]}},
        {"type": "tool_call", "data": {"id": "c1", "name": "echo"}},
    ])  # fmt: skip
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=2", session_cookie)
    assert await page.receive_nothing(QUIET)  # still running
    settings.TURNLOG_STALL_SECONDS = 0
    frame = await page.receive_from(timeout=WAIT)
    card = frame[frame.index('<div class="card') :]
    assert 'hx-swap-oob="true"' in card[:300] and '<span class="badge state">tool_outcome_unknown</span>' in card
    assert "Why (rule 1):" in card and "elapsed" not in card
    assert '<header class="turn-head" id="seq-0" hx-swap-oob="true">' in frame and "open: never closed" in frame


async def test_a_raw_page_gets_new_rows_and_rows_a_new_summary_shadows(sid, session_cookie):
    await create(sid, 3)  # seqs 0-2; the page shows 1-2
    page = await browser_socket(f"/ws/sessions/{sid}/live?view=raw&first=1&after=2", session_cookie)
    await append_events(sid, [{"type": "user_message", "data": {"content": "<b>new</b>"}}])
    frame = await page.receive_from(timeout=WAIT)
    assert '<div hx-swap-oob="beforeend:#raw-rows"><div id="seq-3" role="row" class="raw-row">' in frame
    assert "&lt;b&gt;new&lt;/b&gt;" in frame and "<b>new</b>" not in frame
    assert '<span id="live-cursor" data-last-seq="3" hidden hx-swap-oob="true">' in frame
    assert "<section" not in frame  # no transcript blocks on a raw page

    await append_events(sid, [{"type": "user_message", "data": {"content": "summary", "surface_op": ["replace", 0, 2]}}])
    frame = await page.receive_from(timeout=WAIT)
    replaced = re.findall(r'<div id="seq-(\d+)" role="row" class="raw-row shadowed" hx-swap-oob="true">', frame)
    assert replaced == ["1", "2"]  # seq 0 is not on the page; seq 3 is outside the range
    assert "shadowed by 4" in frame and '<div id="seq-4" role="row" class="raw-row">' in frame


async def test_viewers_in_step_share_one_render_of_each_frame(sid, session_cookie, monkeypatch):
    renders, render = [], live.render_page_frame

    def counted(*args):
        renders.append(args[2])  # shown_through
        return render(*args)

    monkeypatch.setattr(live, "render_page_frame", counted)
    monkeypatch.setattr(live, "shared_frames", live.SharedRenders())
    await create(sid, 1)
    pages = [await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie) for _ in range(3)]
    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}])
    frames = [await page.receive_from(timeout=WAIT) for page in pages]
    assert frames[0] == frames[1] == frames[2] and 'data-last-seq="1"' in frames[0]
    assert renders == [0]

    late = await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)  # behind: the same frame, kept
    assert await late.receive_from(timeout=WAIT) == frames[0]
    behind = await browser_socket(f"/ws/sessions/{sid}/live", session_cookie)  # another range: its own render
    assert 'data-last-seq="1"' in await behind.receive_from(timeout=WAIT)
    assert renders == [0, -1]


async def test_a_failed_render_is_not_kept(monkeypatch):
    shared = live.SharedRenders()
    attempts = []

    def failing():
        attempts.append(1)
        raise RuntimeError("the database went away")

    for _ in range(2):
        with pytest.raises(RuntimeError):
            await shared.get(("s", None, 1, 1), failing)
    assert len(attempts) == 2 and len(shared) == 0
    assert await shared.get(("s", None, 1, 1), lambda: "frame") == "frame"
    assert len(shared) == 1


async def test_a_raw_page_rechecks_only_its_latest_rows(sid, session_cookie, monkeypatch):
    monkeypatch.setattr(raw_log, "RESHADOW_ROWS", 2)
    await create(sid, 4)  # seqs 0-3, a client claiming to show them all
    page = await browser_socket(f"/ws/sessions/{sid}/live?view=raw&first=0&after=3", session_cookie)
    await append_events(sid, [{"type": "user_message", "data": {"content": "summary", "surface_op": ["replace", 0, 3]}}])
    frame = await page.receive_from(timeout=WAIT)
    assert re.findall(r'<div id="seq-(\d+)" role="row" class="raw-row shadowed" hx-swap-oob="true">', frame) == ["2", "3"]


# Without the database ---------------------------------------------------------


async def test_a_page_socket_waits_out_a_database_outage_and_catches_up(sid, session_cookie, monkeypatch, caplog, fresh_outage):
    await create(sid, 1)
    monkeypatch.setattr(live, "render_page_frame", flaky := down_for(2, live.render_page_frame))
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)
    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}])
    frame = await page.receive_from(timeout=WAIT)
    assert len(flaky.failures) == 2 and 'data-last-seq="1"' in frame
    assert await page.receive_nothing(QUIET)
    assert not [r for r in caplog.records if r.exc_info]
    await page.disconnect()


async def test_the_list_without_the_database_closes_4503_and_skips_a_change_it_cannot_render(sid, session_cookie, monkeypatch, fresh_outage):
    await create(sid, 1)
    listing = await browser_socket("/ws/sessions/live", session_cookie)

    def down(*args, **kwargs):
        raise OperationalError("connection refused")

    render_row = SessionListConsumer.render_row
    monkeypatch.setattr(SessionListConsumer, "render_row", down)
    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}])
    assert await listing.receive_nothing(QUIET)  # and the socket is still open:
    monkeypatch.setattr(SessionListConsumer, "render_row", render_row)
    await append_events(sid, [{"type": "turn_end", "data": {"turn": 1}}])
    assert sid in await listing.receive_from(timeout=WAIT)
    await listing.disconnect()

    monkeypatch.setattr(SessionListConsumer, "first_page_ids", down)
    assert await closed_with(await browser_socket("/ws/sessions/live", session_cookie)) == 4503


# Access: projects and roles ------------------------------------------------


def cookie_of(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


@pytest.fixture
def viewer_cookie(django_user_model):
    """The login of a viewer of the default project: reads, may not fork."""
    user = django_user_model.objects.create_user("reader")
    member(user, Role.VIEWER)
    return cookie_of(user)


@pytest.fixture
def teammate_cookie(django_user_model, team):
    """The login of a viewer of the team's project only."""
    user = django_user_model.objects.create_user("teammate")
    member(user, Role.VIEWER, team)
    return cookie_of(user)


@database_sync_to_async
def create_in(project, session_id: str, count: int = 0) -> None:
    services.create_session(session_id=session_id, project=project)
    if count:
        append_sync(session_id, count)


async def test_a_page_socket_of_another_projects_session_is_closed_4404(sid, session_cookie, teammate_cookie, team):
    await create_in(team, sid, 1)
    assert await closed_with(await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)) == 4404
    assert await closed_with(await browser_socket(f"/ws/sessions/{sid}/live?view=raw&first=0&after=0", session_cookie)) == 4404
    theirs = await browser_socket(f"/ws/sessions/{sid}/live?after=0", teammate_cookie)  # the team's own viewer follows it
    await append(sid, 1)
    assert 'data-last-seq="1"' in await theirs.receive_from(timeout=WAIT)
    await theirs.disconnect()


async def test_frames_carry_fork_controls_only_to_those_who_may_fork(sid, session_cookie, viewer_cookie, monkeypatch):
    renders, render = [], live.render_page_frame

    def counted(*args):
        renders.append(args[3])  # can_fork
        return render(*args)

    monkeypatch.setattr(live, "render_page_frame", counted)
    monkeypatch.setattr(live, "shared_frames", live.SharedRenders())
    await create(sid, 1)
    members = [await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie) for _ in range(2)]
    viewer = await browser_socket(f"/ws/sessions/{sid}/live?after=0", viewer_cookie)
    await append(sid, 1)  # a new block: a boundary to fork at
    first, second = [await page.receive_from(timeout=WAIT) for page in members]
    seen_by_viewer = await viewer.receive_from(timeout=WAIT)
    assert first == second and offered(first) == {"1", "last"}  # the new event, and the whole session in the header
    assert 'data-last-seq="1"' in seen_by_viewer and offered(seen_by_viewer) == set() and "fork" not in seen_by_viewer
    assert sorted(renders) == [False, True]  # one render per right, shared by those who have it


async def test_the_list_socket_never_sends_rows_of_another_projects_sessions(sid, session_cookie, teammate_cookie, team):
    listing = await browser_socket("/ws/sessions/live", session_cookie)
    teams_listing = await browser_socket("/ws/sessions/live", teammate_cookie)
    await create_in(team, f"{sid}-theirs")
    assert f"{sid}-theirs" in await teams_listing.receive_from(timeout=WAIT)  # the change was announced
    await append(f"{sid}-theirs", 1)
    assert f"{sid}-theirs" in await teams_listing.receive_from(timeout=WAIT)
    await create(f"{sid}-ours")
    frame = await listing.receive_from(timeout=WAIT)
    assert f"{sid}-ours" in frame and f"{sid}-theirs" not in frame
    assert await listing.receive_nothing(QUIET)
    assert await teams_listing.receive_nothing(QUIET)  # and the team's list shows none of ours


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_shared_frames_render_on_the_database_threads_which_keep_their_connections(settings):
    """channels' sync thread opened a new SQLite connection for every render (a quarter of a frame's cost)."""
    import threading

    from asgiref.sync import sync_to_async

    from sessions_app.lib import db_threads

    settings.TURNLOG_DB_THREADS = 2
    await sync_to_async(db_threads.stop)()
    try:
        renders = live.SharedRenders()

        def where():
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return threading.current_thread().name, id(connection.connection)

        seen = [await renders.get(("frame", i), where) for i in range(6)]
        assert all(name.startswith("turnlog-db") for name, _ in seen), seen
        if connection.vendor == "sqlite":
            assert len({conn for _, conn in seen}) <= 2  # one kept connection per thread
    finally:
        await sync_to_async(db_threads.stop)()


# The ledger panel follows the log ---------------------------------------------------------------


def ledger_of(html: str) -> str | None:
    return element(html, "ledger-panel", "section")


class KeptPage:
    """A page as its browser keeps it (tests.dom): loaded, then each frame applied and the ledger arranged."""

    def __init__(self, html: str, user):
        self.page, self.user = dom.parse(html), user

    @database_sync_to_async
    def apply(self, frame: str) -> None:
        assert dom.apply(self.page, frame) == []
        client = Client()
        client.force_login(self.user)
        dom.arrange_ledger(self.page, lambda url: client.get(url).content.decode())

    def panel(self) -> str:
        return dom.normalized(self.page.by_id("ledger-panel"))


def panel_of(html: str) -> str:
    return dom.normalized(dom.parse(html).by_id("ledger-panel"))


@pytest.mark.parametrize("query", ["", "?view=raw", "?calls=all", "?view=raw&calls=all"])
async def test_the_ledger_panel_of_a_kept_page_is_a_reloads(sid, session_cookie, user, query):
    await create(sid, 1)
    view = "&view=raw&first=0" if "raw" in query else ""
    calls = "&calls=all" if "all" in query else ""
    kept = KeptPage(await reload(user, sid, query), user)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0{view}{calls}", session_cookie)
    await append_events(sid, [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "charge_card", "arguments": {"cents": 5}}]}},
    ])  # fmt: skip
    frame = await page.receive_from(timeout=WAIT)
    assert 'data-call="c1" data-state="pending"' in frame  # the row of the call the frame's events name
    await kept.apply(frame)
    assert 'data-call="c1" data-state="pending"' in kept.panel()
    assert kept.panel() == panel_of(await reload(user, sid, query))
    await append_events(sid, [{"type": "tool_result", "data": {"tool_call_id": "c1", "content": "charged"}}])
    frame = await page.receive_from(timeout=WAIT)
    await kept.apply(frame)
    assert 'data-call="c1" data-state="completed"' in kept.panel()
    assert kept.panel() == panel_of(await reload(user, sid, query))
    await append_events(sid, [{"type": "user_message", "data": {"content": "thanks"}}])
    assert 'id="ledger-' not in await page.receive_from(timeout=WAIT)  # nothing a row reads changed


async def test_a_stalled_pages_ledger_reads_the_risk_without_any_event(sid, session_cookie, user, monkeypatch, settings):
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    await create(sid)
    await append_events(sid, [
        {"type": "turn_start", "data": {"turn": 1}},
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "charge_card"}]}},
        {"type": "tool_call", "data": {"id": "c1", "name": "charge_card"}},
    ])  # fmt: skip
    kept = KeptPage(await reload(user, sid, "?view=raw"), user)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=2&view=raw&first=0", session_cookie)
    assert await page.receive_nothing(QUIET)  # still running
    settings.TURNLOG_STALL_SECONDS = 0
    frame = await page.receive_from(timeout=WAIT)
    await kept.apply(frame)  # the frame names the row's new version; the page fetches it
    assert 'data-call="c1" data-state="tool_outcome_unknown"' in kept.panel()
    assert kept.panel() == panel_of(await reload(user, sid, "?view=raw"))


# Notes appear live ----------------------------------------------------------------------------


@database_sync_to_async
def note(user, session_id: str, text: str, seq: int | None) -> int:
    from sessions_app.selectors import access

    return services.add_note(actor=access.Actor(user=user), session_id=session_id, text=text, tags=["verified"], seq=seq).pk


@database_sync_to_async
def edit(user, note_id: int, text: str) -> None:
    from sessions_app.selectors import access

    services.edit_note(actor=access.Actor(user=user), note_id=note_id, text=text)


@pytest.mark.parametrize("query", ["", "?view=raw"])
async def test_a_note_added_elsewhere_reaches_an_open_page_as_a_reload_shows_it(sid, session_cookie, user, query):
    await create(sid)
    await append_events(sid, [
        {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "charge_card"}]}},
        {"type": "tool_result", "data": {"tool_call_id": "c1", "content": "charged"}},
    ])  # fmt: skip
    view = "&view=raw&first=0" if query else ""
    kept = KeptPage(await reload(user, sid, query), user)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=1{view}", session_cookie)
    assert await page.receive_nothing(QUIET)
    note_id = await note(user, sid, "<b>billing confirmed</b>", 1)  # on c1's result: it shows on c1's card
    frame = await page.receive_from(timeout=WAIT)
    assert "<b>billing" not in frame
    await kept.apply(frame)
    reloaded = await reload(user, sid, query)
    assert "&lt;b&gt;billing confirmed&lt;/b&gt;" in kept.panel() and kept.panel() == panel_of(reloaded)
    if not query:
        anchor = "call-" + frame.split('id="call-')[1].split('"')[0]
        card = by_id(frame, anchor)
        assert f'id="note-{note_id}"' in card and card == by_id(reloaded, anchor)
    await note(user, sid, "customer called back", None)
    await kept.apply(await page.receive_from(timeout=WAIT))
    assert "customer called back" in kept.panel().split('id="session-notes"')[1]
    await edit(user, note_id, "billing confirmed twice")
    await kept.apply(await page.receive_from(timeout=WAIT))
    assert "billing confirmed twice" in kept.panel() and kept.panel() == panel_of(await reload(user, sid, query))


async def test_the_json_stream_carries_no_notes(sid, token, user, session_cookie):
    await create(sid)
    await append_events(sid, [{"type": "user_message", "data": {"content": "hi"}}])
    stream = await open_socket(sid, token=token, query="after=0")
    seen_at = urlencode({"seen_at": timezone.now().isoformat()})  # as the page gives it: a note before the join is caught up
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0&{seen_at}", session_cookie)
    await note(user, sid, "not an event", 0)
    assert "not an event" in await page.receive_from(timeout=WAIT)  # the page's socket heard it
    assert await stream.receive_nothing(QUIET)
