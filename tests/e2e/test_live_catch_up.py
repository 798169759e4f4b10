"""A page whose socket joins late (a slow connect, a reconnect) still shows what changed meanwhile, once."""

import re
import time

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import api_post, open_page
from tests.sessions_app.services.test_recovery import store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE = 15_000  # ms: a live frame must arrive well within this


class HeldSockets:
    """The page's sockets to `pattern`, held before they reach the server until `release()`."""

    def __init__(self, page, pattern: str):
        self.routes = []
        page.route_web_socket(re.compile(pattern), lambda route: self.routes.append(route))

    def release(self) -> None:
        deadline = time.monotonic() + LIVE / 1000
        while not self.routes:
            assert time.monotonic() < deadline, "the page opened no socket"
            time.sleep(0.05)
        for route in self.routes:
            route.connect_to_server()


def test_a_session_created_before_the_list_socket_joined_shows_once_at_the_top(browser, server, plain_user):
    store([("user_message", {"content": "hi"})], session_id="older")
    page = open_page(browser, server, plain_user, "/sessions/older/")
    held = HeldSockets(page, r"/ws/sessions/live")
    page.goto(f"{server.url}/")
    expect(page.locator("#session-rows")).to_contain_text("older")
    status, _ = api_post(server, plain_user, "/api/v1/sessions", {"id": "newcomer"})
    assert status == 201
    held.release()
    expect(page.locator("#session-rows tr").first).to_have_id("session-newcomer", timeout=LIVE)
    expect(page.locator("#session-newcomer")).to_have_count(1)
    # The page's instant moved to the join: a later session arrives as a live row, as always.
    api_post(server, plain_user, "/api/v1/sessions", {"id": "later"})
    expect(page.locator("#session-rows tr").first).to_have_id("session-later", timeout=LIVE)
    expect(page.locator("#session-rows tr[id^=session-]")).to_have_count(3)


def test_a_note_written_before_the_page_socket_joined_shows_on_the_page(browser, server, plain_user):
    store([("user_message", {"content": "hi"})], session_id="noted")
    page = open_page(browser, server, plain_user, "/sessions/noted/")
    held = HeldSockets(page, r"/ws/sessions/noted/live")
    page.reload()
    expect(page.locator("#live-state")).to_be_visible()
    status, _ = api_post(server, plain_user, "/api/v1/sessions/noted/notes", {"text": "Billing confirmed the charge.", "seq": 0})
    assert status == 201
    held.release()
    expect(page.locator("#seq-0")).to_contain_text("Billing confirmed the charge.", timeout=LIVE)


def test_the_list_socket_follows_the_search_and_status_chosen_after_the_page_loaded(browser, server, plain_user):
    store([("user_message", {"content": "hi"})], session_id="older")
    page = open_page(browser, server, plain_user, "/")
    sockets = []
    page.on("websocket", lambda socket: sockets.append(socket.url) if "/ws/sessions/live" in socket.url else None)
    page.fill("#q", "alpha")
    expect(page.locator("#session-rows")).to_contain_text("No session matches", timeout=LIVE)
    expect(page.locator("#q")).to_be_focused()  # the table was swapped, not the form
    page.wait_for_url("**q=alpha**")
    deadline = time.monotonic() + LIVE / 1000
    while not any("q=alpha" in url for url in sockets):
        assert time.monotonic() < deadline, f"no socket with the search: {sockets}"
        page.wait_for_timeout(50)
    api_post(server, plain_user, "/api/v1/sessions", {"id": "beta-1"})
    api_post(server, plain_user, "/api/v1/sessions", {"id": "alpha-2"})
    expect(page.locator("#session-alpha-2")).to_have_count(1, timeout=LIVE)
    expect(page.locator("#session-beta-1")).to_have_count(0)  # outside the search: the old socket would have listed it
    page.select_option("select[name=status]", "clean")
    page.wait_for_url("**status=clean**")
    expect(page.locator("#session-alpha-2")).to_have_count(1, timeout=LIVE)
