"""CPU per append in process, for the source tree in the current directory: `services.append_events` on a
fresh database, batches of 1000 / 100 / 1 (24, 150 and 2,400 of them, `make_events`), the median CPU time
per append over 12 groups after a sixth of warm-up. CPU time of this process and, on PostgreSQL, of its
backend (from /proc), not wall time: on a shared machine wall time moved by half between neighbouring runs.
Prints one JSON line {batch: ms}. No target: an A/B tool (docs/performance.md, *Measuring tools*);
run it from each tree in turn, the script from this one:

    (cd /tmp/before && .venv/bin/python $OLDPWD/bench/append_inprocess.py sqlite|postgres)
    .venv/bin/python bench/append_inprocess.py sqlite|postgres
"""
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime

sys.path.insert(0, "bench")  # the current tree's bench/_common.py
from _common import Target, batches, make_events, setup_django  # noqa: E402
TICK = os.sysconf("SC_CLK_TCK")
db = sys.argv[1]
t = Target(db, None)
try:
    t.setup(servers=0); setup_django(t)
    from django.db import connection
    from sessions_app import services
    from sessions_app.log import events as log_events
    connection.ensure_connection()
    backend = None
    if connection.vendor == "postgresql":
        with connection.cursor() as c:
            c.execute("SELECT pg_backend_pid()"); backend = c.fetchone()[0]
    def backend_cpu():
        if backend is None: return 0.0
        f = open(f"/proc/{backend}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK
    out = {}
    for size, n, sid in ((1000, 24, "k"), (100, 150, "h"), (1, 2400, "o")):
        evs = make_events(size * n, seed=size, start=datetime(2026, 1, 1, tzinfo=UTC))
        chunks = [log_events.validate_batch(c) for c in batches(evs, size)]
        services.create_session(session_id=sid)
        for c in chunks[: n // 6]: services.append_events(session_id=sid, events=c)  # warm-up
        rest = chunks[n // 6:]
        groups = []
        g = max(1, len(rest) // 12)
        for i in range(0, len(rest) - g + 1, g):
            c0, b0 = time.process_time(), backend_cpu()
            for c in rest[i:i + g]: services.append_events(session_id=sid, events=c)
            groups.append((time.process_time() - c0 + backend_cpu() - b0) / g)
        out[size] = statistics.median(groups) * 1e3
    print(json.dumps(out))
finally:
    t.teardown()
