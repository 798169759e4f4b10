"""Ingest benchmark: events/s appended through the real HTTP API vs the database's raw insert rate.

For each database (a fresh SQLite file in a temp dir, and/or a fresh PostgreSQL
database) this script:

1. creates the database, runs `manage.py migrate` and `manage.py create_token bench`
   against it (subprocesses with DATABASE_URL set);
2. starts `turnlog daphne` (Daphne serving dashboard.asgi:application) on a free port as a real
   subprocess with the same DATABASE_URL (DJANGO_DEBUG unset);
3. POSTs realistic event batches (user/assistant messages of a few hundred
   bytes, tool_call/tool_result, turn/step events) to
   `POST /api/v1/sessions/{id}/events` over keep-alive `http.client`
   connections, in batches of 1, 100 and 1000 events, each batch size into
   its own session; every answer must be 201 with the right seqs. Batch 1 is
   measured with one sequential client and with 8 concurrent clients on 8
   sessions, in 4 rounds where the two take turns (2,000 and 8 x 400 events
   by default: the machine's speed drifts within minutes, and a short series
   measured the drift);
4. measures, in this process (django.setup() on the same DATABASE_URL), the
   limit: the driver's own `executemany` of the same rows (every column
   adapted beforehand) into `bench_raw_event`, a table created here with the
   events table's columns, its unique (session, seq) index and its secondary
   indexes; batches of 1000, one transaction per batch. `Event.objects.bulk_create`
   of the same rows is measured too, as a second reference line;
5. measures this run's ceilings for single appends (reference lines, not
   targets): the same requests from the same clients to bench/noop_asgi.py
   under the same `daphne` command, and the driver's own one-event
   transactions (the session's row read under its lock, the row inserted into
   bench_raw_event, the session's count updated).

API(1000), executemany and bulk_create are measured batch by batch in
interleaved rounds (shuffled order per round) so that all see the same table
size and machine state. Targets: API(1000) >= 0.20 of executemany on SQLite,
>= 0.50 on PostgreSQL; batch 1 >= 300 events/s with one client, >= 800 events/s
with 8. Each figure is printed next to its target; the exit status is 1 when
one is missed. Results and method: docs/performance.md.

    .venv/bin/python bench/ingest.py [--db sqlite|postgres|both] [--events N] [--redis] [--worker]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from _common import DEFAULT_REDIS_URL, ROOT, Client, Server, Target, batches, make_events, run_children, torn_down

# API(1000) / raw executemany, per database vendor.
TARGET_RATIO = {"sqlite": 0.20, "postgres": 0.50}
REFERENCE_BULK_RATIO = 0.40  # the earlier target against bulk_create, shown for reference only
TARGET_SINGLE = 300.0  # events/s, batches of 1, one sequential client
TARGET_CONCURRENT = 800.0  # events/s, batches of 1, CONCURRENT_CLIENTS clients on as many sessions
CONCURRENT_CLIENTS = 8
SINGLE_ROUNDS = 4  # batch-1 series are sent in this many rounds, one client's and eight clients' alternating
NOOP, ONE_EVENT_TX = "noop daphne", "one-event tx"  # the ceilings' rows


# Results ------------------------------------------------------------------


@dataclass
class Row:
    mode: str  # "api" or "raw"
    batch: int
    events: int = 0
    seconds: float = 0.0
    rounds: list[float] = field(default_factory=list)  # events/s of each round

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


@dataclass
class DbResult:
    db: str
    rows: list[Row]
    channel_layer: str = "in-memory"
    version: str = ""

    def row(self, mode: str, batch: int) -> Row:
        return next(r for r in self.rows if r.mode == mode and r.batch == batch)

    @property
    def ratio(self) -> float:
        return self.row("api", 1000).rate / self.row("executemany", 1000).rate

    @property
    def bulk_ratio(self) -> float:
        return self.row("api", 1000).rate / self.row("bulk_create", 1000).rate

    def checks(self) -> list[tuple[str, float, str, bool]]:
        """(what, figure, target, met) for every target of this database."""
        target = TARGET_RATIO[self.db]
        single, concurrent = self.row("api", 1).rate, self.row(f"api x{CONCURRENT_CLIENTS}", 1).rate
        return [
            ("API(1000) / raw executemany", self.ratio, f">= {target:.2f}", self.ratio >= target),
            ("batch 1, one client, events/s", single, f">= {TARGET_SINGLE:.0f}", single >= TARGET_SINGLE),
            (f"batch 1, {CONCURRENT_CLIENTS} clients, events/s", concurrent, f">= {TARGET_CONCURRENT:.0f}", concurrent >= TARGET_CONCURRENT),
        ]

    @property
    def passed(self) -> bool:
        return all(met for *_, met in self.checks())

    def ceilings(self) -> list[tuple[str, float]]:
        """What this machine allows single appends in this run (reference lines, not targets)."""
        server, server_x = self.row(NOOP, 1).rate, self.row(f"{NOOP} x{CONCURRENT_CLIENTS}", 1).rate
        database = self.row(ONE_EVENT_TX, 1).rate
        return [
            ("no-op app, same daphne, 1 client", server),
            (f"no-op app, same daphne, {CONCURRENT_CLIENTS} clients", server_x),
            ("driver's one-event transactions", database),
            # Sequential, so their costs add: a server that added nothing to the two gets this.
            ("the two together, one client", 1 / (1 / server + 1 / database)),
        ]


def print_table(result: DbResult) -> None:
    print(f"\n== {result.db}: {result.version}, channel layer {result.channel_layer} ==")
    print(f"{'mode':<15}{'batch':>6}{'events':>9}{'seconds':>10}{'events/s':>11}   per round: min / median / max events/s")
    for r in result.rows:
        spread = ""
        if len(r.rounds) > 1:
            lo, mid, hi = min(r.rounds), statistics.median(r.rounds), max(r.rounds)
            spread = f"{lo:,.0f} / {mid:,.0f} / {hi:,.0f}"
        print(f"{r.mode:<15}{r.batch:>6}{r.events:>9,}{r.seconds:>10.3f}{r.rate:>11,.0f}   {spread}")
    for what, figure, target, met in result.checks():
        shown = f"{figure:.2f}" if figure < 10 else f"{figure:,.0f}"
        print(f"{what:<34} {shown:>8}  target {target:<8} {'met' if met else 'MISSES'}")
    print(f"{'(reference) API(1000) / bulk_create':<34} {result.bulk_ratio:>8.2f}  (the earlier target was {REFERENCE_BULK_RATIO:.2f})")
    for what, figure in result.ceilings():
        print(f"{'(ceiling) ' + what:<44} {figure:>8,.0f} events/s")


# Streams ------------------------------------------------------------------


class ApiStream:
    """Appends one session's event stream batch by batch, checking every answer."""

    def __init__(self, client: Client, session_id: str, events: list[dict], batch: int):
        self.client = client
        self.session_id = session_id
        self.path = f"/api/v1/sessions/{session_id}/events"
        # Bodies are encoded up front: the benchmark times the server, not the client's json.dumps.
        self.bodies = [(len(b), json.dumps({"events": b}).encode()) for b in batches(events, batch)]
        self.pos = 0
        self.next_seq = 0
        client.create_session(session_id)

    def run(self, n_batches: int) -> tuple[int, float]:
        """Send the next n_batches; returns (events, seconds)."""
        sent = 0
        todo = self.bodies[self.pos : self.pos + n_batches]
        self.pos += len(todo)
        t0 = time.perf_counter()
        for count, body in todo:
            status, answer = self.client.post(self.path, body)
            if status != 201:
                raise RuntimeError(f"POST {self.path} answered {status}: {answer[:500]!r}")
            got = json.loads(answer)
            if got != {"first_seq": self.next_seq, "next_seq": self.next_seq + count}:
                raise RuntimeError(f"unexpected seqs {got} (expected first_seq {self.next_seq}, +{count})")
            self.next_seq += count
            sent += count
        return sent, time.perf_counter() - t0

    def verify(self) -> None:
        status, body = self.client.get(f"/api/v1/sessions/{self.session_id}")
        count = json.loads(body).get("event_count") if status == 200 else None
        if count != self.next_seq:
            raise RuntimeError(f"session {self.session_id}: event_count {count}, expected {self.next_seq}")


