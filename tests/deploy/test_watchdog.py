"""The watchdog (sessions_app/lib/notify_systemd.py): `turnlog worker` and `turnlog daphne`, real processes started by
their units' ExecStart lines (deploy/systemd/) with NOTIFY_SOCKET naming a datagram socket of this test, say READY=1 and then WATCHDOG=1 every few seconds, as systemd's
Type=notify and WatchdogSec= expect (deploy/systemd/); frozen (SIGSTOP) they fall silent, and resume on SIGCONT."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from django.db import connection

from sessions_app.lib import notify_systemd
from tests.deploy.test_units import INSTALLED_TURNLOG, values
from tests.servers import PROJECT_DIR, TURNLOG, database_url, free_port

pytestmark = pytest.mark.django_db(transaction=True)

START = 60  # s: Django's start on a busy machine, before READY=1
PING = 6  # s: WATCHDOG=1 comes every 5 s at most


class Listener:
    """A datagram socket as systemd's NOTIFY_SOCKET, and the messages read from it with their arrival times."""

    def __init__(self, name: str):
        self.name = name
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + name[1:] if name.startswith("@") else name)

    def next(self, timeout: float) -> str | None:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(4096).decode()
        except TimeoutError:
            return None

    def wait_for(self, message: str, timeout: float) -> float:
        """Seconds until `message` arrived; fails naming what came instead."""
        started = time.monotonic()
        seen = []
        while (left := started + timeout - time.monotonic()) > 0:
            got = self.next(left)
            if got == message:
                return time.monotonic() - started
            if got is not None:
                seen.append(got)
        pytest.fail(f"no {message} within {timeout} s at {self.name}; got {seen}")

    def drain(self) -> list[str]:
        messages = []
        while (got := self.next(0.05)) is not None:
            messages.append(got)
        return messages

    def close(self) -> None:
        self.sock.close()


def unit_command(unit: str, instance: str = "") -> list[str]:
    """The unit's ExecStart line, with this virtualenv's `turnlog` for the installed one."""
    (line,) = values(unit, "Service", "ExecStart")
    return line.replace(INSTALLED_TURNLOG, str(TURNLOG)).replace("%i", instance).split()


def start(command: list[str], notify_socket: str, log_path) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict), "NOTIFY_SOCKET": notify_socket}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    with log_path.open("w") as log:
        return subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)


def assert_it_pings_stops_when_frozen_and_resumes(process: subprocess.Popen, listener: Listener, log_path) -> None:
    try:
        try:
            listener.wait_for(notify_systemd.READY, START)
        except BaseException:
            print(log_path.read_text())
            raise
        listener.wait_for(notify_systemd.WATCHDOG, PING)
        listener.wait_for(notify_systemd.WATCHDOG, PING)  # and again: a ping every few seconds, not once
        process.send_signal(signal.SIGSTOP)
        time.sleep(0.5)
        listener.drain()  # anything sent just before the signal landed
        assert listener.next(2 * PING) is None, "a frozen process must send no WATCHDOG=1"
        process.send_signal(signal.SIGCONT)
        listener.wait_for(notify_systemd.WATCHDOG, PING)
        process.terminate()
        assert process.wait(timeout=30) == 0 or process.returncode == -signal.SIGTERM
        assert notify_systemd.STOPPING in listener.drain()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        listener.close()


def test_the_worker_says_it_is_ready_then_pings_from_its_loop_until_frozen(tmp_path):
    listener = Listener(str(tmp_path / "notify.sock"))  # a socket file, as systemd's own
    log_path = tmp_path / "worker.log"
    process = start(unit_command("turnlog-worker.service"), listener.name, log_path)
    assert_it_pings_stops_when_frozen_and_resumes(process, listener, log_path)


def test_daphne_says_it_is_ready_once_listening_then_pings_from_its_event_loop_until_frozen(tmp_path):
    listener = Listener(f"@turnlog-test-{os.getpid()}-{time.monotonic_ns()}")  # an abstract name, as the launcher's
    port = free_port()
    log_path = tmp_path / "daphne.log"
    process = start(unit_command("turnlog-daphne@.service", str(port)), listener.name, log_path)
    try:
        listener.wait_for(notify_systemd.READY, START)
    except BaseException:
        process.kill()
        print(log_path.read_text())
        raise
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as response:  # listening once READY
        assert response.status == 200
    assert_it_pings_stops_when_frozen_and_resumes(process, ReadyAlready(listener), log_path)


class ReadyAlready:
    """A listener whose READY=1 was already read (Daphne's, before its port was checked)."""

    def __init__(self, listener: Listener):
        self.listener = listener
        self.ready_read = False

    def wait_for(self, message: str, timeout: float) -> float:
        if message == notify_systemd.READY and not self.ready_read:
            self.ready_read = True
            return 0.0
        return self.listener.wait_for(message, timeout)

    def __getattr__(self, name):
        return getattr(self.listener, name)


def test_nothing_is_sent_without_notify_socket(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not notify_systemd.enabled()
    assert notify_systemd.notify(notify_systemd.READY) is False


def test_a_supervisor_gone_is_no_failure(monkeypatch, tmp_path):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens.sock"))
    assert notify_systemd.notify(notify_systemd.WATCHDOG) is False


def test_the_ping_interval_is_five_seconds_or_half_the_supervisors_watchdog(monkeypatch):
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert notify_systemd.watchdog_seconds() == 5.0
    monkeypatch.setenv("WATCHDOG_USEC", "15000000")
    assert notify_systemd.watchdog_seconds() == 5.0
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    assert notify_systemd.watchdog_seconds() == 2.0
