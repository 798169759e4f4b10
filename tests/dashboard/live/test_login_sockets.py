"""A socket opened with the login cookie ends with its login (dashboard.live.credentials): 4401 within
TURNLOG_CREDENTIAL_CHECK_SECONDS of a logout, a password change, a deactivation or the session's expiry,
whatever path did it; the JSON stream, the session page's socket and the list's alike.

In-process sockets (channels' communicator) here; the same against a real Daphne, across two of them,
in test_login_sockets_served.py.
"""

from __future__ import annotations

from datetime import timedelta
from importlib import import_module

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.forms import PasswordChangeForm
from django.contrib.sessions.models import Session as LoginSession
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.asgi import application
from dashboard.live import credentials
from dashboard.live.consumers import CLOSE_UNAUTHENTICATED
from sessions_app import services
from sessions_app.log.events import validate_batch
from tests.dashboard.conftest import WAIT, opened
from tests.dashboard.live.test_consumers import create
from tests.sessions_app import factories as f

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("slow_poll", "fresh_layer")]

QUICK_CHECK = 0.2
# Every socket a login opens.
PATHS = {
    "json stream": "/ws/v1/sessions/{sid}/events",
    "page": "/ws/sessions/{sid}/live?after=0",
    "recovery page": "/ws/sessions/{sid}/recovery/live?next_seq=0&digest=" + "0" * 64 + "&after=0",
    "list": "/ws/sessions/live",
    "fleet calls": "/ws/calls/live",
}
# Those that send a frame when an event is appended (the fleet's rows change with calls only).
EVENT_PATHS = {name: path for name, path in PATHS.items() if name != "fleet calls"}
PASSWORD = "old-horse-battery"


@pytest.fixture(autouse=True)
def quick_checks(settings, monkeypatch):
    settings.TURNLOG_CREDENTIAL_CHECK_SECONDS = QUICK_CHECK
    monkeypatch.setattr(credentials, "_watcher", None)


@pytest.fixture(params=PATHS.values(), ids=PATHS.keys())
def path(request, sid):
    return request.param.format(sid=sid)


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