def equivalent_table():
    """A model (not migrated, registered only in this process) for `bench_raw_event`.

    Same columns as the events table, its unique (session, seq) constraint and
    its secondary indexes (partial ones included), under other names.
    """
    from django.db import models

    from sessions_app.models import Event

    meta = Event._meta
    attrs = {"__module__": __name__}
    for f in meta.local_fields:
        if f.primary_key:
            continue
        clone = f.clone()
        if f.is_relation:
            clone.remote_field.related_name = "+"
        attrs[f.name] = clone
    indexes = []
    for i, index in enumerate(meta.indexes):
        copy = index.clone()
        copy.name = f"bench_raw_idx{i}"
        indexes.append(copy)
    constraints = [models.UniqueConstraint(fields=["session", "seq"], name="bench_raw_seq_unique")]
    assert [list(c.fields) for c in meta.constraints] == [["session", "seq"]], "the events table's constraints changed"
    attrs["Meta"] = type("Meta", (), {"app_label": "sessions_app", "db_table": "bench_raw_event", "indexes": indexes, "constraints": constraints})
    return type("BenchRawEvent", (models.Model,), attrs)


def create_equivalent_table():
    from django.db import connection

    model = equivalent_table()
    with connection.schema_editor() as editor:
        editor.create_model(model)
    connection.close()
    return model


