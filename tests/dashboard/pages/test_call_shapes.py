"""Tool calls in the shapes runtimes send, as the pages show them: cards, dispatch rows, content
blocks, the recovery page, the agent's page, live frames, and the append lane's sightings."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections
from django.test import Client
from django.utils import timezone

from dashboard.asgi import application
from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.models import CallSighting, Session, ToolPolicy
from tests.access import member, token_for
from tests.asgi import response_of
from tests.sessions_app import factories as f
from tests.sessions_app.test_call_shapes import assistant, chat_call, crashed_checkout


def text_of(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def card_of(page: str, call_id: str) -> str:
    """The card of a call, from its opening tag on."""
    start = page.rindex('<div class="card', 0, page.index(f'data-call-id="{call_id}"'))
    return page[start:].split("</article>")[0]


def store(session_id: str, events: list[dict], *, agent: str = "checkout-bot", quiet: bool = False) -> None:
    services.create_session(session_id=session_id, agent_name=agent)
    services.append_events(session_id=session_id, events=validate_batch(events))
    if quiet:  # stalled: its last activity an hour ago
        Session.objects.filter(pk=session_id).update(last_activity_at=timezone.now() - timedelta(hours=1))


@pytest.fixture
def policies(db):
    ToolPolicy.objects.create(pattern="charge_card", side_effect=ToolPolicy.EXTERNAL_EFFECT)
    ToolPolicy.objects.create(pattern="lookup_*", side_effect=ToolPolicy.READ_ONLY)


@pytest.mark.django_db
def test_a_chat_shaped_calls_card_shows_its_name_arguments_and_class(operator, policies):
    store("checkout", crashed_checkout(), quiet=True)
    page = text_of(operator.get("/sessions/checkout/"))
    c3 = card_of(page, "c3")
    assert '<span class="tool-name">charge_card</span>' in c3
    assert "&quot;amount&quot;: 700" in c3  # the JSON text, parsed and shown as JSON
    assert '<span class="badge se-external_effect">external effect</span>' in c3
    assert '<span class="badge state">tool_outcome_unknown</span>' in c3 and 'class="card state-tool_outcome_unknown loud"' in c3
    c1 = card_of(page, "c1")
    assert '<span class="tool-name">lookup_customer</span>' in c1 and '<span class="badge se-read_only">read-only</span>' in c1


@pytest.mark.django_db
def test_a_chat_shaped_dispatch_shown_apart_from_its_card_names_its_tool(operator):
    store("dispatch-only", [f.event("tool_call", **chat_call("d1", "send_email", {"to": "a@b"}))])
    row = text_of(operator.get("/sessions/dispatch-only/")).split('id="seq-0"')[1].split("</article>")[0]
    assert '<span class="who">tool_call</span>' in row and '<span class="muted">send_email</span>' in row


@pytest.mark.django_db
def test_the_recovery_page_names_chat_shaped_calls_and_checks_the_external_one_first(operator, policies):
    store("checkout", crashed_checkout(), quiet=True)
    page = text_of(operator.get("/sessions/checkout/recovery"))
    owed = re.findall(r'<h3><span class="tool-name">([^<]*)</span> <code class="muted">(c\d)</code></h3>', page)
    assert owed == [("charge_card", "c3"), ("charge_card", "c2")]
    assert "Check this first" in page and "&quot;amount&quot;: 700" in page
    assert '<li class="unverified"><span class="tool-name">charge_card</span> <code class="muted">c3</code>' in page  # manual_check
    header = text_of(operator.get("/sessions/checkout/")).split('class="recommended')[1].split("</span>.")[0]
    assert "manual_check" in header and "(decided by <span class=\"tool-name\">charge_card</span>" in header


@pytest.mark.django_db
def test_the_agents_page_names_the_calls_that_decided_a_recovered_crash(operator, policies):
    store("checkout", crashed_checkout(), quiet=True)
    operator.post("/sessions/checkout/recovery", {"digest": operator.get("/sessions/checkout/recovery").context["digest"]})
    page = text_of(operator.get("/agents/agent", {"name": "checkout-bot"}))
    crash = page.split('id="crash-')[1].split("</tr>")[0]
    assert '<span class="badge">manual_check</span>' in crash
    assert '(<span class="tool-name">charge_card</span>)' in crash  # c3, whose outcome is unknown


@pytest.mark.django_db
def test_calls_written_as_content_blocks_are_shown_with_their_tools_class(operator, policies):
    content = [
        {"type": "text", "text": "Charging, then mailing."},
        {"type": "tool_use", "id": "toolu_1", "name": "charge_card", "input": {"amount": 5}},
        {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "lookup_plan", "arguments": "{\"plan\": \"pro\"}"},
    ]
    store("blocks", [f.event("turn_start", turn=1), f.event("assistant_message", content=content, tool_calls=[])])
    page = text_of(operator.get("/sessions/blocks/"))
    tool_use = page.split('class="card block-call" data-call-id="toolu_1"')[1].split("</div>\n</div>")[0]
    assert '<span class="tool-name">charge_card</span>' in tool_use and "se-external_effect" in tool_use
    assert "&quot;amount&quot;: 5" in tool_use and "Anthropic tool_use block" in tool_use
    function_call = page.split('data-call-id="call_9"')[1]
    assert '<span class="tool-name">lookup_plan</span>' in function_call and "se-read_only" in function_call
    assert "&quot;plan&quot;: &quot;pro&quot;" in function_call
    # Recovery neither sights nor pairs them: the open turn owes nothing.
    assert "Tool calls still owed a result (0)" in text_of(operator.get("/sessions/blocks/recovery"))


# Live frames: the same cards, through the page's socket ------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_chat_shaped_call_arriving_live_is_named_as_on_a_reload(django_user_model):
    @database_sync_to_async
    def setup():
        ToolPolicy.objects.create(pattern="charge_card", side_effect=ToolPolicy.EXTERNAL_EFFECT)
        user = django_user_model.objects.create_user("viewer")
        member(user)
        client = Client()
        client.force_login(user)
        store("live-chat", [f.user("go"), f.event("turn_start", turn=1)])
        return client

    client = await setup()
    headers = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1"), (b"cookie", f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode())]
    socket = WebsocketCommunicator(application, "/ws/sessions/live-chat/live?after=1", headers=headers)
    connected, _ = await socket.connect(timeout=3)
    assert connected
    try:
        await database_sync_to_async(services.append_events)(
            session_id="live-chat", events=validate_batch([assistant(chat_call("c1", "charge_card", {"amount": 9}))])
        )
        frame = await socket.receive_from(timeout=3)
    finally:
        await socket.disconnect()
    card = card_of(frame, "c1")
    assert '<span class="tool-name">charge_card</span>' in card and "se-external_effect" in card and "&quot;amount&quot;: 9" in card
    page = await database_sync_to_async(lambda: text_of(client.get("/sessions/live-chat/")))()
    assert card_of(page, "c1") == card  # the frame's card is the reload's


# The append lane stores the same sightings as Django's endpoint --------------------------


async def post_through(app, path: str, body: dict, token: str) -> int:
    from asgiref.testing import ApplicationCommunicator

    raw = json.dumps(body).encode()
    scope = {
        "type": "http", "http_version": "1.1", "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
        "query_string": b"", "server": ("testserver", 80), "client": ("127.0.0.1", 5000),
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), (b"authorization", f"Bearer {token}".encode())],
    }  # fmt: skip
    communicator = ApplicationCommunicator(app, scope)
    await communicator.send_input({"type": "http.request", "body": raw, "more_body": False})
    status, _, _ = await response_of(communicator)
    return status


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_append_lane_and_django_store_the_names_of_chat_shaped_calls(django_user_model, settings):
    from dashboard.asgi import django_asgi_app

    settings.ALLOWED_HOSTS = ["testserver"]

    @database_sync_to_async
    def setup() -> str:
        for session_id in ("lane-chat", "djan-chat"):
            services.create_session(session_id=session_id)
        return token_for(django_user_model.objects.create_user("agent"))

    token = await setup()
    body = {"events": crashed_checkout()}
    assert await post_through(application, "/api/v1/sessions/lane-chat/events", body, token) == 201
    assert await post_through(django_asgi_app, "/api/v1/sessions/djan-chat/events", body, token) == 201

    @database_sync_to_async
    def sightings(session_id: str) -> list[tuple]:
        return list(CallSighting.objects.filter(session_id=session_id).order_by("seq", "call_id").values_list("seq", "call_id", "tool_name"))

    expected = [(3, "c1", "lookup_customer"), (3, "c2", "charge_card"), (8, "c3", "charge_card")]
    assert await sightings("lane-chat") == await sightings("djan-chat") == expected
    await sync_to_async(connections.close_all)()  # the requests' connection (asgiref's sync thread), before the database is dropped
