"""A stream refused for its token says why in the close reason (4401 stays the code)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from dashboard.live import credentials
from sessions_app import services
from sessions_app.models import ApiToken
from tests.dashboard.conftest import WAIT
from tests.dashboard.live.test_consumers import create, open_socket, socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]


async def close_message(communicator) -> dict:
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected, "the socket is accepted first, then closed with a code"
    message = await communicator.receive_output(timeout=WAIT)
    assert message["type"] == "websocket.close"
    await communicator.disconnect(code=message.get("code"), timeout=WAIT)
    return message


async def test_a_revoked_tokens_stream_is_closed_4401_saying_it_was_revoked(sid, token):
    await create(sid, 1)
    row = await database_sync_to_async(ApiToken.usable_for)(token)
    await database_sync_to_async(services.revoke_token)(token=row)
    message = await close_message(socket(sid, token=token))
    assert message["code"] == 4401 and message["reason"].startswith(f"token {row.prefix}… was revoked at ")
    assert len(message["reason"].encode()) <= 123  # what a close frame can carry


async def test_an_unknown_token_says_so_and_no_credentials_ask_for_them(sid):
    await create(sid, 1)
    assert (await close_message(socket(sid, token="tl_never-issued")))["reason"] == "unknown token"
    assert (await close_message(socket(sid)))["reason"] == "authentication required"


async def test_a_stream_whose_token_expires_while_open_closes_saying_it_expired(sid, token, settings, monkeypatch):
    monkeypatch.setattr(credentials, "_watcher", None)
    settings.TURNLOG_CREDENTIAL_CHECK_SECONDS = 0.2
    await create(sid)
    ws = await open_socket(sid, token=token)
    await database_sync_to_async(ApiToken.objects.update)(expires_at=timezone.now() - timedelta(seconds=1))
    message = await ws.receive_output(timeout=3)
    assert message["type"] == "websocket.close" and message["code"] == 4401
    assert " expired at " in message["reason"] and len(message["reason"].encode()) <= 123
    await ws.disconnect(code=4401, timeout=WAIT)
