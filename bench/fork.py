"""Fork benchmark: `services.fork` of a 100,000-event session, at a boundary near the end and at "last".

For each database (a fresh SQLite file in a temp dir, and/or a fresh PostgreSQL
database) this script:

1. creates the database, runs `manage.py migrate` (a subprocess with
   DATABASE_URL set);
2. builds, in this process (django.setup() on the same DATABASE_URL), one
   session of N events (default 100,000) with `services.append_events` in
   batches of 1000: many closed turns, then a last turn left open (bench/_common.py
   `agent_log`, the same workload as bench/recovery.py);
3. times `services.fork(session_id=..., boundary=B)` `--runs` times (default 5),
   each into a new session, where B is the closed boundary nearest the end:
   the seq just before the open turn's `turn_start` (the `valid_boundaries.before`
   the API would suggest). A fork at a boundary inside the open turn must be
   refused (checked once, not timed);
4. closes the log with `services.recover` (it appends the plan: two synthetic
   tool_results and a turn_end) and times `services.fork(boundary="last")`
   `--runs` times the same way;
   The time of the two INSERT ... SELECT statements of each fork is also
   recorded (django's CaptureQueriesContext), to tell the copy from the checks;
5. verifies every fork: parent and seed_length, event_count, the number of
   stored events and call sightings, and for a sample (first, last and 500
   random seqs) that seq, type, time and data (and the structural columns)
   equal the parent's.

Each fork copies ~100,000 rows, so the events table grows by that much per
run; the table shows every run. Target: the median fork under 2 s, for both
boundaries, on every database measured; the exit status is 1 when it is
missed. Results and method: docs/performance.md.

    .venv/bin/python bench/fork.py [--db sqlite|postgres|both] [--events N] [--runs N]
"""

from __future__ import annotations

import random
import signal
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import Target, agent_log, build_session, database_arguments, db_version, machine_line, run_children, run_single, setup_django

TARGET_SECONDS = 2.0
SAMPLE = 500
COLUMNS = ("seq", "type", "time", "data", "call_id", "turn_seq", "step_seq", "replace_start", "replace_stop")


def verify(parent_id: str, child_id: str, seed_length: int, rng: random.Random) -> None:
    from sessions_app.models import CallSighting, Event, Session

    child = Session.objects.get(pk=child_id)
    assert child.parent_id == parent_id and child.seed_length == seed_length, (child.parent_id, child.seed_length)
    assert child.event_count == seed_length, (child.event_count, seed_length)
    assert not child.turn_stack and not child.interrupted, child.turn_stack
    stored = Event.objects.filter(session_id=child_id).count()
    assert stored == seed_length, f"the fork holds {stored} events, expected {seed_length}"
    sightings = CallSighting.objects.filter(session_id=child_id).count()
    expected = CallSighting.objects.filter(session_id=parent_id, seq__lt=seed_length).count()
    assert sightings == expected, f"the fork holds {sightings} call sightings, expected {expected}"
    seqs = sorted({0, seed_length - 1, *rng.sample(range(seed_length), min(SAMPLE, seed_length))})
    theirs = list(Event.objects.filter(session_id=parent_id, seq__in=seqs).order_by("seq").values_list(*COLUMNS))
    ours = list(Event.objects.filter(session_id=child_id, seq__in=seqs).order_by("seq").values_list(*COLUMNS))
    assert len(ours) == len(seqs) and ours == theirs, "a sampled event of the fork differs from its parent's"


