"""`make run-scaleout`: the deployment of docs/guide/deploy.md on one machine, to try and to test.

Starts N Daphne processes (2 by default, each `turnlog daphne`) and the
worker on one PostgreSQL database and one Redis, behind nginx running the
deployment's site file, deploy/nginx-site.conf (HTTPS with a self-signed
certificate of its own, and the plain-HTTP redirect), each on a free port
(never the shared 6379 or 8000). Like a process supervisor (systemd's Restart=always), it starts any
of them again a second after it dies; nginx sends requests to the other
Daphnes meanwhile. Like systemd's watchdog (deploy/systemd/: Type=notify, WatchdogSec=15), it gives each
Daphne and the worker a NOTIFY_SOCKET of its own and kills (SIGKILL) one that sends no WATCHDOG=1 for 15 s,
so a frozen process is started again too. Ctrl-C (or SIGTERM) stops everything.

    .venv/bin/python deploy/run_scaleout.py [--daphnes 2] [--port PORT] [--run-dir DIR] [--setup]

DATABASE_URL names the database (default: postgres://postgres@127.0.0.1:5432/turnlog_scaleout,
created if missing). REDIS_URL names a Redis to use; without it a redis-server of its
own is started on a free port. Everything it writes (configuration, logs, the
metrics directory, the secret key, collected static files, the certificate) is under the run
directory (default var/scaleout); `scaleout.json` there lists the processes,
their ports and pids, for the tests (tests/deploy/test_run_scaleout.py).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

PROJECT_DIR = Path(__file__).resolve().parents[1]
SITE = PROJECT_DIR / "deploy" / "nginx-site.conf"
# Each Daphne as docs/guide/deploy.md's unit starts it: `turnlog daphne` passes the site's websocket limits.
TURNLOG = Path(sys.executable).parent / "turnlog"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/turnlog_scaleout"
RESTART_DELAY = 1.0  # seconds before a process that died is started again
# The units' WatchdogSec: a watched child silent this long after its last message is killed and started again.
WATCHDOG_SECONDS = 15.0
# Before its READY=1, a watched child has this long (systemd's TimeoutStartSec default) after it was started.
START_SECONDS = 90.0
# nginx keeps a quiet socket open this much longer than the app's renewal of it (TURNLOG_SOCKET_RENEW_SECONDS):
# the site file's 3900 s, for the default renewal.
SOCKET_TIMEOUT_MARGIN = 300
SITE_SOCKET_TIMEOUT = 3900
# In the run directory: the settings its children get, for the commands an operator runs beside them.
ENVIRONMENT_FILE = "turnlog.env"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited with {process.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} did not listen on {port} within {timeout:.0f} s") from None
            time.sleep(0.1)


def create_database_if_missing(url: str) -> None:
    """Its own database in the running cluster: created from the cluster's `postgres` database."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as connection:
        if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            connection.execute(f'CREATE DATABASE "{name}"')


def make_certificate(tls_dir: Path) -> None:
    """A self-signed certificate for 127.0.0.1, as the guide's `openssl` command makes one for a host name; kept
    across runs, so that a browser's exception for it stays valid."""
    if (tls_dir / "fullchain.pem").exists() and (tls_dir / "privkey.pem").exists():
        return
    tls_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(tls_dir / "privkey.pem"), "-out", str(tls_dir / "fullchain.pem")],
        check=True, capture_output=True,
    )  # fmt: skip


def fill_in(text: str, fields: dict) -> str:
    """The {{name}} fields of the directives filled in (the comments naming them stay). Not string.Template's
    syntax: nginx's own variables are $name."""
    return "".join(
        line if line.lstrip().startswith("#") else re.sub(r"\{\{(\w+)\}\}", lambda field: str(fields[field.group(1)]), line)
        for line in text.splitlines(keepends=True)
    )


def nginx_site(*, https_port: int, http_port: int, daphne_ports: list[int], static_root: Path, tls_dir: Path, socket_timeout: int) -> str:
    """deploy/nginx-site.conf filled in for this machine, as docs/guide/deploy.md tells an operator to."""
    fields = {
        "upstream_servers": "\n".join(f"    server 127.0.0.1:{p} max_fails=0;" for p in daphne_ports),
        "server_name": "_", "http_listen": f"127.0.0.1:{http_port}", "https_listen": f"127.0.0.1:{https_port}",
        "ssl_certificate": tls_dir / "fullchain.pem", "ssl_certificate_key": tls_dir / "privkey.pem", "static_root": static_root,
    }  # fmt: skip
    site = fill_in(SITE.read_text(), fields)
    if socket_timeout != SITE_SOCKET_TIMEOUT:  # a renewal other than the default
        for directive in ("proxy_read_timeout", "proxy_send_timeout"):
            site = site.replace(f"{directive} {SITE_SOCKET_TIMEOUT}s;", f"{directive} {socket_timeout}s;")
    return site


