"""Live benchmark: websocket viewers of one session while events are appended, and the session page's render time.

Part (a), for each scenario (each in its own child process, on a fresh database):

- **embedded**: a fresh SQLite file, the in-memory channel layer, ONE
  `turnlog daphne` (Daphne) subprocess; every viewer and every
  append goes to it;
- **scale-out**: a fresh PostgreSQL database, the Redis channel layer
  (`REDIS_URL`), TWO daphne subprocesses behind no balancer: viewers split
  half and half, appends all sent to the first one, so the second one's
  viewers only hear of them through Redis (or the per-process count poll).

1. create the database, `manage.py migrate`, `manage.py create_token bench`,
   start the daphne(s); create a session and append 100 events over HTTP;
2. open `--viewers` (default 100) websockets on
   `/ws/v1/sessions/{id}/events?after=N` with `Authorization: Bearer <token>`
   (autobahn's asyncio client, installed with daphne), N from 80 to 99 so each
   viewer first gets 1 to 20 backlog events from the database; wait until
   every viewer has its backlog. With `--viewer-kind page` the viewers are
   browsers instead: `/ws/sessions/{id}/live?after=N` with a logged-in
   session cookie and an allowed Origin, receiving the page's HTML frames;
   a frame's cursor (`data-last-seq`) tells which events it shows, and an
   event counts as delivered with the first frame that shows it;
3. a separate process appends `--rate` events/s (default 20) for `--duration`
   seconds (default 30) through `POST /api/v1/sessions/{id}/events`, one event
   per request, on a fixed schedule, from 4 keep-alive connections (so a slow
   answer does not delay the next send; `--append-connections 1` sends them
   strictly one after another, which caps the rate at 1 / POST time). Each event's data carries
   `sent_at`, the wall clock (time.time()) taken just before its POST; the
   appender also records when each answer arrived;
4. when the appends end, wait (up to 15 s) until every viewer has the last
   seq, then count per viewer: events received, lost (expected seqs never
   received), duplicated (a seq received twice), out of order.

Latency, over every (viewer, appended event) delivery, from the viewer's
receipt time (time.time() in the autobahn callback):
- **end-to-end** = receipt - `sent_at`: the whole POST (the commit and the
  publish happen inside it) plus the delivery;
- **after the answer** = receipt - the time the POST's answer reached the
  appender. Publishing happens on commit, inside the request, before the
  answer is sent, so this can be negative (the frame overtakes the answer).

Targets for (a): zero lost and zero duplicated events for every viewer, and
every viewer connected until the end; a p99 commit-to-receipt latency under
P99_TARGETS' bound for each workload and scenario.

Part (b), in each child after its servers are stopped (django.setup() on the
same database, in-process): server time of `GET /sessions/{id}/` through
django.test.Client with `force_login`, median of `--page-runs` (default 20)
after warm-up, for a session of 100 events and one of `--page-events`
(default 100,000), both built with `services.append_events` (the workload of
bench/recovery.py: closed turns, then an open last turn). Measured with the
last turn open (a live session, whose page also shows the recovery
preview of the open turn) and again after `services.recover` closed it.
Target: the big session's page within 2x of the small one's, for both.

The exit status is 1 when any target is missed. Results: docs/performance.md.

    .venv/bin/python bench/live.py [--scenario embedded|scaleout|both] [--db sqlite|postgres] [--viewers N] [--viewer-kind json|page]
                                   [--rate R] [--duration S] [--append-connections N]
                                   [--page-events N] [--page-runs N] [--skip-page]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import os
import queue
import random
import re
import resource
import signal
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import (
    DEFAULT_REDIS_URL,
    RUN_EVENTS,
    Client,
    Target,
    agent_log,
    build_session,
    db_version,
    machine_line,
    make_events,
    quantile,
    setup_django,
    spread_ms,
    timed,
    torn_down,
)

PAGE_RATIO = 2.0
APPEND_CONNECTIONS = 4
SCENARIOS = {
    "embedded": {"db": "sqlite", "redis": False, "servers": 1},
    "scaleout": {"db": "postgres", "redis": True, "servers": 2},
}


# The appender (its own process) ---------------------------------------------


def appender(port: int, token: str, plan: list[tuple[float, str, int]], connections: int, pipe) -> None:
    """POST the planned batches on a fixed schedule; send back [(session, first_seq, n, sent_at, answered_at)].

    `plan` holds (seconds after the start, session id, events in the batch).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Whole runs (the stream without its opening system_message), taken in a cycle: every turn the
    # appender opens it closes, as a live agent does. (Cut anywhere, the cycle once skipped every
    # step_end and turn_end: the page workload's session grew dozens of nested open turns.)
    runs = max(2, -(-max(n for _, _, n in plan) * 8 // RUN_EVENTS))
    events = make_events(1 + runs * RUN_EVENTS, seed=42, start=datetime(2025, 1, 1, tzinfo=UTC))[1:]
    for e in events:
        e.pop("time")  # the server stamps the append time, as for a live emitter
    jobs: queue.Queue = queue.Queue()
    records: list[tuple[str, int, int, float, float]] = []
    errors: list[str] = []
    lock = threading.Lock()
    behind = 0.0

    def worker() -> None:
        nonlocal behind
        client = Client(port, token)
        while (item := jobs.get()) is not None:
            due, session_id, batch = item
            sent_at = time.time()
            for event in batch:
                event["data"]["sent_at"] = sent_at
            with lock:
                behind = max(behind, sent_at - due)
            try:
                status, body = client.post(f"/api/v1/sessions/{session_id}/events", json.dumps({"events": batch}).encode())
            except (OSError, http.client.HTTPException) as exc:
                with lock:
                    errors.append(repr(exc))
                client = Client(port, token)
                continue
            answered_at = time.time()
            with lock:
                if status == 201:
                    records.append((session_id, json.loads(body)["first_seq"], len(batch), sent_at, answered_at))
                else:
                    errors.append(f"{status} {body[:200]!r}")
        client.conn.close()

    start_at = pipe.recv()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(connections)]
    for t in threads:
        t.start()
    cursor = 0
    for offset, session_id, n in plan:
        due = start_at + offset
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        batch = [next_lap(events[(cursor + i) % len(events)], (cursor + i) // len(events), runs) for i in range(n)]
        cursor += n
        jobs.put((due, session_id, batch))
    for _ in threads:
        jobs.put(None)
    for t in threads:
        t.join()
    pipe.send({"records": records, "errors": errors, "elapsed": time.time() - start_at, "max_behind": behind})


def next_lap(event: dict, lap: int, runs: int) -> dict:
    """A copy of a cycled event as a live agent would write it on lap `lap` of the cycle: its turns
    numbered on, and its call ids new. (Repeated ids made every tool_result re-render each earlier
    turn that named the same call, as the page must: p99 grew with the run's length.)"""
    event = json.loads(json.dumps(event))
    if lap:
        data = event["data"]
        if isinstance(data.get("turn"), int):
            data["turn"] += lap * runs
        for call in data.get("tool_calls") or ():
            call["id"] = f"{call['id']}_{lap}"
        if event["type"] in ("tool_call", "tool_result"):
            for key in ("id", "tool_call_id"):
                if isinstance(data.get(key), str):
                    data[key] = f"{data[key]}_{lap}"
    return event


# The viewers (asyncio, autobahn) --------------------------------------------


def stamp_seconds(value: str) -> float:
    """The server's append stamp (an event's `time`) as time.time() seconds."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Viewer:
    """An API client's JSON stream: one frame per event."""

    def __init__(self, index: int, server: int, session_id: str, seeded: int, after: int):
        self.index = index
        self.server = server
        self.session_id = session_id
        self.seeded = seeded  # events stored before the run (the backlog), seqs 0 .. seeded-1
        self.after = after
        self.seen: set[int] = set()
        self.received = 0
        self.duplicates = 0
        self.out_of_order = 0
        self.last = after
        self.deliveries: list[tuple[int, float]] = []  # (seq, receipt time) of appended events
        self.stamps: dict[int, float] = {}  # seq -> the server's append stamp, when the frame carries it
        self.opened: asyncio.Future | None = None
        self.close_code: int | None = None
        self.closed = False

    def on_frame(self, payload: bytes, now: float) -> None:
        message = json.loads(payload)
        event = message["event"]
        seq = event["seq"]
        self.received += 1
        if seq in self.seen:
            self.duplicates += 1
            return
        self.seen.add(seq)
        if seq < self.last:
            self.out_of_order += 1
        self.last = max(self.last, seq)
        if seq >= self.seeded:
            self.deliveries.append((seq, now))
            self.stamps[seq] = stamp_seconds(event["time"])


class PageViewer(Viewer):
    """A browser's session page socket: HTML frames, each ending with the cursor (the last seq it shows)."""

    CURSOR = re.compile(rb'id="live-cursor" data-last-seq="(\d+)"')

    def on_frame(self, payload: bytes, now: float) -> None:
        found = self.CURSOR.search(payload)
        if found is None:  # a header-only frame (a status that changed with time)
            return
        cursor = int(found.group(1))
        self.received += 1
        if cursor <= self.last:  # a range shown again
            self.duplicates += 1
            return
        shown = range(self.last + 1, cursor + 1)
        self.seen.update(shown)
        self.deliveries.extend((seq, now) for seq in shown if seq >= self.seeded)
        self.last = cursor


def page_login(target: Target) -> str:
    """A logged-in browser session's cookie value (a member of the default project), made with Django's own session store."""
    script = (
        "from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model\n"
        "from django.contrib.sessions.backends.db import SessionStore\n"
        "user, _ = get_user_model().objects.get_or_create(username='bench-viewer')\n"
        "from sessions_app import services\nfrom sessions_app.models import Project, Role\n"
        "services.set_membership(project=Project.default(), user=user, role=Role.MEMBER)\n"
        "store = SessionStore()\n"
        "store.update({SESSION_KEY: str(user.pk), BACKEND_SESSION_KEY: 'django.contrib.auth.backends.ModelBackend', "
        "HASH_SESSION_KEY: user.get_session_auth_hash()})\n"
        "store.create()\n"
        "print(store.session_key)"
    )
    return target.manage("shell", "-c", script).strip().splitlines()[-1]


def make_protocol():
    from autobahn.asyncio.websocket import WebSocketClientProtocol

    class ViewerProtocol(WebSocketClientProtocol):
        def onOpen(self):
            if not self.factory.viewer.opened.done():
                self.factory.viewer.opened.set_result(True)

        def onMessage(self, payload, isBinary):
            self.factory.viewer.on_frame(payload, time.time())

        def onClose(self, wasClean, code, reason):
            viewer = self.factory.viewer
            viewer.closed, viewer.close_code = True, code
            if not viewer.opened.done():
                viewer.opened.set_exception(RuntimeError(f"closed before opening: {code} {reason}"))

    return ViewerProtocol


async def open_viewer(viewer: Viewer, port: int, credentials: dict, protocol) -> None:
    from autobahn.asyncio.websocket import WebSocketClientFactory

    loop = asyncio.get_running_loop()
    viewer.opened = loop.create_future()
    if isinstance(viewer, PageViewer):
        url = f"ws://127.0.0.1:{port}/ws/sessions/{viewer.session_id}/live?after={viewer.after}"
        headers = {"Cookie": f"sessionid={credentials['cookie']}", "Origin": f"http://127.0.0.1:{port}"}
    else:
        url = f"ws://127.0.0.1:{port}/ws/v1/sessions/{viewer.session_id}/events?after={viewer.after}"
        headers = {"Authorization": f"Bearer {credentials['token']}"}
    factory = WebSocketClientFactory(url, headers=headers)
    factory.setProtocolOptions(utf8validateIncoming=False, openHandshakeTimeout=60)
    factory.protocol = protocol
    factory.viewer = viewer
    await loop.create_connection(factory, "127.0.0.1", port)
    await asyncio.wait_for(viewer.opened, 60)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def watch_sessions(target: Target, work: dict, pipe) -> dict:
    ports = [s.port for s in target.servers]
    kind = PageViewer if work["kind"] == "page" else Viewer
    viewers = [
        kind(i, server=i * len(ports) // len(work["viewers"]), session_id=sid, seeded=work["seeded"], after=after)
        for i, (sid, after) in enumerate(work["viewers"])
    ]
    protocol = make_protocol()
    credentials = {"token": target.token, "cookie": work.get("cookie")}
    t0 = time.perf_counter()
    for start in range(0, len(viewers), 50):  # at most 50 handshakes at once
        await asyncio.gather(*(open_viewer(v, ports[v.server], credentials, protocol) for v in viewers[start : start + 50]))
    deadline = time.monotonic() + 60
    while any(v.last < v.seeded - 1 for v in viewers):
        if closed := [v.close_code for v in viewers if v.closed]:
            raise RuntimeError(f"{len(closed)} viewers were closed before their backlog (codes {sorted(set(closed))})")
        if time.monotonic() > deadline:
            raise RuntimeError("some viewers never received their backlog")
        await asyncio.sleep(0.05)
    connect_seconds = time.perf_counter() - t0

    server_cpu0 = [cpu_seconds(s.process.pid) for s in target.servers]
    received0 = [v.received for v in viewers]
    client_cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start_at = time.time() + 0.5
    pipe.send(start_at)
    loop = asyncio.get_running_loop()
    report = await loop.run_in_executor(None, pipe.recv)
    records = report["records"]
    final = {sid: work["seeded"] for sid in work["sessions"]}
    for sid, first, n, _, _ in records:
        final[sid] = max(final[sid], first + n)
    drain_start = time.perf_counter()
    deadline = time.monotonic() + 15
    while any(v.last < final[v.session_id] - 1 and not v.closed for v in viewers) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    drain_seconds = time.perf_counter() - drain_start
    # CPU and frames up to the moment the last viewer is served (or gave up).
    server_cpu = [cpu_seconds(s.process.pid) - c for s, c in zip(target.servers, server_cpu0)]
    frames = sum(v.received - r for v, r in zip(viewers, received0))
    client_cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = (client_cpu1.ru_utime + client_cpu1.ru_stime) - (client_cpu0.ru_utime + client_cpu0.ru_stime)
    run_seconds = time.time() - start_at
    await asyncio.sleep(0.5)  # let any late duplicate arrive before counting
    still_open = sum(not v.closed for v in viewers)

    sent = {}
    for sid, first, n, sent_at, answered_at in records:
        for seq in range(first, first + n):
            sent[(sid, seq)] = (sent_at, answered_at)
    stamps = work.get("stamps") or {}
    servers = [str(i) for i in range(len(ports))]
    commit: dict[str, list[float]] = {i: [] for i in servers}
    end_to_end: dict[str, list[float]] = {i: [] for i in servers}
    window = 5.0
    by_window: dict[int, list[float]] = {}
    per_viewer = []
    for v in viewers:
        expected = set(range(v.after + 1, final[v.session_id]))
        lost = len(expected - v.seen)
        for seq, now in v.deliveries:
            sent_at, _ = sent[(v.session_id, seq)]
            end_to_end[str(v.server)].append(now - sent_at)
            stamp = v.stamps.get(seq)
            if stamp is not None:
                commit[str(v.server)].append(now - stamp)
            by_window.setdefault(int((sent_at - start_at) // window), []).append(now - sent_at)
        per_viewer.append(
            {"server": v.server, "received": v.received, "expected": len(expected), "lost": lost,
             "duplicates": v.duplicates, "out_of_order": v.out_of_order, "closed": v.closed, "close_code": v.close_code}
        )  # fmt: skip
    receipts = {i: [(seq, now) for v in viewers if str(v.server) == i for seq, now in v.deliveries] for i in servers}
    return {
        "receipts": receipts if work["kind"] == "page" else None,
        "viewers": per_viewer,
        "appended": sum(n for _, _, n, _, _ in records),
        "posts": len(records),
        "append_errors": report["errors"],
        "append_elapsed": report["elapsed"],
        "append_max_behind": report["max_behind"],
        "final": final,
        "connect_seconds": connect_seconds,
        "drain_seconds": drain_seconds,
        "run_seconds": run_seconds,
        "still_open": still_open,
        "commit_to_receipt": commit,
        "end_to_end": end_to_end,
        "server_cpu": server_cpu,
        "frames": frames,
        "client_cpu": client_cpu,
        "post_seconds": [answer - sent_at for _, _, _, sent_at, answer in records],
        # p50 end-to-end latency of the events sent in each 5 s window of the run: a steady rise
        # means the server falls behind (a throughput limit), not a constant delay.
        "e2e_p50_by_window": [quantile(by_window[k], 0.5) for k in sorted(by_window)],
    }


def viewers_process(target: Target, work: dict, args, out) -> None:
    """The viewers, in their own process: autobahn's asyncio flavour must not meet Django's daphne (twisted) import."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    proc = ctx.Process(
        target=appender, args=(target.port, target.token, work["plan"], work["connections"], child_end), daemon=True
    )
    proc.start()
    try:
        out.send(asyncio.run(watch_sessions(target, work, parent_end)))
    except Exception as exc:
        out.send({"error": repr(exc)})
        raise
    finally:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.terminate()


SEED_SCRIPT = """
import json
from sessions_app import services
from sessions_app.log import events as log_events
spec = json.loads(%r)
for sid in spec["sessions"]:
    services.create_session(session_id=sid, agent_name="bench")
    services.append_events(session_id=sid, events=log_events.validate_batch(spec["events"]))
"""


def seed_sessions(target: Target, session_ids: list[str], count: int) -> None:
    """Create the sessions with `count` events each, in one process (services, not HTTP: 500 sessions in seconds)."""
    events = make_events(count, seed=7, start=datetime(2025, 1, 1, tzinfo=UTC))
    target.manage("shell", "-c", SEED_SCRIPT % json.dumps({"sessions": session_ids, "events": events}))


def server_stamps(target: Target, session_id: str, since: int) -> dict[int, float]:
    """seq -> the server's append stamp of the stored events (for page frames, which carry no event time)."""
    client = Client(target.port, target.token)
    out: dict[int, float] = {}
    while True:
        status, body = client.get(f"/api/v1/sessions/{session_id}/events?since={since}&limit=5000")
        page = json.loads(body)["events"]
        out.update((e["seq"], stamp_seconds(e["time"])) for e in page)
        if len(page) < 5000:
            break
        since = page[-1]["seq"] + 1
    client.conn.close()
    return out


def plan_workload(name: str, target: Target, args) -> dict:
    """Sessions, viewers (session, after) and the appender's schedule of one workload."""
    rng = random.Random(3)
    if name in ("json", "page"):
        sessions = [f"bench-live-{name}"]
        seeded = 100
        viewers = [(sessions[0], seeded - 1 - rng.randrange(20)) for _ in range(args.viewers)]
        n = int(args.rate * args.duration)
        plan = [(i / args.rate, sessions[0], 1) for i in range(n)]
        connections = args.append_connections
    else:
        sessions = [f"bench-many-{i:04d}" for i in range(args.sessions)]
        seeded = 20
        viewers = [(sid, seeded - 1 - rng.randrange(10)) for sid in sessions]
        # Each session gets a batch every batch / session_rate seconds, the sessions staggered evenly.
        every = args.batch / args.session_rate
        plan = sorted(
            (k * every + i * every / len(sessions), sid, args.batch)
            for k in range(max(1, int(args.duration / every)))
            for i, sid in enumerate(sessions)
        )
        connections = args.session_connections
    seed_sessions(target, sessions, seeded)
    work = {"kind": "page" if name == "page" else "json", "sessions": sessions, "seeded": seeded, "viewers": viewers,
            "plan": plan, "connections": connections}  # fmt: skip
    if name == "page":
        work["cookie"] = page_login(target)
    return work


def run_viewers(target: Target, name: str, args) -> dict:
    work = plan_workload(name, target, args)
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    proc = ctx.Process(target=viewers_process, args=(target, work, args, child_end))
    proc.start()
    try:
        result = parent_end.recv()
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
    if "error" in result:
        raise RuntimeError(f"the viewers failed: {result['error']}")
    if work["kind"] == "page":  # page frames carry no event time: the stored events' stamps
        stamps = server_stamps(target, work["sessions"][0], work["seeded"])
        result["commit_to_receipt"] = {server: [now - stamps[seq] for seq, now in pairs] for server, pairs in result["receipts"].items()}
    result.pop("receipts")
    client = Client(target.port, target.token)
    for sid in work["sessions"][:5]:
        status, body = client.get(f"/api/v1/sessions/{sid}")
        stored = json.loads(body)["event_count"]
        if stored != result["final"][sid]:
            raise RuntimeError(f"session {sid} holds {stored} events; the appender recorded {result['final'][sid]}")
    client.conn.close()
    result["workload"] = name
    return result


# The session page (in-process) -----------------------------------------------


def measure_pages(args) -> dict:
    from django.contrib.auth import get_user_model
    from django.test import Client as DjangoClient

    from sessions_app import services

    # A superuser reads every project's sessions (a plain user without a membership gets 404s); its own name, as
    # the page workload's viewer may exist already.
    user = get_user_model().objects.create_superuser("bench-pages")
    client = DjangoClient()
    client.force_login(user)
    sizes = {"small": 100, "big": args.page_events}
    built = {}
    for label, n in sizes.items():
        log = agent_log(n, seed=11, start=datetime(2025, 1, 1, tzinfo=UTC))
        built[label] = build_session(f"bench-page-{label}", log.events)

    def page(session_id: str):
        response = client.get(f"/sessions/{session_id}/")
        assert response.status_code == 200, response.status_code
        return response

    out: dict = {"sizes": sizes, "build_seconds": built}
    for state in ("open", "closed"):
        if state == "closed":
            for label in sizes:
                services.recover(session_id=f"bench-page-{label}", user=user)
        for label in sizes:
            sid = f"bench-page-{label}"
            body = page(sid).content
            out[f"{state}_{label}"] = timed(lambda: page(sid), runs=args.page_runs, warmup=2)
            out[f"{state}_{label}_bytes"] = len(body)
    return out


def page_ratios(pages: dict) -> dict[str, float]:
    return {
        state: statistics.median(pages[f"{state}_big"]) / statistics.median(pages[f"{state}_small"]) for state in ("open", "closed")
    }


# One scenario -------------------------------------------------------------------


WORKLOADS = ("json", "page", "sessions")
# p99 commit-to-receipt targets (ms) per (workload, scenario); every workload also needs 0 lost, 0 duplicated.
P99_TARGETS = {
    ("json", "embedded"): 100, ("json", "scaleout"): 100,
    ("page", "embedded"): 250, ("page", "scaleout"): 150,
    ("sessions", "embedded"): 250, ("sessions", "scaleout"): 250,
}  # fmt: skip
WORKLOAD_LABELS = {
    "json": "100 JSON viewers of one session, 20 events/s (1 per POST)",
    "page": "100 page viewers (HTML) of one session, 20 events/s (1 per POST)",
    "sessions": "500 sessions x 1 JSON viewer, 2 events/s each (batches of 10)",
}


def run_scenario(name: str, args) -> dict:
    spec = SCENARIOS[name]
    db = args.db or spec["db"]
    result: dict = {"scenario": name, "db": db, "layer": "redis" if spec["redis"] else "in-memory", "servers": spec["servers"]}
    with torn_down(Target(db, args.redis_url if spec["redis"] else None), name) as target:
        target.setup(servers=spec["servers"])
        result["workloads"] = {}
        for workload in args.workloads:
            # Fresh daphnes per workload: no hub entry or render cache is carried over.
            target.stop_servers()
            target.servers = []
            for _ in range(spec["servers"]):
                target.start_server()
            result["workloads"][workload] = run_viewers(target, workload, args)
        target.stop_servers()
        setup_django(target)
        result["version"] = db_version()
        if not args.skip_page:
            result["pages"] = measure_pages(args)
        return result


def all_values(by_server: dict[str, list[float]]) -> list[float]:
    return [x for xs in by_server.values() for x in xs]


def cpu_per_1000(live: dict) -> float:
    return sum(live["server_cpu"]) / max(live["frames"], 1) * 1000


def live_checks(live: dict, scenario: str) -> list[tuple[str, str, str, bool]]:
    """(figure, value, target, met) of one workload's run."""
    vs = live["viewers"]
    lost, dup = sum(v["lost"] for v in vs), sum(v["duplicates"] for v in vs)
    closed = sum(v["closed"] for v in vs)
    commit = all_values(live["commit_to_receipt"])
    target = P99_TARGETS[(live["workload"], scenario)]
    p99 = quantile(commit, 0.99) * 1000 if commit else float("inf")
    return [
        ("p50 commit-to-receipt", f"{quantile(commit, 0.5) * 1000:.0f} ms" if commit else "-", "(reported)", True),
        ("p99 commit-to-receipt", f"{p99:.0f} ms", f"< {target} ms", p99 < target),
        ("lost", str(lost), "0", lost == 0),
        ("duplicated", str(dup), "0", dup == 0),
        ("closed early / append errors", f"{closed} / {len(live['append_errors'])}", "0 / 0", closed == 0 and not live["append_errors"]),
        ("server CPU s per 1,000 frames", f"{cpu_per_1000(live):.2f}", "(reported)", True),
    ]


def live_ok(live: dict, scenario: str) -> bool:
    return all(met for *_, met in live_checks(live, scenario))


def ms(values: list[float], q: float) -> str:
    return f"{quantile(values, q) * 1000:7.1f}" if values else "      -"


def print_workload(r: dict, live: dict) -> None:
    servers = r["servers"]
    print(f"\n-- {r['scenario']}: {WORKLOAD_LABELS[live['workload']]} --")
    print(
        f"{len(live['viewers'])} viewers connected and had their backlog in {live['connect_seconds']:.1f} s; "
        f"appended {live['appended']} events in {live['posts']} POSTs in {live['append_elapsed']:.1f} s "
        f"({live['appended'] / live['append_elapsed']:.1f}/s, {live['append_max_behind'] * 1000:.0f} ms behind schedule at worst); "
        f"POST p50 {ms(live['post_seconds'], 0.5).strip()} ms, p99 {ms(live['post_seconds'], 0.99).strip()} ms"
    )
    print(f"all viewers had their last seq {live['drain_seconds']:.2f} s after the last append's answer")
    cpu = ", ".join(f"daphne {i}: {c / live['run_seconds']:.2f}" for i, c in enumerate(live["server_cpu"]))
    print(
        f"CPU during the run (cores): {cpu}; the viewers' process: {live['client_cpu'] / live['run_seconds']:.2f}; "
        f"{live['frames']:,} frames delivered, {sum(live['server_cpu']):.1f} server CPU s"
    )
    print(f"{'viewers':<34}{'deliveries':>11}{'commit→recv p50':>16}{'p99':>8}{'max':>8}{'sent→recv p50':>15}{'p99':>8}   (ms)")
    groups = [(f"on daphne {i}" + (" (receives the POSTs)" if i == 0 and servers > 1 else ""), [str(i)]) for i in range(servers)]
    if servers > 1:
        groups.append(("all", [str(i) for i in range(servers)]))
    for label, idx in groups:
        c = [x for i in idx for x in live["commit_to_receipt"][i]]
        e = [x for i in idx for x in live["end_to_end"][i]]
        print(f"{label:<34}{len(e):>11,}{ms(c, 0.5):>16}{ms(c, 0.99):>8}{ms(c, 1.0):>8}{ms(e, 0.5):>15}{ms(e, 0.99):>8}")
    print("sent→recv p50 of the events sent in each 5 s of the run (ms): " + ", ".join(f"{x * 1000:.0f}" for x in live["e2e_p50_by_window"]))
    vs = live["viewers"]
    received = [v["received"] for v in vs]
    print(
        f"per viewer: received {min(received)}–{max(received)} frames (events expected {min(v['expected'] for v in vs)}–{max(v['expected'] for v in vs)}); "
        f"out of order {sum(v['out_of_order'] for v in vs)}"
    )
    if live["append_errors"]:
        print(f"append errors: {live['append_errors'][:5]}")
    for figure, value, target, met in live_checks(live, r["scenario"]):
        print(f"  {figure:<32}{value:>12}   target {target:<12}{'' if target == '(reported)' else ('met' if met else 'MISSED')}")


def print_result(r: dict, args) -> None:
    servers = r["servers"]
    print(f"\n== {r['scenario']}: {r['version']}, {r['layer']} channel layer, {servers} daphne process{'es' if servers > 1 else ''} ==")
    for live in r["workloads"].values():
        print_workload(r, live)
    if "pages" in r:
        p = r["pages"]
        print("\n(b) GET /sessions/{id}/ in-process (django.test.Client, force_login), server time in ms:")
        print(f"{'session':<44}{'median ms':>10}  (min–max, n)    page bytes")
        for state in ("open", "closed"):
            for label in ("small", "big"):
                n = p["sizes"][label]
                what = f"{n:,} events, last turn {'open' if state == 'open' else 'closed (recovered)'}"
                print(f"{what:<44}{spread_ms(p[f'{state}_{label}'])}    {p[f'{state}_{label}_bytes']:,}")
        for state, ratio in page_ratios(p).items():
            verdict = "meets" if ratio <= PAGE_RATIO else "MISSES"
            print(f"last turn {state}: {p['sizes']['big']:,} / 100 events = {ratio:.2f}x ({verdict} the {PAGE_RATIO:.0f}x target)")


def scenario_ok(r: dict) -> bool:
    ok = all(live_ok(live, r["scenario"]) for live in r["workloads"].values())
    if "pages" in r:
        ok &= all(ratio <= PAGE_RATIO for ratio in page_ratios(r["pages"]).values())
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=["embedded", "scaleout", "both"], default="both")
    parser.add_argument("--db", choices=["sqlite", "postgres"], help="override the scenario's database (embedded: sqlite, scale-out: postgres)")
    parser.add_argument(
        "--workload", action="append", choices=[*WORKLOADS, "all"], dest="workloads",
        help="json: 100 API event streams of one session; page: 100 session page sockets (HTML) of one session; "
        "sessions: 500 sessions with one API stream each (repeat the option for several; default: all)",
    )
    parser.add_argument("--viewers", type=int, default=100, help="viewers of the one session (json, page)")
    parser.add_argument("--rate", type=float, default=20.0, help="appended events per second to the one session (json, page; one per POST)")
    parser.add_argument("--sessions", type=int, default=500, help="sessions of the sessions workload (one viewer each)")
    parser.add_argument("--session-rate", type=float, default=2.0, help="events per second per session (sessions workload)")
    parser.add_argument("--batch", type=int, default=10, help="events per POST (sessions workload)")
    parser.add_argument("--session-connections", type=int, default=8, help="appender connections (sessions workload)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of appends")
    parser.add_argument(
        "--append-connections", type=int, default=APPEND_CONNECTIONS,
        help=f"concurrent keep-alive connections of the appender (default {APPEND_CONNECTIONS}; 1 = strictly sequential POSTs)",
    )
    parser.add_argument("--page-events", type=int, default=100_000, help="events of the big session of part (b)")
    parser.add_argument("--page-runs", type=int, default=20)
    parser.add_argument("--skip-page", action="store_true", help="only part (a)")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.workloads = list(WORKLOADS) if not args.workloads or "all" in args.workloads else list(dict.fromkeys(args.workloads))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if args.scenario != "both":
        t0 = time.perf_counter()
        result = run_scenario(args.scenario, args)
        print_result(result, args)
        print(f"({args.scenario} took {time.perf_counter() - t0:.0f} s)")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result))
        return 0 if scenario_ok(result) else 1

    print(machine_line("Turnlog live benchmark"))
    import subprocess
    import tempfile

    summary, failed = [], False
    given = sys.argv[1:] if argv is None else list(argv)
    forwarded, skip = [], False
    for arg in given:  # everything but --scenario goes to the children
        if skip:
            skip = False
        elif arg == "--scenario":
            skip = True
        elif not arg.startswith("--scenario="):
            forwarded.append(arg)
    for name in SCENARIOS:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        rc = subprocess.call([sys.executable, str(Path(__file__).resolve()), "--scenario", name, *forwarded, "--json-out", out])
        try:
            summary.append((name, json.loads(Path(out).read_text())))
        except (OSError, ValueError):
            summary.append((name, None))
        finally:
            Path(out).unlink(missing_ok=True)
        failed |= rc != 0

    print("\n== summary ==")
    for name, r in summary:
        if r is None:
            print(f"{name:<10} error")
            continue
        parts = []
        for live in r["workloads"].values():
            checks = {figure: (value, met) for figure, value, _, met in live_checks(live, name)}
            parts.append(
                f"{live['workload']}: p50 {checks['p50 commit-to-receipt'][0]} p99 {checks['p99 commit-to-receipt'][0]}"
                f"{'' if checks['p99 commit-to-receipt'][1] else ' (MISSED)'}, lost {checks['lost'][0]}, dup {checks['duplicated'][0]}, "
                f"{checks['server CPU s per 1,000 frames'][0]} CPU s/1,000 frames"
            )
        line = f"{name:<10} {r['db']}, {r['layer']}, {r['servers']} daphne: " + "; ".join(parts)
        if "pages" in r:
            ratios = page_ratios(r["pages"])
            line += f"; page {r['pages']['sizes']['big']:,}/100 events: open {ratios['open']:.2f}x, closed {ratios['closed']:.2f}x"
        print(line + ("" if scenario_ok(r) else "  TARGET MISSED"))
    if failed:
        print("FAILED: a target is missed (or a run failed).")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
