"""The production recipe of docs/guide/deploy.md, end to end: each process started by its unit's ExecStart line
(deploy/systemd/), its settings from one configuration file as /etc/turnlog.env, under a supervisor that acts as
systemd does for Type=notify, WatchdogSec=15 and Restart=always (deploy/run_scaleout.py's, the launcher's own),
behind nginx running the shipped site file over TLS with the guide's self-signed certificate; once straight to
PostgreSQL and once through PgBouncer in transaction mode (deploy/pgbouncer.ini).

Each Daphne is frozen (SIGSTOP) and then killed (SIGKILL) in turn while the Python client's writer appends
through nginx, a reader sends requests and a third client opens websockets. No HTTP request waits more than
30 s, no handshake waits past the watchdog's restart, the frozen Daphne is replaced within 30 s, and the stored
log holds every event the writer was given exactly once, in order, with gapless seqs.

PostgreSQL and Redis only (the suite's PostgreSQL pass runs it); in CI a missing nginx, openssl, redis-server or
pgbouncer fails it.
"""

from __future__ import annotations

import base64
import configparser
import importlib.util
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

from sessions_app.models import Event
from tests.access import token_for
from tests.conftest import load_factor, running_in_ci
from tests.deploy.test_nginx_site import Nginx, nginx_binary
from tests.deploy.test_units import INSTALLED_TURNLOG, UNITS_DIR, values
from tests.servers import PROJECT_DIR, RedisServer, TURNLOG, database_url, free_port
from turnlog_client import Client

# The bounds the issue sets, not stretched for a busy machine: they are what a frozen Daphne may cost.
REQUEST_LIMIT = 30  # s: the longest any HTTP request through nginx may wait
RESTART_LIMIT = 30  # s: a frozen Daphne replaced (killed by the watchdog, started again, listening) within this
WATCHDOG = 15  # s: the units' WatchdogSec
START = 120 * load_factor()  # s: migrate, collectstatic and the processes' start on a busy machine

PGBOUNCER_INI = PROJECT_DIR / "deploy" / "pgbouncer.ini"
PGBOUNCER_PASSWORD = "pgbouncer-test-password"


def launcher():
    """deploy/run_scaleout.py as a module: the supervision (Child, tend) `make run-scaleout` runs."""
    spec = importlib.util.spec_from_file_location("run_scaleout", PROJECT_DIR / "deploy" / "run_scaleout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_scaleout = launcher()


def needs(program: str, package: str) -> str:
    path = shutil.which(program) or next((p for p in (f"/usr/sbin/{program}", f"/usr/bin/{program}") if os.path.exists(p)), None)
    if path is None:
        if running_in_ci():
            pytest.fail(f"{program} is not installed; CI must install it (apt-get install {package})")
        pytest.skip(f"{program} is not installed (apt-get install -y -qq {package})")
    return path


def unit_commands(unit: str, instance: str = "") -> list[list[str]]:
    """The unit's ExecStart lines, this virtualenv's `turnlog` for the installed one, %i its instance."""
    return [line.replace(INSTALLED_TURNLOG, str(TURNLOG)).replace("%i", instance).split() for line in values(unit, "Service", "ExecStart")]


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def pgbouncer_version(binary: str) -> tuple[int, ...]:
    output = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True, timeout=30).stdout
    return tuple(int(part) for part in re.search(r"PgBouncer (\d+)\.(\d+)", output).groups())


