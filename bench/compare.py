"""Comparison benchmark: the page comparing a fork of a 100,000-event parent with it (sessions/<fork>/compare).

For each database (a fresh SQLite file in a temp dir, and/or a fresh PostgreSQL database) this script:

1. creates and migrates the database; builds one parent of N events (default 100,000) with
   `services.append_events` in batches of 1000 (bench/_common.py `agent_log`: closed turns with
   tool calls, a last turn left open);
2. forks it twice: near the end (the boundary just before the open turn) and early (at the first
   closed boundary past seq 1,000, so the parent's own continuation is ~99,000 events long); each
   fork then writes a continuation of its own (a user message and five turns, each calling
   `charge_card` with the arguments the parent's continuation also used, so calls in both are flagged);
3. also builds a small parent (SMALL events) with the same fork, as the baseline of the same run;
4. GETs the comparison page of each fork `--runs` times (default 5) through Django's test client,
   logged in as a member of the project, and checks the answer: 200, the prefix line, the first
   difference marked and a call flagged as made in both.

Target: the median page under 1 s for both forks of the 100,000-event parent, on every database
measured; the exit status is 1 when it is missed. The ratio to the small parent's page says the
cost follows the continuations, not the prefix. Results and method: docs/performance.md.

    .venv/bin/python bench/compare.py [--db sqlite|postgres|both] [--events N] [--runs N]
"""

from __future__ import annotations

import signal
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import Target, agent_log, build_session, database_arguments, db_version, machine_line, run_children, run_single, setup_django

TARGET_SECONDS = 1.0
SMALL = 200
TURNS = 5


def continuation(turns: int, first_turn: int) -> list[dict]:
    """A fork's own events: a user message, then turns that each charge a card."""
    events = [{"type": "user_message", "data": {"content": "try the payment again", "name": None, "metadata": {}}}]
    for n in range(first_turn, first_turn + turns):
        call = {"id": f"fork_call_{n}", "name": "charge_card", "arguments": {"order": 42}}
        events += [
            {"type": "turn_start", "data": {"turn": n}},
            {"type": "assistant_message", "data": {"content": "", "tool_calls": [call]}},
            {"type": "tool_call", "data": call},
            {"type": "tool_result", "data": {"tool_call_id": call["id"], "content": f"charged ch_{n}"}},
            {"type": "turn_end", "data": {"turn": n, "reason": "complete"}},
        ]
    return events


def early_boundary(parent_id: str, past: int) -> int:
    """The first seq at or past `past` where no turn is open (a fork may end there)."""
    from sessions_app.models import Event

    for seq, turn_seq in Event.objects.filter(session_id=parent_id, seq__gte=past).order_by("seq").values_list("seq", "turn_seq")[:2000]:
        if turn_seq is None:
            return seq
    raise AssertionError("no closed boundary found")


