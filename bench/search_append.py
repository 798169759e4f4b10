"""The search index beside appends, in process: how fast `services.index_pending` (the worker's and every
search's catch-up) indexes what appends stored, against how fast those appends stored it.

A fresh database (`sqlite` or `postgres`, the first argument): 40 batches of 1000 events
(bench/_common.py `make_events`) appended to one session, then indexed in the worker's
transactions; 4,000 single-event appends to another session, then indexed. Wall time, both
sides in the same run on the same database. Prints events/s of each and the ratio
index rate / append rate: above 1, one worker keeps up with appends arriving as fast as
this process stores them. The append throughput target is end to end (bench/ingest.py
against the tree before, docs/performance.md).

    .venv/bin/python bench/search_append.py sqlite|postgres
"""
import sys
import time
from datetime import UTC, datetime

from _common import Target, batches, make_events, setup_django

db = sys.argv[1]
t = Target(db, None)
try:
    t.setup(servers=0)
    setup_django(t)
    from sessions_app import services
    from sessions_app.log import events as log_events

    events = make_events(44_000, seed=1, start=datetime(2026, 1, 1, tzinfo=UTC))
    chunks = [log_events.validate_batch(c) for c in batches(events[:40_000], 1000)]
    singles = [log_events.validate_batch([e]) for e in events[40_000:]]
    services.create_session(session_id="batches")
    services.create_session(session_id="singles")
    for name, appends in (("batch 1000", chunks), ("batch 1", singles)):
        session_id = "batches" if name == "batch 1000" else "singles"
        count = sum(len(c) for c in appends)
        t0 = time.perf_counter()
        for chunk in appends:
            services.append_events(session_id=session_id, events=chunk)
        appended = time.perf_counter() - t0
        t0 = time.perf_counter()
        indexed = services.index_pending(wait=False)
        indexing = time.perf_counter() - t0
        assert indexed == count, (indexed, count)
        print(
            f"{db} {name}: appended {count / appended:,.0f} events/s, indexed {count / indexing:,.0f} events/s,"
            f" index/append {appended / indexing:.2f}"
        )
finally:
    t.teardown()
