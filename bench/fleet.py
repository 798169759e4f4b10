"""Fleet benchmark: the /calls/ page's query over 100,000 sessions and 1,000,000 calls in 10 projects.

For each database (a fresh SQLite file, and/or a fresh PostgreSQL database) this script:

1. creates and migrates the database;
2. inserts directly (bulk; COPY on PostgreSQL) 10 projects of `--sessions / 10` sessions
   each, 10 calls per session: the ledger rows (sessions_app.models.LedgerCall) and the
   assistant_message event that first sighted each call (what the page reads its name and
   arguments from). The mix: most sessions healthy (completed, some error), 3% crashed and
   stalled (their last call owed: the risk the plan gives it), 1% crashed and still running
   with their last call pending for an hour (pending past the stall window), 2% recovered
   (tool_outcome_unknown from a synthetic result), and 0.5% of calls superseded;
3. times, for a caller who is a member of one project, `selectors.fleet_calls` (the page's
   query and the reads that shape its rows), first page of 50:
   - the default filters (tool_outcome_unknown, superseded, pending past the stall window);
   - with filters: state=tool_outcome_unknown, one agent, one tool;
   - with the class filter (class=external_effect through the tool policies);
   and the whole page (GET /calls/ through Django's test client, logged in);
4. times, in the same run, the same filter answered by the database from an index alone:
   the ids of the first 51 rows by one SQL statement on the ledger's indexes (no join, no
   rendering), and prints each query's ratio to it;
5. checks the answers: every listed call is the caller's project's, in the states asked,
   newest first.

Target: the page's query under 100 ms (median) on both databases. Results: docs/performance.md.

    .venv/bin/python bench/fleet.py [--db sqlite|postgres|both] [--sessions N] [--runs N]
"""

from __future__ import annotations

import json
import random
import signal
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import TOOLS, Target, db_version, machine_line, run_children, setup_django, torn_down

TARGET_MS = 100.0
PROJECTS = 10
CALLS_PER_SESSION = 10
CHECK = ("tool_outcome_unknown", "superseded")


def build(n_sessions: int) -> dict:
    """The projects, sessions, calls and sighting events; returns counts and seconds."""
    from django.db import connection, transaction
    from django.utils import timezone

    from sessions_app.models import Event, LedgerCall, Project, Session, ToolPolicy

    rng = random.Random(7)
    now = timezone.now()
    t0 = time.perf_counter()
    projects = [Project.objects.get_or_create(slug=f"p{i}", defaults={"name": f"Project {i}"})[0] for i in range(PROJECTS)]
    ToolPolicy.objects.create(pattern="issue_*", side_effect="external_effect")
    ToolPolicy.objects.create(pattern="send_email", side_effect="external_effect")
    ToolPolicy.objects.create(pattern="search_*", side_effect="read_only")
    per_project = n_sessions // PROJECTS
    sessions, calls, events = [], [], []
    for p, project in enumerate(projects):
        for i in range(per_project):
            sid = f"s{p}-{i:06}"
            agent = f"agent-{rng.randrange(20)}"
            start = now - timedelta(days=30) + timedelta(seconds=rng.uniform(0, 30 * 86400 - 7200))
            kind = rng.random()
            crashed, running, recovered = kind < 0.03, 0.03 <= kind < 0.04, 0.04 <= kind < 0.06
            interrupted = crashed or running
            last_activity = now if running else start + timedelta(minutes=10)
            recovered_at = start + timedelta(minutes=11) if recovered else None
            sessions.append(Session(
                id=sid, project=project, agent_name=agent, created_at=start, last_activity_at=last_activity,
                last_received_at=last_activity, retained_from=max(last_activity, recovered_at or last_activity),
                event_count=CALLS_PER_SESSION, interrupted=interrupted, turn_stack=[0] if interrupted else [], recovered_at=recovered_at,
            ))  # fmt: skip
            for seq in range(CALLS_PER_SESSION):
                tool = rng.choice(TOOLS)
                at = start + timedelta(seconds=seq * 30)
                last = seq == CALLS_PER_SESSION - 1
                row = {
                    "session_id": sid, "project_id": project.pk, "agent_name": agent, "call_id": f"c{seq}", "tool": tool,
                    "arguments_preview": '{"order": %d}' % seq, "seq": seq, "time": at, "sighted_at": at, "turn_seq": 0,
                    "step_seq": None, "turn_open": False, "dispatched": True, "turn_dispatched": True, "step_closed": False,
                    "real_seq": None, "real_error": False, "standin_seq": None, "synthetic_seq": None, "synthetic_risk": "",
                    "patch_seq": None, "settled_state": "completed", "result_seq": seq + 100, "owed_risk": None,
                }  # fmt: skip
                if last and interrupted:
                    row.update(turn_open=True, settled_state=None, result_seq=None, owed_risk="tool_outcome_unknown")
                elif last and recovered:
                    row.update(settled_state="tool_outcome_unknown", synthetic_seq=seq + 100, synthetic_risk="tool_outcome_unknown")
                elif rng.random() < 0.005:
                    row.update(settled_state="superseded")
                elif rng.random() < 0.05:
                    row.update(settled_state="error", real_error=True)
                calls.append(row)
                data = {"content": "", "tool_calls": [{"id": f"c{seq}", "name": tool, "arguments": {"order": seq}}]}
                events.append((sid, seq, "assistant_message", at, at, json.dumps(data), None, 0, None, None, None))
    with transaction.atomic():
        Session.objects.bulk_create(sessions, batch_size=5000)
        _insert(LedgerCall, list(calls[0].keys()), [tuple(c.values()) for c in calls])
        _insert(Event, ["session_id", "seq", "type", "time", "received_at", "data", "call_id", "turn_seq", "step_seq", "replace_start", "replace_stop"], events)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {"sessions": len(sessions), "calls": len(calls), "events": len(events), "build_seconds": time.perf_counter() - t0, "project": projects[0].pk}


