"""Helpers shared by the bench scripts (ingest, recovery, fork, live).

- workloads: `make_events` (the ingest stream of healthy runs) and `agent_log`
  (a longer, more varied session, optionally ending in an open turn);
- `Target`: a fresh database (a SQLite file in a temp dir, or a PostgreSQL
  database created here and dropped with `WITH (FORCE)`), migrated, with an
  API token, and any number of real `daphne` subprocesses on free ports;
- `Client`: one keep-alive `http.client` connection with the bearer token;
- in-process Django on a target's database (`setup_django`), timing helpers,
  and the "one child process per database" runner (Django's settings read
  DATABASE_URL once per process).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432")
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


# Workloads ------------------------------------------------------------------

WORDS = (
    "the a of to and in is it that for on with as this was be are by at from or an not have but "
    "session agent tool call result turn step invoice customer refund order account balance query "
    "database record error retry timeout status shipping address payment card token request response "
    "summary analysis report value field schema update create delete list fetch search parse compute"
).split()
TOOLS = ["search_orders", "lookup_customer", "issue_refund", "get_balance", "send_email", "read_file"]


def _text(rng: random.Random, size: int) -> str:
    out, n = [], 0
    while n < size:
        word = rng.choice(WORDS)
        out.append(word)
        n += len(word) + 1
    return " ".join(out).capitalize() + "."


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


RUN_EVENTS = 11  # events of one run of make_events, user_message to turn_end


def make_events(count: int, *, seed: int, start: datetime) -> list[dict]:
    """`count` wire events shaped like healthy agent runs (session-log.md section 3).

    One run: user_message, turn_start, step_start, assistant_message with a tool
    call, tool_call, tool_result, step_end, step_start, assistant_message,
    step_end, turn_end (11 events). The stream is cut at `count`, so batches cut
    through runs just as a live emitter's would.
    """
    rng = random.Random(seed)
    events: list[dict] = []
    clock = start
    turn = 0

    def add(type_: str, data: dict) -> None:
        nonlocal clock
        clock += timedelta(microseconds=rng.randint(500, 50_000))
        events.append({"type": type_, "time": iso(clock), "data": data})

    add("system_message", {"content": _text(rng, 400), "name": None, "metadata": {}})
    while len(events) < count:
        turn += 1
        call = f"call_{turn}_{rng.randrange(10**8):08d}"
        tool = rng.choice(["search_orders", "lookup_customer", "issue_refund", "get_balance"])
        add("user_message", {"content": _text(rng, rng.randint(150, 400)), "name": None, "metadata": {}})
        add("turn_start", {"turn": turn})
        add("step_start", {"turn": turn, "step": 1})
        add(
            "assistant_message",
            {
                "content": _text(rng, rng.randint(100, 300)),
                "name": None,
                "metadata": {"model": "bench-model-1", "usage": {"input_tokens": rng.randint(500, 5000), "output_tokens": rng.randint(20, 400)}},
                "tool_calls": [{"id": call, "name": tool, "arguments": {"query": _text(rng, 40), "limit": 10}}],
                "reasoning_content": _text(rng, rng.randint(80, 250)),
            },
        )
        add("tool_call", {"id": call, "name": tool})
        add(
            "tool_result",
            {"tool_call_id": call, "content": _text(rng, rng.randint(200, 600)), "name": tool, "metadata": {}},
        )
        add("step_end", {"turn": turn, "step": 1, "outcome": "ok"})
        add("step_start", {"turn": turn, "step": 2})
        add(
            "assistant_message",
            {"content": _text(rng, rng.randint(200, 500)), "name": None, "metadata": {}, "tool_calls": [], "reasoning_content": None},
        )
        add("step_end", {"turn": turn, "step": 2, "outcome": "ok"})
        add("turn_end", {"turn": turn, "steps": 2, "reason": "complete"})
    return events[:count]


def batches(events: list, size: int) -> list[list]:
    return [events[i : i + size] for i in range(0, len(events), size)]


class AgentLog:
    """A long session as `agent_log` built it, with what a benchmark needs to know about it."""

    def __init__(self, events: list[dict], open_turn_seq: int | None, owed: list[str], closed_turns: int):
        self.events = events
        self.open_turn_seq = open_turn_seq  # seq of the final, unclosed turn_start (None: all closed)
        self.owed = owed  # call ids the open turn still owes a result for
        self.closed_turns = closed_turns


def agent_log(count: int, *, seed: int, start: datetime, open_last_turn: bool = True) -> AgentLog:
    """Exactly `count` wire events: many closed turns, then (optionally) one open turn.

    Closed turns vary as real agents do: 1 to 3 steps, 0 to 3 tool calls per
    step (parallel calls answered after their dispatches), `tool_call` events
    for 80% of the steps (some emitters write none), contents of 100 to 600
    characters. Loose `user_message`s pad the log to exactly `count` before
    the last turn. The open last turn is a crash in its second step:

        user_message, turn_start,
          step_start, assistant_message [a, b], tool_call a, tool_call b,
            tool_result a, tool_result b, step_end,
          step_start, assistant_message [c, d, e], tool_call c, tool_result c,
            tool_call d                                (crash)

    so recovery owes d (rule 1, dispatched) and e (rule 2, the turn logged
    dispatches for other calls).
    """
    rng = random.Random(seed)
    clock = start
    turn = 0

    def event(type_: str, data: dict) -> dict:
        nonlocal clock
        clock += timedelta(microseconds=rng.randint(500, 50_000))
        return {"type": type_, "time": iso(clock), "data": data}

    def user() -> dict:
        return event("user_message", {"content": _text(rng, rng.randint(100, 400)), "name": None, "metadata": {}})

    def assistant(calls: list[dict]) -> dict:
        return event(
            "assistant_message",
            {
                "content": _text(rng, rng.randint(100, 500)),
                "name": None,
                "metadata": {"model": "bench-model-1", "usage": {"input_tokens": rng.randint(500, 5000), "output_tokens": rng.randint(20, 400)}},
                "tool_calls": calls,
                "reasoning_content": _text(rng, rng.randint(80, 250)) if calls else None,
            },
        )

    def new_call(label: str) -> dict:
        return {"id": f"call_{turn}_{label}_{rng.randrange(10**8):08d}", "name": rng.choice(TOOLS), "arguments": {"query": _text(rng, 40), "limit": 10}}

    def result(call: dict) -> dict:
        return event("tool_result", {"tool_call_id": call["id"], "content": _text(rng, rng.randint(200, 600)), "name": call["name"], "metadata": {}})

    def closed_run() -> list[dict]:
        run = [user(), event("turn_start", {"turn": turn})]
        steps = rng.choice([1, 2, 2, 3])
        for step in range(1, steps + 1):
            run.append(event("step_start", {"turn": turn, "step": step}))
            calls = [] if step == steps else [new_call(f"{step}{i}") for i in range(rng.choice([1, 1, 2, 3]))]
            run.append(assistant(calls))
            if rng.random() < 0.8:
                run += [event("tool_call", {"id": c["id"], "name": c["name"]}) for c in calls]
            run += [result(c) for c in calls]
            run.append(event("step_end", {"turn": turn, "step": step, "outcome": "ok"}))
        run.append(event("turn_end", {"turn": turn, "steps": steps, "reason": "complete"}))
        return run

    def open_run() -> tuple[list[dict], list[str]]:
        a, b = new_call("a"), new_call("b")
        run = [user(), event("turn_start", {"turn": turn}), event("step_start", {"turn": turn, "step": 1}), assistant([a, b])]
        run += [event("tool_call", {"id": a["id"], "name": a["name"]}), event("tool_call", {"id": b["id"], "name": b["name"]})]
        run += [result(a), result(b), event("step_end", {"turn": turn, "step": 1, "outcome": "ok"})]
        c, d, e = new_call("c"), new_call("d"), new_call("e")
        run += [event("step_start", {"turn": turn, "step": 2}), assistant([c, d, e])]
        run += [event("tool_call", {"id": c["id"], "name": c["name"]}), result(c), event("tool_call", {"id": d["id"], "name": d["name"]})]
        return run, [d["id"], e["id"]]

    events = [event("system_message", {"content": _text(rng, 400), "name": None, "metadata": {}})]
    tail_length = 14 if open_last_turn else 0
    while True:
        turn += 1
        run = closed_run()
        if len(events) + len(run) + tail_length > count:
            turn -= 1
            break
        events += run
    closed_turns = turn
    while len(events) < count - tail_length:
        events.append(user())
    if not open_last_turn:
        return AgentLog(events[:count], None, [], closed_turns)
    turn += 1
    run, owed = open_run()
    assert len(run) == tail_length
    open_turn_seq = len(events) + 1
    events += run
    assert len(events) == count, len(events)
    return AgentLog(events, open_turn_seq, owed, closed_turns)


# Servers and databases -----------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TURNLOG_APPLICATION = "dashboard.asgi:application"


def daphne_command(port: int, *, application: str = TURNLOG_APPLICATION, tree: Path = ROOT) -> list[str]:
    """Daphne serving `application` from `tree` on `port`, as the tree's users start it: Turnlog as the tree's
    own `turnlog daphne` (its websocket limits; a tree from before that command gets plain `daphne`, as then)."""
    cli = tree / "dashboard" / "cli.py"
    if application == TURNLOG_APPLICATION and cli.exists() and "def daphne(" in cli.read_text():
        # `python -c` from the tree imports the tree's own dashboard package, not the one installed here.
        turnlog = [str(VENV_BIN / "python"), "-c", "import sys; from dashboard.cli import main; sys.exit(main())"]
        return [*turnlog, "daphne", "-b", "127.0.0.1", "-p", str(port)]
    return [str(VENV_BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), application]


class Server:
    """One Daphne subprocess on a free port serving the site (daphne_command), or another app, from `cwd`."""

    def __init__(self, env: dict, log_path: Path, *, application: str = TURNLOG_APPLICATION, cwd: Path = ROOT):
        self.env = env
        self.log_path = log_path
        self.application, self.cwd = application, cwd
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def start(self, token: str) -> Server:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                daphne_command(self.port, application=self.application, tree=self.cwd),
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"daphne exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/api/v1/sessions?limit=1", headers={"Authorization": f"Bearer {token}"})
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    return self
                raise RuntimeError(f"the server answered {status} to an authenticated GET")
            except (ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"daphne did not answer within 60 s:\n{self.log_tail()}") from None
                time.sleep(0.2)

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        stop_process(self.process, timeout=10)


def log_tail(log_path: Path, lines: int = 20) -> str:
    """The last lines of a server's log, for an error message."""
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_process(process: subprocess.Popen | None, *, timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Target:
    """A fresh database plus a migrated schema, a token and (optionally) running daphnes."""

    def __init__(self, db: str, redis_url: str | None, *, prefix: str = "turnlog-bench", root: Path = ROOT):
        self.db = db
        self.root = root  # the source tree whose manage.py and daphne run (bench/append_cpu.py compares trees)
        self.redis_url = redis_url
        self.tmpdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-{db}-"))
        self.pg_name: str | None = None
        if db == "sqlite":
            self.url = f"sqlite:///{self.tmpdir / 'bench.sqlite3'}"
        else:
            self.pg_name = f"turnlog_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
            self.url = f"{PG_ADMIN_URL}/{self.pg_name}"
        self.env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_DEBUG", "REDIS_URL", "DATABASE_URL"}}
        self.env["DATABASE_URL"] = self.url
        self.env["DJANGO_SETTINGS_MODULE"] = "dashboard.settings"
        if redis_url:
            self.env["REDIS_URL"] = redis_url
        self.servers: list[Server] = []
        self.token = ""

    # The first server, under the names bench/ingest.py has always used.
    @property
    def server(self) -> subprocess.Popen | None:
        return self.servers[0].process if self.servers else None

    @property
    def port(self) -> int:
        return self.servers[0].port if self.servers else 0

    def manage(self, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=self.root, env=self.env, capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def setup(self, servers: int = 1) -> None:
        """Create and migrate the database, issue a token (user `bench`), start `servers` daphnes."""
        if self.pg_name:
            import psycopg

            with psycopg.connect(f"{PG_ADMIN_URL}/postgres", autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.pg_name}"')
        self.manage("migrate", "--noinput")
        self.token = self.manage("create_token", "bench").strip().splitlines()[-1]
        for _ in range(servers):
            self.start_server()

    def start_server(self) -> Server:
        server = Server(self.env, self.tmpdir / f"daphne-{len(self.servers)}.log", cwd=self.root)
        self.servers.append(server)
        return server.start(self.token)

    def stop_servers(self) -> None:
        for server in self.servers:
            server.stop()

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(
            f"[daphne {i} on port {s.port}]\n{tail}" for i, s in enumerate(self.servers) if (tail := s.log_tail(lines))
        )

    def teardown(self) -> None:
        self.stop_servers()
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # Django may not be set up yet
            pass
        if self.pg_name:
            import psycopg

            with psycopg.connect(f"{PG_ADMIN_URL}/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)')
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def setup_django(target: Target, *, with_redis: bool = False) -> None:
    """Django in this process, on the target's database (and its Redis layer only when asked)."""
    import django

    os.environ.update({"DATABASE_URL": target.url, "DJANGO_SETTINGS_MODULE": "dashboard.settings"})
    os.environ.pop("DJANGO_DEBUG", None)
    if with_redis and target.redis_url:
        os.environ["REDIS_URL"] = target.redis_url
    else:
        os.environ.pop("REDIS_URL", None)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    django.setup()


def db_version() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("select sqlite_version()" if connection.vendor == "sqlite" else "show server_version")
        return f"{connection.vendor} {cursor.fetchone()[0]}"


def build_session(session_id: str, events: list[dict], *, batch: int = 1000, agent_name: str = "bench") -> float:
    """Create a session and append `events` through services.append_events; returns seconds."""
    from sessions_app import services
    from sessions_app.log import events as log_events

    t0 = time.perf_counter()
    services.create_session(session_id=session_id, agent_name=agent_name)
    for chunk in batches(events, batch):
        services.append_events(session_id=session_id, events=log_events.validate_batch(chunk))
    return time.perf_counter() - t0


# Client -------------------------------------------------------------------


class Client:
    """One keep-alive connection; sequential requests."""

    def __init__(self, port: int, token: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        self.conn.request("POST", path, body=body, headers=self.headers)
        resp = self.conn.getresponse()
        return resp.status, resp.read()

    def get(self, path: str) -> tuple[int, bytes]:
        self.conn.request("GET", path, headers=self.headers)
        resp = self.conn.getresponse()
        return resp.status, resp.read()

    def create_session(self, session_id: str) -> None:
        status, body = self.post("/api/v1/sessions", json.dumps({"id": session_id, "agent_name": "bench"}).encode())
        if status != 201:
            raise RuntimeError(f"creating session {session_id}: {status} {body[:300]!r}")


# Timing and reporting ------------------------------------------------------


def timed(fn: Callable[[], object], *, runs: int, warmup: int = 2) -> list[float]:
    """Seconds of each of `runs` calls of fn, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; needs at least one value."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def spread_ms(seconds: list[float]) -> str:
    """'median (min–max, n=N)' in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return f"{statistics.median(ms):8.1f}  ({min(ms):.1f}–{max(ms):.1f}, n={len(ms)})"


def machine_line(title: str) -> str:
    import django

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{title}: {os.cpu_count()} CPUs (nproc), Python {sys.version.split()[0]}, Django {django.get_version()}, "
        f"load average {load}"
    )


def run_children(script: str, dbs: list[str], args: list[str]) -> list[tuple[str, dict | None, int]]:
    """Run `script --db DB ARGS --json-out FILE` for each database in its own process.

    Each child prints its own tables; returns (db, its JSON result or None, exit status).
    """
    results = []
    for db in dbs:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        rc = subprocess.call([sys.executable, script, "--db", db, *args, "--json-out", out])
        try:
            data = json.loads(Path(out).read_text())
        except (OSError, ValueError):
            data = None
        finally:
            Path(out).unlink(missing_ok=True)
        results.append((db, data, rc))
    return results


@contextlib.contextmanager
def torn_down(target: Target, label: str) -> Iterator[Target]:
    """Always tear the target down; on a failure, first print its daphnes' log tail."""
    try:
        yield target
    except Exception:
        if tail := target.log_tail():
            print(f"--- daphne log tail ({label}) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        target.teardown()


def measure_in_process(db: str, args, measure: Callable[..., dict]) -> dict:
    """Set up a fresh `db`, run measure(target, args.events, args.runs), always tear down."""
    with torn_down(Target(db, None), db) as target:
        target.setup(servers=0)
        return measure(target, args.events, args.runs)


def run_single(args, measure: Callable[..., dict], print_result: Callable[[dict], None], passed: Callable[[dict], bool]) -> int:
    """One database in this process: measure, print, hand the result to a parent run (--json-out)."""
    started = time.perf_counter()
    result = measure_in_process(args.db, args, measure)
    print_result(result)
    print(f"({args.db} took {time.perf_counter() - started:.0f} s)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result))
    return 0 if passed(result) else 1


def database_arguments(doc: str, *, events_help: str, runs: int, runs_help: str) -> argparse.ArgumentParser:
    """The options bench/recovery.py and bench/fork.py share (--db, --events, --runs)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--events", type=int, default=100_000, help=events_help)
    parser.add_argument("--runs", type=int, default=runs, help=runs_help)
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    return parser
