"""Only `migrate` (and so `turnlog serve`, `make run`) and `restore` create a SQLite database (dashboard/sqlite_guard.py):
any other command against a missing file exits non-zero naming it and creates nothing; and the commands that
write tokens say which database they wrote. Real processes, each on a SQLite file of its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection

from tests.servers import PROJECT_DIR, TURNLOG, database_url, free_port

pytestmark = pytest.mark.timeout(120)


def run(command: list, database_file, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TURNLOG_CONFIG": "", "DATABASE_URL": f"sqlite:///{database_file}", **env}
    return subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=90)


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "manage.py", "tokens", "create", "--user", "ops", "--project", "default"],
        [sys.executable, "manage.py", "create_token", "ops"],
        [sys.executable, "manage.py", "recovery_worker", "--once"],
        [TURNLOG, "manage", "create_token", "ops"],
        [TURNLOG, "manage", "tokens", "list"],
        [TURNLOG, "worker", "--once"],
    ],
    ids=["manage.py tokens create", "manage.py create_token", "manage.py recovery_worker", "turnlog manage create_token",
         "turnlog manage tokens list", "turnlog worker"],
)  # fmt: skip
def test_a_command_against_a_missing_sqlite_file_exits_non_zero_naming_it_and_creates_nothing(tmp_path, command):
    missing = tmp_path / "nowhere" / "turnlog.sqlite3"
    result = run(command, missing)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"the SQLite database {missing} does not exist, and this command does not create one" in result.stderr
    assert "turnlog manage migrate" in result.stderr and "Traceback" not in result.stderr
    assert not missing.exists()
    assert not list(missing.parent.glob("turnlog.sqlite3*")) if missing.parent.exists() else True


def test_commands_that_need_no_database_still_run_without_one(tmp_path):
    missing = tmp_path / "turnlog.sqlite3"
    assert run([sys.executable, "manage.py", "help"], missing).returncode == 0
    assert run([TURNLOG, "manage", "check"], missing).returncode == 0
    checked = run([TURNLOG, "check"], missing)  # reports the missing database among its problems
    assert checked.returncode == 1 and f"the database {missing} does not exist" in checked.stdout
    assert not missing.exists()


def test_migrate_creates_the_sqlite_database_and_then_token_commands_say_which_they_wrote(tmp_path):
    database = tmp_path / "turnlog.sqlite3"
    assert run([TURNLOG, "manage", "migrate", "--noinput", "-v", "0"], database).returncode == 0
    assert database.exists()
    made = run([TURNLOG, "manage", "create_token", "ops"], database)
    assert made.returncode == 0, made.stderr
    assert f"in the SQLite database {database}" in made.stderr
    created = run([sys.executable, "manage.py", "tokens", "create", "--user", "ops", "--project", "default"], database)
    assert created.returncode == 0, created.stderr
    assert f"in the SQLite database {database}. It is shown once" in created.stderr
    assert created.stdout.strip().startswith("tl_") and created.stdout.strip() not in created.stderr


@pytest.mark.django_db(transaction=True)
def test_token_commands_on_postgresql_name_the_database_and_host_never_the_password(django_user_model):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: the suite's PostgreSQL pass runs it")
    env = {**os.environ, "TURNLOG_CONFIG": "", "DATABASE_URL": database_url(connection.settings_dict)}
    result = subprocess.run([TURNLOG, "manage", "create_token", "ops"], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    settings = connection.settings_dict
    assert f"in the PostgreSQL database {settings['NAME']} on {settings['HOST'] or '127.0.0.1'}" in result.stderr
    if settings.get("PASSWORD"):
        assert settings["PASSWORD"] not in result.stderr


def test_daphne_against_a_missing_sqlite_file_says_so_stays_unavailable_and_creates_nothing(tmp_path):
    """A server stays up, alive but unavailable, as with any database it cannot reach (test_health.py)."""
    import time

    import httpx

    missing = tmp_path / "nowhere" / "turnlog.sqlite3"
    missing.parent.mkdir()
    port = free_port()
    env = {**os.environ, "TURNLOG_CONFIG": "", "DATABASE_URL": f"sqlite:///{missing}"}
    server = subprocess.Popen([TURNLOG, "daphne", "-b", "127.0.0.1", "-p", str(port)], cwd=PROJECT_DIR, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, "Daphne did not answer"
                time.sleep(0.2)
        assert ready.status_code == 503 and ready.json()["checks"]["database"] == "unreachable"
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert f"the SQLite database {missing} does not exist, and this command does not create one" in stderr
    assert not list(missing.parent.iterdir())