def event_rows(session, events: list[dict]) -> list:
    """The Event objects of `events` (seq, structure and call id filled in)."""
    from sessions_app.log import events as log_events
    from sessions_app.log import structure
    from sessions_app.models import Event

    turn_stack: list[int] = []
    step_stack: list[int] = []
    rows = []
    for seq, e in enumerate(events):
        placement = structure.place(turn_stack, step_stack, seq, e["type"])
        rows.append(
            Event(
                session=session,
                seq=seq,
                type=e["type"],
                time=log_events.parse_time(e["time"]),
                data=e["data"],
                call_id=log_events.call_id(e["data"]) if e["type"] in {"tool_call", "tool_result"} else None,
                turn_seq=placement.turn_seq,
                step_seq=placement.step_seq,
            )
        )
    return rows


class ExecutemanyStream:
    """The same rows as plain tuples through the driver's executemany into bench_raw_event, a transaction per batch.

    Every value is adapted for the driver before timing starts (the time as the
    backend stores it, data as Django's JSONField sends it), so this is the
    insert itself: the database's limit through its Python driver.
    """

    def __init__(self, model, session_id: str, events: list[dict], batch: int):
        from django.db import connection

        from sessions_app import services

        self.model = model
        session = services.create_session(session_id=session_id, agent_name="bench-executemany")
        ops = connection.ops
        fields = ["session", "seq", "type", "time", "data", "call_id", "turn_seq", "step_seq", "replace_start", "replace_stop"]
        quote = ops.quote_name
        columns = ", ".join(quote(model._meta.get_field(f).column) for f in fields)
        mark = "?" if connection.vendor == "sqlite" else "%s"
        self.sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({', '.join([mark] * len(fields))})"
        rows = [
            (session.id, e.seq, e.type, ops.adapt_datetimefield_value(e.time), ops.adapt_json_value(e.data, None), e.call_id, e.turn_seq, e.step_seq, None, None)
            for e in event_rows(session, events)
        ]
        connection.close()
        self.batches = batches(rows, batch)
        self.pos = 0

    def run(self, n_batches: int) -> tuple[int, float]:
        from django.db import connection, transaction

        todo = self.batches[self.pos : self.pos + n_batches]
        self.pos += len(todo)
        connection.ensure_connection()
        driver = connection.connection  # the DB-API connection itself: sqlite3 or psycopg
        sent = 0
        t0 = time.perf_counter()
        for rows in todo:
            with transaction.atomic():  # BEGIN (IMMEDIATE on SQLite) ... COMMIT, as the API's appends
                cursor = driver.cursor()
                cursor.executemany(self.sql, rows)
                cursor.close()
            sent += len(rows)
        elapsed = time.perf_counter() - t0
        connection.close()
        return sent, elapsed

    def count(self, session_id: str) -> int:
        return self.model.objects.filter(session_id=session_id).count()