def _insert(model, columns: list[str], rows: list[tuple]) -> None:
    from django.db import connection

    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        adapt = connection.ops.adapt_datetimefield_value
        prepared = [tuple(adapt(v) if isinstance(v, datetime) else v for v in row) for row in rows]
        marks = ", ".join(["%s"] * len(columns))
        for i in range(0, len(prepared), 50_000):
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", prepared[i : i + 50_000])


def timed_ms(fn, runs: int) -> list[float]:
    fn()
    fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def measure(target: Target, n_sessions: int, runs: int) -> dict:
    setup_django(target)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from sessions_app import selectors
    from sessions_app.models import Membership, Project, Role
    from sessions_app.selectors import access

    built = build(n_sessions)
    user = get_user_model().objects.create_user("support")
    Membership.objects.create(user=user, project=Project.objects.get(pk=built["project"]), role=Role.VIEWER)
    projects = access.Actor(user=user).project_ids(access.READ)
    assert projects == [built["project"]], projects
    agent, tool = "agent-3", "issue_refund"

    def index_alone(where: str, params: list) -> callable:
        sql = (
            'SELECT "id" FROM "sessions_app_ledgercall" WHERE "project_id" = %s AND ' + where
            + ' ORDER BY "sighted_at" DESC, "id" DESC LIMIT 51'
        )

        def run():
            with connection.cursor() as cursor:
                cursor.execute(sql, [projects[0], *params])
                return cursor.fetchall()

        return run

    cases = {
        "default filters": (
            lambda: selectors.fleet_calls(projects=projects),
            index_alone('"settled_state" IN (%s, %s)', list(CHECK)),
            None,
        ),
        "state=tool_outcome_unknown, agent, tool": (
            lambda: selectors.fleet_calls(projects=projects, states=frozenset({"tool_outcome_unknown"}), agent=agent, tool=tool),
            index_alone('"settled_state" = %s AND "agent_name" = %s AND "tool" = %s', ["tool_outcome_unknown", agent, tool]),
            frozenset({"tool_outcome_unknown"}),
        ),
        "class=external_effect (default states)": (
            lambda: selectors.fleet_calls(projects=projects, classes=frozenset({"external_effect"})),
            index_alone('"settled_state" IN (%s, %s) AND "tool" IN (%s, %s)', [*CHECK, "issue_refund", "send_email"]),
            None,
        ),
    }
    results = {}
    for label, (query, baseline, states) in cases.items():
        page = query()
        assert page.items or states, label  # a narrow filter may match nothing in a small run
        assert all(row.session.project_id == projects[0] for row in page.items), label
        allowed = states or {*CHECK, "pending"}
        assert all(row.call.state in allowed for row in page.items), (label, {row.call.state for row in page.items})
        times = [row.session.id for row in page.items]
        assert len(times) == len(set(zip(times, (r.call.call_id for r in page.items)))), label
        query_ms, base_ms = timed_ms(query, runs), timed_ms(baseline, runs)
        results[label] = {"query_ms": query_ms, "index_ms": base_ms, "rows": len(page.items)}
    client = Client()
    client.force_login(user)
    assert client.get("/calls/").status_code == 200
    results["whole page GET /calls/ (default filters)"] = {"query_ms": timed_ms(lambda: client.get("/calls/"), runs), "index_ms": None, "rows": None}
    version = db_version()
    connection.close()
    return {"db": target.db, "version": version, **built, "cases": results}


def print_result(r: dict) -> None:
    print(f"\n== {r['db']}: {r['version']}; {r['sessions']:,} sessions, {r['calls']:,} calls, {r['events']:,} events in {PROJECTS} projects ==")
    print(f"built (bulk inserts) in {r['build_seconds']:.1f} s; the caller reads one project")
    print(f"{'query (first page of 50)':<44}{'median ms':>10}{'min–max':>16}{'index alone ms':>16}{'ratio':>8}{'rows':>6}")
    for label, c in r["cases"].items():
        q = c["query_ms"]
        base = statistics.median(c["index_ms"]) if c["index_ms"] else None
        ratio = f"{statistics.median(q) / base:.1f}x" if base else "—"
        shown = f"{base:.2f}" if base else "—"
        print(f"{label:<44}{statistics.median(q):>10.1f}{f'{min(q):.1f}–{max(q):.1f}':>16}{shown:>16}{ratio:>8}{c['rows'] or '—':>6}")
    worst = max(statistics.median(c["query_ms"]) for label, c in r["cases"].items() if c["index_ms"])
    print(f"slowest query median {worst:.1f} ms ({'meets' if worst < TARGET_MS else 'MISSES'} the {TARGET_MS:.0f} ms target)")


def passed(r: dict) -> bool:
    return all(statistics.median(c["query_ms"]) < TARGET_MS for c in r["cases"].values() if c["index_ms"])


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.db != "both":
        started = time.perf_counter()
        with torn_down(Target(args.db, None), args.db) as target:
            target.setup(servers=0)
            result = measure(target, args.sessions, args.runs)
        print_result(result)
        print(f"({args.db} took {time.perf_counter() - started:.0f} s)")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result))
        return 0 if passed(result) else 1
    print(machine_line("Turnlog fleet benchmark"))
    results = run_children(str(Path(__file__).resolve()), ["sqlite", "postgres"], ["--sessions", str(args.sessions), "--runs", str(args.runs)])
    failed = any(rc != 0 for _, _, rc in results)
    if failed:
        print(f"FAILED: the {TARGET_MS:.0f} ms target is not met (or a run failed) on at least one database.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
