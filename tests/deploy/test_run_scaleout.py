"""deploy/run_scaleout.py: 2 Daphne + the worker + nginx on PostgreSQL and Redis, driven end to end.

The launcher runs as `make run-scaleout` does, on the test database and on a
redis-server of this test (tests.servers.RedisServer) so that the test can
stop and start it. nginx runs the deployment's site file (deploy/nginx-site.conf)
over HTTPS with the launcher's self-signed certificate, which the test trusts.
Appends go to each Daphne directly; a browser page, logged
in and served through nginx, must show every one of them, through a Redis
restart and through each Daphne being killed in turn (the launcher starts it
again, as systemd would): nginx sends requests to the other one meanwhile, the
page's socket reconnects from its cursor, and in the end the page shows
exactly the events the API lists. PostgreSQL only: the suite's PostgreSQL
pass runs it; in CI a missing nginx fails it.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import httpx
import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.db import connection
from playwright.sync_api import expect
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from sessions_app import services
from tests.access import token_for
from tests.conftest import running_in_ci
from tests.e2e.conftest import open_page, wait_until
from tests.dashboard.live.test_large_events import LARGE_MESSAGE
from tests.servers import PROJECT_DIR, RedisServer, database_url
from turnlog_client import Client

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LIVE = 20_000  # ms: an event must reach the page within this, through a reconnect or the database poll
START = 120  # s: migrate, collectstatic and five processes on a busy machine

RECORD_SOCKETS = """
window.socketOpens = 0;
document.addEventListener("htmx:wsOpen", function () { window.socketOpens += 1; });
"""


def nginx_available() -> bool:
    return shutil.which("nginx") is not None or os.path.exists("/usr/sbin/nginx")


@pytest.fixture
def requirements():
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("PostgreSQL only (the suite's PostgreSQL pass runs it)")
    if not nginx_available():
        if running_in_ci():
            pytest.fail("nginx is not installed; CI must install it (apt-get install nginx)")
        pytest.skip("nginx is not installed (apt-get install nginx)")


class ScaleOut:
    """The launcher as a subprocess, and what its scaleout.json says about the processes it runs."""

    def __init__(self, run_dir: Path, redis: RedisServer, env: dict):
        self.run_dir = run_dir
        self.log_path = run_dir.parent / "run_scaleout.log"
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "deploy/run_scaleout.py", "--run-dir", str(run_dir)],
                cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + START
        while not (run_dir / "scaleout.json").exists():
            assert self.process.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, f"not started within {START} s: {self.log_path.read_text()}"
            time.sleep(0.2)
        self.url = self.state()["url"]
        # The launcher's certificate, for 127.0.0.1: verified in full (its name too).
        self.tls = ssl.create_default_context(cafile=self.state()["ca_file"])

    def state(self) -> dict:
        return json.loads((self.run_dir / "scaleout.json").read_text())

    def daphne(self, index: int) -> dict:
        return self.state()["processes"][f"daphne-{index}"]

    def daphne_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.daphne(index)['port']}"

    def kill_daphne(self, index: int) -> int:
        pid = self.daphne(index)["pid"]
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_restarted(self, index: int, old_pid: int) -> None:
        deadline = time.monotonic() + 60
        while self.daphne(index)["pid"] == old_pid or not port_open(self.daphne(index)["port"]):
            assert time.monotonic() < deadline, f"daphne-{index} was not started again: {self.log_path.read_text()}"
            time.sleep(0.2)

    def stop(self) -> int:
        """Ctrl-C: the launcher stops every process it started."""
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=60)

    def logs(self) -> dict[str, str]:
        return {path.name: path.read_text() for path in (self.run_dir / "logs").glob("*.log")}


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.fixture
def scaleout(requirements, transactional_db, tmp_path):
    redis = RedisServer(tmp_path / "redis.log").start()
    env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict), "REDIS_URL": redis.url}
    # Browser tests allow the ORM next to Playwright's loop; the servers must not.
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    env.pop("TURNLOG_DATA_DIR", None)
    run = ScaleOut(tmp_path / "run", redis, env)
    run.redis = redis
    TLS["context"] = run.tls
    yield run
    TLS.clear()
    if run.process.poll() is None:
        run.stop()
    redis.kill()


# Set by the scaleout fixture: HTTPS to nginx trusts the launcher's certificate.
TLS: dict[str, ssl.SSLContext] = {}


class TrustingBrowser:
    """Pages of a browser that accepts the launcher's self-signed certificate (open_page asks for new_page)."""

    def __init__(self, browser):
        self.browser = browser

    def new_page(self, **options):
        return self.browser.new_page(ignore_https_errors=True, **options)


