"""Recovery-plan benchmark: server time of the plan of a 100,000-event session whose last turn is open.

For each database (a fresh SQLite file in a temp dir, and/or a fresh PostgreSQL
database) this script:

1. creates the database, runs `manage.py migrate` and `manage.py create_token
   bench` against it (subprocesses with DATABASE_URL set);
2. builds, in this process (django.setup() on the same DATABASE_URL), one
   session of N events (default 100,000) with `services.append_events` in
   batches of 1000: many closed turns of 1-3 steps with parallel tool calls,
   `tool_call` events for most steps and their results, then a last turn left
   open in its second step owing two calls (bench/_common.py `agent_log`);
3. checks that `selectors.recovery_plan(session)` equals the naive
   `sessions_app.log.recovery.plan(selectors.session_log(session))` (same
   open turns, repairs with their rules and evidence, warnings, digest) and
   that it owes exactly the calls the workload left open;
4. times, each after warm-up, median of `--runs` (default 20):
   - the selector alone, `selectors.recovery_plan(session)` (the target);
   - what the view does, `get_session` + `recovery_plan` + `plan_to_wire`;
   - `GET /api/v1/sessions/{id}/recovery-plan` in-process through
     django.test.Client with the bearer token (the whole Django/ninja stack);
   - the same request to a real `daphne` subprocess over one keep-alive
     connection (the client's wall clock);
   - for contrast, the naive plan over the whole log (load + scan), fewer runs;
   - the selector again after an explicit `ANALYZE` (planner statistics: the
     project never runs it; PostgreSQL's autovacuum does, on its own schedule).

Target: the selector under 50 ms (median) on every database measured; the exit
status is 1 when it is missed. Results and method: docs/performance.md.

    .venv/bin/python bench/recovery.py [--db sqlite|postgres|both] [--events N] [--runs N]
"""

from __future__ import annotations

import json
import signal
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

from _common import Client, Target, agent_log, build_session, database_arguments, db_version, machine_line, run_children, run_single, setup_django, spread_ms, timed

TARGET_MS = 50.0


