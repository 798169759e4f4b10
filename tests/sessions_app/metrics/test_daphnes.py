"""/metrics across two real Daphne processes sharing one multi-process directory, one of them killed.

Both Daphnes (tests/servers.py) run on the test database with PROMETHEUS_MULTIPROC_DIR set, as the
launchers set it. Appends, a recovery and websocket streams go to either; a scrape of either adds up
both; after one is killed (SIGKILL) its counts stay, its open sockets go, and its files are merged.
A stall shows on the sessions gauge, and the worker's webhook delivery on either Daphne's scrape.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from sessions_app import services
from sessions_app.models import Project, Role
from sessions_app.services import notify
from tests.access import token_for
from tests.servers import PROJECT_DIR, DaphneServer, database_url
from tests.sessions_app import factories as f
from tests.webhook_receiver import receiver  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 10


@pytest.fixture
def metrics_dir(tmp_path):
    path = tmp_path / "prometheus"
    path.mkdir()
    return path


@pytest.fixture
def daphnes(transactional_db, tmp_path, metrics_dir):
    servers = [DaphneServer(connection.settings_dict, tmp_path / f"daphne-{i}.log", PROMETHEUS_MULTIPROC_DIR=str(metrics_dir)) for i in range(2)]
    for server in servers:
        server.start()
    yield servers
    for server in servers:
        server.stop()


def call(server: DaphneServer, method: str, path: str, token: str, body: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(
        server.url + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def scrape(server: DaphneServer, token: str) -> tuple[bytes, dict[tuple[str, tuple], float]]:
    status, body = call(server, "GET", "/metrics", token)
    assert status == 200, body
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    return body, found


def stream(server: DaphneServer, token: str, session_id: str):
    return connect(f"ws://127.0.0.1:{server.port}/ws/v1/sessions/{session_id}/events", additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=WAIT)


def frames(ws, count: int) -> list[int]:
    return [json.loads(ws.recv(timeout=WAIT))["event"]["seq"] for _ in range(count)]


def test_two_daphnes_add_up_and_a_killed_one_keeps_its_counts(daphnes, metrics_dir, django_user_model, promtool):
    first, second = daphnes
    root = django_user_model.objects.create_superuser("root")
    site = services.issue_token(user=root, project=None, scopes=["metrics"])[1]
    agent = token_for(django_user_model.objects.create_user("agent"), Role.OPERATOR)

    def moved(now, before, name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return now.get(key, 0) - before.get(key, 0)

    _, before = scrape(first, site)
    assert call(first, "POST", "/api/v1/sessions", agent, {"id": "two"})[0] == 201
    assert call(first, "POST", "/api/v1/sessions/two/events", agent, {"events": [f.user("a"), f.user("b"), f.user("c")]})[0] == 201
    assert call(second, "POST", "/api/v1/sessions/two/events", agent, {"events": [f.event("turn_start", turn=1), f.user("d")]})[0] == 201

    with stream(first, agent, "two") as on_first, stream(second, agent, "two") as on_second, stream(second, agent, "two") as again:
        for ws in (on_first, on_second, again):
            assert frames(ws, 5) == [0, 1, 2, 3, 4]
        status, body = call(second, "POST", "/api/v1/sessions/two/recover", agent, {})
        assert status == 200, body
        for ws in (on_first, on_second, again):
            assert frames(ws, 1) == [5]  # the recovery's turn_end

        _, both = scrape(second, site)
        assert moved(both, before, "turnlog_events_appended_total", type="user_message") == 4
        assert moved(both, before, "turnlog_events_appended_total", type="turn_start") == 1
        assert moved(both, before, "turnlog_events_appended_total", type="turn_end") == 1
        assert moved(both, before, "turnlog_append_seconds_count") == 2  # one append on each
        assert moved(both, before, "turnlog_append_batch_events_sum") == 5
        assert moved(both, before, "turnlog_recoveries_total", kind="manual") == 1
        assert both[("turnlog_websockets_open", (("kind", "api_events"),))] == 3
        assert moved(both, before, "turnlog_websocket_frames_sent_total", kind="api_events") == 18
        assert moved(both, before, "turnlog_stream_catch_ups_total", reason="backlog") >= 3
        assert both[("turnlog_sessions", (("project", "default"), ("status", "running")))] == 0
        assert both[("turnlog_sessions", (("project", "default"), ("status", "recovered")))] == 1  # quiet since its recovery

        pid = second.process.pid
        second.stop(kill=True)
        body, after = scrape(first, site)
        kept = {key: value for key, value in both.items() if key[0] != "turnlog_websockets_open" and not key[0].startswith("turnlog_sessions")}
        assert {key: after.get(key) for key in kept} == kept  # every count of the killed one, kept
        assert after[("turnlog_websockets_open", (("kind", "api_events"),))] == 1  # its sockets died with it
        assert not [p.name for p in metrics_dir.iterdir() if p.name.endswith(f"_{pid}.db")]
        assert {"counter_merged.db", "histogram_merged.db"} <= {p.name for p in metrics_dir.iterdir()}

    checked = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()


def test_a_stall_and_a_webhook_delivery_show_on_either_daphnes_scrape(tmp_path, metrics_dir, django_user_model, receiver, promtool, settings):
    """The worker process counts into the same directory: its webhook delivery shows on a Daphne's scrape after it exits."""
    settings.TURNLOG_WEBHOOK_ALLOW_PRIVATE = True  # the receiver listens on 127.0.0.1
    quick = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "TURNLOG_STALL_SECONDS": "1", "TURNLOG_WEBHOOK_ALLOW_PRIVATE": "1"}
    servers = [DaphneServer(connection.settings_dict, tmp_path / f"daphne-{i}.log", **quick) for i in range(2)]
    for server in servers:
        server.start()
    try:
        first, second = servers
        site = services.issue_token(user=django_user_model.objects.create_superuser("root"), project=None, scopes=["metrics"])[1]
        agent = token_for(django_user_model.objects.create_user("agent"), Role.OPERATOR)
        endpoint = notify.create_endpoint(project=Project.default(), actor=None, url=receiver.url, kinds=["stalled"])
        _, before = scrape(first, site)
        assert call(first, "POST", "/api/v1/sessions", agent, {"id": "stalls"})[0] == 201
        assert call(second, "POST", "/api/v1/sessions/stalls/events", agent, {"events": [f.event("turn_start", turn=1)]})[0] == 201
        time.sleep(1.5)  # past the 1 s stall window

        _, stalled = scrape(first, site)
        assert stalled[("turnlog_sessions", (("project", "default"), ("status", "stalled")))] == 1
        env = {"DATABASE_URL": database_url(connection.settings_dict), "PATH": "/usr/bin:/bin", **quick}
        worker = subprocess.run([sys.executable, "manage.py", "recovery_worker", "--once"], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60)
        assert worker.returncode == 0, worker.stdout + worker.stderr
        assert [payload["type"] for payload in receiver.verified(endpoint.secret)] == ["session.stalled"]

        body, after = scrape(second, site)
        assert after[("turnlog_webhook_deliveries_total", (("outcome", "delivered"),))] - before.get(("turnlog_webhook_deliveries_total", (("outcome", "delivered"),)), 0) == 1
        assert after[("turnlog_events_appended_total", (("type", "turn_start"),))] - before.get(("turnlog_events_appended_total", (("type", "turn_start"),)), 0) == 1
    finally:
        for server in servers:
            server.stop()
    checked = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()
