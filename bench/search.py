"""Search benchmark: the first page of `search.search` over 1,000,000 stored events in 10 projects, beside a scan.

For each database (a fresh SQLite file in a temp dir, and/or a fresh PostgreSQL
database) this script:

1. creates the database and runs `manage.py migrate` (a subprocess);
2. builds, in this process, 10 projects of 1,000 sessions of 100 events each
   (bench/_common.py `make_events`: agent runs of a few hundred bytes per
   message, call ids unique per call), in bulk: the events go in with the
   driver's executemany (PostgreSQL: COPY), and their index rows are what
   `search_text.event_searchable` gives each event (the extraction the indexer
   uses) written with explicit event ids in large batches. A
   selective word (`kumquat`) is put into 100 events spread over the
   projects (10 in each); the common word (`refund`) is one of the workload's
   ~100 words (in about a third of the events) and a piece of the tool name
   `issue_refund`;
3. times `search.search(q=..., projects=..., limit=50)` after
   `services.index_pending` (the whole first page as the API answers it: the
   check for pending events, the index's ids, the events' data, forks, snippets) `--runs` times for each
   query, for a caller in one project and for one in all ten; next to it, the
   same query answered by a scan of the events table (SQLite: `data LIKE`,
   PostgreSQL: `data::text ILIKE`, newest first, in the same projects, the
   first 50 ids), timed in the same run (fewer runs: a selective word reads
   every row);
4. measures the index's size against the events' (SQLite: `dbstat`;
   PostgreSQL: `pg_total_relation_size`, table + indexes + TOAST).

Targets: a selective word's first page < 200 ms, a common word's
< 500 ms (median, both callers), and the index at most the events' own size.
The exit status is 1 when one is missed. Append throughput with the index on
is measured by bench/append_cpu.py and bench/ingest.py against the tree
before (docs/performance.md, "Ingest").

    .venv/bin/python bench/search.py [--db sqlite|postgres|both] [--events N] [--runs N]
"""

from __future__ import annotations

import io
import json
import random
import signal
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import (
    database_arguments,
    db_version,
    machine_line,
    make_events,
    run_children,
    run_single,
    setup_django,
    timed,
)

PROJECTS = 10
EVENTS_PER_SESSION = 100
SELECTIVE, COMMON = "kumquat", "refund"
SELECTIVE_PER_PROJECT = 10
TARGET_MS = {SELECTIVE: 200.0, COMMON: 500.0}
TARGET_SIZE_RATIO = 1.0
LIMIT = 50
EVENT_COLUMNS = ("id", "session_id", "seq", "type", "time", "received_at", "data", "call_id")


def build(n_events: int) -> dict:
    """Projects, sessions and events in bulk, their index rows as the append would write them; seconds per phase."""
    from django.db import connection, transaction

    from sessions_app.log import search_text
    from sessions_app.models import Project, Session

    rng = random.Random(27)
    started = time.perf_counter()
    projects = [Project.objects.create(slug=f"p{i}", name=f"Project {i}") for i in range(PROJECTS)]
    n_sessions = n_events // EVENTS_PER_SESSION
    start = datetime(2026, 1, 1, tzinfo=UTC)
    template_runs = [make_events(EVENTS_PER_SESSION, seed=seed, start=start) for seed in range(50)]
    selective = {n for p in range(PROJECTS) for n in rng.sample(range(p, n_sessions, PROJECTS), SELECTIVE_PER_PROJECT)}
    timings = {"generate": 0.0, "events": 0.0, "index": 0.0}
    event_id = 0
    chunk_sessions = 500
    for first in range(0, n_sessions, chunk_sessions):
        t0 = time.perf_counter()
        sessions, rows, index_rows = [], [], []
        for number in range(first, min(first + chunk_sessions, n_sessions)):
            session_id = f"s{number:07d}"
            sessions.append(Session(id=session_id, project=projects[number % PROJECTS], agent_name="bench", event_count=EVENTS_PER_SESSION, search_indexed_seq=EVENTS_PER_SESSION))
            events = template_runs[number % len(template_runs)]
            marked = rng.randrange(1, EVENTS_PER_SESSION, 11) if number in selective else None  # a user message
            for seq, event in enumerate(events):
                data = event["data"]
                if "tool_call_id" in data or "tool_calls" in data or data.get("id"):
                    data = _with_call_ids(data, number)
                if seq == marked:
                    data = {**data, "content": f"{data['content']} {SELECTIVE} basket"}
                event_id += 1
                moment = start + timedelta(seconds=event_id)
                rows.append((event_id, session_id, seq, event["type"], moment, moment, data, _call_id(event["type"], data)))
                found = search_text.event_searchable(event["type"], data)
                if found:
                    index_rows.append((event_id, found.words, found.short))
        t1 = time.perf_counter()
        with transaction.atomic():
            Session.objects.bulk_create(sessions)
            _insert_events(connection, rows)
        t2 = time.perf_counter()
        with transaction.atomic():
            _insert_index(connection, index_rows)
        t3 = time.perf_counter()
        timings["generate"] += t1 - t0
        timings["events"] += t2 - t1
        timings["index"] += t3 - t2
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    timings["total"] = time.perf_counter() - started
    return {"projects": [p.pk for p in projects], "timings": timings, "events": event_id}


