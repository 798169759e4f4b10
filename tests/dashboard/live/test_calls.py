"""The fleet page's live rows (dashboard.live.calls), through the real ASGI application."""

from __future__ import annotations

import re

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from dashboard.live import sessions as live
from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.dashboard.conftest import QUIET, WAIT
from tests.dashboard.live.test_sessions import browser_socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]

CRASH = [
    {"type": "turn_start", "data": {"turn": 1}},
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "p1", "name": "charge_card", "arguments": {"cents": 500}}]}},
    {"type": "tool_call", "data": {"id": "p1", "name": "charge_card"}},
]


@database_sync_to_async
def store(session_id: str, events: list[dict]) -> None:
    services.create_session(session_id=session_id, agent_name="billing-bot")
    services.append_events(session_id=session_id, events=validate_batch(events))


@database_sync_to_async
def append(session_id: str, events: list[dict]) -> None:
    services.append_events(session_id=session_id, events=validate_batch(events))


@database_sync_to_async
def recover(session_id: str, user) -> None:
    services.recover(session_id=session_id, user=user)


@database_sync_to_async
def reloaded_row(user, row_id: str) -> str:
    client = Client()
    client.force_login(user)
    page = client.get("/calls/").content.decode()
    found = re.search(rf'<tr id="{row_id}".*?</tr>', page, re.S)
    assert found, page
    return found.group(0)


def row_of(frame: str) -> str:
    found = re.search(r'<tr id="call-.*?</tr>', frame, re.S)
    assert found, frame
    return found.group(0)


async def test_a_session_that_stalls_lists_its_call_without_any_event_as_a_reload_would(sid, session_cookie, user, monkeypatch, settings):
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    await store(sid, CRASH)
    listing = await browser_socket("/ws/calls/live", session_cookie)
    assert await listing.receive_nothing(QUIET * 2)  # running: its call is pending, sighted a moment ago
    settings.TURNLOG_STALL_SECONDS = 0  # the session stalls: no event marks it
    frame = await listing.receive_from(timeout=WAIT)
    assert frame.startswith('<tbody hx-swap-oob="afterbegin:#call-rows">')
    assert row_of(frame) == await reloaded_row(user, f"call-{sid}--p1")
    assert "tool_outcome_unknown" in frame and "charge_card" in frame and f"/sessions/{sid}/#seq-1" in frame
    assert await listing.receive_nothing(QUIET * 2)  # listed once, not again on the next rounds


async def test_a_listed_call_superseded_by_a_late_result_is_replaced_in_place(sid, session_cookie, user, monkeypatch, settings):
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    settings.TURNLOG_STALL_SECONDS = 0
    await store(sid, CRASH)
    listing = await browser_socket("/ws/calls/live", session_cookie)
    await recover(sid, user)  # a synthetic result: still tool_outcome_unknown, the same row
    assert await listing.receive_nothing(QUIET * 3)
    await append(sid, [{"type": "tool_result", "data": {"tool_call_id": "p1", "content": "charged"}}])
    frame = await listing.receive_from(timeout=WAIT)
    assert frame.startswith(f'<tr id="call-{sid}--p1"') and 'hx-swap-oob="true"' in frame and "superseded" in frame
    assert row_of(frame).replace(' hx-swap-oob="true"', "") == await reloaded_row(user, f"call-{sid}--p1")


async def test_a_filtered_socket_ignores_calls_outside_its_filter(sid, session_cookie, monkeypatch, settings):
    monkeypatch.setattr(live, "STATUS_REFRESH_SECONDS", 0.2)
    settings.TURNLOG_STALL_SECONDS = 0
    listing = await browser_socket("/ws/calls/live?agent=someone-else", session_cookie)
    await store(sid, CRASH)
    assert await listing.receive_nothing(QUIET * 3)
