"""Numbers in query strings: a Unicode digit ("²" passes `str.isdigit()`, `int()` refuses it) is a 4xx or the default, never a 500."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings

from dashboard.asgi import application
from dashboard.params import decimal_int
from tests.access import member
from tests.dashboard.conftest import WAIT, opened
from sessions_app import services
from tests.dashboard.test_consumers import append, append_sync, create
from tests.dashboard.test_live import ORIGIN, browser_socket, closed_with

SUPERSCRIPT_TWO = "²"


def member_named(django_user_model, username: str):
    """A member of the default project, where `stored` puts its sessions."""
    user = django_user_model.objects.create_user(username)
    member(user)
    return user


def stored(session_id: str, count: int) -> None:
    services.create_session(session_id=session_id)
    append_sync(session_id, count)


@pytest.mark.parametrize("text", ["²", "١", "𝟠", "-1", "1.5", " 1", "1_0", "", "+1"])
def test_only_ascii_decimal_digits_are_a_number(text):
    assert decimal_int(text) is None


def test_ascii_decimal_digits_are_their_number():
    assert decimal_int("0") == 0 and decimal_int("0042") == 42 and decimal_int("9" * 30) == int("9" * 30)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path, params",
    [
        ("/sessions/{sid}/", {"view": "raw", "before": SUPERSCRIPT_TWO}),
        ("/sessions/{sid}/", {"highlight": f"{SUPERSCRIPT_TWO}-3"}),
        ("/sessions/{sid}/", {"highlight": f"1-{SUPERSCRIPT_TWO}"}),
        ("/sessions/{sid}/blocks", {"before": SUPERSCRIPT_TWO}),
        ("/sessions/{sid}/fork", {"boundary": SUPERSCRIPT_TWO}),
        ("/", {"cursor": SUPERSCRIPT_TWO}),
    ],
)
def test_a_page_given_a_unicode_digit_answers_without_a_server_error(client, django_user_model, path, params):
    stored("digits", 3)
    client.force_login(member_named(django_user_model, "viewer"))
    response = client.get(path.format(sid="digits"), params)
    assert response.status_code in (200, 400)


@pytest.mark.django_db
def test_a_page_given_a_huge_seq_answers_like_one_past_the_end(client, django_user_model):
    stored("digits", 3)
    client.force_login(member_named(django_user_model, "viewer"))
    huge = "9" * 40  # beyond any 64-bit column
    assert client.get("/sessions/digits/", {"view": "raw", "before": huge}).status_code == 200
    assert client.get("/sessions/digits/blocks", {"before": huge}).status_code == 200
    assert client.get("/sessions/digits/", {"highlight": f"1-{huge}"}).status_code == 200


@pytest.mark.django_db
def test_the_fork_form_refuses_a_unicode_digit_as_a_boundary(client, django_user_model):
    stored("digits", 3)
    client.force_login(member_named(django_user_model, "viewer"))
    response = client.post("/sessions/digits/fork", {"boundary": SUPERSCRIPT_TWO, "id": "child"})
    assert response.status_code == 422


@pytest.mark.django_db
@pytest.mark.parametrize("params", [{"since": SUPERSCRIPT_TWO}, {"limit": SUPERSCRIPT_TWO}])
def test_the_api_refuses_a_unicode_digit_in_a_query(api, params):
    stored("digits", 3)
    response = api.get("/api/v1/sessions/digits/events", params)
    assert response.status_code == 422 and response.json()["error"]



@pytest.mark.parametrize("first", ["%C2%B2", "%B2"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_a_raw_page_socket_given_a_unicode_digit_streams_from_the_start(sid, session_cookie, first):
    await create(sid, 1)
    page = await browser_socket(f"/ws/sessions/{sid}/live?view=raw&first={first}&after=0", session_cookie)
    await append(sid, 1)
    assert 'data-last-seq="1"' in await page.receive_from(timeout=WAIT)
    await page.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_a_raw_unicode_digit_byte_in_a_page_socket_query_is_no_server_error(sid, session_cookie):
    """Query strings are decoded as latin-1, where byte 0xB2 is "²"."""
    await create(sid, 1)
    headers = [(b"origin", ORIGIN.encode()), (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session_cookie}".encode())]
    communicator = WebsocketCommunicator(application, f"/ws/sessions/{sid}/live", headers=headers)
    communicator.scope["query_string"] = b"view=raw&first=\xb2"
    opened.append(communicator)
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected
    await append(sid, 1)
    assert 'data-last-seq="1"' in await communicator.receive_from(timeout=WAIT)
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.usefixtures("slow_poll", "fresh_layer")
async def test_an_api_socket_given_a_unicode_digit_closes_4400(sid, token):
    await create(sid, 1)
    communicator = WebsocketCommunicator(
        application, f"/ws/v1/sessions/{sid}/events?after=%C2%B2", headers=[(b"authorization", f"Bearer {token}".encode())]
    )
    opened.append(communicator)
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected and await closed_with(communicator) == 4400
