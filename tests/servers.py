"""A real Daphne serving the project on the test database, for tests across processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

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


class DaphneServer:
    """`daphne dashboard.asgi:application` as a subprocess; can be stopped and started again on its port."""

    def __init__(self, database_settings: dict, log_path: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {**os.environ, "DATABASE_URL": database_url(database_settings), **env}
        # Browser tests allow the ORM next to Playwright's loop; the server must not.
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.process: subprocess.Popen | None = None

    def start(self) -> DaphneServer:
        log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "dashboard.asgi:application"],
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