class OneEventTransactions(ExecutemanyStream):
    """The database's own share of a single append: per event one transaction, through the driver.

    Each reads the session's row under its lock (FOR UPDATE on PostgreSQL;
    SQLite's IMMEDIATE transaction), inserts the event's row (adapted
    beforehand) into bench_raw_event and updates the session's event count,
    as an append does with fewer columns and no token check: a ceiling, not
    the same work.
    """

    def __init__(self, model, session_id: str, events: list[dict]):
        from django.db import connection

        from sessions_app.models import Session

        super().__init__(model, session_id, events, 1)
        self.session_id = session_id
        table, quote = connection.ops.quote_name(Session._meta.db_table), connection.ops.quote_name
        mark = "?" if connection.vendor == "sqlite" else "%s"
        lock = "" if connection.vendor == "sqlite" else " FOR UPDATE"
        self.lock_sql = f"SELECT {quote('event_count')} FROM {table} WHERE {quote('id')} = {mark}{lock}"
        self.update_sql = f"UPDATE {table} SET {quote('event_count')} = {mark} WHERE {quote('id')} = {mark}"

    def run(self, n_batches: int) -> tuple[int, float]:
        from django.db import connection, transaction

        todo = self.batches[self.pos : self.pos + n_batches]
        self.pos += len(todo)
        connection.ensure_connection()
        driver = connection.connection
        t0 = time.perf_counter()
        for (row,) in todo:
            with transaction.atomic():
                cursor = driver.cursor()
                cursor.execute(self.lock_sql, [self.session_id])
                (count,) = cursor.fetchone()
                cursor.execute(self.sql, row)
                cursor.execute(self.update_sql, [count + 1, self.session_id])
                cursor.close()
        elapsed = time.perf_counter() - t0
        connection.close()
        return len(todo), elapsed


class RawStream:
    """The same rows written with Event.objects.bulk_create, a transaction per batch (a reference line)."""

    def __init__(self, session_id: str, events: list[dict], batch: int):
        from django.db import connection

        from sessions_app import services
        from sessions_app.models import Event

        self.Event = Event
        session = services.create_session(session_id=session_id, agent_name="bench-raw")
        connection.close()  # hold nothing open between rounds (SQLite: no lingering reader)
        rows = event_rows(session, events)
        self.batches = batches(rows, batch)
        self.pos = 0

    def run(self, n_batches: int) -> tuple[int, float]:
        from django.db import connection, transaction

        todo = self.batches[self.pos : self.pos + n_batches]
        self.pos += len(todo)
        connection.ensure_connection()  # connecting is not part of the insert rate
        sent = 0
        t0 = time.perf_counter()
        for rows in todo:
            with transaction.atomic():
                self.Event.objects.bulk_create(rows)
            sent += len(rows)
        elapsed = time.perf_counter() - t0
        connection.close()
        return sent, elapsed