def measure(target: Target, n_events: int, runs: int) -> dict:
    setup_django(target)
    from django.db import connection
    from django.test import Client as DjangoClient
    from django.test.utils import CaptureQueriesContext

    from sessions_app import selectors
    from sessions_app.api.recovery import plan_to_wire
    from sessions_app.log import recovery

    log = agent_log(n_events, seed=11, start=datetime(2025, 1, 1, tzinfo=UTC))
    session_id = "bench-recovery"
    build_seconds = build_session(session_id, log.events)
    session = selectors.get_session(session_id)
    assert session.event_count == n_events, session.event_count
    assert session.open_turns == [log.open_turn_seq], session.open_turns

    # Correctness first: the indexed selector and the naive scan agree.
    fast = selectors.recovery_plan(session)
    naive = recovery.plan(selectors.session_log(session))
    if fast != naive or fast.digest(n_events) != naive.digest(n_events):
        raise AssertionError(f"the plans differ:\nselector: {fast}\nnaive:    {naive}")
    owed = [(r.call.id, r.call.rule) for r in fast.repairs if r.call is not None]
    if owed != [(log.owed[0], 1), (log.owed[1], 2)] or fast.repairs[-1].type != "turn_end":
        raise AssertionError(f"unexpected plan for the workload: {owed} / {[r.type for r in fast.repairs]}")

    def view_work():
        s = selectors.get_session(session_id)
        return plan_to_wire(selectors.recovery_plan(s), s.event_count)

    path = f"/api/v1/sessions/{session_id}/recovery-plan"
    django_client = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {target.token}")

    def in_process():
        response = django_client.get(path)
        assert response.status_code == 200, response.content[:300]
        return response

    wire = in_process().json()
    assert wire["digest"] == fast.digest(n_events) and len(wire["repairs"]) == len(fast.repairs), wire

    with CaptureQueriesContext(connection) as queries:
        selectors.recovery_plan(session)
    query_count = len(queries.captured_queries)

    selector = timed(lambda: selectors.recovery_plan(session), runs=runs, warmup=3)
    view = timed(view_work, runs=runs, warmup=2)
    http_in_process = timed(in_process, runs=runs, warmup=2)

    # Per-query times of the selector (ms, median of 5 captured runs), for the report.
    per_query: list[list[float]] = []
    for _ in range(5):
        with CaptureQueriesContext(connection) as queries:
            selectors.recovery_plan(session)
        per_query.append([float(q["time"]) * 1000 for q in queries.captured_queries])
    query_ms = [statistics.median(col) for col in zip(*per_query)]
    query_sql = [q["sql"][:160] for q in queries.captured_queries]

    def naive_plan():
        return recovery.plan(selectors.session_log(session))

    naive_runs = max(3, runs // 4)
    naive_total = timed(naive_plan, runs=naive_runs, warmup=1)
    events = selectors.session_log(session)
    naive_load = timed(lambda: selectors.session_log(session), runs=naive_runs, warmup=0)
    naive_scan = timed(lambda: recovery.plan(events), runs=naive_runs, warmup=0)

    # The same selector once the database has planner statistics. The project never runs
    # ANALYZE; PostgreSQL's autovacuum does it on its own schedule, SQLite never does.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    analyzed = timed(lambda: selectors.recovery_plan(session), runs=runs, warmup=3)
    version = db_version()
    connection.close()

    # The same request through a real daphne (started now: it idles during the in-process part).
    server = target.start_server()
    client = Client(server.port, target.token)

    def over_http():
        status, body = client.get(path)
        assert status == 200, body[:300]
        return body

    assert json.loads(over_http())["digest"] == wire["digest"]
    daphne = timed(over_http, runs=runs, warmup=2)
    client.conn.close()

    return {
        "db": target.db,
        "version": version,
        "events": n_events,
        "build_seconds": build_seconds,
        "open_turn_seq": log.open_turn_seq,
        "repairs": [r.type for r in fast.repairs],
        "query_count": query_count,
        "query_ms": query_ms,
        "query_sql": query_sql,
        "selector": selector,
        "selector_analyzed": analyzed,
        "view": view,
        "http_in_process": http_in_process,
        "http_daphne": daphne,
        "naive_total": naive_total,
        "naive_load": naive_load,
        "naive_scan": naive_scan,
    }


def print_result(r: dict) -> None:
    median_ms = statistics.median(r["selector"]) * 1000
    print(f"\n== {r['db']}: {r['version']}; session of {r['events']:,} events, last turn open at seq {r['open_turn_seq']} ==")
    print(f"built with services.append_events in batches of 1000 in {r['build_seconds']:.1f} s")
    print(f"plan: {', '.join(r['repairs'])} (equal to the naive plan over the whole log, digest included)")
    print(f"{'what':<58}{'median ms':>10}  (min–max, n)")
    rows = [
        ("selectors.recovery_plan(session)  [target]", r["selector"]),
        ("get_session + recovery_plan + plan_to_wire (the view)", r["view"]),
        ("GET .../recovery-plan, in-process django.test.Client", r["http_in_process"]),
        ("GET .../recovery-plan, real daphne, keep-alive client", r["http_daphne"]),
        ("the selector again, after an explicit ANALYZE", r["selector_analyzed"]),
        ("naive: recovery.plan(session_log(session))", r["naive_total"]),
        (f"  of which session_log (load {r['events']:,} events)", r["naive_load"]),
        ("  of which recovery.plan (the scan)", r["naive_scan"]),
    ]
    for label, values in rows:
        print(f"{label:<58}{spread_ms(values)}")
    print(f"selector queries: {r['query_count']}; median ms each: " + ", ".join(f"{t:.1f}" for t in r["query_ms"]))
    verdict = "meets" if median_ms < TARGET_MS else "MISSES"
    print(f"selector median {median_ms:.1f} ms ({verdict} the {TARGET_MS:.0f} ms target)")


def main(argv=None) -> int:
    parser = database_arguments(__doc__, events_help="events in the session (default 100,000)", runs=20, runs_help="timed runs per measurement (default 20)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    if not args.json_out:
        print(machine_line("Turnlog recovery-plan benchmark"))

    if args.db != "both":
        return run_single(args, measure, print_result, lambda r: statistics.median(r["selector"]) * 1000 < TARGET_MS)

    results = run_children(str(Path(__file__).resolve()), ["sqlite", "postgres"], ["--events", str(args.events), "--runs", str(args.runs)])
    print(f"\n== summary: selectors.recovery_plan on {args.events:,} events, target < {TARGET_MS:.0f} ms ==")
    failed = False
    for db, data, rc in results:
        if data is None:
            print(f"{db:<9} error")
        else:
            ms = statistics.median(data["selector"]) * 1000
            http = statistics.median(data["http_daphne"]) * 1000
            naive = statistics.median(data["naive_total"]) * 1000
            ok = "ok" if ms < TARGET_MS else "OVER TARGET"
            print(f"{db:<9} selector {ms:6.1f} ms {ok}; HTTP via daphne {http:6.1f} ms; naive {naive:,.0f} ms")
        failed |= rc != 0
    if failed:
        print(f"FAILED: the {TARGET_MS:.0f} ms target is not met (or a run failed) on at least one database.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
