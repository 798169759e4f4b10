"""Settings taken from the environment, checked on a real Daphne started with them."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db import connection
from websockets.sync.client import connect

from dashboard.secret_key import development_secret_key
from sessions_app import services
from tests.access import token_for
from tests.dashboard.live.test_large_events import LARGE_MESSAGE
from tests.servers import PROJECT_DIR, TURNLOG, DaphneServer, database_url, free_port
from tests.sessions_app.log.test_recovery import WORKED_EXAMPLE
from tests.sessions_app.services.test_recovery import store

LIMIT = 4096


def post(server: DaphneServer, token: str, path: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{server.url}{path}", data=body, method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def append_body(size: int) -> bytes:
    """An append of one user message, padded to exactly `size` bytes."""
    empty = json.dumps({"events": [{"type": "user_message", "data": {"content": ""}}]})
    return json.dumps({"events": [{"type": "user_message", "data": {"content": "x" * (size - len(empty))}}]}).encode()


@pytest.fixture
def limited_server(transactional_db, tmp_path):
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", TURNLOG_MAX_REQUEST_BYTES=str(LIMIT)).start()
    yield daphne
    daphne.stop()


def test_turnlog_max_request_bytes_is_the_real_limit_of_a_request_body(limited_server, django_user_model):
    services.create_session(session_id="limited")
    token = token_for(django_user_model.objects.create_user("agent"))
    path = "/api/v1/sessions/limited/events"

    status, body = post(limited_server, token, path, append_body(LIMIT + 1))
    assert (status, body["error"]) == (413, "too_large")
    assert str(LIMIT) in body["detail"]
    status, body = post(limited_server, token, path, append_body(LIMIT))
    assert (status, body) == (201, {"first_seq": 0, "next_seq": 1})


# The websocket message limit: derived from the request limits, refused below them, given to every Daphne


DEFAULT_WS_LIMIT = 6 * 16 * 1024 * 1024 + 64 * 1024


def ws_limits(**env: str) -> subprocess.CompletedProcess:
    show = "from django.conf import settings as s; print(s.TURNLOG_WS_MAX_MESSAGE_BYTES, s.DAPHNE_WEBSOCKET_MAX_MESSAGE_SIZE, s.DAPHNE_WEBSOCKET_MAX_FRAME_SIZE)"
    return manage("shell", "-v", "0", "-c", show, **env)


def test_the_websocket_limit_is_six_times_the_larger_request_limit_and_a_margin_unless_set_above():
    assert ws_limits().stdout.split() == [str(DEFAULT_WS_LIMIT)] * 3
    assert ws_limits(TURNLOG_OTLP_MAX_BODY_BYTES=str(32 << 20)).stdout.split() == [str(6 * (32 << 20) + 65536)] * 3
    assert ws_limits(TURNLOG_MAX_REQUEST_BYTES="1000", TURNLOG_OTLP_MAX_BODY_BYTES="500").stdout.split() == ["71536"] * 3
    assert ws_limits(TURNLOG_WS_MAX_MESSAGE_BYTES=str(1 << 30)).stdout.split() == [str(1 << 30)] * 3


def test_a_websocket_limit_below_what_an_accepted_event_can_need_is_refused():
    checked = manage("check", TURNLOG_WS_MAX_MESSAGE_BYTES=str(DEFAULT_WS_LIMIT - 1))
    assert checked.returncode != 0
    assert f"ImproperlyConfigured: TURNLOG_WS_MAX_MESSAGE_BYTES is {DEFAULT_WS_LIMIT - 1}, below the {DEFAULT_WS_LIMIT} bytes" in checked.stderr
    raised = manage("check", TURNLOG_WS_MAX_MESSAGE_BYTES="1048576", TURNLOG_MAX_REQUEST_BYTES="1000", TURNLOG_OTLP_MAX_BODY_BYTES="1000")
    assert raised.returncode == 0, raised.stderr  # the request limits lowered instead


def daphne_command(*command: str, **env: str) -> subprocess.CompletedProcess:
    """A server command that must refuse to start (else it is stopped after 20 s and the test fails)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TURNLOG_"))}
    return subprocess.run(command, cwd=PROJECT_DIR, env={**base, **env}, capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize(
    ("command", "given"),
    [
        ([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", "0", "dashboard.asgi:application"], 1048576),
        ([str(TURNLOG.with_name("daphne")), "--websocket-max-message-size", "2097152", "-p", "0", "dashboard.asgi:application"], 2097152),
        ([str(TURNLOG), "daphne", "-p", "0", "--websocket-max-message-size", str(DEFAULT_WS_LIMIT - 1)], DEFAULT_WS_LIMIT - 1),
    ],
    ids=["daphne's default", "a smaller limit", "turnlog daphne given a smaller limit"],
)
def test_daphne_refuses_to_serve_with_a_websocket_limit_below_the_setting(command, given):
    served = daphne_command(*command)
    assert served.returncode != 0
    expected = f"ImproperlyConfigured: Daphne's websocket message limit is {given} bytes, below TURNLOG_WS_MAX_MESSAGE_BYTES ({DEFAULT_WS_LIMIT})"
    assert expected in served.stderr, served.stderr


def test_runserver_as_make_run_starts_it_streams_an_event_above_daphnes_default_websocket_limit(transactional_db, tmp_path, django_user_model):
    """`make run` serves with `manage.py runserver` (Daphne's): it reads the limit from the settings."""
    services.create_session(session_id="large")
    token = token_for(django_user_model.objects.create_user("agent"))
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict)}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log_path = tmp_path / "runserver.log"
    with log_path.open("w") as log:
        server = subprocess.Popen([sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
                                  cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not port_open(port):
            assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        body = json.dumps({"events": [{"type": "user_message", "data": {"content": LARGE_MESSAGE}}]}).encode()
        served = SimpleNamespace(url=f"http://127.0.0.1:{port}")  # what post() reads of a DaphneServer
        assert post(served, token, "/api/v1/sessions/large/events", body) == (201, {"first_seq": 0, "next_seq": 1})
        with connect(f"ws://127.0.0.1:{port}/ws/v1/sessions/large/events", additional_headers={"Authorization": f"Bearer {token}"}, max_size=None) as stream:
            frame = json.loads(stream.recv(timeout=60))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert frame["event"]["data"]["content"] == LARGE_MESSAGE
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


# The production environment docs/guide/running.md documents (and .ci/run checks).
PRODUCTION_ENV = {
    "TURNLOG_ENV": "production",
    "DJANGO_SECRET_KEY": "k8Qz-3vN1xR7pL0sT5wY2mB9cF4hJ6dG8aE1uI3oK7nV0qZ5rW2yX9",
    "DJANGO_ALLOWED_HOSTS": "turnlog.example.com",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    """manage.py in a new process: the test's environment without its DJANGO_/TURNLOG_ settings, plus env."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TURNLOG_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT_DIR, env={**base, **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_production_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    checked = manage("check", **env)
    assert checked.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is not set" in checked.stderr
    blank = manage("check", **env, DJANGO_SECRET_KEY="  ")
    assert blank.returncode != 0 and "DJANGO_SECRET_KEY is not set" in blank.stderr


def test_daphne_refuses_to_serve_in_production_without_a_secret_key():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TURNLOG_"))}
    served = subprocess.run(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", "0", "dashboard.asgi:application"],
        cwd=PROJECT_DIR, env={**env, "TURNLOG_ENV": "production"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert served.returncode != 0 and "ImproperlyConfigured: DJANGO_SECRET_KEY is not set" in served.stderr


@pytest.fixture
def production_server(transactional_db, tmp_path):
    env = {**PRODUCTION_ENV, "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log", **env).start()
    yield daphne
    daphne.stop()


def test_production_serves_https_only_behind_its_proxy(production_server):
    def get(path: str, **headers: str):
        conn = http.client.HTTPConnection("127.0.0.1", production_server.port, timeout=10)
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        conn.close()
        return response

    plain = get("/login/")
    assert (plain.status, plain.headers["Location"]) == (301, f"https://127.0.0.1:{production_server.port}/login/")
    proxied = get("/login/", **{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "127.0.0.1"})
    assert proxied.status == 200
    assert proxied.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
    assert "; Secure" in proxied.headers["Set-Cookie"]  # the CSRF cookie of the login form
    assert "script-src 'self'" in proxied.headers["Content-Security-Policy"]


def test_production_refuses_debug():
    checked = manage("check", **PRODUCTION_ENV, DJANGO_DEBUG="1")
    assert checked.returncode != 0 and "DJANGO_DEBUG must be off when TURNLOG_ENV=production" in checked.stderr


def test_an_unknown_turnlog_env_is_refused():
    checked = manage("check", TURNLOG_ENV="prod")
    assert checked.returncode != 0 and "TURNLOG_ENV must be 'development' or 'production', not 'prod'" in checked.stderr


def test_check_deploy_is_clean_with_the_documented_production_environment():
    checked = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION_ENV)
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout


def test_development_fails_check_deploy_so_it_is_never_mistaken_for_production():
    checked = manage("check", "--deploy", "--fail-level", "WARNING")
    assert checked.returncode != 0
    assert "security.W004" in checked.stderr and "security.W008" in checked.stderr


def test_production_turns_on_https_and_each_part_can_be_turned_off():
    show = (
        "from django.conf import settings as s; print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS,"
        " s.SECURE_HSTS_INCLUDE_SUBDOMAINS, s.SECURE_HSTS_PRELOAD, s.SESSION_COOKIE_SECURE,"
        " s.CSRF_COOKIE_SECURE, s.SECURE_PROXY_SSL_HEADER, s.USE_X_FORWARDED_HOST, s.DEBUG)"
    )
    on = manage("shell", "-v", "0", "-c", show, **PRODUCTION_ENV)
    assert on.stdout.split() == ["True", "31536000", "True", "True", "True", "True", "('HTTP_X_FORWARDED_PROTO',", "'https')", "True", "False"]
    off = manage(
        "shell", "-v", "0", "-c", show, **PRODUCTION_ENV, DJANGO_SECURE_SSL_REDIRECT="0", DJANGO_SECURE_HSTS_SECONDS="60",
        DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS="0", DJANGO_SECURE_HSTS_PRELOAD="0", DJANGO_SECURE_COOKIES="0",
        TURNLOG_BEHIND_PROXY="0",
    )  # fmt: skip
    assert off.stdout.split() == ["False", "60", "False", "False", "False", "False", "None", "False", "False"]
    development = manage("shell", "-v", "0", "-c", show)
    assert development.stdout.split() == ["False", "0", "False", "False", "False", "False", "None", "False", "False"]


def test_development_uses_a_generated_key_kept_under_var():
    key_file = PROJECT_DIR / "var" / "secret_key"
    shown = manage("shell", "-v", "0", "-c", "from django.conf import settings; print(settings.SECRET_KEY)")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == key_file.read_text().strip()
    assert len(shown.stdout.strip()) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_the_development_key_is_created_once_and_reused(tmp_path: Path):
    key_file = tmp_path / "var" / "secret_key"
    first = development_secret_key(key_file)
    assert len(first) >= 50 and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert development_secret_key(key_file) == first
    assert [p.name for p in key_file.parent.iterdir()] == ["secret_key"]  # no temporary file left behind


def test_processes_starting_together_agree_on_one_development_key(tmp_path: Path):
    key_file = tmp_path / "secret_key"
    read = f"from dashboard.secret_key import development_secret_key; from pathlib import Path; print(development_secret_key(Path({str(key_file)!r})))"
    processes = [
        subprocess.Popen([sys.executable, "-c", read], cwd=PROJECT_DIR, stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]  # fmt: skip
    keys = {process.communicate(timeout=60)[0].strip() for process in processes}
    assert keys == {key_file.read_text().strip()}


PAGES = [
    "/login/",
    "/",
    "/sessions/crashed/",
    "/sessions/crashed/?view=raw",
    "/sessions/crashed/recovery",
    "/sessions/crashed/lineage",
    "/sessions/crashed/fork?boundary=0",
    "/admin/",
    "/api/v1/docs",
    "/no-such-page/",
]


@pytest.mark.django_db
@pytest.mark.parametrize("path", PAGES)
def test_every_page_carries_a_content_security_policy_without_inline_scripts(client, django_user_model, path):
    store(WORKED_EXAMPLE, session_id="crashed")
    if path != "/login/":
        client.force_login(django_user_model.objects.create_user("ops", is_staff=True, is_superuser=True))
    response = client.get(path)
    assert response.status_code == (404 if path == "/no-such-page/" else 200)
    directives = dict(
        (name, sources) for name, _, sources in (d.strip().partition(" ") for d in response["Content-Security-Policy"].split(";"))
    )  # fmt: skip
    assert directives["script-src"] == "'self'"
    assert "unsafe" not in response["Content-Security-Policy"]
    assert directives["frame-ancestors"] == "'none'"
    # Every script is a static file (a JSON data block is not a script).
    for tag in re.findall(r"<script\b[^>]*>", response.content.decode()):
        assert " src=" in tag or 'type="application/json"' in tag, tag