def request(url: str, *, method: str = "GET", body: dict | None = None, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers), timeout=30, context=TLS.get("context")) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, {"body": error.read().decode()}


def append(base_url: str, token: str, text: str) -> None:
    status, body = request(f"{base_url}/api/v1/sessions/scaled/events", method="POST", body={"events": [{"type": "user_message", "data": {"content": text}}]}, token=token)
    assert status == 201, body


def appended_counts(base_url: str, token: str) -> float:
    """turnlog_events_appended_total over every process, as /metrics adds them up from the shared directory."""
    request = urllib.request.Request(f"{base_url}/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30, context=TLS.get("context")) as response:
        text = response.read().decode()
    families = text_string_to_metric_families(text)
    return sum(s.value for family in families for s in family.samples if s.name == "turnlog_events_appended_total")


def shown(page) -> list[str]:
    return page.locator("#blocks .row .text").all_inner_texts()


def expect_shown(page, text: str) -> None:
    expect(page.locator("#blocks")).to_contain_text(text, timeout=LIVE)


def test_two_daphnes_behind_nginx_serve_one_page_through_a_redis_restart_and_each_daphne_killed(browser, scaleout, plain_user, django_user_model):
    token = token_for(plain_user)
    assert request(f"{scaleout.url}/api/v1/sessions", method="POST", body={"id": "scaled"}, token=token)[0] == 201
    append(scaleout.daphne_url(0), token, "before")

    page = open_page(TrustingBrowser(browser), scaleout, plain_user, "/")
    page.add_init_script(RECORD_SOCKETS)
    page.goto(f"{scaleout.url}/sessions/scaled/")
    wait_until(page, "window.socketOpens >= 1", timeout=LIVE)
    assert page.evaluate("fetch('/static/turnlog/turnlog.js').then(r => r.status)") == 200  # nginx serves the static files

    # Whichever Daphne holds the page's socket, one of these came through the other one.
    append(scaleout.daphne_url(0), token, "through daphne-0")
    append(scaleout.daphne_url(1), token, "through daphne-1")
    expect_shown(page, "through daphne-0")
    expect_shown(page, "through daphne-1")

    # Redis restarted mid-stream: what is appended while it is down comes from the database, then live again.
    scaleout.redis.kill()
    append(scaleout.daphne_url(0), token, "redis down 0")
    append(scaleout.daphne_url(1), token, "redis down 1")
    expect_shown(page, "redis down 0")
    expect_shown(page, "redis down 1")
    scaleout.redis.start()
    append(scaleout.daphne_url(1), token, "redis back 1")
    append(scaleout.daphne_url(0), token, "redis back 0")
    expect_shown(page, "redis back 1")
    expect_shown(page, "redis back 0")

    # Each Daphne killed in turn: the page's socket was on one of them, and reconnects through nginx to the other.
    for index in (0, 1):
        old_pid = scaleout.kill_daphne(index)
        statuses = [request(f"{scaleout.url}/api/v1/sessions/scaled", token=token)[0] for _ in range(6)]
        assert statuses == [200] * 6, f"nginx's other upstream serves while daphne-{index} is down"
        append(scaleout.url, token, f"daphne-{index} down")
        expect_shown(page, f"daphne-{index} down")
        scaleout.wait_restarted(index, old_pid)
        append(scaleout.daphne_url(index), token, f"daphne-{index} back")
        expect_shown(page, f"daphne-{index} back")

    assert page.evaluate("window.socketOpens") >= 2, "the page's socket never had to reconnect"
    status, listed = request(f"{scaleout.url}/api/v1/sessions/scaled/events", token=token)
    assert status == 200
    stored = [event["data"]["content"] for event in listed["events"]]
    assert len(stored) == 11
    assert shown(page) == stored  # nothing missed, nothing twice, in order
    page.close()

    # One metrics directory for every process: the counts of the two killed Daphnes are still there.
    root = django_user_model.objects.create_superuser("root", password="pw-root-1234")
    metrics_token = services.issue_token(user=root, project=None, scopes=["metrics"], name="prometheus")[1]
    assert appended_counts(scaleout.url, metrics_token) == 11

    logs = scaleout.logs()
    assert not [name for name, text in logs.items() if "Traceback" in text], logs


def test_a_message_larger_than_daphnes_default_websocket_limit_reaches_streams_on_the_other_daphne_and_through_nginx(scaleout, plain_user, monkeypatch):
    """Each Daphne the launcher starts carries a frame above Daphne's default 1 MiB, as the deployment's units do."""
    token = token_for(plain_user)
    assert request(f"{scaleout.url}/api/v1/sessions", method="POST", body={"id": "large"}, token=token)[0] == 201
    auth = {"Authorization": f"Bearer {token}"}
    with connect(f"ws://127.0.0.1:{scaleout.daphne(1)['port']}/ws/v1/sessions/large/events", additional_headers=auth, max_size=None) as live:
        for text in ("before", LARGE_MESSAGE):
            body = {"events": [{"type": "user_message", "data": {"content": text}}]}
            assert request(f"{scaleout.daphne_url(0)}/api/v1/sessions/large/events", method="POST", body=body, token=token)[0] == 201
        status, listed = request(f"{scaleout.url}/api/v1/sessions/large/events", token=token)
        assert status == 200 and [event["data"]["content"] for event in listed["events"]] == ["before", LARGE_MESSAGE]
        assert [json.loads(live.recv(timeout=60))["event"] for _ in range(2)] == listed["events"]
    monkeypatch.setenv("SSL_CERT_FILE", scaleout.state()["ca_file"])  # the stream's websocket trusts the default paths
    with Client(scaleout.url, token, transport=httpx.HTTPTransport(verify=scaleout.tls)) as client:  # through nginx
        stream = client.stream("large", open_timeout=60)
        assert [next(stream), next(stream)] == listed["events"]
        stream.close()
    assert not [name for name, text in scaleout.logs().items() if "Traceback" in text]


def test_throttling_counts_failed_logins_under_the_address_nginx_saw_not_one_the_client_wrote(scaleout, plain_user):
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), urllib.request.HTTPSHandler(context=scaleout.tls))
    with opener.open(f"{scaleout.url}/login/", timeout=30) as response:
        form_token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.read().decode()).group(1)
    body = urllib.parse.urlencode({"csrfmiddlewaretoken": form_token, "username": plain_user.username, "password": "wrong"}).encode()
    # Over HTTPS Django's CSRF check wants the page the form came from, as a browser sends it.
    headers = {"X-Forwarded-For": "203.0.113.9", "Referer": f"{scaleout.url}/login/"}
    login = urllib.request.Request(f"{scaleout.url}/login/", data=body, headers=headers)
    with opener.open(login, timeout=30) as response:
        assert response.status == 200  # the form again, with its error
    assert list(AccessAttempt.objects.values_list("username", "ip_address")) == [(plain_user.username, "127.0.0.1")]