def nginx_main_config(*, run_dir: Path, site: Path) -> str:
    """The least of a main configuration around the site file, with every path under the run directory."""
    # nginx started by root runs its workers as `nobody` unless told: they could not read the static files.
    user_line = f"user {getpass.getuser()};" if os.geteuid() == 0 else ""
    temporary = "\n".join(f"    {kind}_temp_path {run_dir}/nginx-tmp/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""# Started in the foreground by deploy/run_scaleout.py: nginx -p {run_dir} -c nginx.conf
{user_line}
worker_processes 1;
pid {run_dir}/nginx.pid;
error_log {run_dir}/logs/nginx-error.log warn;

events {{
    worker_connections 4096;  # one per browser socket and one to its Daphne: 2 per open page
}}

http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log {run_dir}/logs/nginx-access.log;
{temporary}
    include {site};
}}
"""


def environment_file(env: dict) -> str:
    """The Turnlog settings of `env` (those it sets, and any the caller's environment set) in the syntax of
    dashboard/config_file.py (systemd's EnvironmentFile=): double-quoted, with its four escapes."""
    from dashboard.variables import VARIABLES  # every variable Turnlog reads

    names = [name for name in env if name in VARIABLES]
    lines = ["# Written by deploy/run_scaleout.py at each start: the settings of its processes. Commands run beside it",
             "# read it with TURNLOG_CONFIG=<this file> in front, so they use its database, not var/turnlog.sqlite3."]  # fmt: skip
    for name in sorted(names):
        value = re.sub(r'(["\\`$])', r"\\\1", env[name])  # a newline stays, kept inside the quotes
        lines.append(f'{name}="{value}"')
    return "\n".join(lines) + "\n"


def config_prefix(path: Path) -> str:
    """What goes in front of a command so that it reads the launcher's settings."""
    return f"TURNLOG_CONFIG={shlex.quote(str(path))}"


class Notifications:
    """A child's own NOTIFY_SOCKET (sd_notify(3), sessions_app/lib/notify_systemd.py): an abstract datagram socket
    this launcher reads, and when the child last said anything (READY=1, WATCHDOG=1)."""

    def __init__(self, name: str):
        self.name = f"@turnlog-scaleout-{os.getpid()}-{name}"  # abstract: no path to clean up, none too long
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        self.sock.bind("\0" + self.name[1:])
        self.ready = False
        self.heard_at = time.monotonic()

    def restart(self) -> None:
        """A new process: what its predecessor sent is dropped, and it has its start time to say READY=1."""
        self.read()
        self.ready = False
        self.heard_at = time.monotonic()

    def read(self) -> None:
        while True:
            try:
                message = self.sock.recv(4096).decode(errors="replace")
            except BlockingIOError:
                return
            lines = message.split("\n")
            self.ready = self.ready or "READY=1" in lines
            if "READY=1" in lines or "WATCHDOG=1" in lines:
                self.heard_at = time.monotonic()

    def silent(self) -> float | None:
        """The seconds past its limit the child has been silent, or None while it is within it."""
        self.read()
        past = time.monotonic() - self.heard_at - (WATCHDOG_SECONDS if self.ready else START_SECONDS)
        return past if past > 0 else None

    def close(self) -> None:
        self.sock.close()


class Child:
    """One supervised process: its command, its log, its current Popen, and its watchdog if it speaks sd_notify."""

    def __init__(self, name: str, command: list[str], log_path: Path, env: dict, *, port: int | None = None, watched: bool = False):
        self.name, self.command, self.log_path, self.port = name, command, log_path, port
        self.notifications = Notifications(name) if watched else None
        # Only a watched child gets a NOTIFY_SOCKET: redis-server speaks the protocol too, and must not tell ours.
        self.env = {key: value for key, value in env.items() if key not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
        if self.notifications is not None:
            self.env["NOTIFY_SOCKET"] = self.notifications.name
        self.process: subprocess.Popen | None = None
        self.died_at: float | None = None

    def start(self) -> Child:
        if self.notifications is not None:
            self.notifications.restart()
        with self.log_path.open("a") as log:
            # A session of its own: Ctrl-C reaches the launcher alone, which stops the children in order.
            self.process = subprocess.Popen(
                self.command, cwd=PROJECT_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )  # fmt: skip
        if self.port is not None:
            wait_for_port(self.port, self.process, self.name)
        self.died_at = None
        return self

    def kill_if_silent(self) -> None:
        """SIGKILL for a running watched child silent past its watchdog (frozen, or its loop blocked): the
        supervision then starts it again as any child that died. SIGKILL: a stopped process takes no other."""
        if self.notifications is None or self.process is None or self.process.poll() is not None:
            return
        if self.notifications.silent() is not None:
            said = "sent no WATCHDOG=1" if self.notifications.ready else "sent no READY=1"
            limit = WATCHDOG_SECONDS if self.notifications.ready else START_SECONDS
            print(f"{self.name} (pid {self.process.pid}) {said} for {limit:.0f} s: killing it (SIGKILL)", flush=True)
            self.process.kill()

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def wait(self) -> None:
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def tend(children: list[Child]) -> bool:
    """One round of the supervision, as systemd's Restart=always and WatchdogSec= act: a watched child silent past
    its watchdog is killed, and any child that died is started again RESTART_DELAY after. True when one was
    started again. tests/deploy/test_production_recipe.py supervises the units' commands with it too."""
    changed = False
    for child in children:
        child.kill_if_silent()
        code = child.process.poll() if child.process else None
        if code is not None and child.died_at is None:
            child.died_at = time.monotonic()
            print(f"{child.name} exited with {code}; starting it again in {RESTART_DELAY:.0f} s", flush=True)
        if child.died_at is not None and time.monotonic() - child.died_at >= RESTART_DELAY:
            child.start()
            changed = True
    return changed


class ScaleOut:
    """The run: prepares the database and the files, starts the processes, keeps them running, stops them."""

    def __init__(self, options: argparse.Namespace):
        self.run_dir = Path(options.run_dir).resolve()
        self.port = options.port or free_port()  # nginx's HTTPS
        self.http_port = free_port()  # its redirect to HTTPS
        self.tls_dir = self.run_dir / "tls"
        self.daphne_count = options.daphnes
        self.setup = options.setup
        self.database_url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
        self.redis_url = os.environ.get("REDIS_URL", "")
        self.children: list[Child] = []
        self.stopping = False

    def environment(self) -> dict:
        data_dir = self.run_dir / "data"  # kept across runs: the secret key every process shares, the static files
        return {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "TURNLOG_DATA_DIR": os.environ.get("TURNLOG_DATA_DIR") or str(data_dir),
            "TURNLOG_BEHIND_PROXY": "1",
            "PROMETHEUS_MULTIPROC_DIR": str(self.run_dir / "prometheus"),
        }

    def write_environment_file(self, env: dict) -> Path:
        """The settings it gives its children, as a configuration file (TURNLOG_CONFIG) for the commands an
        operator runs beside them: without it, `manage.py tokens create` would use var/turnlog.sqlite3."""
        path = self.run_dir / ENVIRONMENT_FILE
        path.unlink(missing_ok=True)
        # Private from its first byte: DATABASE_URL may hold a password.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(environment_file(env))
        return path

    def prepare(self) -> dict:
        for part in ("logs", "prometheus", "nginx-tmp"):
            shutil.rmtree(self.run_dir / part, ignore_errors=True)
            (self.run_dir / part).mkdir(parents=True)
        if self.database_url.startswith(("postgres://", "postgresql://")):
            create_database_if_missing(self.database_url)
        if not self.redis_url:
            redis_port = free_port()
            redis = Child(
                "redis", ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "", "--appendonly", "no"],
                self.run_dir / "logs" / "redis.log", dict(os.environ), port=redis_port,
            )  # fmt: skip
            self.children.append(redis.start())
            self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        env = self.environment()
        config = self.write_environment_file(env)
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=PROJECT_DIR, env=env, check=True)
        subprocess.run([*manage, "collectstatic", "--noinput", "-v", "0"], cwd=PROJECT_DIR, env=env, check=True)
        if self.setup:
            subprocess.run([*manage, "seed_demo"], cwd=PROJECT_DIR, env=env, check=True)
            url = f"https://127.0.0.1:{self.port}"
            hint = f"{config_prefix(config)} .venv/bin/python manage.py"
            subprocess.run([*manage, "local_setup", "--url", url, "--manage-command", hint], cwd=PROJECT_DIR, env=env, check=True)
        return env

    def start(self) -> None:
        env = self.prepare()
        logs = self.run_dir / "logs"
        self.children.append(Child("worker", [sys.executable, "manage.py", "recovery_worker"], logs / "worker.log", env, watched=True).start())
        daphne_ports = [free_port() for _ in range(self.daphne_count)]
        for index, port in enumerate(daphne_ports):
            command = [str(TURNLOG), "daphne", "-b", "127.0.0.1", "-p", str(port)]
            self.children.append(Child(f"daphne-{index}", command, logs / f"daphne-{index}.log", env, port=port, watched=True).start())
        renew = float(env.get("TURNLOG_SOCKET_RENEW_SECONDS") or 3600)
        make_certificate(self.tls_dir)
        site = nginx_site(
            https_port=self.port, http_port=self.http_port, daphne_ports=daphne_ports,
            static_root=Path(env["TURNLOG_DATA_DIR"]) / "static", tls_dir=self.tls_dir,
            socket_timeout=int(renew) + SOCKET_TIMEOUT_MARGIN,
        )  # fmt: skip
        (self.run_dir / "turnlog-site.conf").write_text(site)
        (self.run_dir / "nginx.conf").write_text(nginx_main_config(run_dir=self.run_dir, site=self.run_dir / "turnlog-site.conf"))
        nginx = [shutil.which("nginx") or "/usr/sbin/nginx", "-p", str(self.run_dir), "-c", str(self.run_dir / "nginx.conf"), "-e", str(logs / "nginx-error.log"), "-g", "daemon off;"]
        self.children.append(Child("nginx", nginx, logs / "nginx.log", env, port=self.port).start())
        self.write_state()
        print(f"Turnlog, {self.daphne_count} Daphne processes behind nginx: https://127.0.0.1:{self.port}/", flush=True)
        print(f"  its certificate is self-signed: {self.tls_dir / 'fullchain.pem'} (curl --cacert it; a browser asks once)", flush=True)
        print(f"  database {self.database_url}, Redis {self.redis_url}; logs in {logs}. Ctrl-C stops everything.", flush=True)
        config = self.run_dir / ENVIRONMENT_FILE
        print(f"  its settings: {config}; commands beside it: {config_prefix(config)} .venv/bin/python manage.py COMMAND", flush=True)

    def write_state(self) -> None:
        state = {
            "url": f"https://127.0.0.1:{self.port}",
            "http_url": f"http://127.0.0.1:{self.http_port}",
            "ca_file": str(self.tls_dir / "fullchain.pem"),
            "redis_url": self.redis_url,
            "processes": {c.name: {"pid": c.process.pid if c.process else None, "port": c.port} for c in self.children},
        }
        temporary = self.run_dir / "scaleout.json.tmp"
        temporary.write_text(json.dumps(state, indent=2))
        temporary.replace(self.run_dir / "scaleout.json")  # readers never see half a file

    def supervise(self) -> None:
        while not self.stopping:
            if tend(self.children):
                self.write_state()
            time.sleep(0.2)

    def stop(self, *_) -> None:
        self.stopping = True

    def shutdown(self) -> None:
        for child in reversed(self.children):  # nginx first, then the Daphnes, the worker and Redis, all at once
            child.terminate()
        for child in self.children:
            child.wait()
            if child.notifications is not None:
                child.notifications.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daphnes", type=int, default=2, help="how many Daphne processes (default 2)")
    parser.add_argument("--port", type=int, default=0, help="nginx's HTTPS port (default: a free one)")
    parser.add_argument("--run-dir", default=str(PROJECT_DIR / "var" / "scaleout"), help="where configuration, logs and state go")
    parser.add_argument("--setup", action="store_true", help="also seed the demo sessions and create the local admin (as make run does)")
    scaleout = ScaleOut(parser.parse_args(argv))
    signal.signal(signal.SIGINT, scaleout.stop)
    signal.signal(signal.SIGTERM, scaleout.stop)
    try:
        scaleout.start()
        scaleout.supervise()
    finally:
        scaleout.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