class PgBouncer:
    """pgbouncer on deploy/pgbouncer.ini, with only its database line (the test database), its port and the paths
    of the files it writes changed; clients log in with SCRAM against a user list of the test's."""

    def __init__(self, database: dict):
        self.binary = needs("pgbouncer", "pgbouncer")
        self.version = pgbouncer_version(self.binary)
        # pgbouncer refuses to run as root: as root, it runs as PostgreSQL's user, in a directory of its own.
        self.user = None
        if os.geteuid() == 0:
            self.user = next((name for name in ("postgres", "nobody") if user_exists(name)), None)
        run_dir = Path(tempfile.mkdtemp(prefix="turnlog-pgbouncer-"))
        self.port = free_port()
        self.run_dir = run_dir
        (run_dir / "userlist.txt").write_text(f'"{database["USER"]}" "{PGBOUNCER_PASSWORD}"\n')
        text = PGBOUNCER_INI.read_text()
        replaced = {
            r"^turnlog = host=127\.0\.0\.1 port=5432 dbname=turnlog$": f"{database['NAME']} = host={database['HOST'] or '127.0.0.1'} port={database['PORT'] or 5432} dbname={database['NAME']}",
            r"^listen_port = 6432$": f"listen_port = {self.port}",
            r"^unix_socket_dir = .*$": f"unix_socket_dir = {run_dir}",
            r"^auth_file = .*$": f"auth_file = {run_dir / 'userlist.txt'}",
            r"^logfile = .*$": f"logfile = {run_dir / 'pgbouncer.log'}",
            r"^pidfile = .*$": f"pidfile = {run_dir / 'pgbouncer.pid'}",
        }  # fmt: skip
        for pattern, line in replaced.items():
            text, count = re.subn(pattern, line, text, flags=re.MULTILINE)
            assert count == 1, pattern
        self.config = run_dir / "pgbouncer.ini"
        self.config.write_text(text)
        if self.user is not None:
            for path in (run_dir, *run_dir.iterdir()):
                shutil.chown(path, self.user)
        self.url = f"postgres://{database['USER']}:{PGBOUNCER_PASSWORD}@127.0.0.1:{self.port}/{database['NAME']}"
        self.process: subprocess.Popen | None = None

    def start(self) -> PgBouncer:
        with (self.run_dir / "stdout.log").open("w") as log:
            self.process = subprocess.Popen([self.binary, str(self.config)], stdout=log, stderr=subprocess.STDOUT, user=self.user)
        run_scaleout.wait_for_port(self.port, self.process, "pgbouncer", timeout=30)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def log(self) -> str:
        path = self.run_dir / "pgbouncer.log"
        return path.read_text() if path.exists() else ""


class Supervisor:
    """The launcher's supervision (run_scaleout.tend, every 0.2 s) on a thread: the watchdog and Restart=always."""

    def __init__(self, children: list):
        self.children = children
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="supervisor", daemon=True)

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            run_scaleout.tend(self.children)

    def child(self, name: str):
        return next(child for child in self.children if child.name == name)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=90)
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(signal.SIGCONT)  # a frozen one cannot act on SIGTERM
            child.terminate()
        for child in self.children:
            child.wait()
            if child.notifications is not None:
                child.notifications.close()


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class TimedTransport(httpx.HTTPTransport):
    """httpx's own transport, with every request's wait and answer recorded."""

    def __init__(self, record: list, **options):
        super().__init__(**options)
        self.record = record

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        try:
            response = super().handle_request(request)
            response.read()
        except httpx.TransportError as error:
            self.record.append((request.method, type(error).__name__, time.monotonic() - started))
            raise
        self.record.append((request.method, response.status_code, time.monotonic() - started))
        return response


class Traffic:
    """Through nginx, all the while: the writer appending, a reader reading the session, and websocket handshakes."""

    def __init__(self, url: str, port: int, token: str, tls, session_id: str):
        self.requests: list = []  # (method, status or error, seconds) of every HTTP request
        self.handshakes: list = []  # (seconds, error or None) of every websocket opening
        self.given: list[str] = []  # what the writer was given, in order
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.writer_client = Client(url, token, transport=TimedTransport(self.requests, verify=tls))
        self.reader = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120, transport=TimedTransport(self.requests, verify=tls))
        self.port, self.token, self.tls, self.session_id = port, token, tls, session_id
        self.writer = self.writer_client.writer(session_id, flush_interval=0.2, batch_size=20)
        self.threads = [threading.Thread(target=self.guarded(work), daemon=True) for work in (self.write, self.read, self.handshake)]

    def guarded(self, work):
        def run():
            try:
                work()
            except BaseException as error:
                self.errors.append(error)

        return run

    def start(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def write(self) -> None:
        number = 0
        while not self.stopping.wait(0.05):
            text = f"event {number}"
            self.writer.user(text)
            self.given.append(text)
            number += 1

    def read(self) -> None:
        while not self.stopping.wait(0.3):
            self.reader.get(f"/api/v1/sessions/{self.session_id}")

    def handshake(self) -> None:
        """A websocket opened every second, each on a thread of its own: one held by a frozen Daphne does not
        keep the next from starting."""
        openings = []
        while not self.stopping.wait(1.0):
            openings.append(threading.Thread(target=self.open_stream, daemon=True))
            openings[-1].start()
        for opening in openings:
            opening.join(timeout=180)

    def open_stream(self) -> None:
        """A websocket handshake written out (RFC 6455), timed from the connect to nginx to its 101; then the
        stream's first frame (the stored events from the start)."""
        request = (
            f"GET /ws/v1/sessions/{self.session_id}/events HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\nAuthorization: Bearer {self.token}\r\n\r\n"
        ).encode()
        started = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=120) as raw, self.tls.wrap_socket(raw) as tls:
                tls.sendall(request)
                answer = b""
                while b"\r\n\r\n" not in answer:
                    chunk = tls.recv(65536)
                    assert chunk, f"nginx closed the connection after {answer!r}"
                    answer += chunk
                opened = time.monotonic() - started
                assert answer.startswith(b"HTTP/1.1 101 "), answer.split(b"\r\n")[0]
                if not answer.split(b"\r\n\r\n", 1)[1]:
                    tls.settimeout(60)
                    assert tls.recv(1), "the stream sent nothing"
            self.handshakes.append((opened, None))
        except Exception as error:  # noqa: BLE001 (recorded and asserted on)
            self.handshakes.append((time.monotonic() - started, f"{type(error).__name__}: {error}"))

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=180)
        try:
            self.writer.close(timeout=120)
        finally:
            self.writer_client.close()
            self.reader.close()


