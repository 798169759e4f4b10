"""OTLP benchmark: Turnlog's OTLP ingest next to its native API, and next to Arize Phoenix, on the same spans.

The workload (bench/_otlp_workload.py): ~N spans (default 20,000) of Pydantic
AI runs traced by the real OpenTelemetry SDK (invoke_agent roots, chat spans
requesting tool calls, execute_tool spans, GenAI attributes with content and
usage), conversations of a few runs, plus one crashed run whose root never
ends, cut into batches of 512 in the SDK's export order and encoded as OTLP
protobuf; and the same runs as native events, batch by batch. Every request
body is encoded before any clock starts, on both sides.

Turnlog runs on its embedded default: a fresh SQLite file, the in-memory
channel layer, one `turnlog daphne` (Daphne) subprocess with the
settings' defaults (DJANGO_DEBUG unset), migrated, with a `create_token`
token (its project receives the spans). Phoenix runs from its own virtualenv
(`arize-phoenix`, pinned; `make phoenix-venv`) as `phoenix serve` on a fresh
working directory (its default SQLite storage), with telemetry and external
resources off.

(a) Turnlog ingest, one fresh database: `POST /otlp/v1/traces` of each batch
    (spans/s) next to the native `POST /api/v1/sessions/{id}/events` of the
    same batch's events, one request per session the batch touches, after a
    `POST /api/v1/sessions` for each session it starts (events/s over both:
    OTLP's requests create their sessions, and its time counts them; the
    appends alone are printed too). Interleaved batch by batch in a shuffled
    order per round, so both see the same table sizes and machine state.
    Target: OTLP spans/s >= half the native events/s.
(b) Turnlog and Phoenix one after the other, each alone on the machine: every
    batch POSTed back to back over one keep-alive connection (the accepted
    rate). Meanwhile a sampler polls the first and last chat or tool span of
    each exported batch through the product's API (their lag: the start of
    the read that first showed the span, minus the end of its batch's
    export). After the export, everything is read back (Turnlog: `GET
    /api/v1/sessions/{id}/events` of every session; Phoenix: `GET
    /v1/projects/default/spans` in insertion order, polled until all are
    stored). A chat span shows as the assistant message carrying its marker,
    a tool span as the tool_result of its call id, a root as its turn's
    turn_end (written once `TURNLOG_OTLP_SETTLE_SECONDS` have passed). Then
    the crashed run: Turnlog's session and recovery plan (an open turn,
    stalled, owing the call that was running) and Phoenix's spans of that
    trace. Targets: Turnlog's end-to-end rate (spans / time from the first
    export until every span read back) >= 20x Phoenix's, every sampled span
    readable within 2 s of its batch's export, the crashed run a stalled turn
    owing that call.

--phases instead times the OTLP path's steps in-process (decode, read, plan +
store) next to the native append of the same runs, with --profile a cProfile.

Prints a table; the exit status is 1 when a target is missed. Results and
method: docs/performance.md.

    .venv/bin/python bench/otlp.py [--spans N] [--phoenix-venv DIR | --no-phoenix] [--skip-native] [--phases [--profile]]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from _common import ROOT, Client, Server, Target, free_port, log_tail, machine_line, quantile, stop_process, torn_down
from _otlp_workload import MARKER, Workload, build

TARGET_NATIVE_RATIO = 0.5  # OTLP spans/s over native events/s, same content
TARGET_PHOENIX_RATIO = 20.0  # Turnlog end-to-end spans/s over Phoenix's
TARGET_LAG_SECONDS = 2.0  # every chat and tool span readable within this of its export
PHOENIX_VERSION = "20.26.1"
OTLP_PATH = "/otlp/v1/traces"
PROTOBUF = {"Content-Type": "application/x-protobuf"}
DEFAULT_PHOENIX_VENV = Path(os.environ.get("BENCH_PHOENIX_VENV") or ROOT.parent / "phoenix-venv")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def post(conn: http.client.HTTPConnection, path: str, body: bytes, headers: dict) -> tuple[int, bytes]:
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def check_otlp_answer(status: int, body: bytes, spans: int, product: str) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    if status != 200:
        raise RuntimeError(f"{product} answered {status} to an OTLP export of {spans} spans: {body[:500]!r}")
    answer = ExportTraceServiceResponse.FromString(body)
    if answer.partial_success.rejected_spans:
        raise RuntimeError(
            f"{product} rejected {answer.partial_success.rejected_spans} of {spans} spans: {answer.partial_success.error_message}"
        )


# (a) OTLP next to the native API ----------------------------------------------------------


@dataclass
class IngestResult:
    otlp_spans: int = 0
    otlp_seconds: float = 0.0
    native_events: int = 0
    native_requests: int = 0
    native_seconds: float = 0.0
    create_sessions: int = 0
    create_seconds: float = 0.0
    server_cpu: float = 0.0
    wall: float = 0.0
    noop_otlp_seconds: float = 0.0  # the same requests to a no-op ASGI app under the same daphne command
    noop_native_seconds: float = 0.0

    @property
    def otlp_rate(self) -> float:
        return self.otlp_spans / self.otlp_seconds

    @property
    def native_rate(self) -> float:
        """The native API's events/s storing the same runs: its appends and the creation of their sessions
        (OTLP's requests create theirs, and its time counts them)."""
        return self.native_events / (self.native_seconds + self.create_seconds)

    @property
    def appends_rate(self) -> float:
        return self.native_events / self.native_seconds

    @property
    def ratio(self) -> float:
        """The target's reading: OTLP spans/s over the native API's events/s, each side storing the same runs."""
        return self.otlp_rate / self.native_rate

    @property
    def appends_ratio(self) -> float:
        """The stricter reading: OTLP spans/s (sessions created inside) over the native appends' events/s alone."""
        return self.otlp_rate / self.appends_rate

    @property
    def content_ratio(self) -> float:
        """The same runs: native append time over OTLP time (1 = as fast; each span is ~2.7 native events)."""
        return self.native_seconds / self.otlp_seconds

    @property
    def content_ratio_with_creation(self) -> float:
        """The same, counting the native sessions' creation (OTLP creates its sessions inside its requests)."""
        return (self.native_seconds + self.create_seconds) / self.otlp_seconds


def measure_ingest(work: Workload, target: Target) -> IngestResult:
    """OTLP and native requests of each batch, in a shuffled order per batch, into one fresh database."""
    otlp = http.client.HTTPConnection("127.0.0.1", target.port, timeout=300)
    native = Client(target.port, target.token)
    headers = {**PROTOBUF, "Authorization": f"Bearer {target.token}"}
    next_seq: dict[str, int] = {}
    result = IngestResult()

    def send_otlp(k: int) -> None:
        t0 = time.perf_counter()
        status, body = post(otlp, OTLP_PATH, work.bodies[k], headers)
        result.otlp_seconds += time.perf_counter() - t0
        check_otlp_answer(status, body, len(work.batch_spans[k]), "Turnlog")
        result.otlp_spans += len(work.batch_spans[k])

    def send_native(k: int) -> None:
        for session, body, count in work.native[k]:
            sid = f"native-{session}"
            if sid not in next_seq:  # a native emitter creates its session first; timed apart
                t0 = time.perf_counter()
                native.create_session(sid)
                result.create_seconds += time.perf_counter() - t0
                result.create_sessions += 1
                next_seq[sid] = 0
            t0 = time.perf_counter()
            status, answer = native.post(f"/api/v1/sessions/{sid}/events", body)
            result.native_seconds += time.perf_counter() - t0
            expected = {"first_seq": next_seq[sid], "next_seq": next_seq[sid] + count}
            if status != 201 or json.loads(answer) != expected:
                raise RuntimeError(f"native append to {sid}: {status} {answer[:300]!r}, expected {expected}")
            next_seq[sid] += count
            result.native_events += count
            result.native_requests += 1

    order = random.Random(7)
    cpu0, wall0 = cpu_seconds(target.server.pid), time.perf_counter()
    for k in range(len(work.bodies)):
        pair = [send_otlp, send_native]
        order.shuffle(pair)
        for send in pair:
            send(k)
    result.server_cpu, result.wall = cpu_seconds(target.server.pid) - cpu0, time.perf_counter() - wall0
    otlp.close()
    native.conn.close()
    measure_noop(work, target, result)
    return result


def measure_noop(work: Workload, target: Target, result: IngestResult) -> None:
    """The transport's share: the same bodies to bench/noop_asgi.py under the same daphne command (a ceiling)."""
    noop = Server(target.env, target.tmpdir / "daphne-noop.log", application="noop_asgi:application", cwd=Path(__file__).parent)
    try:
        noop.start(target.token)
        conn = http.client.HTTPConnection("127.0.0.1", noop.port, timeout=300)
        headers = {**PROTOBUF, "Authorization": f"Bearer {target.token}"}
        for k, body in enumerate(work.bodies):
            t0 = time.perf_counter()
            post(conn, OTLP_PATH, body, headers)
            result.noop_otlp_seconds += time.perf_counter() - t0
            for session, native_body, _ in work.native[k]:
                t0 = time.perf_counter()
                post(conn, f"/api/v1/sessions/native-{session}/events", native_body, {**headers, "Content-Type": "application/json"})
                result.noop_native_seconds += time.perf_counter() - t0
        conn.close()
    finally:
        noop.stop()


# (b) export, then read back ---------------------------------------------------------------


@dataclass
class ExportResult:
    product: str
    version: str = ""
    spans: int = 0
    export_seconds: float = 0.0
    readback_seconds: float | None = None  # from the end of the export until the last span read back
    complete: bool = False
    unread: int = 0
    lag_max: float | None = None  # sampled chat/tool spans: first read back - end of their batch's export
    lag_p50: float | None = None
    samples: int = 0
    body_readback_seconds: float | None = None  # chat and tool spans only
    root_readback_seconds: float | None = None  # roots only (Turnlog: the last turn_end, after the settle time)
    reads: int = 0
    reads_after_export: int = 0
    server_cpu_export: float = 0.0
    server_cpu_total: float = 0.0
    crash: dict = field(default_factory=dict)

    @property
    def accepted_rate(self) -> float:
        return self.spans / self.export_seconds

    @property
    def cpu_per_read_ms(self) -> float | None:
        reads = self.reads_after_export
        return (self.server_cpu_total - self.server_cpu_export) / reads * 1000 if reads else None

    @property
    def end_to_end_rate(self) -> float:
        return self.spans / (self.export_seconds + self.readback_seconds) if self.complete else 0.0


class Reads:
    """How a product's API shows spans; `seen` maps a span's index to the start of the first read that showed it."""

    poll_pause = 0.2  # seconds between rounds that found nothing new

    def __init__(self, work: Workload):
        self.work = work
        self.seen: dict[int, float] = {}
        self.reads = 0
        self.lock = threading.Lock()

    def note(self, i: int | None, t0: float) -> bool:
        with self.lock:
            if i is None or i in self.seen:
                return False
            self.seen[i] = t0
            return True

    def sample(self, pending: list[int]) -> None:
        """Read these spans (a few per batch) once; `note` those found."""
        raise NotImplementedError

    def read_all(self) -> bool:
        """One round of the full read back; True when it found something new."""
        raise NotImplementedError


class TurnlogReads(Reads):
    """Sessions' events: a chat span is its marked assistant message, a tool span its tool_result, a root its turn_end."""

    def __init__(self, work: Workload, port: int, token: str):
        super().__init__(work)
        self.port, self.token = port, token
        self.sampler = Client(port, token)
        self.by_key: dict[tuple[str, str], int] = {}
        self.roots: dict[str, list[int]] = {}  # session -> its roots, in export order (the n-th turn_end shows the n-th)
        for i, span in enumerate(work.spans):
            if span.kind == "agent":
                self.roots.setdefault(span.session, []).append(i)
            else:
                self.by_key[(span.kind, span.key)] = i
        self.cursor: dict[str, int] = {}
        self.turn_ends: dict[str, int] = {}

    def events(self, client: Client, session: str, since: int) -> tuple[float, dict | None]:
        t0 = time.perf_counter()
        status, body = client.get(f"/api/v1/sessions/{session}/events?since={since}&limit=5000")
        self.reads += 1
        if status == 404:  # the batch that creates it is not stored yet
            return t0, None
        if status != 200:
            raise RuntimeError(f"GET events of {session}: {status} {body[:300]!r}")
        return t0, json.loads(body)

    def found(self, event: dict) -> list[int | None]:
        kind, data = event["type"], event["data"]
        if kind == "assistant_message":
            return [self.by_key.get(("chat", m)) for m in MARKER.findall(json.dumps(data.get("content")))]
        if kind == "tool_result":
            return [self.by_key.get(("tool", data.get("tool_call_id")))]
        return []

    def sample(self, pending: list[int]) -> None:
        for i in pending:
            t0, page = self.events(self.sampler, self.work.spans[i].session, 0)
            if page and i in [j for e in page["events"] for j in self.found(e)]:
                self.note(i, t0)

    def read_all(self) -> bool:
        client = Client(self.port, self.token)
        new = False
        for session in {self.work.spans[i].session: None for i in range(len(self.work.spans)) if i not in self.seen}:
            while True:
                t0, page = self.events(client, session, self.cursor.get(session, 0))
                if page is None:
                    break
                for event in page["events"]:
                    hits = self.found(event)
                    if event["type"] == "turn_end":
                        n = self.turn_ends[session] = self.turn_ends.get(session, 0) + 1
                        hits = self.roots.get(session, [])[n - 1 : n]
                    for i in hits:
                        new |= self.note(i, t0)
                self.cursor[session] = page["next_seq"]
                if len(page["events"]) < 5000:
                    break
        client.conn.close()
        return new


class PhoenixReads(Reads):
    """`GET /v1/projects/default/spans`: the sample by span_id, the full read back in insertion order."""

    poll_pause = 0.5

    def __init__(self, work: Workload, port: int):
        super().__init__(work)
        self.sampler = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.reader = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.by_span_id = {span.span_id: i for i, span in enumerate(work.spans)}
        self.cursor: str | None = None

    def spans(self, conn: http.client.HTTPConnection, query: str) -> tuple[float, dict | None]:
        t0 = time.perf_counter()
        conn.request("GET", f"/v1/projects/default/spans?{query}")
        resp = conn.getresponse()
        body = resp.read()
        self.reads += 1
        if resp.status == 404:  # the default project appears with the first stored span
            return t0, None
        if resp.status != 200:
            raise RuntimeError(f"Phoenix GET spans?{query[:100]}: {resp.status} {body[:300]!r}")
        return t0, json.loads(body)

    def sample(self, pending: list[int]) -> None:
        query = "limit=1000&" + "&".join(f"span_id={self.work.spans[i].span_id}" for i in pending)
        t0, page = self.spans(self.sampler, query)
        for span in page["data"] if page else []:
            self.note(self.by_span_id.get(span["context"]["span_id"]), t0)

    def read_all(self) -> bool:
        new = False
        while True:
            t0, page = self.spans(self.reader, "sort=id&order=asc&limit=1000" + (f"&cursor={self.cursor}" if self.cursor else ""))
            if page is None:
                return new
            for span in page["data"]:
                new |= self.note(self.by_span_id.get(span["context"]["span_id"]), t0)
            if page["next_cursor"]:
                self.cursor = page["next_cursor"]
                continue
            if page["data"]:  # at the end: the next round starts at the last span read (read again, already seen)
                self.cursor = page["data"][-1]["id"]
            return new


def sample_of(work: Workload, k: int) -> list[int]:
    """The first and the last chat or tool span of batch k: the spans whose lag is measured during the export."""
    body = [i for i in work.batch_spans[k] if work.spans[i].kind != "agent"]
    return sorted({body[0], body[-1]}) if body else []


def export_and_read(work: Workload, result: ExportResult, port: int, path: str, headers: dict, reads: Reads, pid: int, timeout: float) -> None:
    """POST every batch back to back while a sampler reads each batch's sample; then read everything back."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    exported: list[float] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def sampler() -> None:
        try:
            while not stop.is_set():
                pending = [i for k in range(len(exported)) for i in sample_of(work, k) if i not in reads.seen]
                if pending:
                    reads.sample(pending)
                if len(exported) == len(work.bodies) and all(i in reads.seen for k in range(len(exported)) for i in sample_of(work, k)):
                    return
                time.sleep(reads.poll_pause if pending else 0.01)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=sampler, daemon=True)
    cpu0 = cpu_seconds(pid)
    thread.start()
    start = time.perf_counter()
    for k, body in enumerate(work.bodies):
        status, answer = post(conn, path, body, headers)
        exported.append(time.perf_counter())
        check_otlp_answer(status, answer, len(work.batch_spans[k]), result.product)
    end = exported[-1]
    result.server_cpu_export = cpu_seconds(pid) - cpu0
    reads_before = reads.reads
    conn.close()
    deadline, last_report = end + timeout, end
    while len(reads.seen) < len(work.spans) and time.perf_counter() < deadline and not errors:
        if not reads.read_all():
            time.sleep(reads.poll_pause)
        if time.perf_counter() - last_report >= 30:
            last_report = time.perf_counter()
            print(f"  {result.product}: {len(reads.seen):,} of {len(work.spans):,} spans read back, {last_report - end:.0f} s after the export", flush=True)
    stop.set()
    thread.join()
    if errors:
        raise errors[0]
    result.server_cpu_total = cpu_seconds(pid) - cpu0
    result.reads_after_export = reads.reads - reads_before
    result.spans, result.export_seconds, result.reads = len(work.spans), end - start, reads.reads
    result.unread = len(work.spans) - len(reads.seen)
    result.complete = result.unread == 0
    root_seen = [t for i, t in reads.seen.items() if work.spans[i].kind == "agent"]
    body_seen = [t for i, t in reads.seen.items() if work.spans[i].kind != "agent"]
    if body_seen and len(body_seen) == len(work.spans) - work.counts["agent"]:
        result.body_readback_seconds = max(max(body_seen) - end, 0.0)
    if reads.seen:
        result.readback_seconds = max(max(reads.seen.values()) - end, 0.0)
    if root_seen and len(root_seen) == work.counts["agent"]:
        result.root_readback_seconds = max(max(root_seen) - end, 0.0)
    lags = [max(reads.seen[i] - exported[k], 0.0) if i in reads.seen else None for k in range(len(exported)) for i in sample_of(work, k)]
    result.samples = len(lags)
    if lags and None not in lags:
        result.lag_max, result.lag_p50 = max(lags), quantile(lags, 0.5)


# Turnlog -----------------------------------------------------------------------------------


def turnlog_crash(work: Workload, target: Target, stall_seconds: float) -> dict:
    """The crashed run's session: open turn, status, and the recovery plan's owed calls (waits for `stalled`)."""
    client = Client(target.port, target.token)
    sid = work.crash.conversation
    deadline = time.monotonic() + stall_seconds + 10
    while True:
        status, body = client.get(f"/api/v1/sessions/{sid}")
        if status != 200:
            return {"error": f"GET session {sid}: {status} {body[:200]!r}"}
        session = json.loads(body)
        if session["status"] == "stalled" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    status, body = client.get(f"/api/v1/sessions/{sid}/recovery-plan")
    plan = json.loads(body) if status == 200 else {}
    owed = [(c["id"], c["risk"]) for c in plan.get("owed_calls", [])]
    client.conn.close()
    return {
        "session": sid,
        "status": session["status"],
        "open_turns": session["open_turns"],
        "owed": owed,
        "stalled_turn": bool(session["open_turns"]) and session["status"] == "stalled" and (work.crash.owed_call, "tool_outcome_unknown") in owed,
    }


def measure_turnlog(work: Workload, args) -> tuple[IngestResult | None, ExportResult]:
    ingest = None
    if not args.skip_native:
        with torn_down(turnlog_target(args), "turnlog ingest") as target:
            target.setup()
            print("(a) Turnlog: OTLP and native ingest, batch by batch ...", flush=True)
            ingest = measure_ingest(work, target)
    with torn_down(turnlog_target(args), "turnlog export") as target:
        target.setup()
        print("(b) Turnlog: export and read back ...", flush=True)
        result = ExportResult("Turnlog", version=turnlog_version())
        reads = TurnlogReads(work, target.port, target.token)
        headers = {**PROTOBUF, "Authorization": f"Bearer {target.token}"}
        export_and_read(work, result, target.port, OTLP_PATH, headers, reads, target.server.pid, args.timeout)
        result.crash = turnlog_crash(work, target, args.stall_seconds)
    return ingest, result


def turnlog_target(args) -> Target:
    target = Target("sqlite", None, prefix="turnlog-bench-otlp")
    # The crashed run must read `stalled` within the run, not after the default two minutes.
    target.env["TURNLOG_STALL_SECONDS"] = str(args.stall_seconds)
    return target


def turnlog_version() -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return f"{commit or '?'}{'+changes' if changed else ''}"


# Phoenix -----------------------------------------------------------------------------------


class Phoenix:
    """`phoenix serve` from its own virtualenv, on a fresh working directory (its default SQLite storage)."""

    def __init__(self, venv: Path, workdir: Path):
        self.venv, self.workdir = venv, workdir
        self.port, self.grpc_port = free_port(), free_port()
        self.process: subprocess.Popen | None = None
        self.log_path = workdir / "phoenix.log"

    def version(self) -> str:
        code = "import importlib.metadata as m; print(m.version('arize-phoenix'))"
        return subprocess.run([self.venv / "bin" / "python", "-c", code], capture_output=True, text=True, check=True).stdout.strip()

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_")}
        env.update(
            PHOENIX_WORKING_DIR=str(self.workdir),
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(self.grpc_port),
            PHOENIX_TELEMETRY_ENABLED="false",
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        )
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([self.venv / "bin" / "phoenix", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"phoenix exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/v1/projects")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"phoenix did not answer within 180 s:\n{self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def stop(self) -> None:
        stop_process(self.process, timeout=20)


def phoenix_crash(work: Workload, port: int) -> dict:
    """What Phoenix's API shows of the crashed run: its spans, their status, whether it has a root."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", f"/v1/projects/default/spans?trace_id={work.crash.trace_id}&limit=1000")
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    if resp.status != 200:
        return {"error": f"GET spans of the crashed trace: {resp.status} {body[:200]!r}"}
    spans = json.loads(body)["data"]
    ids = {s["context"]["span_id"] for s in spans}
    return {
        "spans": len(spans),
        "statuses": sorted({s["status_code"] for s in spans}),
        "orphans": sum(1 for s in spans if s["parent_id"] and s["parent_id"] not in ids),
        "owed_call_visible": any(s["attributes"].get("gen_ai.tool.call.id") == work.crash.owed_call for s in spans),
    }


def measure_phoenix(work: Workload, args, tmpdir: Path) -> ExportResult:
    phoenix = Phoenix(args.phoenix_venv, tmpdir)
    result = ExportResult("Phoenix", version=phoenix.version())
    try:
        phoenix.start()
        print(f"(b) Phoenix {result.version}: export and read back (it stores slowly: minutes) ...", flush=True)
        reads = PhoenixReads(work, phoenix.port)
        export_and_read(work, result, phoenix.port, "/v1/traces", PROTOBUF, reads, phoenix.process.pid, args.timeout)
        result.crash = phoenix_crash(work, phoenix.port)
    except Exception:
        print(f"--- phoenix log tail ---\n{phoenix.log_tail()}", file=sys.stderr)
        raise
    finally:
        phoenix.stop()
    return result


# Where the time goes (--phases) -------------------------------------------------------------


def measure_phases(work: Workload, args) -> None:
    """In this process, on a fresh SQLite file: each OTLP batch through the endpoint's steps, timed one by one.

    decode (the door's protobuf decoding), read (conventions.read of every
    span), plan + store (services.ingest_readings: the planner and the
    writes); then the native batches through validate_batch +
    services.append_events. With --profile, cProfile of the OTLP steps (the
    server's database threads are invisible to a profile of daphne's main
    thread, hence in-process).
    """
    import cProfile
    import pstats

    from _common import setup_django

    with torn_down(Target("sqlite", None, prefix="turnlog-bench-otlp"), "phases") as target:
        target.setup(servers=0)
        setup_django(target)
        from django.conf import settings

        from sessions_app import services
        from sessions_app.log import events as log_events
        from sessions_app.models import ApiToken, Session
        from sessions_app.otel import conventions, decode
        from sessions_app.selectors import access
        from sessions_app.services import otlp as otlp_service
        from sessions_app.services import publishing

        # The server posts a commit's messages to its event loop from the database thread; here,
        # with no loop, async_to_sync would start a thread per commit, which the server never does.
        publishing.get_channel_layer = lambda: None

        token = ApiToken.usable_for(target.token)
        actor, project = access.Actor(user=token.user, token=token), token.project
        phases = {"decode": 0.0, "read": 0.0, "plan + store": 0.0}
        profile = cProfile.Profile() if args.profile else None
        for k, body in enumerate(work.bodies):
            if profile:
                profile.enable()
            t0 = time.perf_counter()
            decoded = decode.decode(body, content_type="application/x-protobuf", content_encoding=None, max_bytes=settings.TURNLOG_OTLP_MAX_BODY_BYTES)
            t1 = time.perf_counter()
            readings = [conventions.read(span) for span in decoded.spans]
            t2 = time.perf_counter()
            result = otlp_service.ingest_readings(actor=actor, project=project, readings=readings)
            t3 = time.perf_counter()
            if profile:
                profile.disable()
            if decoded.refused or result.refused or result.accepted != len(work.batch_spans[k]):
                raise RuntimeError(f"batch {k}: {len(decoded.refused)} refused by decode, {result.refused[:3]} by the service")
            phases["decode"] += t1 - t0
            phases["read"] += t2 - t1
            phases["plan + store"] += t3 - t2
        total = sum(phases.values())
        print(f"\n== where the OTLP time goes, in-process, {len(work.spans):,} spans in {len(work.bodies)} batches ==")
        for name, seconds in phases.items():
            print(f"{name:<14} {seconds:7.2f} s  {seconds / total:5.0%}  {seconds / len(work.bodies) * 1000:7.1f} ms/batch")
        print(f"{'all':<14} {total:7.2f} s         {len(work.spans) / total:7,.0f} spans/s")
        read_back_phases(work)
        native = 0.0
        for batch in work.native:
            for session, body, _ in batch:
                sid = f"native-{session}"
                events = json.loads(body)["events"]
                t0 = time.perf_counter()
                if not Session.objects.filter(pk=sid).exists():
                    services.create_session(session_id=sid, agent_name="support", project=project)
                services.append_events(session_id=sid, events=log_events.validate_batch(events))
                native += time.perf_counter() - t0
        print(f"{'native':<14} {native:7.2f} s         {work.native_events / native:7,.0f} events/s (validate_batch + create_session + append_events)")
        if profile:
            stats = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats(r"sessions_app|django/db", 40)
            stats.sort_stats("tottime").print_stats(25)


def read_back_phases(work: Workload) -> None:
    """What GET events' view itself does for every OTLP session: read the session and its events, make the wire form.

    Next to the server CPU per read request of (b), this tells the view's reads from the rest of the request.
    """
    from sessions_app import selectors
    from sessions_app.log import events as log_events

    t0 = time.perf_counter()
    events = 0
    for session in work.sessions:
        found = selectors.get_session(session)
        events += len([log_events.event_to_wire(e) for e in selectors.events_since(found, since=0, limit=5000)])
    seconds = time.perf_counter() - t0
    print(f"read back     {seconds:7.2f} s  {seconds / len(work.sessions) * 1000:.1f} ms per session: GET events' own reads and wire form"
          f" ({events / len(work.sessions):.0f} events each)")


# Report -----------------------------------------------------------------------------------


def fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "never"
    return f"{value:,.{digits}f}{unit}" if value < 100 else f"{value:,.0f}{unit}"


def checks(ingest: IngestResult | None, turnlog: ExportResult, phoenix: ExportResult | None) -> list[tuple[str, str, str, bool]]:
    out = []
    if ingest:
        out.append(("(a) OTLP spans/s / native events/s, same runs", f"{ingest.ratio:.2f}", f">= {TARGET_NATIVE_RATIO:.2f}", ingest.ratio >= TARGET_NATIVE_RATIO))
    lag_met = turnlog.lag_max is not None and turnlog.lag_max <= TARGET_LAG_SECONDS
    out.append(("(b) sampled span readable after export, max", fmt(turnlog.lag_max, " s"), f"<= {TARGET_LAG_SECONDS:.0f} s", lag_met))
    if phoenix:
        ratio = turnlog.end_to_end_rate / phoenix.end_to_end_rate if phoenix.complete and turnlog.complete else None
        shown = "n/a" if ratio is None else f"{ratio:,.1f}x"
        out.append(("(b) end-to-end rate, Turnlog / Phoenix", shown, f">= {TARGET_PHOENIX_RATIO:.0f}x", ratio is not None and ratio >= TARGET_PHOENIX_RATIO))
    out.append(("(b) crashed run is a stalled turn owing its call", str(turnlog.crash.get("stalled_turn", False)), "True", bool(turnlog.crash.get("stalled_turn"))))
    return out


def report(work: Workload, ingest: IngestResult | None, turnlog: ExportResult, phoenix: ExportResult | None) -> bool:
    if ingest:
        print("\n== (a) Turnlog ingest, the same runs over OTLP and over the native API (interleaved batch by batch) ==")
        print(f"OTLP   {ingest.otlp_spans:>7,} spans  in {len(work.bodies):>4} requests  {ingest.otlp_seconds:7.2f} s  {ingest.otlp_rate:8,.0f} spans/s  ({ingest.otlp_rate * work.native_events / len(work.spans):,.0f} native-event equivalents/s)")
        print(f"native {ingest.native_events:>7,} events in {ingest.native_requests:>4} requests  {ingest.native_seconds:7.2f} s  {ingest.appends_rate:8,.0f} events/s"
              f"  (+ {ingest.create_sessions} session creations, {ingest.create_seconds:.2f} s: {ingest.native_rate:,.0f} events/s in all)")
        print(f"(ceiling) the same requests to a no-op app under the same daphne: OTLP {ingest.noop_otlp_seconds:.2f} s"
              f" ({ingest.otlp_spans / ingest.noop_otlp_seconds:,.0f} spans/s), native {ingest.noop_native_seconds:.2f} s"
              f" ({ingest.native_events / ingest.noop_native_seconds:,.0f} events/s)")
        print(f"same runs, native time / OTLP time: {ingest.content_ratio:.2f} (appends), {ingest.content_ratio_with_creation:.2f} (with the sessions' creation);"
              f" server CPU {ingest.server_cpu:.1f} s over {ingest.wall:.1f} s")
        print(f"OTLP spans/s / native events/s: {ingest.ratio:.2f} (each side storing the same runs: the target's reading),"
              f" {ingest.appends_ratio:.2f} (the native appends alone, their sessions made beforehand)")
    products = [p for p in (turnlog, phoenix) if p]
    print("\n== (b) export, then read back through the API (one product at a time) ==")
    print(f"{'':<44}" + "".join(f"{p.product + ' ' + p.version:>24}" for p in products))
    rows = [
        ("spans exported (batches of 512)", lambda p: f"{p.spans:,}"),
        ("export, s", lambda p: fmt(p.export_seconds)),
        ("accepted, spans/s", lambda p: fmt(p.accepted_rate)),
        ("export end -> every span read back, s", lambda p: fmt(p.readback_seconds) + ("" if p.complete else f" ({p.unread:,} never)")),
        ("  every chat/tool span, s", lambda p: fmt(p.body_readback_seconds)),
        ("  every root (Turnlog: its turn_end), s", lambda p: fmt(p.root_readback_seconds)),
        ("end to end, spans/s", lambda p: fmt(p.end_to_end_rate) if p.complete else "incomplete"),
        ("sampled span lag after its batch: max, s", lambda p: fmt(p.lag_max)),
        ("  median, s (n = 2 per batch)", lambda p: fmt(p.lag_p50)),
        ("read requests (sampler + read back)", lambda p: f"{p.reads:,}"),
        ("  server CPU per read after the export, ms", lambda p: fmt(p.cpu_per_read_ms) if p.product == "Turnlog" else "(it is storing)"),
        ("server CPU s: export / until read back", lambda p: f"{p.server_cpu_export:.1f} / {p.server_cpu_total:.1f}"),
    ]
    for label, cell in rows:
        print(f"{label:<44}" + "".join(f"{cell(p):>24}" for p in products))
    c = turnlog.crash
    print(f"\ncrashed run ({work.crash.exported} spans exported, root never; the process died in call {work.crash.owed_call}):")
    if "error" in c:
        print(f"  Turnlog: {c['error']}")
    else:
        print(f"  Turnlog: session {c['session']} status {c['status']}, open turns {c['open_turns']}, recovery owes {c['owed']}")
    if phoenix:
        p = phoenix.crash
        if "error" in p:
            print(f"  Phoenix: {p['error']}")
        else:
            print(f"  Phoenix: {p['spans']} spans of the trace, statuses {p['statuses']}, {p['orphans']} whose parent never arrived;"
                  f" a span for the owed call: {p['owed_call_visible']}")
    print("\n== targets ==")
    passed = True
    for what, figure, target, met in checks(ingest, turnlog, phoenix):
        passed &= met
        print(f"{what:<50} {figure:>10}  target {target:<8} {'met' if met else 'MISSES'}")
    return passed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Method and results: docs/performance.md")
    parser.add_argument("--spans", type=int, default=20_000, help="spans to generate (whole runs: a few more; default 20,000)")
    parser.add_argument("--batch", type=int, default=512, help="spans per OTLP request (the SDK's default batch, 512)")
    parser.add_argument("--runs-per-conversation", type=int, default=3, help="runs (traces) per conversation (default 3)")
    parser.add_argument("--concurrency", type=int, default=8, help="conversations running side by side (default 8)")
    parser.add_argument("--phoenix-venv", type=Path, default=DEFAULT_PHOENIX_VENV,
                        help=f"virtualenv with arize-phoenix=={PHOENIX_VERSION} (default $BENCH_PHOENIX_VENV or ../phoenix-venv; make phoenix-venv)")
    parser.add_argument("--no-phoenix", action="store_true", help="measure Turnlog alone (the Phoenix target is then not judged)")
    parser.add_argument("--skip-native", action="store_true", help="skip (a), the native comparison")
    parser.add_argument("--timeout", type=float, default=900, help="seconds after the export to wait for every span to read back (default 900)")
    parser.add_argument("--stall-seconds", type=float, default=10, help="TURNLOG_STALL_SECONDS of the Turnlog server (default 10)")
    parser.add_argument("--phases", action="store_true", help="instead: time the OTLP path's steps in-process (decode, read, plan + store)")
    parser.add_argument("--profile", action="store_true", help="with --phases: cProfile of the OTLP steps")
    parser.add_argument("--json-out", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if not (args.no_phoenix or args.phases) and not (args.phoenix_venv / "bin" / "phoenix").exists():
        print(f"no Phoenix at {args.phoenix_venv}: `make phoenix-venv`, or --phoenix-venv DIR, or --no-phoenix", file=sys.stderr)
        return 2
    print(machine_line("Turnlog OTLP benchmark"))
    t0 = time.perf_counter()
    work = build(args.spans, batch=args.batch, runs_per_conversation=args.runs_per_conversation, concurrency=args.concurrency)
    print(
        f"workload: {len(work.spans):,} spans ({work.counts['agent']:,} invoke_agent, {work.counts['chat']:,} chat, {work.counts['tool']:,} execute_tool)"
        f" of {work.runs:,} runs + 1 crashed run in {len(work.sessions):,} conversations; {len(work.bodies)} OTLP requests of"
        f" {work.otlp_bytes / 1e6:.1f} MB in all; natively {work.native_events:,} events, {work.native_bytes / 1e6:.1f} MB"
        f" (built in {time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
    if args.phases:
        measure_phases(work, args)
        return 0
    ingest, turnlog = measure_turnlog(work, args)
    phoenix = None
    if not args.no_phoenix:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="phoenix-bench-") as tmpdir:
            phoenix = measure_phoenix(work, args, Path(tmpdir))
    passed = report(work, ingest, turnlog, phoenix)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "ingest": asdict(ingest) if ingest else None,
            "turnlog": asdict(turnlog), "phoenix": asdict(phoenix) if phoenix else None,
            "checks": checks(ingest, turnlog, phoenix),
        }, indent=1))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"({time.perf_counter() - t0:.0f} s in all; load average at the end {load})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
