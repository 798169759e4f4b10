"""Catching up at a socket's join (dashboard.live.seen): what changed between a page's read and its socket's join,
or while the socket was away, reaches the page as a reload shows it; then the page's instant moves to the join."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from django.utils import timezone
from django.utils.http import urlencode

from sessions_app import services
from sessions_app.services import verdicts
from sessions_app.services.retention.deletion import delete_session
from sessions_app.log.events import validate_batch
from sessions_app.models import Role, Session
from sessions_app.selectors import access
from tests import dom
from tests.access import member
from tests.dashboard.conftest import QUIET, WAIT
from tests.dashboard.live.test_consumers import create
from tests.dashboard.live.test_sessions import KeptPage, append_events, browser_socket, closed_with, edit, note, panel_of, reload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]

SEEN = re.compile(r'<span id="live-seen" data-seen-at="([^"]+)"')
CALL = [
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "charge_card"}]}},
    {"type": "tool_result", "data": {"tool_call_id": "c1", "content": "charged"}},
]


def seen_at(html: str) -> str:
    found = SEEN.search(html)
    assert found, "the page gives its socket the instant it read what it shows"
    return found.group(1)


@database_sync_to_async
def page_html(user, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


@database_sync_to_async
def delete(user, note_id: int) -> None:
    services.delete_note(actor=access.Actor(user=user), note_id=note_id)


@database_sync_to_async
def verdict(user, session_id: str, call_id: str) -> None:
    verdicts.record_verdict(actor=access.Actor(user=user), session_id=session_id, call_id=call_id, outcome="happened", evidence="the bank's receipt")


async def frames_until_marker(socket) -> list[str]:
    """The frames a socket sends at its join, through the one that moves the page's instant."""
    frames = []
    while not frames or 'id="live-seen"' not in frames[-1]:
        frames.append(await socket.receive_from(timeout=WAIT))
    return frames


@pytest.mark.parametrize("query", ["", "?view=raw"])
async def test_notes_written_before_the_page_socket_joined_reach_the_page_as_a_reload_shows_them(sid, session_cookie, user, query):
    await create(sid)
    await append_events(sid, CALL)
    gone = await note(user, sid, "to be deleted", 1)
    changed = await note(user, sid, "first words", None)
    html = await reload(user, sid, query)
    kept = KeptPage(html, user)
    # Meanwhile, before the socket joins: a note added, one edited, one deleted.
    await note(user, sid, "billing confirmed", 1)
    await edit(user, changed, "second words")
    await delete(user, gone)
    view = "&view=raw&first=0" if query else ""
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=1{view}&{urlencode({'seen_at': seen_at(html)})}", session_cookie)
    for frame in await frames_until_marker(page):
        await kept.apply(frame)
    reloaded = await reload(user, sid, query)
    assert "billing confirmed" in kept.panel() and "second words" in kept.panel() and "to be deleted" not in kept.panel()
    assert kept.panel() == panel_of(reloaded)
    if not query:  # the call's card shows its notes as a reload does
        anchor = re.search(r'id="([^"]+)" data-call-id="c1"', reloaded).group(1)
        card = lambda html_: dom.normalized(dom.parse(html_).by_id(anchor))  # noqa: E731
        assert "billing confirmed" in card(kept.page.html()) and "to be deleted" not in card(kept.page.html())
        assert card(kept.page.html()) == card(reloaded)
    assert await page.receive_nothing(QUIET)


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user("operator")
    member(user, Role.OPERATOR)
    return user


async def test_a_verdict_recorded_before_the_page_socket_joined_shows_on_its_card(sid, session_cookie, user, operator):
    await create(sid)
    await append_events(sid, [{"type": "turn_start", "data": {"turn": 1}}, CALL[0], {"type": "tool_call", "data": {"id": "c1", "name": "charge_card"}}])
    html = await reload(user, sid)
    kept = KeptPage(html, user)
    await verdict(operator, sid, "c1")
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=2&{urlencode({'seen_at': seen_at(html)})}", session_cookie)
    for frame in await frames_until_marker(page):
        await kept.apply(frame)
    assert "the bank&#x27;s receipt" in kept.panel() or "the bank's receipt" in kept.panel()
    assert kept.panel() == panel_of(await reload(user, sid))


