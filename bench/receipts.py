"""Receipts benchmark: the worker re-reading stored calls' receipts after a tool policy gains a pointer.

For each database (a fresh SQLite file, and/or a fresh PostgreSQL database) this script:

1. creates and migrates the database;
2. stores `--calls` calls through services.append_events (sessions of 1,000 calls, each an
   assistant message asking for `charge_card`, then its tool_result holding a JSON object
   with the charge's id), before any policy names a pointer: no call has a receipt;
3. adds the policy `charge_*` with the pointer `/id`, asks for a sweep
   (services.receipts.sweep_for_policy_change) and times the worker working through it
   (worker.sweep_receipts, batches of TURNLOG_RECEIPT_SWEEP_BATCH), then checks every call
   holds its receipt;
4. times, in the same run, the limit the database sets for the same work: the same rows
   read in id order, their result events read per session (`seq IN (...)`), and the same
   column written by one UPDATE ... FROM (VALUES ...) per batch, in plain SQL with no
   policy, pointer or JSON reading, and prints the sweep's rate beside it.

Target: at least 5,000 calls a second. Results: docs/performance.md.

    .venv/bin/python bench/receipts.py [--db sqlite|postgres|both] [--calls N]
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from _common import Target, db_version, machine_line, run_children, setup_django, torn_down

TARGET_PER_SECOND = 5000.0
PER_SESSION = 1000


def build(calls: int) -> float:
    from sessions_app import services
    from sessions_app.log import events as log_events

    t0 = time.perf_counter()
    for s in range(0, calls, PER_SESSION):
        sid = f"s{s // PER_SESSION:05}"
        services.create_session(session_id=sid, agent_name="billing-bot")
        events = []
        for n in range(s, min(s + PER_SESSION, calls)):
            cid = f"c{n}"
            content = json.dumps({"id": f"ch_{n:08}", "amount": 1200 + n % 97, "currency": "eur", "status": "succeeded"})
            events.append({"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": cid, "name": "charge_card", "arguments": {"cents": n}}]}})
            events.append({"type": "tool_result", "data": {"tool_call_id": cid, "content": content}})
        for start in range(0, len(events), 1000):
            services.append_events(session_id=sid, events=log_events.validate_batch(events[start : start + 1000]))
    return time.perf_counter() - t0


def limit_seconds(batch: int) -> float:
    """The same rows and events read and the same column written by plain SQL, batch by batch: the limit."""
    from django.db import connection, transaction

    from sessions_app.models import Event, LedgerCall

    calls, events = LedgerCall._meta.db_table, Event._meta.db_table
    t0 = time.perf_counter()
    after = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SELECT id, session_id, real_seq FROM {calls} WHERE id > %s ORDER BY id LIMIT %s", [after, batch])
            rows = cursor.fetchall()
            if not rows:
                break
            by_session: dict[str, list[int]] = {}
            for _, session_id, seq in rows:
                by_session.setdefault(session_id, []).append(seq)
            for session_id, seqs in by_session.items():
                cursor.execute(f"SELECT data FROM {events} WHERE session_id = %s AND seq IN ({', '.join(['%s'] * len(seqs))})", [session_id, *seqs])
                cursor.fetchall()
            values = ", ".join(["(%s, %s)"] * len(rows))
            params = [value for row in rows for value in (row[0], "x")]
            cursor.execute(f"UPDATE {calls} SET receipt = v.column2 FROM (VALUES {values}) AS v WHERE {calls}.id = v.column1", params)
            after = rows[-1][0]
    return time.perf_counter() - t0


def measure(target: Target, calls: int) -> dict:
    setup_django(target)
    from django.conf import settings
    from django.db import connection

    from sessions_app import worker
    from sessions_app.models import LedgerCall, ReceiptSweep, ToolPolicy
    from sessions_app.services import receipts

    built = build(calls)
    assert not LedgerCall.objects.filter(receipt__isnull=False).exists()
    ToolPolicy.objects.create(pattern="charge_*", side_effect="external_effect", receipt_pointer="/id")
    receipts.sweep_for_policy_change(project_id=None, pattern="charge_*")
    t0 = time.perf_counter()
    read = worker.sweep_receipts(batches=None)
    sweep = time.perf_counter() - t0
    assert read == calls, (read, calls)
    assert not ReceiptSweep.objects.exists()
    assert LedgerCall.objects.filter(receipt__startswith="ch_").count() == calls
    LedgerCall.objects.update(receipt=None)
    floor = limit_seconds(settings.TURNLOG_RECEIPT_SWEEP_BATCH)
    version = db_version()
    connection.close()
    return {"db": target.db, "version": version, "calls": calls, "build_seconds": built, "sweep_seconds": sweep, "floor_seconds": floor,
            "batch": settings.TURNLOG_RECEIPT_SWEEP_BATCH}  # fmt: skip


def print_result(r: dict) -> None:
    rate, floor_rate = r["calls"] / r["sweep_seconds"], r["calls"] / r["floor_seconds"]
    print(f"\n== {r['db']}: {r['version']}; {r['calls']:,} calls stored in {r['build_seconds']:.1f} s; batches of {r['batch']} ==")
    print(f"sweep:                       {r['sweep_seconds']:8.2f} s  {rate:10,.0f} calls/s")
    print(f"limit (plain SQL, same I/O): {r['floor_seconds']:8.2f} s  {floor_rate:10,.0f} calls/s  (the sweep at {rate / floor_rate:.2f}x of it)")
    print(f"{rate:,.0f} calls/s ({'meets' if rate >= TARGET_PER_SECOND else 'MISSES'} the {TARGET_PER_SECOND:,.0f} calls/s target)")


def passed(r: dict) -> bool:
    return r["calls"] / r["sweep_seconds"] >= TARGET_PER_SECOND


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.db != "both":
        started = time.perf_counter()
        with torn_down(Target(args.db, None), args.db) as target:
            target.setup(servers=0)
            result = measure(target, args.calls)
        print_result(result)
        print(f"({args.db} took {time.perf_counter() - started:.0f} s)")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result))
        return 0 if passed(result) else 1
    print(machine_line("Turnlog receipts benchmark"))
    results = run_children(str(Path(__file__).resolve()), ["sqlite", "postgres"], ["--calls", str(args.calls)])
    failed = any(rc != 0 for _, _, rc in results)
    if failed:
        print(f"FAILED: the {TARGET_PER_SECOND:,.0f} calls/s target is not met (or a run failed) on at least one database.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