def measure(target: Target, n_events: int, runs: int) -> dict:
    setup_django(target)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from sessions_app import services
    from sessions_app.log import events as log_events
    from sessions_app.models import Project, Role

    def parent_of(parent_id: str, count: int) -> tuple[float, int]:
        log = agent_log(count, seed=13, start=datetime(2025, 1, 1, tzinfo=UTC))
        seconds = build_session(parent_id, log.events)
        # The parent's own continuation calls charge_card too, with the same arguments.
        services.recover(session_id=parent_id, user=None)
        services.append_events(session_id=parent_id, events=log_events.validate_batch(continuation(1, 10_000)[1:]))
        return seconds, log.open_turn_seq - 1

    def fork_of(parent_id: str, boundary: int, fork_id: str) -> None:
        services.fork(session_id=parent_id, boundary=boundary, new_session_id=fork_id)
        services.append_events(session_id=fork_id, events=log_events.validate_batch(continuation(TURNS, 20_000)))

    build_seconds, near_end = parent_of("bench-parent", n_events)
    fork_of("bench-parent", near_end, "bench-near-end")
    fork_of("bench-parent", early_boundary("bench-parent", 1000), "bench-early")
    _, small_near_end = parent_of("bench-small", SMALL)
    fork_of("bench-small", small_near_end, "bench-small-fork")

    user = get_user_model().objects.create_user("bench-viewer")
    services.set_membership(project=Project.default(), user=user, role=Role.MEMBER)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)

    def page_seconds(fork_id: str, *, flagged: bool = True) -> list[float]:
        out = []
        for i in range(runs + 1):
            t0 = time.perf_counter()
            response = client.get(f"/sessions/{fork_id}/compare")
            seconds = time.perf_counter() - t0
            page = response.content.decode()
            assert response.status_code == 200, (response.status_code, page[:500])
            assert "are the same in both" in page and 'id="first-difference"' in page, page[:2000]
            # Early, the parent's ~99k events hold more calls than are listed: its charge_card is past them.
            assert ("charge_card ran in the parent and again in the fork" in page) == flagged
            assert flagged or "Only the first calls of each continuation are listed" in page
            if i:  # the first is a warm-up
                out.append(seconds)
        return out

    result = {
        "db": target.db,
        "version": db_version(),
        "events": n_events,
        "build_seconds": build_seconds,
        "near_end": page_seconds("bench-near-end"),
        "early": page_seconds("bench-early", flagged=False),
        "small": page_seconds("bench-small-fork"),
    }
    connection.close()
    return result


def medians(r: dict) -> dict[str, float]:
    return {key: statistics.median(r[key]) for key in ("near_end", "early", "small")}


def passed(r: dict) -> bool:
    m = medians(r)
    return max(m["near_end"], m["early"]) < TARGET_SECONDS


def print_result(r: dict) -> None:
    m = medians(r)
    print(f"\n== {r['db']}: {r['version']}; parent of {r['events']:,} events (built in {r['build_seconds']:.1f} s) ==")
    print(f"{'fork':<48}{'median ms':>10}   each run, ms")
    labels = {
        "near_end": "near the end (short continuations)",
        "early": "early, past seq 1,000 (parent continues ~99k)",
        "small": f"of a {SMALL}-event parent (baseline)",
    }
    for key, label in labels.items():
        print(f"{label:<48}{m[key] * 1000:>10.0f}   {', '.join(f'{s * 1000:.0f}' for s in r[key])}")
    print(f"ratio to the small parent's page: near the end {m['near_end'] / m['small']:.2f}, early {m['early'] / m['small']:.2f}")
    worst = max(m["near_end"], m["early"])
    print(f"slowest median {worst * 1000:.0f} ms ({'meets' if worst < TARGET_SECONDS else 'MISSES'} the {TARGET_SECONDS * 1000:.0f} ms target)")


def main(argv=None) -> int:
    parser = database_arguments(__doc__, events_help="events in the parent session (default 100,000)", runs=5, runs_help="pages per fork (default 5)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not args.json_out:
        print(machine_line("Turnlog comparison benchmark"))
    if args.db != "both":
        return run_single(args, measure, print_result, passed)
    results = run_children(str(Path(__file__).resolve()), ["sqlite", "postgres"], ["--events", str(args.events), "--runs", str(args.runs)])
    print(f"\n== summary: the comparison page of a fork of {args.events:,} events, target < {TARGET_SECONDS * 1000:.0f} ms ==")
    failed = False
    for db, data, rc in results:
        if data is None:
            print(f"{db:<9} error")
        else:
            m = medians(data)
            print(f"{db:<9} near the end {m['near_end'] * 1000:.0f} ms, early {m['early'] * 1000:.0f} ms, "
                  f"baseline {m['small'] * 1000:.0f} ms  {'ok' if passed(data) else 'OVER TARGET'}")  # fmt: skip
        failed |= rc != 0
    if failed:
        print(f"FAILED: the {TARGET_SECONDS:.0f} s target is not met (or a run failed) on at least one database.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