def test_the_launcher_serves_https_and_redirects_plain_http_as_the_site_file_does(scaleout):
    with urllib.request.urlopen(f"{scaleout.url}/healthz", timeout=30, context=scaleout.tls) as response:
        assert response.status == 200
    plain = httpx.get(f"{scaleout.state()['http_url']}/sessions/?x=1", timeout=30)
    assert plain.status_code == 308 and plain.headers["location"] == "https://127.0.0.1/sessions/?x=1"
    assert "include " in (scaleout.run_dir / "nginx.conf").read_text()  # a minimal main configuration around the site


def test_its_environment_file_sends_the_commands_of_its_hint_to_its_database(scaleout, plain_user):
    config = scaleout.run_dir / "turnlog.env"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    hint = next(line for line in scaleout.log_path.read_text().splitlines() if "commands beside it:" in line)
    command = hint.split("commands beside it: ", 1)[1].replace(".venv/bin/python", sys.executable).replace("COMMAND", "")
    assert command.startswith(f"TURNLOG_CONFIG={config} ")
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "TURNLOG_DATA_DIR", "TURNLOG_CONFIG")}
    created = subprocess.run(
        f"{command} tokens create --user {plain_user.username} --project default", shell=True, cwd=PROJECT_DIR, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert f"in the PostgreSQL database {connection.settings_dict['NAME']} on" in created.stderr
    status, _ = request(f"{scaleout.url}/api/v1/sessions", token=created.stdout.strip())
    assert status == 200


def test_ctrl_c_stops_every_process_it_started(scaleout):
    pids = [process["pid"] for process in scaleout.state()["processes"].values()]
    assert all(alive(pid) for pid in pids)
    assert scaleout.stop() == 0
    assert not [pid for pid in pids if alive(pid)]
    assert not port_open(int(scaleout.url.rsplit(":", 1)[1]))


WATCHDOG_RESTART = 30  # s: a frozen process replaced within this (the launcher's watchdog is 15 s, as the units')


def test_a_frozen_daphne_and_a_frozen_worker_are_killed_and_started_again_within_30_s_and_the_site_answers(scaleout, plain_user):
    token = token_for(plain_user)
    frozen = {"daphne-0": scaleout.daphne(0)["pid"], "worker": scaleout.state()["processes"]["worker"]["pid"]}
    for pid in frozen.values():
        os.kill(pid, signal.SIGSTOP)  # alive to a supervisor that only waits for an exit: only the watchdog sees it
    stopped_at = time.monotonic()
    try:
        replaced = {}
        while len(replaced) < len(frozen):
            assert time.monotonic() - stopped_at < WATCHDOG_RESTART, (f"not replaced within {WATCHDOG_RESTART} s: {sorted(set(frozen) - set(replaced))}", scaleout.log_path.read_text())
            processes = scaleout.state()["processes"]
            for name, old_pid in frozen.items():
                now = processes[name]
                if name not in replaced and now["pid"] != old_pid and (now["port"] is None or port_open(now["port"])):
                    replaced[name] = time.monotonic() - stopped_at
            time.sleep(0.2)
    finally:
        for pid in frozen.values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert min(replaced.values()) >= 14  # by the watchdog, not before it
    assert not [pid for pid in frozen.values() if alive(pid)]
    launcher = scaleout.log_path.read_text()
    for name, pid in frozen.items():
        assert f"{name} (pid {pid}) sent no WATCHDOG=1 for 15 s: killing it (SIGKILL)" in launcher
    # The new Daphne serves, and so does the site through nginx.
    assert request(f"{scaleout.daphne_url(0)}/readyz")[0] == 200
    assert request(f"{scaleout.url}/api/v1/sessions", method="POST", body={"id": "after-the-freeze"}, token=token)[0] == 201
    status, body = request(f"{scaleout.daphne_url(0)}/api/v1/sessions/after-the-freeze/events", method="POST", body={"events": [{"type": "user_message", "data": {"content": "after the freeze"}}]}, token=token)
    assert status == 201, body