def environment_file(path: Path, values: dict[str, str]) -> Path:
    """The configuration file as /etc/turnlog.env would be (systemd's EnvironmentFile= syntax)."""
    path.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    path.chmod(0o640)
    return path


@pytest.fixture(params=["direct", "pgbouncer"])
def recipe(request, transactional_db, tmp_path):
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("PostgreSQL only (the suite's PostgreSQL pass runs it)")
    nginx_binary()
    needs("openssl", "openssl")
    pgbouncer = None
    database = database_url(connection.settings_dict)
    settings_file = {}
    if request.param == "pgbouncer":
        pgbouncer = PgBouncer(connection.settings_dict).start()
        database = pgbouncer.url
        if pgbouncer.version < (1, 21):  # it cannot keep prepared statements in transaction mode before 1.21
            settings_file["TURNLOG_DB_PREPARED_STATEMENTS"] = "0"
    redis = RedisServer(tmp_path / "redis.log").start()
    (tmp_path / "metrics").mkdir()
    config = environment_file(tmp_path / "turnlog.env", {
        "TURNLOG_ENV": "production",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": database,
        "REDIS_URL": redis.url,
        "TURNLOG_DATA_DIR": str(tmp_path / "data"),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        **settings_file,
    })  # fmt: skip
    # What systemd gives a unit besides its EnvironmentFile=: no DATABASE_URL or REDIS_URL of the test run.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8", "TURNLOG_CONFIG": str(config)}
    logs = tmp_path / "logs"
    logs.mkdir()
    for command in unit_commands("turnlog-migrate.service"):  # the oneshot the others wait for
        done = subprocess.run(command, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=START)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    ports = [free_port(), free_port()]
    children = [run_scaleout.Child("worker", unit_commands("turnlog-worker.service")[0], logs / "worker.log", env, watched=True)]
    for index, port in enumerate(ports):
        (command,) = unit_commands("turnlog-daphne@.service", str(port))
        children.append(run_scaleout.Child(f"daphne-{index}", command, logs / f"daphne-{index}.log", env, port=port, watched=True))
    supervisor = Supervisor(children)
    nginx = None
    try:
        for child in children:
            child.start()
        supervisor.thread.start()
        (tmp_path / "nginx").mkdir()
        nginx = Nginx(tmp_path / "nginx", upstreams=ports, timeout=None).start()  # the site file's own 30 s
        yield {"nginx": nginx, "supervisor": supervisor, "logs": logs, "pgbouncer": pgbouncer, "env_file": config}
    finally:
        if nginx is not None:
            nginx.stop()
        supervisor.stop()
        redis.kill()
        if pgbouncer is not None:
            pgbouncer.stop()


