"""Live servers for the client's tests: a real Daphne on the test database (a real SQLite file, or PostgreSQL
when DATABASE_URL names one), started per test, and tokens made in that database.

The client itself never imports Django; its tests do, to make users and tokens
and to run the server (tests/servers.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from sessions_app.models import Role
from tests.access import token_for
from tests.servers import PROJECT_DIR, DaphneServer
from turnlog_client import Client


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory) -> Iterator[DaphneServer]:
    """One Daphne per test module (starting one costs seconds); each test's data is its own (transactional_db)."""
    daphne = DaphneServer(connection.settings_dict, tmp_path_factory.mktemp("daphne") / "daphne.log")
    try:
        yield daphne.start()
    finally:
        daphne.stop()


@pytest.fixture
def own_server(transactional_db, tmp_path) -> Iterator[DaphneServer]:
    """A Daphne of this test alone, for tests that stop and start it."""
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log")
    try:
        yield daphne.start()
    finally:
        daphne.stop()


@pytest.fixture
def down_server(transactional_db, tmp_path) -> Iterator[DaphneServer]:
    """A Daphne of this test alone, not started yet: its address refuses connections until the test starts it."""
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log")
    try:
        yield daphne
    finally:
        daphne.stop()


@pytest.fixture
def token(transactional_db, django_user_model) -> str:
    """A member's token (committed, so the server sees it): reads, creates sessions, appends, forks."""
    return token_for(django_user_model.objects.create_user("agent"))


@pytest.fixture
def operator_token(transactional_db, django_user_model) -> str:
    """An operator's token: may also apply recoveries."""
    return token_for(django_user_model.objects.create_user("operator"), Role.OPERATOR)


@pytest.fixture
def client(server, token) -> Iterator[Client]:
    with Client(server.url, token) as api:
        yield api


def run_script(source: str, *args: str, timeout: float = 60, **popen) -> subprocess.Popen:
    """Start `source` (dedented) in a new Python process that can import the client (and nothing of the server's settings)."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(source), *args], cwd=PROJECT_DIR, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen,
    )  # fmt: skip


def wait_for_line(process: subprocess.Popen, expected: str) -> None:
    """Read the process's output until a line equal to `expected` (its stderr on failure)."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == expected:
            return
    process.wait(timeout=10)
    raise AssertionError(f"the script ended ({process.returncode}) before {expected!r}: {process.stderr.read() if process.stderr else ''}")


def events_of(api: Client, session_id: str) -> list[dict]:
    return list(api.iter_events(session_id))


ROOT = Path(__file__).resolve().parents[2]