async def test_a_socket_moves_the_page_instant_to_its_join_so_a_reconnect_asks_only_for_what_came_after(sid, session_cookie, user):
    await create(sid, 1)
    html = await reload(user, sid)
    await note(user, sid, "written before the join", 0)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0&{urlencode({'seen_at': seen_at(html)})}", session_cookie)
    frames = await frames_until_marker(page)
    assert "written before the join" in frames[0]
    joined = seen_at(frames[-1])
    assert datetime.fromisoformat(joined) > datetime.fromisoformat(seen_at(html))
    await page.disconnect()
    # The reconnect gives the moved instant: nothing to catch up beyond the margin's notes, which a frame re-sends as they stand.
    again = await browser_socket(f"/ws/sessions/{sid}/live?after=0&{urlencode({'seen_at': joined})}", session_cookie)
    assert len(await frames_until_marker(again)) <= 2


async def test_a_page_socket_without_an_instant_sends_no_catch_up(sid, session_cookie, user):
    await create(sid, 1)
    await note(user, sid, "already on the page", 0)
    page = await browser_socket(f"/ws/sessions/{sid}/live?after=0", session_cookie)
    assert await page.receive_nothing(QUIET)


@pytest.mark.parametrize("path", ["/ws/sessions/{sid}/live?after=0", "/ws/sessions/live?", "/ws/calls/live?"])
@pytest.mark.parametrize("bad", ["yesterday", "2026-12-06T10:00:00", "9" * 5000, "0001-01-01T00:00:00+00:00", "0001-01-01T00:00:00+01:00", "2026-12-06T10:00:00+00:00\x00"])
async def test_an_instant_that_is_not_one_closes_the_socket_4400(sid, session_cookie, path, bad):
    await create(sid, 1)
    socket = await browser_socket(path.format(sid=sid) + "&" + urlencode({"seen_at": bad}), session_cookie)
    assert await closed_with(socket) == 4400


def list_rows(html: str) -> list[str]:
    rows = dom.parse(html).by_id("session-rows")
    return [r.attrs["id"] for r in rows.elements() if r.attrs.get("id", "").startswith("session-")]


async def test_sessions_created_or_appended_to_before_the_list_socket_joined_go_to_the_top_once(session_cookie, user):
    for name in ("older", "busy", "quiet"):
        await create(f"s-{name}", 1)
    html = await page_html(user, "/")
    kept = dom.parse(html)
    await create("s-newcomer")
    await database_sync_to_async(services.append_events)(session_id="s-busy", events=validate_batch([{"type": "user_message", "data": {"content": "more"}}]))
    listing = await browser_socket(f"/ws/sessions/live?{urlencode({'seen_at': seen_at(html)})}", session_cookie)
    for frame in await frames_until_marker(listing):
        assert dom.apply(kept, frame) == []
    assert list_rows(kept.html()) == list_rows(await page_html(user, "/"))
    assert list_rows(kept.html())[:2] == ["session-s-busy", "session-s-newcomer"]
    assert await listing.receive_nothing(QUIET)


@database_sync_to_async
def quiet_for_an_hour(*session_ids: str) -> None:
    Session.objects.filter(pk__in=session_ids).update(last_activity_at=timezone.now() - timedelta(hours=1))


def status_cell(html: str, session_id: str) -> str:
    return dom.normalized(next(c for c in dom.parse(html).by_id(f"session-{session_id}").elements() if "col-status" in c.attrs.get("class", "")))


async def test_a_row_changed_with_no_event_before_the_list_socket_joined_is_replaced_where_it_stands(session_cookie, user, operator):
    await create("s-crashed")
    await append_events("s-crashed", [{"type": "turn_start", "data": {"turn": 1}}, CALL[0], {"type": "tool_call", "data": {"id": "c1", "name": "charge_card"}}])
    await create("s-newer", 1)
    await quiet_for_an_hour("s-crashed", "s-newer")  # stalled: c1's outcome is unknown
    html = await page_html(user, "/")
    await verdict(operator, "s-crashed", "c1")  # settles the session's last unknown call: its row says so
    listing = await browser_socket(f"/ws/sessions/live?{urlencode({'seen_at': seen_at(html)})}", session_cookie)
    kept = dom.parse(html)
    for frame in await frames_until_marker(listing):
        assert dom.apply(kept, frame) == []
    reloaded = await page_html(user, "/")
    assert list_rows(kept.html()) == list_rows(html) == list_rows(reloaded)  # nothing moved
    assert "all unknown calls settled" in status_cell(kept.html(), "s-crashed")
    assert status_cell(kept.html(), "s-crashed") == status_cell(reloaded, "s-crashed")


