"""dashboard/live/metered.py: each socket counted open while it lives and each frame it sends, by kind (through the real routing)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from tests.dashboard.conftest import WAIT
from tests.dashboard.live.test_consumers import create, frames, open_socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]


def counted(name: str) -> float:
    return REGISTRY.get_sample_value(name, {"kind": "api_events"}) or 0


async def test_a_stream_is_open_while_it_lives_and_its_frames_are_counted(sid, token):
    await create(sid, 3)
    open_before, sent_before = counted("turnlog_websockets_open"), counted("turnlog_websocket_frames_sent_total")
    first, second = await open_socket(sid, token=token), await open_socket(sid, token=token)
    assert len(await frames(first, 3)) == 3 and len(await frames(second, 3)) == 3
    assert counted("turnlog_websockets_open") - open_before == 2
    assert counted("turnlog_websocket_frames_sent_total") - sent_before == 6

    await first.disconnect(timeout=WAIT)
    assert counted("turnlog_websockets_open") - open_before == 1
    await second.disconnect(timeout=WAIT)
    assert counted("turnlog_websockets_open") == open_before