def measure(target: Target, n_events: int, runs: int) -> dict:
    setup_django(target)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from sessions_app import selectors, services
    from sessions_app.log.fork import ForkRefused
    from sessions_app.models import Event

    log = agent_log(n_events, seed=11, start=datetime(2025, 1, 1, tzinfo=UTC))
    parent_id = "bench-fork"
    build_seconds = build_session(parent_id, log.events)
    rng = random.Random(5)

    # Inside the open turn: refused (the seq of the innermost open turn_start), never clipped.
    try:
        services.fork(session_id=parent_id, boundary=n_events - 1)
        raise AssertionError("a fork inside the open turn was not refused")
    except ForkRefused as refused:
        assert refused.code == "open_turn" and refused.fields["seq"] == log.open_turn_seq, refused.fields
        before = refused.fields["valid_boundaries"]["before"]
    assert before == log.open_turn_seq - 1, before

    def series(boundary: object, seed_length: int, label: str) -> list[dict]:
        out = []
        for i in range(runs):
            child_id = f"{parent_id}-{label}-{i}"
            rows_before = Event.objects.count()
            with CaptureQueriesContext(connection) as queries:
                t0 = time.perf_counter()
                services.fork(session_id=parent_id, boundary=boundary, new_session_id=child_id)
                seconds = time.perf_counter() - t0
            copy = sum(float(q["time"]) for q in queries.captured_queries if q["sql"].startswith("INSERT INTO") and " SELECT " in q["sql"])
            verify(parent_id, child_id, seed_length, rng)
            out.append({"seconds": seconds, "copy_seconds": copy, "table_rows": rows_before})
        return out

    near_end = series(before, before + 1, "near-end")

    user = get_user_model().objects.create_user("bench-recoverer")
    repaired = services.recover(session_id=parent_id, user=user)
    count = selectors.get_session(parent_id).event_count
    assert count == n_events + len(repaired.appended) and len(repaired.appended) == 3, count
    last = series("last", count, "last")
    version = db_version()
    connection.close()
    return {
        "db": target.db,
        "version": version,
        "events": n_events,
        "build_seconds": build_seconds,
        "near_end_boundary": before,
        "last_count": count,
        "near_end": near_end,
        "last": last,
    }


def medians(r: dict) -> dict[str, float]:
    return {key: statistics.median(run["seconds"] for run in r[key]) for key in ("near_end", "last")}


def print_result(r: dict) -> None:
    print(f"\n== {r['db']}: {r['version']}; parent session of {r['events']:,} events, last turn open ==")
    print(f"built with services.append_events in batches of 1000 in {r['build_seconds']:.1f} s")
    print(f"{'boundary':<34}{'seed_length':>12}{'median s':>10}{'copy s':>8}   each run (events table rows before it)")
    labels = {
        "near_end": (f"{r['near_end_boundary']} (just before the open turn)", r["near_end_boundary"] + 1),
        "last": ('"last" (after services.recover)', r["last_count"]),
    }
    for key, (label, seed_length) in labels.items():
        runs = ", ".join(f"{run['seconds']:.2f} ({run['table_rows'] / 1000:,.0f}k)" for run in r[key])
        copy = statistics.median(run["copy_seconds"] for run in r[key])
        print(f"{label:<34}{seed_length:>12,}{medians(r)[key]:>10.2f}{copy:>8.2f}   {runs}")
    print("copy s: the two INSERT ... SELECT statements (events, call sightings), median; the rest is fork_point's checks, "
          "creating the session and saving its summary")
    print("every fork verified: parent, seed_length, event_count, events and call sightings counted, "
          f"{SAMPLE} random events + first + last equal to the parent's")
    worst = max(medians(r).values())
    verdict = "meets" if worst < TARGET_SECONDS else "MISSES"
    print(f"slowest median {worst:.2f} s ({verdict} the {TARGET_SECONDS:.0f} s target)")


def main(argv=None) -> int:
    parser = database_arguments(__doc__, events_help="events in the parent session (default 100,000)", runs=5, runs_help="forks per boundary (default 5)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if not args.json_out:
        print(machine_line("Turnlog fork benchmark"))

    if args.db != "both":
        return run_single(args, measure, print_result, lambda r: max(medians(r).values()) < TARGET_SECONDS)

    results = run_children(str(Path(__file__).resolve()), ["sqlite", "postgres"], ["--events", str(args.events), "--runs", str(args.runs)])
    print(f"\n== summary: services.fork of {args.events:,} events, target < {TARGET_SECONDS:.0f} s ==")
    failed = False
    for db, data, rc in results:
        if data is None:
            print(f"{db:<9} error")
        else:
            m = medians(data)
            ok = "ok" if max(m.values()) < TARGET_SECONDS else "OVER TARGET"
            print(f"{db:<9} near the end {m['near_end']:.2f} s, \"last\" {m['last']:.2f} s  {ok}")
        failed |= rc != 0
    if failed:
        print(f"FAILED: the {TARGET_SECONDS:.0f} s target is not met (or a run failed) on at least one database.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
