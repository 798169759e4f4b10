"""Ingest benchmark: events/s appended through the real HTTP API vs raw bulk_create.

For each database (a fresh SQLite file in a temp dir, and/or a fresh PostgreSQL
database) this script:

1. creates the database, runs `manage.py migrate` and `manage.py create_token bench`
   against it (subprocesses with DATABASE_URL set);
2. starts `daphne dashboard.asgi:application` on a free port as a real
   subprocess with the same DATABASE_URL (DJANGO_DEBUG unset);
3. POSTs realistic event batches (user/assistant messages of a few hundred
   bytes, tool_call/tool_result, turn/step events) to
   `POST /api/v1/sessions/{id}/events` over one keep-alive `http.client`
   connection, sequentially, in batches of 1, 100 and 1000 events, each batch
   size into its own session; every answer must be 201 with the right seqs;
4. measures, in this process (django.setup() on the same DATABASE_URL), the raw
   `Event.objects.bulk_create` rate of the same rows (seq, turn_seq, step_seq,
   call_id filled in beforehand) in batches of 1000, one transaction per
   batch, into a separate session: the practical limit of the database.

API(1000) and raw are measured batch by batch in interleaved rounds (shuffled
order per round) so that both see the same table size and machine state. The
target: API(1000) >= 40% of raw on every database measured; the exit status is
1 when it is missed. Results and method: docs/benchmarks.md.

    .venv/bin/python bench/ingest.py [--db sqlite|postgres|both] [--events N] [--redis]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from _common import DEFAULT_REDIS_URL, ROOT, Client, Target, batches, make_events, run_children, torn_down

TARGET_RATIO = 0.40


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
        return self.row("api", 1000).rate / self.row("raw", 1000).rate


def print_table(result: DbResult) -> None:
    print(f"\n== {result.db}: {result.version}, channel layer {result.channel_layer} ==")
    print(f"{'mode':<6}{'batch':>7}{'events':>9}{'seconds':>10}{'events/s':>11}   per batch of 1000: min / median / max events/s")
    for r in result.rows:
        spread = ""
        if len(r.rounds) > 1:
            lo, mid, hi = min(r.rounds), statistics.median(r.rounds), max(r.rounds)
            spread = f"{lo:,.0f} / {mid:,.0f} / {hi:,.0f}"
        print(f"{r.mode:<6}{r.batch:>7}{r.events:>9,}{r.seconds:>10.3f}{r.rate:>11,.0f}   {spread}")
    verdict = "meets" if result.ratio >= TARGET_RATIO else "MISSES"
    print(f"ratio API(1000)/raw = {result.ratio:.2f}  ({verdict} the {TARGET_RATIO:.0%} target)")


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


class RawStream:
    """The same rows written with Event.objects.bulk_create, a transaction per batch."""

    def __init__(self, session_id: str, events: list[dict], batch: int):
        from django.db import connection

        from sessions_app import services
        from sessions_app.log import events as log_events
        from sessions_app.log import structure
        from sessions_app.models import Event

        self.Event = Event
        session = services.create_session(session_id=session_id, agent_name="bench-raw")
        connection.close()  # hold nothing open between rounds (SQLite: no lingering reader)
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

    # Sizes: batch 1 is bound by per-request cost, so it gets fewer events.
    n_single = max(50, n_events // 100)
    n_hundred = max(200, n_events // 200 * 100)
    n_rounds = max(2, n_events // 1000)  # one batch of 1000 each for API and raw per round
    n_big = n_rounds * 1000

    # Warm-up (not timed): every code path, its own sessions.
    warm = make_events(2000, seed=99, start=start)
    ApiStream(client, f"warm-1-{tag}", warm[:5], 1).run(5)
    ApiStream(client, f"warm-100-{tag}", warm[:200], 100).run(2)
    ApiStream(client, f"warm-1000-{tag}", warm, 1000).run(2)
    RawStream(f"warm-raw-{tag}", warm, 1000).run(2)

    rows = {key: Row(*key) for key in [("api", 1), ("api", 100), ("api", 1000), ("raw", 1000)]}

    def record(key, result):
        events, seconds = result
        row = rows[key]
        row.events += events
        row.seconds += seconds
        row.rounds.append(events / seconds)

    s1 = ApiStream(client, f"bench-1-{tag}", make_events(n_single, seed=1, start=start), 1)
    record(("api", 1), s1.run(len(s1.bodies)))
    s100 = ApiStream(client, f"bench-100-{tag}", make_events(n_hundred, seed=2, start=start), 100)
    record(("api", 100), s100.run(len(s100.bodies)))

    # API(1000) and raw interleaved batch by batch, in a shuffled order per round, so that both
    # see the same table size and machine state, and WAL checkpoints (SQLite) or background
    # writes land on either at random instead of always on the same one.
    big = make_events(n_big, seed=3, start=start)
    s1000 = ApiStream(client, f"bench-1000-{tag}", big, 1000)
    raw = RawStream(f"bench-raw-{tag}", big, 1000)
    order = random.Random(7)
    for _ in range(n_rounds):
        pair = [("raw", raw), ("api", s1000)]
        order.shuffle(pair)
        for mode, stream in pair:
            record((mode, 1000), stream.run(1))

    for stream in (s1, s100, s1000):
        stream.verify()
    client.conn.close()
    raw_count = raw.Event.objects.filter(session_id=f"bench-raw-{tag}").count()
    if raw_count != n_big:
        raise RuntimeError(f"raw session holds {raw_count} events, expected {n_big}")

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
        return measure(target, args.events)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument(
        "--events", type=int, default=40000,
        help="events appended by API(1000) and by raw bulk_create each (API batch 100 gets N/2, batch 1 N/100)",
    )
    parser.add_argument("--redis", action="store_true", help="run the server with the Redis channel layer (REDIS_URL)")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL, help=argparse.SUPPRESS)
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
                json.dumps({"db": result.db, "ratio": result.ratio, "rows": [asdict(r) | {"rate": r.rate} for r in result.rows]})
            )
        return 0 if result.ratio >= TARGET_RATIO else 1

    # Each database in its own process: Django's settings read DATABASE_URL once.
    forwarded = ["--events", str(args.events), *(["--redis", "--redis-url", args.redis_url] if args.redis else [])]
    results = run_children(str(Path(__file__).resolve()), ["sqlite", "postgres"], forwarded)
    summary = [(db, data["ratio"] if data else None) for db, data, _ in results]
    failed = any(rc != 0 for _, _, rc in results)
    print("\n== summary: API(1000) / raw bulk_create, target >= 40% ==")
    for db, ratio in summary:
        shown = "error" if ratio is None else f"{ratio:.2f} {'ok' if ratio >= TARGET_RATIO else 'BELOW TARGET'}"
        print(f"{db:<9} {shown}")
    if failed:
        print("FAILED: the 40% target is not met (or a run failed) on at least one database.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
