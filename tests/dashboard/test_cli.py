"""`turnlog`, from a wheel built from the repository and installed into a virtualenv of its own, run outside
the repository: its commands, its server and worker, its data under TURNLOG_DATA_DIR, and its stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from websockets.sync.client import connect

from tests.dashboard.live.test_large_events import LARGE_MESSAGE
from tests.servers import PROJECT_DIR, free_port


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A virtualenv holding only the wheel (no pip, no dependencies: it reads those from the test's own
    virtualenv, listed after its own site-packages, so that the wheel's packages are the ones imported)."""
    root = tmp_path_factory.mktemp("installed")
    wheels = root / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(PROJECT_DIR)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("turnlog-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ["dashboard/bundled/templates/sessions/list.html", "dashboard/bundled/static/turnlog/turnlog.js",
                   "sessions_app/migrations/0001_initial.py", "dashboard/cli.py"]:  # fmt: skip
        assert needed in names, needed
    assert not [name for name in names if name.startswith(("tests/", "bench/", "var/", "templates/", "static/"))]

    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (Path(own) / "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


@pytest.fixture
def run_env(tmp_path: Path) -> dict[str, str]:
    """The embedded setup, data in tmp_path/data: none of the test run's database, Redis or settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TURNLOG_", "PYTHON"))}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    return {**env, "TURNLOG_CONFIG": "", "TURNLOG_DATA_DIR": str(tmp_path / "data"), "TURNLOG_WORKER_INTERVAL_SECONDS": "1"}


def turnlog(venv: Path, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([venv / "bin" / "turnlog", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def request(url: str, *, token: str | None = None, body: dict | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=10) as response:
        return response.status, response.read()


def children_of(pid: int) -> dict[int, str]:
    """The live child processes of pid, by their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (FileNotFoundError, ProcessLookupError):
                pass
    return found


def wait_until(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while not (result := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return result


def test_the_installed_command_migrates_serves_and_stops(installed: Path, run_env: dict[str, str], tmp_path: Path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    data = Path(run_env["TURNLOG_DATA_DIR"])
    where = turnlog(installed, "manage", "shell", "-v", "0", "-c", "import dashboard; print(dashboard.__file__)", env=run_env, cwd=cwd)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed)  # the wheel's copy, not the repository's

    migrated = turnlog(installed, "manage", "migrate", env=run_env, cwd=cwd)
    assert migrated.returncode == 0, migrated.stderr
    created = turnlog(installed, "manage", "create_token", "x", env=run_env, cwd=cwd)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip().splitlines()[-1]
    once = turnlog(installed, "worker", "--once", env=run_env, cwd=cwd)
    assert once.returncode == 0, once.stderr

    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        serve = subprocess.Popen([installed / "bin" / "turnlog", "serve", "--port", str(port)],
                                 env=run_env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"

        def answers():
            assert serve.poll() is None, log_path.read_text()
            try:
                return request(f"{url}/login/")
            except OSError:
                return None

        status, page = wait_until(answers, 60, "turnlog serve did not answer within 60 s")
        assert status == 200 and b'name="password"' in page
        status, script = request(f"{url}/static/turnlog/turnlog.js")
        assert status == 200 and script == (PROJECT_DIR / "static" / "turnlog" / "turnlog.js").read_bytes()

        api = f"{url}/api/v1"
        assert request(f"{api}/sessions", token=token, body={"id": "installed-1"})[0] == 201
        status, appended = request(f"{api}/sessions/installed-1/events", token=token,
                                   body={"events": [{"type": "user_message", "data": {"content": "hi"}}]})  # fmt: skip
        assert (status, json.loads(appended)) == (201, {"first_seq": 0, "next_seq": 1})
        assert list((data / "prometheus").glob("counter_*.db"))  # both processes' metrics in the data directory

        wait_until(lambda: "recovery worker: a round every 1 s" in log_path.read_text(), 30, "the worker did not start")
        output = log_path.read_text()
        assert "log in as:  admin / " in output and "Applying" not in output  # migrated already: nothing to apply
        assert f"data:       {data} (TURNLOG_DATA_DIR)" in output
        processes = children_of(serve.pid)
        assert sorted("daphne" in line for line in processes.values()) == [False, True], processes
        assert any("recovery_worker" in line for line in processes.values()), processes
        assert sorted(running_with(f"TURNLOG_DATA_DIR={data}")) == sorted([serve.pid, *processes])

        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if serve.poll() is None:
            serve.kill()
    for pid in processes:
        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 10, f"process {pid} outlived turnlog serve")
    assert running_with(f"TURNLOG_DATA_DIR={data}") == []
    assert "recovery worker: stopped" in log_path.read_text()  # stopped, not killed

    assert {"turnlog.sqlite3", "secret_key"} <= {path.name for path in data.iterdir()}
    assert list(cwd.iterdir()) == []
    assert not list(installed.glob("lib/python*/site-packages/var"))  # nothing written into the installation
    shown = turnlog(installed, "manage", "sessions", "list", env=run_env, cwd=cwd)
    assert shown.returncode == 0 and "installed-1" in shown.stdout, shown.stderr


@pytest.mark.parametrize("command", [["serve"], ["daphne", "-b", "127.0.0.1"]], ids=["serve", "daphne"])
def test_the_installed_server_streams_an_event_larger_than_daphnes_default_websocket_limit(
    installed: Path, run_env: dict[str, str], tmp_path: Path, command: list[str]
):
    """Daphne's own limit (1 MiB) would fail the frame, and the stream would close 4500 on every reconnect."""
    assert turnlog(installed, "manage", "migrate", env=run_env, cwd=tmp_path).returncode == 0
    created = turnlog(installed, "manage", "create_token", "x", env=run_env, cwd=tmp_path)
    token = created.stdout.strip().splitlines()[-1]
    port = free_port()
    log_path = tmp_path / "server.log"
    with log_path.open("w") as log:
        server = subprocess.Popen([installed / "bin" / "turnlog", *command, "--port" if command == ["serve"] else "-p", str(port)],
                                  env=run_env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"

        def answers():
            assert server.poll() is None, log_path.read_text()
            try:
                return request(f"{url}/healthz")
            except OSError:
                return None

        wait_until(answers, 60, f"turnlog {command[0]} did not answer within 60 s")
        api = f"{url}/api/v1"
        assert request(f"{api}/sessions", token=token, body={"id": "large"})[0] == 201
        assert request(f"{api}/sessions/large/events", token=token, body={"events": [{"type": "user_message", "data": {"content": LARGE_MESSAGE}}]})[0] == 201
        listed = json.loads(request(f"{api}/sessions/large/events", token=token)[1])["events"]
        stream = f"ws://127.0.0.1:{port}/ws/v1/sessions/large/events"
        with connect(stream, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None) as socket_:
            assert [json.loads(socket_.recv(timeout=60))["event"]] == listed
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    assert listed[0]["data"]["content"] == LARGE_MESSAGE
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


def test_serve_migrates_a_new_database_and_ends_the_worker_when_the_server_cannot_start(
    installed: Path, run_env: dict[str, str], tmp_path: Path
):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        served = turnlog(installed, "serve", "--port", str(taken.getsockname()[1]), env=run_env, cwd=tmp_path)
    assert served.returncode != 0
    assert "Applying sessions_app.0001_initial... OK" in served.stdout  # a first start migrates by itself
    assert "Address already in use" in served.stdout + served.stderr
    # Daphne's failure ended `turnlog serve`, and the worker with it.
    assert running_with(f"TURNLOG_DATA_DIR={run_env['TURNLOG_DATA_DIR']}") == []


def running_with(variable: str) -> list[int]:
    """The processes whose environment holds this exact variable (a test's own TURNLOG_DATA_DIR)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and variable.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            pass
    return found


def test_serve_applies_the_first_start_variables_once_and_makes_no_random_admin(installed: Path, run_env: dict[str, str], tmp_path: Path):
    password, token = "correct horse battery staple", "tl_" + "A" * 43
    (tmp_path / "admin-password").write_text(password + "\n")
    env = {**run_env, "TURNLOG_INIT_ADMIN_USERNAME": "ops", "TURNLOG_INIT_ADMIN_PASSWORD_FILE": str(tmp_path / "admin-password"),
           "TURNLOG_INIT_PROJECT": "team", "TURNLOG_INIT_TOKEN": token}  # fmt: skip
    outputs = []
    for _ in range(2):  # a first start (migrations pending), then a second (none: the first start alone)
        with socket.socket() as taken:  # the server cannot start: serve returns once it has set up
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            served = turnlog(installed, "serve", "--port", str(taken.getsockname()[1]), env=env, cwd=tmp_path)
        outputs.append(served.stdout + served.stderr)
        assert password not in outputs[-1] and token not in outputs[-1] and "log in as:  admin" not in outputs[-1]
        assert "log in as:  ops, with the password in" in outputs[-1]
    assert "created the admin 'ops'" in outputs[0] and "issued the token tl_AAAAAAA..." in outputs[0]
    assert "its password not reset" in outputs[1] and "not issued again" in outputs[1]
