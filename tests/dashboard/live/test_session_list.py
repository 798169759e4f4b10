"""The session list's live rows (dashboard.live.session_list.SessionListConsumer) with its usage columns and filters:
a live row is the reload's row, a filter the page applies the socket applies, a sorted list gets no new rows on top."""

from __future__ import annotations

import re

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.dashboard.conftest import QUIET, WAIT
from tests.dashboard.live.test_consumers import create
from tests.dashboard.live.test_sessions import browser_socket, closed_with

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]


@database_sync_to_async
def spend(session_id: str, input_tokens: int, output_tokens: int, model: str = "gpt-4o") -> None:
    message = {"content": "ok", "metadata": {"usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}, "model": model}}
    services.append_events(session_id=session_id, events=validate_batch([{"type": "assistant_message", "data": message}]))


@database_sync_to_async
def reloaded_row(user, session_id: str, query: str = "") -> str:
    client = Client()
    client.force_login(user)
    page = client.get(f"/{query}").content.decode()
    return re.search(rf'<tr id="session-{re.escape(session_id)}".*?</tr>', page, re.S).group(0)


def as_row(frame: str) -> str:
    row = re.search(r"<tr id=.*?</tr>", frame, re.S).group(0)
    return row.replace(' hx-swap-oob="true"', "")


async def test_a_live_row_shows_the_usage_columns_as_a_reload_does(sid, session_cookie, user):
    await create(sid, 1)
    listing = await browser_socket("/ws/sessions/live", session_cookie)
    await spend(sid, 12_000, 3_000, model="house-model-9")
    row = as_row(await listing.receive_from(timeout=WAIT))
    assert "15.0k" in row and "house-model-9" in row and "partly priced" in row
    assert row == await reloaded_row(user, sid)


async def test_a_list_filtered_by_model_follows_only_the_sessions_that_used_it(sid, session_cookie, user):
    await create(sid, 1)
    await create(f"{sid}-other", 1)
    listing = await browser_socket("/ws/sessions/live?model=o3&tag=", session_cookie)
    await spend(f"{sid}-other", 10, 1, model="gpt-4o")
    assert await listing.receive_nothing(QUIET * 2)
    await spend(sid, 10, 1, model="o3")
    frame = await listing.receive_from(timeout=WAIT)
    assert frame.startswith('<tbody hx-swap-oob="afterbegin:#session-rows">') and sid in frame
    assert as_row(frame) == await reloaded_row(user, sid, "?model=o3")


async def test_a_sorted_list_replaces_its_rows_but_puts_no_new_session_on_top(sid, session_cookie, user):
    await create(f"{sid}-shown", 1)
    listing = await browser_socket("/ws/sessions/live?sort=-cost", session_cookie)
    # A change of a shown row, answered once the socket read the rows it shows: the new session comes after it.
    await spend(f"{sid}-shown", 1000, 10)
    frame = await listing.receive_from(timeout=WAIT)
    assert frame.startswith(f'<tr id="session-{sid}-shown"') and 'hx-swap-oob="true"' in frame
    assert as_row(frame) == await reloaded_row(user, f"{sid}-shown", "?sort=-cost")
    await create(sid, 1)
    assert await listing.receive_nothing(QUIET * 2)


async def test_a_list_socket_with_a_bad_filter_is_closed_4400(session_cookie):
    assert await closed_with(await browser_socket("/ws/sessions/live?sort=price", session_cookie)) == 4400
