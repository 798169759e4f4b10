"""systemd's notification protocol (sd_notify(3)), for `Type=notify` units with `WatchdogSec=` (deploy/systemd/).

A message is one datagram of `KEY=VALUE` lines to the AF_UNIX socket named by $NOTIFY_SOCKET (an abstract
one when the name starts with `@`). Without $NOTIFY_SOCKET nothing is sent: the process is not supervised
so. deploy/run_scaleout.py listens the same way, so the launcher restarts a silent child as systemd does.
"""

from __future__ import annotations

import logging
import os
import socket
import time

logger = logging.getLogger(__name__)

READY = "READY=1"
WATCHDOG = "WATCHDOG=1"
STOPPING = "STOPPING=1"
# How often a live process says so: a third of the units' WatchdogSec=15, so one lost or late ping is no restart.
WATCHDOG_SECONDS = 5.0

_failure_said: list[str] = []  # the socket whose failure was logged, once per process


def enabled() -> bool:
    return bool(os.environ.get("NOTIFY_SOCKET"))


def watchdog_seconds() -> float:
    """WATCHDOG_SECONDS, or half of the supervisor's own watchdog time (systemd's $WATCHDOG_USEC) when that is shorter."""
    try:
        usec = int(os.environ.get("WATCHDOG_USEC", "0"))
    except ValueError:
        usec = 0
    return min(WATCHDOG_SECONDS, usec / 2_000_000) if usec > 0 else WATCHDOG_SECONDS


def notify(message: str) -> bool:
    """Send `message` to $NOTIFY_SOCKET; False when it is unset or the send failed (logged once: a supervisor
    that went away must not stop the process it supervised)."""
    name = os.environ.get("NOTIFY_SOCKET", "")
    if not name:
        return False
    if name.startswith("@"):
        address = "\0" + name[1:]
    elif name.startswith("/"):
        address = name
    else:  # vsock (vsock:CID:PORT) is for virtual machines' managers: not a Turnlog host's
        _say_once(name, f"NOTIFY_SOCKET={name!r} is not a unix socket path or @abstract name; not notifying")
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError as error:
        _say_once(name, f"cannot notify the supervisor at NOTIFY_SOCKET={name} ({error}); carrying on")
        return False
    return True


def _say_once(name: str, text: str) -> None:
    if name not in _failure_said:
        _failure_said.append(name)
        logger.warning(text)


class Watchdog:
    """WATCHDOG=1 at most every `every` seconds, for a loop that calls ping() more often (the worker's)."""

    def __init__(self, every: float | None = None):
        self.every = watchdog_seconds() if every is None else every
        self.last: float | None = None

    def ping(self) -> None:
        now = time.monotonic()
        if self.last is None or now - self.last >= self.every:
            self.last = now
            notify(WATCHDOG)