def ready_daphne(supervisor: Supervisor, name: str, old_pid: int, since: float) -> float:
    """Seconds from `since` until `name` runs as a new process that listens; fails past RESTART_LIMIT (and a margin
    to say by how much)."""
    child = supervisor.child(name)
    while True:
        process = child.process
        if process is not None and process.pid != old_pid and process.poll() is None and port_open(child.port):
            return time.monotonic() - since
        assert time.monotonic() - since < RESTART_LIMIT + 30, f"{name} was not started again"
        time.sleep(0.1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_frozen_or_killed_daphne_holds_no_request_past_30_s_and_the_writer_stores_each_event_once(recipe, plain_user):
    nginx, supervisor = recipe["nginx"], recipe["supervisor"]
    tls = nginx.tls_context()
    url = f"https://127.0.0.1:{nginx.https_port}"
    traffic = Traffic(url, nginx.https_port, token_for(plain_user), tls, "recipe").start()
    restarts = {}
    try:
        time.sleep(2)  # appends flow before the first freeze
        for signal_sent in (signal.SIGSTOP, signal.SIGKILL):
            for name in ("daphne-0", "daphne-1"):
                old_pid = supervisor.child(name).process.pid
                os.kill(old_pid, signal_sent)
                restarts[(name, signal_sent.name)] = ready_daphne(supervisor, name, old_pid, time.monotonic())
                time.sleep(2)  # both serve a while before the next one goes
    finally:
        traffic.stop()

    assert not traffic.errors, traffic.errors
    # What the freezes and kills cost, for the log of a run (pytest -s).
    print({"restarted after (s)": {f"{n} {s}": round(v, 1) for (n, s), v in restarts.items()},
           "longest request (s)": round(max(r[2] for r in traffic.requests), 1),
           "longest handshake (s)": round(max(h[0] for h in traffic.handshakes), 1),
           "requests": len(traffic.requests), "handshakes": len(traffic.handshakes), "events": len(traffic.given)})  # fmt: skip
    for (name, sent), seconds in restarts.items():
        assert seconds < RESTART_LIMIT, f"{name} after {sent}: started again after {seconds:.1f} s"
        if sent == "SIGSTOP":
            assert seconds >= WATCHDOG - 5, f"{name} replaced after {seconds:.1f} s: by the watchdog, not before"  # the last ping may be 5 s old

    # No HTTP request waited past 30 s; every one was answered (the writer's 502s are retried, below).
    slow = [r for r in traffic.requests if r[2] > REQUEST_LIMIT]
    assert not slow, slow
    assert not [r for r in traffic.requests if not isinstance(r[1], int)], "every request through nginx got an answer"
    reads = [r for r in traffic.requests if r[0] == "GET"]
    assert reads and all(status == 200 for _, status, _ in reads), [r for r in reads if r[1] != 200]
    # A request held by a frozen Daphne waited for the watchdog (not the 30 s read timeout alone): the freezes cost.
    assert max(seconds for _, _, seconds in traffic.requests) > 2

    # Every handshake opened, none waiting past the watchdog's restart of the Daphne that held it.
    assert traffic.handshakes and not [h for h in traffic.handshakes if h[1] is not None], traffic.handshakes
    assert max(seconds for seconds, _ in traffic.handshakes) < RESTART_LIMIT, traffic.handshakes
    # Some were held by a frozen Daphne until the watchdog killed it, and went on to the other.
    assert max(seconds for seconds, _ in traffic.handshakes) > 5, traffic.handshakes

    # The stored log: every event the writer was given, once, in order, with seqs 0, 1, 2 ... and no gap.
    stored = list(Event.objects.filter(session_id="recipe").order_by("seq").values_list("seq", "data"))
    assert [seq for seq, _ in stored] == list(range(len(stored)))
    assert [data["content"] for _, data in stored] == traffic.given
    assert len(traffic.given) > 100

    logs = {path.name: path.read_text() for path in recipe["logs"].glob("*.log")}
    assert not [name for name, text in logs.items() if "Traceback" in text], logs
    if recipe["pgbouncer"] is not None:  # the processes' connections went through PgBouncer, with SCRAM
        assert f"login attempt: db={connection.settings_dict['NAME']} user=" in recipe["pgbouncer"].log()


def test_pgbouncers_pools_take_the_guides_largest_deployment_within_postgresqls_default_connections():
    config = configparser.ConfigParser(inline_comment_prefixes=None)
    config.read_string(PGBOUNCER_INI.read_text())
    pgbouncer = config["pgbouncer"]
    assert pgbouncer["pool_mode"] == "transaction"
    guide = (PROJECT_DIR / "docs" / "guide" / "deploy.md").read_text()
    table = guide.split("| Daphnes | `TURNLOG_DB_POOL_SIZE`")[1].split("\n\n")[0]
    clients = [int(row.group(1)) for row in re.finditer(r"^\| \d+ \| [^|]+ \| (\d+) \|", table, flags=re.MULTILINE)]
    assert clients and int(pgbouncer["max_client_conn"]) >= max(clients)  # every row of the table connects
    servers = int(pgbouncer["max_db_connections"])
    assert int(pgbouncer["default_pool_size"]) + int(pgbouncer["reserve_pool_size"]) <= servers
    assert servers <= 100 - 3 - 5  # PostgreSQL's default max_connections, its superuser reserve, psql and backups
    assert pgbouncer["auth_type"] == "scram-sha-256" and list(config["databases"]) == ["turnlog"]