async def cookie_socket(path: str, client: Client) -> WebsocketCommunicator:
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    headers = [(b"host", b"testserver"), (b"origin", b"http://testserver"), (b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={cookie}".encode())]
    communicator = WebsocketCommunicator(application, path, headers=headers)
    opened.append(communicator)
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected
    await communicator.receive_nothing(3 * QUICK_CHECK)  # open, and past a check or two (frames it sends are not the point)
    return communicator


async def closed_with(communicator: WebsocketCommunicator) -> int:
    """The code of the close that must come within a few checks (frames before it are skipped)."""
    while True:
        message = await communicator.receive_output(timeout=WAIT)
        if message["type"] == "websocket.close":
            await communicator.disconnect(code=message["code"], timeout=WAIT)
            return message["code"]


async def stays_open(communicator: WebsocketCommunicator) -> bool:
    while not await communicator.receive_nothing(5 * QUICK_CHECK):
        if (await communicator.receive_output())["type"] == "websocket.close":
            return False
    return True


@pytest.fixture
def person(user):
    user.set_password(PASSWORD)
    user.save()
    return user


async def test_logging_out_closes_that_logins_sockets_and_no_other(sid, person, path):
    await create(sid, 1)
    browser, other_browser = await database_sync_to_async(login)(person), await database_sync_to_async(login)(person)
    ws, other = await cookie_socket(path, browser), await cookie_socket(path, other_browser)
    response = await database_sync_to_async(browser.post)("/logout/")  # Django's LogoutView, as the page's button does
    assert response.status_code == 302
    assert await closed_with(ws) == CLOSE_UNAUTHENTICATED
    assert await stays_open(other), "another login of the same user is not logged out"
    await other.disconnect(timeout=WAIT)


@database_sync_to_async
def set_password(user, password: str) -> None:
    user.set_password(password)
    user.save()


async def test_changing_the_password_closes_every_login_socket_of_the_user(sid, person, path, django_user_model):
    await create(sid, 1)
    first, second = await database_sync_to_async(login)(person), await database_sync_to_async(login)(person)
    sockets = [await cookie_socket(path, first), await cookie_socket(path, second)]
    await set_password(await database_sync_to_async(django_user_model.objects.get)(pk=person.pk), "new-horse-battery")
    assert [await closed_with(ws) for ws in sockets] == [CLOSE_UNAUTHENTICATED] * 2


@database_sync_to_async
def change_password_as_the_view_does(browser: Client, user) -> None:
    """What django.contrib.auth.views.PasswordChangeView does on a valid form: save it, keep its own login."""
    form = PasswordChangeForm(user, {"old_password": PASSWORD, "new_password1": "n3w-horse-battery", "new_password2": "n3w-horse-battery"})
    assert form.is_valid(), form.errors
    form.save()
    request = RequestFactory().post("/")
    request.session = import_module(django_settings.SESSION_ENGINE).SessionStore(browser.cookies[django_settings.SESSION_COOKIE_NAME].value)
    request.user = user
    update_session_auth_hash(request, user)


async def test_a_password_change_through_djangos_view_closes_the_other_logins_sockets(sid, person, path):
    """The login that changed it moves to a new session key (its own page reconnects with it); its old socket closes too."""
    await create(sid, 1)
    changer, other = await database_sync_to_async(login)(person), await database_sync_to_async(login)(person)
    sockets = [await cookie_socket(path, changer), await cookie_socket(path, other)]
    await change_password_as_the_view_does(changer, person)
    assert [await closed_with(ws) for ws in sockets] == [CLOSE_UNAUTHENTICATED] * 2


async def test_saving_the_user_without_a_new_password_keeps_the_sockets(sid, person, path):
    await create(sid, 1)
    ws = await cookie_socket(path, await database_sync_to_async(login)(person))
    person.first_name = "Vera"
    await database_sync_to_async(person.save)()
    assert await stays_open(ws)
    await ws.disconnect(timeout=WAIT)


async def test_deactivating_the_user_closes_their_login_sockets(sid, person, path):
    await create(sid, 1)
    ws = await cookie_socket(path, await database_sync_to_async(login)(person))
    person.is_active = False
    await database_sync_to_async(person.save)()
    assert await closed_with(ws) == CLOSE_UNAUTHENTICATED


async def test_the_login_sessions_expiry_closes_its_sockets(sid, person, path):
    await create(sid, 1)
    browser = await database_sync_to_async(login)(person)
    ws = await cookie_socket(path, browser)
    key = browser.cookies[django_settings.SESSION_COOKIE_NAME].value
    expiry = timezone.now() + timedelta(seconds=1)
    await database_sync_to_async(LoginSession.objects.filter(pk=key).update)(expire_date=expiry)
    assert await closed_with(ws) == CLOSE_UNAUTHENTICATED
    assert timezone.now() >= expiry, "not before the session expired"


async def test_a_check_of_many_login_sockets_takes_two_more_queries(person):
    browsers = [await database_sync_to_async(login)(person) for _ in range(5)]

    async def never(why):
        raise AssertionError("kept")

    registrations = [
        credentials.Registration(user_id=person.pk, token=None, session_key=b.cookies[django_settings.SESSION_COOKIE_NAME].value, close=never)
        for b in browsers
    ] * 4

    def check():
        with CaptureQueriesContext(connection) as queries:
            return credentials.lost(registrations), len(queries)

    verdicts, queries = await database_sync_to_async(check)()
    assert verdicts == [] and queries == 4, "users, memberships, login sessions, their users"


# Exactly: no frame after the end, and the end heard at once ----------------------------------------------


@pytest.fixture(params=EVENT_PATHS.values(), ids=EVENT_PATHS.keys())
def event_path(request, sid):
    return request.param.format(sid=sid)


@database_sync_to_async
def append_text(sid: str, text: str) -> None:
    services.append_events(session_id=sid, events=validate_batch([f.user(text)]))


async def drained(communicator: WebsocketCommunicator) -> WebsocketCommunicator:
    """The socket with the frames it sent so far read (its backlog, a first status)."""
    while not await communicator.receive_nothing(3 * QUICK_CHECK):
        assert (await communicator.receive_output())["type"] == "websocket.send"
    return communicator


async def frames_until_closed(communicator: WebsocketCommunicator) -> tuple[list[str], int]:
    """Every text frame until the close (which must come within WAIT), and its code."""
    received = []
    while True:
        message = await communicator.receive_output(timeout=WAIT)
        if message["type"] == "websocket.close":
            await communicator.disconnect(code=message["code"], timeout=WAIT)
            return received, message["code"]
        received.append(message.get("text") or "")


async def test_after_a_logout_a_socket_sends_no_frame_even_before_it_hears_of_it(sid, person, event_path, periodic_check_off, nothing_told):
    """The frame of an event committed after the logout waits for a check, which finds the login gone: the
    socket closes 4401 instead of sending it."""
    await create(sid, 1)
    browser = await database_sync_to_async(login)(person)
    ws = await drained(await cookie_socket(event_path, browser))
    assert (await database_sync_to_async(browser.post)("/logout/")).status_code == 302
    assert await ws.receive_nothing(3 * QUICK_CHECK), "nothing tells this process: the socket stays open while idle"
    await append_text(sid, "after-the-logout")
    received, code = await frames_until_closed(ws)
    assert code == CLOSE_UNAUTHENTICATED
    assert received == [], received


async def test_a_check_is_per_socket_not_per_shared_frame(sid, person, periodic_check_off, nothing_told):
    """Two logins' page sockets share each frame's render; the logged-out one's is not sent, the other's is."""
    await create(sid, 1)
    leaving, staying = await database_sync_to_async(login)(person), await database_sync_to_async(login)(person)
    path = PATHS["page"].format(sid=sid)
    gone, kept = await drained(await cookie_socket(path, leaving)), await drained(await cookie_socket(path, staying))
    await database_sync_to_async(leaving.post)("/logout/")
    await append_text(sid, "after-the-logout")
    assert await frames_until_closed(gone) == ([], CLOSE_UNAUTHENTICATED)
    frame = await kept.receive_from(timeout=WAIT)
    assert "after-the-logout" in frame
    await kept.disconnect(timeout=WAIT)


async def log_out(browser: Client, user) -> None:
    assert (await database_sync_to_async(browser.post)("/logout/")).status_code == 302


async def change_password(browser: Client, user) -> None:
    await set_password(user, "n3w-horse-battery")


@database_sync_to_async
def deactivate(browser: Client, user) -> None:
    user.is_active = False
    user.save()


@database_sync_to_async
def delete_user(browser: Client, user) -> None:
    user.delete()


ENDS = {"logout": log_out, "password change": change_password, "deactivation": deactivate, "user deleted": delete_user}


@pytest.mark.parametrize("end", ENDS.values(), ids=ENDS.keys())
async def test_the_end_of_a_login_closes_its_idle_sockets_at_once(sid, person, path, end, periodic_check_off):
    """Told through the channel layer on commit: no periodic round, no frame needed."""
    await create(sid, 1)
    browser = await database_sync_to_async(login)(person)
    ws = await cookie_socket(path, browser)
    await end(browser, person)
    assert await closed_with(ws) == CLOSE_UNAUTHENTICATED