def _with_call_ids(data: dict, number: int) -> dict:
    """Call ids unique per session, as agents make them."""
    suffix = f"_{number:07d}"
    if "tool_call_id" in data:
        return {**data, "tool_call_id": data["tool_call_id"] + suffix}
    if "tool_calls" in data:
        return {**data, "tool_calls": [{**call, "id": call["id"] + suffix} for call in data["tool_calls"]]}
    return {**data, "id": data["id"] + suffix}


def _call_id(type_: str, data: dict) -> str | None:
    if type_ == "tool_result":
        return data["tool_call_id"]
    return data["id"] if type_ == "tool_call" else None


def _insert_events(connection, rows) -> None:
    from sessions_app.models import Event

    table = Event._meta.db_table
    if connection.vendor == "sqlite":
        adapt = [(i, s, q, t, m.strftime("%Y-%m-%d %H:%M:%S"), m.strftime("%Y-%m-%d %H:%M:%S"), json.dumps(d), c) for i, s, q, t, m, _, d, c in rows]
        marks = ", ".join(["?"] * len(EVENT_COLUMNS))
        connection.connection.executemany(f"INSERT INTO {table} ({', '.join(EVENT_COLUMNS)}) VALUES ({marks})", adapt)
        return
    buffer = io.StringIO()
    for i, s, q, t, m, r, d, c in rows:
        text = json.dumps(d).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        buffer.write(f"{i}\t{s}\t{q}\t{t}\t{m.isoformat()}\t{r.isoformat()}\t{text}\t{c if c is not None else chr(92) + 'N'}\n")
    with connection.connection.cursor() as cursor:
        with cursor.copy(f"COPY {table} ({', '.join(EVENT_COLUMNS)}) FROM STDIN") as copy:
            copy.write(buffer.getvalue())


def _insert_index(connection, index_rows) -> None:
    """The rows `services.search.index_events` writes (the sessions are created indexed to their length)."""
    raw = connection.connection
    if connection.vendor == "sqlite":
        raw.executemany("INSERT INTO sessions_app_search_words (rowid, words) VALUES (?, ?)", [(i, w) for i, w, _ in index_rows if w])
        raw.executemany("INSERT INTO sessions_app_search_short (rowid, short) VALUES (?, ?)", [(i, s) for i, _, s in index_rows if s])
        return
    from sessions_app.log import search_text

    with raw.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sessions_app_search_event (event_id, words, short)"
            " SELECT i, array_to_tsvector(string_to_array(w, ' ')), s FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS u(i, w, s)",
            [[i for i, _, _ in index_rows], [search_text.lexemes(w) or None for _, w, _ in index_rows], [s or None for _, _, s in index_rows]],
        )


def scan_ids(word: str, projects: list[int]) -> list[int]:
    """The same question answered without the index: newest events whose data holds the word, in the projects."""
    from django.db import connection

    marks = ", ".join(["%s"] * len(projects))
    match = "e.data LIKE %s" if connection.vendor == "sqlite" else "e.data::text ILIKE %s"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.session_id, e.seq FROM sessions_app_event e JOIN sessions_app_session s ON s.id = e.session_id"
            f" WHERE s.project_id IN ({marks}) AND {match} ORDER BY e.id DESC LIMIT %s",
            [*projects, f"%{word}%", LIMIT],
        )
        return [tuple(row) for row in cursor.fetchall()]


def sizes() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
            by_name = dict(cursor.fetchall())
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions_app_event'")
            events_table = by_name.get("sessions_app_event", 0)
            events_indexes = sum(by_name.get(name, 0) for (name,) in cursor.fetchall())
            index = sum(v for k, v in by_name.items() if k.startswith(("sessions_app_search_words_", "sessions_app_search_short_")))
            words = sum(v for k, v in by_name.items() if k.startswith("sessions_app_search_words_"))
            return {"events_table": events_table, "events_with_indexes": events_table + events_indexes, "index": index, "words_index": words}
        cursor.execute(
            "SELECT pg_table_size('sessions_app_event'), pg_total_relation_size('sessions_app_event'),"
            " pg_total_relation_size('sessions_app_search_event'), pg_relation_size('search_event_words_idx')"
        )
        table, total, index, words = cursor.fetchone()
        return {"events_table": table, "events_with_indexes": total, "index": index, "words_index": words}


