"""TURNLOG_METRICS_BIND: the recovery worker (a real `manage.py recovery_worker` process) serves the scrape on its own address."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from sessions_app import services
from sessions_app.log.events import validate_batch
from sessions_app.metrics.listener import parse_address
from tests.servers import PROJECT_DIR, database_url, free_port
from tests.sessions_app import factories as f


def test_the_address_is_host_and_port():
    assert parse_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_address("[::1]:9464") == ("::1", 9464)
    for wrong in ("9464", "127.0.0.1", "host:port", "127.0.0.1:70000", ":9464"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_address(wrong)


def start_worker(port: int, metrics_dir) -> subprocess.Popen:
    env = {
        **os.environ, "DATABASE_URL": database_url(connection.settings_dict), "TURNLOG_METRICS_BIND": f"127.0.0.1:{port}",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    }  # fmt: skip
    command = [sys.executable, "manage.py", "recovery_worker", "--interval", "60"]
    return subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.django_db(transaction=True)
def test_the_worker_serves_the_scrape_without_a_token_at_its_address(tmp_path):
    services.create_session(session_id="seen")
    services.append_events(session_id="seen", events=validate_batch([f.event("turn_start", turn=1)]))
    port = free_port()
    worker = start_worker(port, tmp_path)
    try:
        assert worker.stdout.readline().startswith(f"recovery worker: metrics at http://127.0.0.1:{port}/metrics")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            assert response.status == 200
            families = {family.name: family for family in text_string_to_metric_families(response.read().decode())}
        running = {s.labels["status"]: s.value for s in families["turnlog_sessions"].samples if s.labels["project"] == "default"}
        assert running["running"] == 1
        assert "turnlog_recoveries" in families  # the worker's own counters, from the shared directory
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30)
        assert refused.value.code == 404
    finally:
        worker.terminate()
        worker.wait(timeout=30)


@pytest.mark.django_db(transaction=True)
def test_a_taken_address_is_said_and_the_worker_keeps_recovering(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        worker = start_worker(taken.getsockname()[1], tmp_path)
        try:
            assert worker.stderr.readline().startswith(f"metrics: cannot serve at 127.0.0.1:{taken.getsockname()[1]}")
            assert worker.stdout.readline().startswith("recovery worker: a round every 60 s")
        finally:
            worker.terminate()
            worker.wait(timeout=30)
