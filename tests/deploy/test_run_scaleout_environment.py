"""deploy/run_scaleout.py's environment file: the settings it gives its children, written to its run directory
(mode 0600) in the configuration file's syntax, so that a command its hints print with `TURNLOG_CONFIG=<file>`
in front reaches the launcher's database, not var/turnlog.sqlite3. The launcher itself on PostgreSQL:
tests/deploy/test_run_scaleout.py."""

from __future__ import annotations

import argparse
import importlib.util
import os
import stat
import subprocess
import sys

import pytest

from dashboard import config_file
from tests.servers import PROJECT_DIR

pytestmark = pytest.mark.timeout(120)

spec = importlib.util.spec_from_file_location("run_scaleout", PROJECT_DIR / "deploy" / "run_scaleout.py")
run_scaleout = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_scaleout)


def launcher(run_dir, **env: str):
    options = argparse.Namespace(run_dir=str(run_dir), port=0, daphnes=2, setup=False)
    return run_scaleout.ScaleOut(options)


def test_the_environment_file_holds_every_setting_it_gives_its_children_privately_and_reads_back_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", 'postgres://turnlog:p"a$s`w\\d@127.0.0.1:5432/turnlog_scaleout')
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6390/0")
    monkeypatch.setenv("TURNLOG_SOCKET_RENEW_SECONDS", "60")
    monkeypatch.setenv("TURNLOG_CONFIG", "/etc/turnlog.env")
    run = launcher(tmp_path / "run")
    (tmp_path / "run").mkdir()
    env = run.environment()
    path = run.write_environment_file(env)
    assert path == tmp_path / "run" / "turnlog.env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    values = config_file.parse(path.read_text()).values()
    assert values == {
        "DATABASE_URL": env["DATABASE_URL"], "REDIS_URL": "redis://127.0.0.1:6390/0", "TURNLOG_DATA_DIR": env["TURNLOG_DATA_DIR"],
        "TURNLOG_BEHIND_PROXY": "1", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "run" / "prometheus"),
        "TURNLOG_SOCKET_RENEW_SECONDS": "60",
    }  # fmt: skip
    assert env["TURNLOG_DATA_DIR"] == str(tmp_path / "run" / "data")
    run.write_environment_file(env)  # each start writes it anew
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_command_with_the_hints_prefix_uses_the_launchers_database(tmp_path, monkeypatch):
    database = tmp_path / "scaleout.sqlite3"
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{database}")
    run = launcher(tmp_path / "run")
    (tmp_path / "run" / "prometheus").mkdir(parents=True)  # as the launcher makes it before its children start
    path = run.write_environment_file(run.environment())
    prefix = run_scaleout.config_prefix(path)
    assert prefix == f"TURNLOG_CONFIG={path}"
    # As an operator pastes the hint into a shell, whose own environment names no database.
    shell_env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "TURNLOG_DATA_DIR", "TURNLOG_CONFIG")}
    python = f"{sys.executable} manage.py"
    for command in ("migrate --noinput -v 0", "create_token ops"):
        done = subprocess.run(f"{prefix} {python} {command}", shell=True, cwd=PROJECT_DIR, env=shell_env, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
    assert f"in the SQLite database {database}" in done.stderr


def test_local_setup_spells_the_hints_with_the_prefix(tmp_path):
    hint = f"{run_scaleout.config_prefix(tmp_path / 'run dir' / 'turnlog.env')} .venv/bin/python manage.py"
    assert hint == f"TURNLOG_CONFIG='{tmp_path}/run dir/turnlog.env' .venv/bin/python manage.py"