def measure(target, n_events: int, runs: int) -> dict:
    setup_django(target)
    from django.db import connection

    from sessions_app import services
    from sessions_app.selectors import search

    def first_page(word, scope):  # as the API answers it: what is pending in the projects first (nothing here)
        services.index_pending(projects=scope, wait=True)
        return search.search(q=word, projects=scope, limit=LIMIT)

    built = build(n_events)
    projects = built["projects"]
    callers = {"1 project": projects[:1], "10 projects": projects}
    results = []
    for word in (SELECTIVE, COMMON):
        for caller, scope in callers.items():
            page = first_page(word, scope)
            index_runs = timed(lambda w=word, s=scope: first_page(w, s), runs=runs)
            scan_runs = timed(lambda w=word, s=scope: scan_ids(w, s), runs=3 if word == SELECTIVE else runs, warmup=1)
            scanned = scan_ids(word, scope)
            if word == SELECTIVE:  # the same events, in the same order (the word is in user messages only)
                assert [(hit.session_id, hit.seq) for hit in page.items] == scanned, (page.items[:3], scanned[:3])
            results.append({
                "word": word, "caller": caller, "hits": len(page.items), "scan_hits": len(scanned),
                "index_ms": [s * 1000 for s in index_runs], "scan_ms": [s * 1000 for s in scan_runs],
            })
    measured = sizes()
    version = db_version()
    connection.close()
    return {"db": target.db, "version": version, "events": built["events"], "timings": built["timings"], "results": results, "sizes": measured}


def passed(r: dict) -> bool:
    times_ok = all(statistics.median(row["index_ms"]) < TARGET_MS[row["word"]] for row in r["results"])
    return times_ok and r["sizes"]["index"] <= TARGET_SIZE_RATIO * r["sizes"]["events_table"]


def print_result(r: dict) -> None:
    t = r["timings"]
    print(f"\n== {r['db']}: {r['version']}; {r['events']:,} events in {PROJECTS} projects ==")
    print(f"built in {t['total']:.0f} s (generating {t['generate']:.0f} s, events {t['events']:.0f} s, index rows {t['index']:.0f} s)")
    print(f"{'query':<10}{'caller':<13}{'hits':>5}{'index ms (median, min-max)':>30}{'scan ms (median, min-max)':>30}{'scan/index':>11}  target")
    for row in r["results"]:
        index, scan = row["index_ms"], row["scan_ms"]
        ratio = statistics.median(scan) / statistics.median(index)
        ok = "ok" if statistics.median(index) < TARGET_MS[row["word"]] else "MISSED"
        print(
            f"{row['word']:<10}{row['caller']:<13}{row['hits']:>5}"
            f"{statistics.median(index):>14.1f} ({min(index):.1f}-{max(index):.1f}){'':>3}"
            f"{statistics.median(scan):>14.1f} ({min(scan):.1f}-{max(scan):.1f}){'':>2}{ratio:>10.1f}x  < {TARGET_MS[row['word']]:.0f} ms {ok}"
        )
    s = r["sizes"]
    mb = 1024 * 1024
    print(
        f"index {s['index'] / mb:.1f} MB (words {s['words_index'] / mb:.1f} MB) vs events table {s['events_table'] / mb:.1f} MB"
        f" ({s['index'] / s['events_table']:.2f}x; with the events' own indexes {s['events_with_indexes'] / mb:.1f} MB:"
        f" {s['index'] / s['events_with_indexes']:.2f}x); target <= {TARGET_SIZE_RATIO:.0f}x of the table"
    )


def main(argv=None) -> int:
    parser = database_arguments(__doc__, events_help="events stored (default 1,000,000)", runs=15, runs_help="timed runs per query (default 15)")
    parser.set_defaults(events=1_000_000)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not args.json_out:
        print(machine_line("Turnlog search benchmark"))
    if args.db != "both":
        return run_single(args, measure, print_result, passed)
    results = run_children(str(Path(__file__).resolve()), ["sqlite", "postgres"], ["--events", str(args.events), "--runs", str(args.runs)])
    failed = any(rc != 0 for _, _, rc in results)
    print("FAILED: a target is missed (or a run failed)." if failed else "every target met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
