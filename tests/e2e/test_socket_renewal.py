"""Live sockets renewed by the server (close 4012) come back by themselves, from the page's cursor."""

import pytest
from django.db import connection
from playwright.sync_api import expect

from dashboard.live.consumers import CLOSE_RENEW
from tests.e2e.conftest import api_post, open_page, wait_until
from tests.servers import DaphneServer
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms: a live frame or a reconnect must arrive well within this
RENEW_SECONDS = 3

# What the page's sockets do, recorded from the first one: close codes and opens.
RECORD_SOCKETS = """
window.closeCodes = [];
window.socketOpens = 0;
document.addEventListener("htmx:wsClose", function (event) { window.closeCodes.push(event.detail.event.code); });
document.addEventListener("htmx:wsOpen", function () { window.socketOpens += 1; });
"""


@pytest.fixture
def renewing_server(transactional_db, tmp_path):
    daphne = DaphneServer(
        connection.settings_dict, tmp_path / "daphne.log", TURNLOG_SOCKET_RENEW_SECONDS=str(RENEW_SECONDS)
    ).start()
    yield daphne
    daphne.stop()


def watch_sockets(page, path: str) -> list[str]:
    """The URLs of the sockets to path the page opens from now on.

    Only those: the page it was on may still open (or renew) its own socket meanwhile."""
    urls = []
    page.on("websocket", lambda socket: urls.append(socket.url) if path in socket.url else None)
    return urls


def wait_for_opens(page, count: int) -> None:
    wait_until(page, f"window.socketOpens >= {count}", timeout=LIVE)


def test_a_renewed_session_page_socket_reconnects_from_its_cursor_and_misses_nothing(browser, renewing_server, plain_user):
    store([("user_message", {"content": "before"})], session_id="renewed")
    page = open_page(browser, renewing_server, plain_user, "/")
    page.add_init_script(RECORD_SOCKETS)
    urls = watch_sockets(page, "/ws/sessions/renewed/live")
    page.goto(f"{renewing_server.url}/sessions/renewed/")
    wait_for_opens(page, 1)
    api_post(renewing_server, plain_user, "/api/v1/sessions/renewed/events", {"events": [{"type": "user_message", "data": {"content": "m1"}}]})
    expect(page.locator("#blocks")).to_contain_text("m1", timeout=LIVE)

    wait_for_opens(page, 2)  # the server closed the first one, the page opened another
    base = f"{renewing_server.url.replace('http', 'ws')}/ws/sessions/renewed/live"
    assert [url.split("&state=")[0] for url in urls[:2]] == [f"{base}?after=0", f"{base}?after=1"]
    assert all("&state=" in url for url in urls[:2])  # and the header's state the page shows
    assert page.evaluate("window.closeCodes")[0] == CLOSE_RENEW
    api_post(renewing_server, plain_user, "/api/v1/sessions/renewed/events", {"events": [{"type": "user_message", "data": {"content": "m2"}}]})
    expect(page.locator("#blocks")).to_contain_text("m2", timeout=LIVE)

    wait_for_opens(page, 4)  # renewed again and again; nothing is shown twice
    api_post(renewing_server, plain_user, "/api/v1/sessions/renewed/events", {"events": [{"type": "user_message", "data": {"content": "m3"}}]})
    expect(page.locator("#blocks")).to_contain_text("m3", timeout=LIVE)
    assert page.locator("#blocks .row .text").all_inner_texts() == ["before", "m1", "m2", "m3"]
    assert set(page.evaluate("window.closeCodes")) == {CLOSE_RENEW}


def test_a_renewed_session_list_socket_reconnects_and_shows_new_sessions(browser, renewing_server, plain_user):
    store([("user_message", {"content": "hi"})], session_id="older")
    page = open_page(browser, renewing_server, plain_user, "/sessions/older/")
    page.add_init_script(RECORD_SOCKETS)
    page.goto(f"{renewing_server.url}/")
    wait_for_opens(page, 2)  # renewed once (a change while it reconnects is caught up: test_live_catch_up.py)
    status, _ = api_post(renewing_server, plain_user, "/api/v1/sessions", {"id": "newer"})
    assert status == 201
    expect(page.locator("#session-rows")).to_contain_text("newer", timeout=LIVE)
    assert page.evaluate("window.closeCodes")[0] == CLOSE_RENEW


def test_a_page_logged_out_elsewhere_stops_reconnecting_and_says_so(browser, renewing_server, plain_user):
    store([("user_message", {"content": "hi"})], session_id="loggedout")
    page = open_page(browser, renewing_server, plain_user, "/")
    page.add_init_script(RECORD_SOCKETS)
    page.goto(f"{renewing_server.url}/sessions/loggedout/")
    wait_for_opens(page, 1)
    page.context.clear_cookies()  # the login is gone: the renewed socket's reconnect is refused with 4401
    wait_until(page, "window.closeCodes.indexOf(4401) >= 0", timeout=LIVE)
    expect(page.locator("#live-state")).to_have_text("Disconnected: reload the page")
    assert page.evaluate("window.closeCodes") == [CLOSE_RENEW, 4401]
