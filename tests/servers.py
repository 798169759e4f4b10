"""Real servers for tests across processes: Daphne serving the project on the test database, a redis-server of a test's own."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import running_in_ci

PROJECT_DIR = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url(settings: dict) -> str:
    """The URL of a Django database (pytest-django's test database) for a subprocess."""
    if settings["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{settings['NAME']}"
    password = f":{quote(settings['PASSWORD'], safe='')}" if settings.get("PASSWORD") else ""
    return (
        f"postgres://{quote(settings['USER'], safe='')}{password}@{settings['HOST'] or '127.0.0.1'}:"
        f"{settings['PORT'] or 5432}/{settings['NAME']}"
    )


# The `turnlog` command of this virtualenv (pip's editable install of the source tree).
TURNLOG = Path(sys.executable).parent / "turnlog"


class DaphneServer:
    """`turnlog daphne` (Daphne serving dashboard.asgi:application, as docs/guide/deploy.md runs each server process)
    as a subprocess; can be stopped and started again on its port."""

    def __init__(self, database_settings: dict, log_path: Path, *, arguments: tuple[str, ...] = (), **env: str):
        self.port = free_port()
        self.arguments = arguments  # more of daphne's options
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {**os.environ, "DATABASE_URL": database_url(database_settings), **env}
        # Browser tests allow the ORM next to Playwright's loop; the server must not.
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.process: subprocess.Popen | None = None

    def start(self) -> DaphneServer:
        log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [TURNLOG, "daphne", "-b", "127.0.0.1", "-p", str(self.port), *self.arguments],
            cwd=PROJECT_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 30
        while True:
            assert self.process.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, "daphne did not start listening within 30 s"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.1)

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        self.process.kill() if kill else self.process.terminate()
        self.process.wait(timeout=10)
        self.process = None


class RedisServer:
    """A redis-server of this test alone on a free port: it can be killed and started again on that port."""

    def __init__(self, log_path: Path):
        binary = shutil.which("redis-server")
        if binary is None:
            if running_in_ci():
                pytest.fail("redis-server is not installed; CI must install it (apt-get install redis-server)")
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not self.ping():
            assert self.process.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, "redis-server did not answer within 10 s"
            time.sleep(0.05)
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None
