"""Browser tests: Playwright drives Debian's Chromium against a real Daphne on the test database."""

import json
import os
import time
import urllib.request

import pytest
from django.db import connection

from sessions_app.models import Membership, Project, Role
from tests.access import member, token_for
from tests.servers import DaphneServer

# Playwright's sync API runs an event loop in this thread; the test code's ORM
# calls are still synchronous and safe. (The server process never sees this.)
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def browser(request):
    """One Chromium per module: Playwright's loop must be gone before other tests call async_to_sync."""
    chromium = request.getfixturevalue("chromium_path")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def chromium_path():
    from tests.conftest import find_chromium

    return find_chromium()


@pytest.fixture(autouse=True)
def no_publishing_from_this_process(settings):
    """This process writes without publishing: async_to_sync refuses to run in a thread with an
    event loop (Playwright's). The servers follow its writes as they follow any other process's."""
    settings.CHANNEL_LAYERS = {}


@pytest.fixture
def server(transactional_db, tmp_path):
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log").start()
    yield daphne
    daphne.stop()


@pytest.fixture
def staff_user(django_user_model):
    """An operator of the default project: applies recoveries."""
    user = django_user_model.objects.create_user("ops", password=PASSWORD, is_staff=True)
    member(user, Role.OPERATOR)
    return user


@pytest.fixture
def plain_user(django_user_model):
    """A member of the default project: reads, appends and forks, but may not recover."""
    user = django_user_model.objects.create_user("viewer", password=PASSWORD)
    member(user)
    return user


def open_page(browser, server, user, path="/"):
    """A new browser page, logged in as user through the login form, at path."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("dialog", lambda dialog: dialog.dismiss())
    response = page.goto(f"{server.url}/login/?next={path}")
    # Said with what came instead, when the login form did not (a browser test timed out once waiting for it).
    assert response is not None and response.ok and page.locator("#id_username").count() == 1, (
        f"GET /login/ answered {response.status if response else 'nothing'}: {page.content()[:600]}"
    )
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}{path}*")
    return page


def wait_until(page, expression, timeout):
    """Wait (timeout in ms) until a JavaScript expression is true in the page.

    Instead of page.wait_for_function, which evaluates its expression with
    eval() inside the page, and the pages' Content-Security-Policy forbids eval.
    """
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"{expression} still false after {timeout} ms"
        page.wait_for_timeout(50)


def api_post(server, user, path, body):
    """POST JSON to the running server's API with a token of user (their role's scopes in the default project)."""
    token = token_for(user, Membership.objects.get(user=user, project=Project.default()).role)
    request = urllib.request.Request(
        f"{server.url}{path}", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())
