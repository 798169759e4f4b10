"""dashboard.middleware: under ASGI, the wrapped middleware run their hooks in the event loop
(no thread hop), and a message still reaches the next page (its storage goes to a thread)."""

from __future__ import annotations

import re
import threading

import pytest
from channels.db import database_sync_to_async
from django.test import AsyncClient

from dashboard import middleware
from sessions_app.models import Project, Role
from tests.access import member

pytestmark = pytest.mark.django_db(transaction=True)

WRAPPED = [middleware.CSPMiddleware, middleware.CommonMiddleware, middleware.AuthenticationMiddleware, middleware.MessageMiddleware]


@pytest.fixture
def hook_threads(monkeypatch):
    """The thread each wrapped middleware's hooks ran in, by class and hook."""
    seen: dict[tuple[str, str], set[int]] = {}
    for cls in WRAPPED:
        base = cls.__mro__[1]  # the class it wraps
        for hook in ("process_request", "process_response"):
            original = getattr(base, hook, None)
            if original is None:
                continue

            def recording(self, *args, _original=original, _key=(cls.__name__, hook)):
                seen.setdefault(_key, set()).add(threading.get_ident())
                return _original(self, *args)

            monkeypatch.setattr(base, hook, recording)
    return seen


@pytest.mark.asyncio
async def test_wrapped_hooks_run_in_the_event_loop_thread(hook_threads):
    response = await AsyncClient().get("/api/v1/no-such-endpoint")
    assert response.status_code == 404
    loop_thread = threading.get_ident()
    assert set(hook_threads) == {
        ("CSPMiddleware", "process_request"),
        ("CSPMiddleware", "process_response"),
        ("CommonMiddleware", "process_request"),
        ("CommonMiddleware", "process_response"),
        ("AuthenticationMiddleware", "process_request"),
        ("MessageMiddleware", "process_request"),
        ("MessageMiddleware", "process_response"),
    }
    assert all(threads == {loop_thread} for threads in hook_threads.values()), hook_threads


@pytest.mark.asyncio
async def test_a_message_added_by_a_page_is_shown_on_the_next_one_under_asgi(django_user_model):
    @database_sync_to_async
    def world():
        team = Project.objects.create(slug="team", name="The Team")
        admin = django_user_model.objects.create_user("alice", password="pw-alice-1")
        member(admin, Role.ADMIN, team)
        django_user_model.objects.create_user("dave")
        return admin

    admin = await world()
    client = AsyncClient()
    await client.aforce_login(admin)
    page = await client.get("/projects/team/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    added = await client.post("/projects/team/", {"csrfmiddlewaretoken": token, "username": "dave", "role": Role.VIEWER})
    assert added.status_code == 302, added.content[:500]
    shown = await client.get(added["Location"])
    assert "Added dave with the role viewer." in shown.content.decode()
    again = await client.get(added["Location"])
    assert "Added dave" not in again.content.decode()  # shown once, then consumed
