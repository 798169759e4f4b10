import pytest
from channels.db import database_sync_to_async

from tests.access import token_for
from tests.dashboard.live.test_consumers import closed_with, socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]


@pytest.mark.parametrize("session_id", ["a%00b", "a%2Fb", "x" * 129, "%ED%A0%80"])
async def test_a_socket_for_an_id_no_session_can_have_is_closed_4404(django_user_model, session_id):
    user = await database_sync_to_async(django_user_model.objects.create_user)("agent")
    token = await database_sync_to_async(token_for)(user)
    assert await closed_with(socket(session_id, token=token)) == 4404
