"""Failed logins are throttled per username and client address (django-axes, dashboard/lockout.py)."""

from __future__ import annotations

import http.cookiejar
import io
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.db import connection
from django.test import Client

from tests.access import token_for
from tests.conftest import ApiClient
from tests.servers import DaphneServer

pytestmark = pytest.mark.django_db

PASSWORD = "right-password-1"
LIMIT = 5  # settings' default (TURNLOG_LOGIN_FAILURE_LIMIT)


@pytest.fixture
def ops(django_user_model):
    return django_user_model.objects.create_user("ops", password=PASSWORD, is_staff=True)


def log_in(client: Client, password: str, username: str = "ops", path: str = "/login/", **extra):
    return client.post(path, {"username": username, "password": password}, **extra)


def fail_until_locked(client: Client, username: str = "ops", path: str = "/login/", **extra):
    for attempt in range(1, LIMIT):
        response = log_in(client, "wrong", username, path, **extra)
        assert response.status_code == 200, attempt  # the form again, with its error
    locking = log_in(client, "wrong", username, path, **extra)
    assert locking.status_code == 429
    return locking


def assert_locked_page(response, username: str = "ops", wait: str = "15 minutes"):
    assert response.status_code == 429
    text = response.content.decode()
    assert "Too many failed logins" in text
    assert f"Logging in as <strong>{username}</strong> from this address is locked after {LIMIT} failed attempts." in text
    assert f"Try again in {wait}, after " in text
    assert "An administrator can unlock it now" in text


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_the_right_password_after_the_limit_is_refused_with_the_lockout_page(ops, client):
    fail_until_locked(client)
    response = log_in(client, PASSWORD)
    assert_locked_page(response)
    assert response["Retry-After"] == "900"
    assert not logged_in(client)
    assert client.get("/").status_code == 302  # still sent to the login page


def test_fewer_failures_than_the_limit_do_not_lock_and_a_success_clears_them(ops, client):
    for _ in range(LIMIT - 1):
        log_in(client, "wrong")
    assert log_in(client, PASSWORD).status_code == 302
    client.logout()
    for _ in range(LIMIT - 1):
        assert log_in(client, "wrong").status_code == 200
    assert log_in(client, PASSWORD).status_code == 302


def test_the_admin_login_is_throttled_too(ops, client):
    fail_until_locked(client, path="/admin/login/")
    response = log_in(client, PASSWORD, path="/admin/login/")
    assert_locked_page(response)
    assert not logged_in(client)


def test_the_lockout_ends_after_the_cool_off(ops, client, settings):
    fail_until_locked(client)
    # Shortened once locked: failures far apart (a slow machine's password
    # hashing) would never add up to a lock under a cool-off of seconds.
    settings.AXES_COOLOFF_TIME = timedelta(seconds=4)
    assert_locked_page(log_in(client, PASSWORD), wait="4 seconds")  # and the wait starts again
    time.sleep(4.5)
    assert log_in(client, PASSWORD).status_code == 302
    assert logged_in(client)


def test_the_reset_command_unlocks_the_user(ops, client):
    fail_until_locked(client)
    out = io.StringIO()
    call_command("axes_reset_username", "ops", stdout=out)
    assert "1 attempts removed." in out.getvalue()
    assert log_in(client, PASSWORD).status_code == 302


def test_an_administrator_unlocks_the_user_in_the_admin(ops, client, django_user_model):
    fail_until_locked(client)
    admin = Client()
    admin.force_login(django_user_model.objects.create_superuser("boss", password="boss-password"))
    listing = admin.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and "ops" in listing.content.decode()
    attempt = AccessAttempt.objects.get(username="ops")
    deleted = admin.post(
        "/admin/axes/accessattempt/",
        {"action": "delete_selected", "_selected_action": [attempt.pk], "post": "yes"},
    )  # fmt: skip
    assert deleted.status_code == 302
    assert log_in(client, PASSWORD).status_code == 302


def test_another_user_and_another_address_are_not_locked(ops, client, django_user_model):
    django_user_model.objects.create_user("viewer", password=PASSWORD)
    fail_until_locked(client)
    assert log_in(Client(), PASSWORD, "viewer").status_code == 302
    assert log_in(Client(), PASSWORD, REMOTE_ADDR="10.0.0.7").status_code == 302
    assert log_in(Client(), PASSWORD).status_code == 429


def test_a_locked_user_keeps_its_api_token_and_its_open_login_session(ops, client):
    token = token_for(ops)
    already_in = Client()
    already_in.force_login(ops)
    fail_until_locked(client)
    assert ApiClient(token).get("/api/v1/sessions").status_code == 200
    assert already_in.get("/").status_code == 200


def test_the_environment_sets_the_limit_and_cool_off_on_a_real_server(ops, transactional_db, tmp_path):
    # On Daphne the middleware runs async (axes' __acall__), unlike the test client.
    server = DaphneServer(
        connection.settings_dict, tmp_path / "daphne.log",
        TURNLOG_LOGIN_FAILURE_LIMIT="2", TURNLOG_LOGIN_COOLOFF_MINUTES="0.1",
    ).start()  # fmt: skip
    try:
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect)

        def post_login(password: str) -> tuple[int, str]:
            opener.open(f"{server.url}/login/", timeout=10).read()
            csrf = next(cookie.value for cookie in jar if cookie.name == "csrftoken")
            body = urllib.parse.urlencode({"username": "ops", "password": password, "csrfmiddlewaretoken": csrf}).encode()
            try:
                with opener.open(f"{server.url}/login/", data=body, timeout=10) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                return error.code, error.read().decode()

        assert post_login("wrong")[0] == 200
        assert post_login("wrong")[0] == 429
        status, text = post_login(PASSWORD)
        assert status == 429
        assert "Logging in as <strong>ops</strong> from this address is locked after 2 failed attempts." in text
        assert "Try again in 6 seconds, after " in text
        time.sleep(6.5)
        assert post_login(PASSWORD)[0] == 302
    finally:
        server.stop()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.mark.parametrize("behind_proxy", [True, False])
def test_behind_the_proxy_each_client_is_counted_under_the_address_the_proxy_appended(ops, client, settings, behind_proxy):
    settings.TURNLOG_BEHIND_PROXY = behind_proxy
    # One proxy address for everyone; the client forges an earlier entry.
    fail_until_locked(client, HTTP_X_FORWARDED_FOR="10.0.0.9, 203.0.113.7", REMOTE_ADDR="127.0.0.1")
    other_client = log_in(Client(), PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.2", REMOTE_ADDR="127.0.0.1")
    forged_the_same = log_in(Client(), PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.7, 10.0.0.9", REMOTE_ADDR="127.0.0.1")
    if behind_proxy:
        assert other_client.status_code == 302 and forged_the_same.status_code == 302
    else:  # without a proxy the header is the client's own words: the address is REMOTE_ADDR
        assert_locked_page(other_client)
