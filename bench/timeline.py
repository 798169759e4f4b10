"""Timeline benchmark: the Timeline tab of a 100,000-event session, rendered through the Django test client.

For each database (a fresh SQLite file in a temp dir; and a fresh PostgreSQL database when DATABASE_URL is
set, or with --db postgres|both) this script builds, in this process, one session of N events (default
100,000) with services.append_events in batches of 1000: closed turns of six steps each, every step a model
call (with usage) asking for two tool calls run in parallel, then a last turn left open. It then times
`GET /sessions/{id}/timeline` (the whole session, drawn turn by turn) and `?turn=` (its last turn alone), and the
zoom into a second session's one open turn of 10,000 events (each step and call drawn or aggregated), --runs times
each after two warm-up rounds (on PostgreSQL after an ANALYZE), as a logged-in member, and prints the medians
against the limit: under 1 s. The exit status is 1 when it is missed. Results: docs/performance.md.

    .venv/bin/python bench/timeline.py [--db sqlite|postgres|both] [--events N] [--runs N]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import batches, database_arguments, db_version, machine_line, run_children, run_single, setup_django

LIMIT_SECONDS = 1.0
TURN_EVENTS = 10_000  # a second session: one open turn this long, zoomed into
START = datetime(2026, 1, 1, 8, tzinfo=UTC)


def workload(count: int, *, steps: int = 6) -> list[dict]:
    """Closed turns of six two-call steps, then an open one: `count` events, times a few seconds apart, the last a
    minute ago (an open turn runs to now: the drawing spans the log, not the months since a fixed date)."""
    out: list[dict] = []
    clock = START
    times: list[datetime] = []

    def add(type_: str, seconds: float, **data) -> None:
        nonlocal clock
        clock += timedelta(seconds=seconds)
        times.append(clock)
        out.append({"type": type_, "data": data})

    turn = 0
    while len(out) < count:
        turn += 1
        add("user_message", 30, content=f"Task {turn}")
        add("turn_start", 0.1, turn=turn)
        for step in range(1, steps + 1):
            a, b = f"t{turn}s{step}a", f"t{turn}s{step}b"
            add("step_start", 0.1, turn=turn, step=step)
            usage = {"input_tokens": 2000 + step, "output_tokens": 120, "input_tokens_details": {"cached_tokens": 1500}}
            add("assistant_message", 2.5, content="", metadata={"model": "gpt-4o", "provider": "openai", "usage": usage},
                tool_calls=[{"id": a, "name": "search", "arguments": {"q": step}}, {"id": b, "name": "fetch_page", "arguments": {"n": step}}])
            add("tool_call", 0.05, id=a, name="search", arguments={"q": step})
            add("tool_call", 0.01, id=b, name="fetch_page", arguments={"n": step})
            add("tool_result", 0.8 + step % 3, tool_call_id=b, content="page")
            add("tool_result", 0.4, tool_call_id=a, content="hits")
            add("step_end", 0.05, turn=turn, step=step, outcome="ok")
        if len(out) + 1 < count:
            add("turn_end", 0.2, turn=turn, steps=steps, reason="complete")
    out, times = out[:count], times[:count]
    shift = datetime.now(UTC) - timedelta(minutes=1) - times[-1]
    for event, moment in zip(out, times, strict=True):
        event["time"] = (moment + shift).isoformat().replace("+00:00", "Z")
    return out


def measure(target, events: int, runs: int) -> dict:
    setup_django(target)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from sessions_app import services
    from sessions_app.log import events as log_events
    from sessions_app.models import Event

    print(db_version())
    started = time.perf_counter()
    services.create_session(session_id="timeline", agent_name="bench")
    for chunk in batches(workload(events), 1000):
        services.append_events(session_id="timeline", events=log_events.validate_batch(chunk))
    built = time.perf_counter() - started
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    services.create_session(session_id="one-turn", agent_name="bench")
    for chunk in batches(workload(TURN_EVENTS, steps=TURN_EVENTS), 1000):  # one open turn of TURN_EVENTS events
        services.append_events(session_id="one-turn", events=log_events.validate_batch(chunk))
    long_turn = Event.objects.get(session_id="one-turn", type="turn_start").seq
    last_turn = Event.objects.filter(session_id="timeline", type="turn_start").order_by("-seq").values_list("seq", flat=True).first()
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))
    pages = {
        "whole session": "/sessions/timeline/timeline",
        "its last turn (?turn=)": f"/sessions/timeline/timeline?turn={last_turn}",
        f"a turn of {TURN_EVENTS:,} events (?turn=)": f"/sessions/one-turn/timeline?turn={long_turn}",
    }
    times: dict[str, list[float]] = {name: [] for name in pages}
    sizes = {}
    for round_ in range(runs + 2):
        for name, path in pages.items():
            t0 = time.perf_counter()
            response = client.get(path)
            elapsed = time.perf_counter() - t0
            assert response.status_code == 200, response.status_code
            sizes[name] = len(response.content)
            if round_ >= 2:
                times[name].append(elapsed)
    return {"db": connection.vendor, "events": events, "built": built, "times": times, "sizes": sizes}


def print_result(result: dict) -> None:
    print(f"\nTimeline of a {result['events']:,}-event session on {result['db']} (built in {result['built']:.0f} s); limit {LIMIT_SECONDS:.0f} s")
    print(f"{'page':<34} {'median ms':>10} {'max ms':>8} {'bytes':>9}")
    for name, values in result["times"].items():
        ok = "ok" if statistics.median(values) < LIMIT_SECONDS else "OVER LIMIT"
        print(f"{name:<34} {statistics.median(values) * 1000:>10.0f} {max(values) * 1000:>8.0f} {result['sizes'][name]:>9,}  {ok}")


def passed(result: dict) -> bool:
    return all(statistics.median(values) < LIMIT_SECONDS for values in result["times"].values())


def main(argv=None) -> int:
    parser = database_arguments(__doc__, events_help="events in the session (default 100,000)", runs=5, runs_help="renders of each page (default 5)")
    parser.set_defaults(db="both" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite")
    args = parser.parse_args(argv)
    if not args.json_out:
        print(machine_line("Turnlog timeline benchmark"))
    if args.db != "both":
        return run_single(args, measure, print_result, passed)
    results = run_children(str(Path(__file__).resolve()), ["sqlite", "postgres"], ["--events", str(args.events), "--runs", str(args.runs)])
    return 1 if any(rc != 0 for _, _, rc in results) else 0


if __name__ == "__main__":
    sys.exit(main())