async def test_a_session_deleted_before_the_list_socket_joined_leaves_the_list(session_cookie, user):
    await create("s-kept", 1)
    await create("s-deleted", 1)
    await quiet_for_an_hour("s-kept", "s-deleted")
    html = await page_html(user, "/")
    await database_sync_to_async(delete_session)(session_id="s-deleted")
    listing = await browser_socket(f"/ws/sessions/live?{urlencode({'seen_at': seen_at(html)})}", session_cookie)
    kept = dom.parse(html)
    for frame in await frames_until_marker(listing):
        assert dom.apply(kept, frame) == []
    assert list_rows(kept.html()) == list_rows(await page_html(user, "/")) == ["session-s-kept"]


async def test_a_sorted_list_socket_replaces_the_rows_it_shows_and_puts_none_on_top(session_cookie, user):
    await create("s-shown", 1)
    html = await page_html(user, "/?sort=-tokens")
    await create("s-newcomer")
    await database_sync_to_async(services.append_events)(session_id="s-shown", events=validate_batch([{"type": "user_message", "data": {"content": "more"}}]))
    listing = await browser_socket(f"/ws/sessions/live?sort=-tokens&{urlencode({'seen_at': seen_at(html)})}", session_cookie)
    frames = await frames_until_marker(listing)
    assert "s-newcomer" not in "".join(frames)
    assert any('id="session-s-shown"' in f and 'hx-swap-oob="true"' in f and ">2<" in f for f in frames)


async def test_the_calls_list_lists_again_when_a_session_changed_before_its_socket_joined(session_cookie, user, settings):
    settings.TURNLOG_STALL_SECONDS = 0  # a crash's owed call is listed at once
    html = await page_html(user, "/calls/")
    await create("s-calls")  # a crash, before the socket joins
    await append_events("s-calls", [{"type": "turn_start", "data": {"turn": 1}}, CALL[0], {"type": "tool_call", "data": {"id": "c1", "name": "charge_card"}}])
    listing = await browser_socket(f"/ws/calls/live?{urlencode({'seen_at': seen_at(html)})}", session_cookie)
    kept = dom.parse(html)
    for frame in await frames_until_marker(listing):
        assert dom.apply(kept, frame) == []
    rows = lambda page: [dom.normalized(r) for r in dom.parse(page).by_id("call-rows").elements() if r.attrs.get("id", "").startswith("call-")]  # noqa: E731
    fresh = await page_html(user, "/calls/")
    assert len(rows(fresh)) == 1 and "charge_card" in rows(fresh)[0]
    assert rows(kept.html()) == rows(fresh)


async def test_a_call_settled_before_the_calls_socket_joined_leaves_the_list(session_cookie, user, operator, settings):
    settings.TURNLOG_STALL_SECONDS = 0
    for name in ("s-settled", "s-owed"):
        await create(name)
        await append_events(name, [{"type": "turn_start", "data": {"turn": 1}}, CALL[0], {"type": "tool_call", "data": {"id": "c1", "name": "charge_card"}}])
    html = await page_html(user, "/calls/")
    await verdict(operator, "s-settled", "c1")  # the list shows calls without a verdict
    listing = await browser_socket(f"/ws/calls/live?{urlencode({'seen_at': seen_at(html)})}", session_cookie)
    kept = dom.parse(html)
    for frame in await frames_until_marker(listing):
        assert dom.apply(kept, frame) == []
    rows = lambda page: [r.attrs["id"] for r in dom.parse(page).by_id("call-rows").elements() if r.attrs.get("id", "").startswith("call-")]  # noqa: E731
    assert rows(html) == ["call-s-owed--c1", "call-s-settled--c1"] or rows(html) == ["call-s-settled--c1", "call-s-owed--c1"]
    assert rows(kept.html()) == rows(await page_html(user, "/calls/")) == ["call-s-owed--c1"]

