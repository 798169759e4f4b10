"""The search index's cost in an append, in process: `services.append_events` with the index hook on and off.

A fresh database (`sqlite` or `postgres`, the first argument); 40 batches of 1000 events
(bench/_common.py `make_events`) and 4,000 single-event appends, each into sessions of
their own, the hook on and off taking turns (ABBA) so both see the same table sizes and
machine. Prints the median milliseconds per append and the on/off ratio. No target: the
issue's target is end to end (bench/ingest.py against the tree before, docs/benchmarks.md).

    .venv/bin/python bench/search_append.py sqlite|postgres
"""
import statistics
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
    from sessions_app.services import appends, search_index
    from sessions_app.log import events as log_events
    real = appends.index_events
    off = lambda session_id, rows: None
    events = make_events(40_000, seed=1, start=datetime(2026, 1, 1, tzinfo=UTC))
    chunks = [log_events.validate_batch(c) for c in batches(events, 1000)]
    singles = [log_events.validate_batch([e]) for e in events[:4000]]
    services.create_session(session_id="on"); services.create_session(session_id="off")
    services.create_session(session_id="on1"); services.create_session(session_id="off1")
    res = {"on": [], "off": [], "on1": [], "off1": []}
    for i, chunk in enumerate(chunks):
        for mode in (("on", "off") if i % 2 else ("off", "on")):
            appends.index_events = real if mode == "on" else off
            t0 = time.perf_counter(); services.append_events(session_id=mode, events=chunk); res[mode].append(time.perf_counter() - t0)
    for i in range(0, len(singles), 50):
        for mode in (("on1", "off1") if (i // 50) % 2 else ("off1", "on1")):
            appends.index_events = real if mode == "on1" else off
            t0 = time.perf_counter()
            for one in singles[i:i + 50]:
                services.append_events(session_id=mode, events=one)
            res[mode].append((time.perf_counter() - t0) / 50)
    for k, v in res.items():
        print(db, k, f"median {statistics.median(v)*1000:.2f} ms", f"n={len(v)}")
    print(db, "batch 1000 cost", f"{statistics.median(res['on'])/statistics.median(res['off']):.3f}", "single", f"{statistics.median(res['on1'])/statistics.median(res['off1']):.3f}")
finally:
    t.teardown()