def run_concurrent(streams: list[ApiStream], n_batches: int) -> tuple[int, float]:
    """Every stream sends its next n_batches bodies from its own thread (and connection) at once; (events, seconds)."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(streams) + 1)

    def send(stream: ApiStream) -> None:
        start.wait()
        try:
            stream.run(n_batches)
        except BaseException as exc:  # reported below
            errors.append(exc)

    sent_before = sum(s.next_seq for s in streams)
    threads = [threading.Thread(target=send, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(s.next_seq for s in streams) - sent_before, elapsed


# One database ---------------------------------------------------------------


def measure(target: Target, n_events: int) -> DbResult:
    import django

    os.environ.update({"DATABASE_URL": target.url, "DJANGO_SETTINGS_MODULE": "dashboard.settings"})
    os.environ.pop("REDIS_URL", None)
    sys.path.insert(0, str(ROOT))
    django.setup()

    start = datetime(2025, 1, 1, tzinfo=UTC)
    client = Client(target.port, target.token)
    tag = uuid.uuid4().hex[:6]

    # Sizes: batch 1 is bound by per-request cost, so it gets fewer events, sent in SINGLE_ROUNDS
    # rounds (each a few seconds at the targets' rates: the machine's speed drifts within minutes).
    n_single = max(SINGLE_ROUNDS * 10, n_events // 20)
    n_concurrent = max(SINGLE_ROUNDS * 5, n_events // 100)  # per client
    n_hundred = max(200, n_events // 200 * 100)
    n_rounds = max(2, n_events // 1000)  # one batch of 1000 each for API, executemany and bulk_create per round
    n_big = n_rounds * 1000

    raw_model = create_equivalent_table()

    # Warm-up (not timed): every code path, its own sessions.
    warm = make_events(2000, seed=99, start=start)
    ApiStream(client, f"warm-1-{tag}", warm[:5], 1).run(5)
    ApiStream(client, f"warm-100-{tag}", warm[:200], 100).run(2)
    ApiStream(client, f"warm-1000-{tag}", warm, 1000).run(2)
    RawStream(f"warm-raw-{tag}", warm, 1000).run(2)
    ExecutemanyStream(raw_model, f"warm-em-{tag}", warm, 1000).run(2)

    keys = [
        ("api", 1), (f"api x{CONCURRENT_CLIENTS}", 1), ("api", 100), ("api", 1000), ("executemany", 1000), ("bulk_create", 1000),
        (NOOP, 1), (f"{NOOP} x{CONCURRENT_CLIENTS}", 1), (ONE_EVENT_TX, 1),
    ]
    rows = {key: Row(*key) for key in keys}

    def record(key, result):
        events, seconds = result
        row = rows[key]
        row.events += events
        row.seconds += seconds
        row.rounds.append(events / seconds)

    s1 = ApiStream(client, f"bench-1-{tag}", make_events(n_single, seed=1, start=start), 1)
    clients = [Client(target.port, target.token) for _ in range(CONCURRENT_CLIENTS)]
    concurrent = [
        ApiStream(c, f"bench-1x{i}-{tag}", make_events(n_concurrent, seed=10 + i, start=start), 1) for i, c in enumerate(clients)
    ]
    for _ in range(SINGLE_ROUNDS):  # one client and eight take turns, so both see the same machine
        record(("api", 1), s1.run(n_single // SINGLE_ROUNDS))
        record((f"api x{CONCURRENT_CLIENTS}", 1), run_concurrent(concurrent, n_concurrent // SINGLE_ROUNDS))
    s100 = ApiStream(client, f"bench-100-{tag}", make_events(n_hundred, seed=2, start=start), 100)
    record(("api", 100), s100.run(len(s100.bodies)))

    # API(1000), executemany and bulk_create interleaved batch by batch, in a shuffled order per
    # round, so that all see the same table sizes and machine state, and WAL checkpoints (SQLite)
    # or background writes land on any of them at random instead of always on the same one.
    big = make_events(n_big, seed=3, start=start)
    s1000 = ApiStream(client, f"bench-1000-{tag}", big, 1000)
    raw = RawStream(f"bench-raw-{tag}", big, 1000)
    em = ExecutemanyStream(raw_model, f"bench-em-{tag}", big, 1000)
    order = random.Random(7)
    for _ in range(n_rounds):
        trio = [("bulk_create", raw), ("api", s1000), ("executemany", em)]
        order.shuffle(trio)
        for mode, stream in trio:
            record((mode, 1000), stream.run(1))

    # The ceilings: the same requests from the same clients to a no-op app under the same daphne
    # command, and the database's own one-event transactions.
    noop = Server(target.env, target.tmpdir / "daphne-noop.log", application="noop_asgi:application", cwd=Path(__file__).parent)
    try:
        noop.start(target.token)
        noop_clients = [Client(noop.port, target.token) for _ in range(CONCURRENT_CLIENTS + 1)]
        n1 = ApiStream(noop_clients[0], f"noop-1-{tag}", make_events(n_single, seed=1, start=start), 1)
        noop_concurrent = [
            ApiStream(c, f"noop-1x{i}-{tag}", make_events(n_concurrent, seed=10 + i, start=start), 1) for i, c in enumerate(noop_clients[1:])
        ]
        for _ in range(SINGLE_ROUNDS):
            record((NOOP, 1), n1.run(n_single // SINGLE_ROUNDS))
            record((f"{NOOP} x{CONCURRENT_CLIENTS}", 1), run_concurrent(noop_concurrent, n_concurrent // SINGLE_ROUNDS))
        for c in noop_clients:
            c.conn.close()
    finally:
        noop.stop()
    one = OneEventTransactions(raw_model, f"bench-one-{tag}", make_events(n_single, seed=1, start=start))
    record((ONE_EVENT_TX, 1), one.run(len(one.batches)))
    if (one_count := one.count(f"bench-one-{tag}")) != n_single:
        raise RuntimeError(f"the one-event transactions stored {one_count} events, expected {n_single}")

    for stream in (s1, s100, s1000, *concurrent):
        stream.verify()
    for c in (client, *clients):
        c.conn.close()
    raw_count = raw.Event.objects.filter(session_id=f"bench-raw-{tag}").count()
    if raw_count != n_big:
        raise RuntimeError(f"raw session holds {raw_count} events, expected {n_big}")
    if (em_count := em.count(f"bench-em-{tag}")) != n_big:
        raise RuntimeError(f"the executemany table holds {em_count} events, expected {n_big}")

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("select sqlite_version()" if connection.vendor == "sqlite" else "show server_version")
        version = f"{connection.vendor} {cursor.fetchone()[0]}"
    connection.close()
    return DbResult(
        db=target.db,
        rows=list(rows.values()),
        channel_layer="redis" if target.redis_url else "in-memory",
        version=version,
    )


def run_one(db: str, args) -> DbResult:
    with torn_down(Target(db, args.redis_url if args.redis else None), db) as target:
        target.setup()
        if not args.worker:
            return measure(target, args.events)
        # As `make run` deploys it: the worker beside the server (it fills the search index every second).
        log = open(target.tmpdir / "worker.log", "w")
        worker = subprocess.Popen([sys.executable, "manage.py", "recovery_worker"], cwd=target.root, env=target.env, stdout=log, stderr=log)
        try:
            result = measure(target, args.events)
            print(f"search index caught up {index_lag():.1f} s after the last append (the worker's)")
            return result
        finally:
            worker.terminate()
            worker.wait(timeout=30)


def index_lag() -> float:
    """Seconds until no session has events the search index does not hold (0 for a tree without the field)."""
    from django.db.models import F

    from sessions_app.models import Session

    if not any(field.name == "search_indexed_seq" for field in Session._meta.fields):
        return 0.0
    started = time.perf_counter()
    while Session.objects.filter(search_indexed_seq__lt=F("event_count")).exists():
        if time.perf_counter() - started > 120:
            raise RuntimeError("the worker did not catch the search index up within 120 s")
        time.sleep(0.05)
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--events", type=int, default=40000,
        help="events appended by API(1000) and by raw bulk_create each (API batch 100 gets N/2, batch 1 N/100)",
    )
    parser.add_argument("--redis", action="store_true", help="run the server with the Redis channel layer (REDIS_URL)")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help="run `manage.py recovery_worker` beside the server, as `make run` does")
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # Let SIGTERM unwind through the finally blocks (stop daphne, drop the database).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if not args.json_out:  # the top-level invocation
        import django

        print(
            f"Turnlog ingest benchmark: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
            f"Django {django.get_version()}, {args.events:,} events per API(1000)/raw series"
        )

    if args.db != "both":
        t0 = time.perf_counter()
        result = run_one(args.db, args)
        print_table(result)
        print(f"({args.db} took {time.perf_counter() - t0:.0f} s)")
        if args.json_out:
            Path(args.json_out).write_text(
                json.dumps({"db": result.db, "checks": result.checks(), "ceilings": result.ceilings(), "rows": [asdict(r) | {"rate": r.rate} for r in result.rows]})
            )
        return 0 if result.passed else 1

    # Each database in its own process: Django's settings read DATABASE_URL once.
    forwarded = ["--events", str(args.events), *(["--redis", "--redis-url", args.redis_url] if args.redis else []), *(["--worker"] if args.worker else [])]
    results = run_children(str(Path(__file__).resolve()), ["sqlite", "postgres"], forwarded)
    failed = any(rc != 0 for _, _, rc in results)
    print("\n== summary: figure, target, verdict ==")
    for db, data, rc in results:
        if data is None:
            print(f"{db:<9} error (exit status {rc})")
            continue
        for what, figure, target, met in data["checks"]:
            shown = f"{figure:.2f}" if figure < 10 else f"{figure:,.0f}"
            print(f"{db:<9} {what:<34} {shown:>8}  target {target:<8} {'met' if met else 'MISSES'}")
        for what, figure in data["ceilings"]:
            print(f"{db:<9} {'(ceiling) ' + what:<44} {figure:>8,.0f} events/s")
    if failed:
        print("FAILED: a target is missed (or a run failed) on at least one database.")
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
