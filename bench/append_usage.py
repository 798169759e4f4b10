"""Append throughput with usage sums on, against a tree before them, in the same run (limit: a ratio >= 0.90).

The same workload on each tree: `make_events`' runs with usage on both assistant messages (2 events in 11: a
model call with a tool call, then its answer), the models taking turns among one the bundled prices know with
a cache (gpt-4o), another (claude-sonnet-4-5) and one no price knows (priced as "partly priced"). Each tree is
run in a child process of its own (its own fresh database, migrated by its own manage.py, its own modules on
sys.path), the trees taking turns (ABBA...), each child reporting the median CPU per append of
`services.append_events` (this process's and, on PostgreSQL, its backend's, from /proc) over 12 groups after a
sixth of warm-up, for batches of 100 and of 1 event. The ratio is before / after CPU per append: the after tree's
throughput as a share of the before tree's.

    git worktree add /tmp/turnlog-before fe24864
    .venv/bin/python bench/append_usage.py /tmp/turnlog-before . [--db sqlite|postgres] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Target, batches, make_events  # noqa: E402

LIMIT = 0.90
TICK = os.sysconf("SC_CLK_TCK")
MODELS = ("gpt-4o", "claude-sonnet-4-5", "bench-model-1")
SIZES = ((100, 72), (1, 1200))  # batch size, appends


def with_usage(events: list[dict]) -> list[dict]:
    """Usage on every assistant message, the models taking turns (gpt-4o's with cached input tokens)."""
    n = 0
    for event in events:
        if event["type"] == "assistant_message":
            model = MODELS[n % len(MODELS)]
            usage = {"input_tokens": 1200 + n % 800, "output_tokens": 40 + n % 300}
            if model == "gpt-4o":
                usage["input_tokens_details"] = {"cached_tokens": 1024}
            event["data"]["metadata"] = {"model": model, "usage": usage}
            n += 1
    return events


def cpu_clock(connection) -> Callable[[], float]:
    """A clock of CPU seconds: this process's and, on PostgreSQL, its connection's backend's (from /proc)."""
    connection.ensure_connection()
    backend = None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]

    def cpu() -> float:
        mine = time.process_time()
        if backend is None:
            return mine
        fields = Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()
        return mine + (int(fields[11]) + int(fields[12])) / TICK

    return cpu


def child(db: str) -> None:
    """In a tree's own directory: its modules, its database; print {batch: ms of CPU per append}."""
    tree = Path.cwd()
    sys.path.insert(0, str(tree))
    target = Target(db, None, prefix="turnlog-usage", root=tree)
    try:
        target.setup(servers=0)
        os.environ.update({"DATABASE_URL": target.url, "DJANGO_SETTINGS_MODULE": "dashboard.settings"})
        os.environ.pop("REDIS_URL", None)
        import django

        django.setup()
        import sessions_app
        from django.db import connection

        from sessions_app import services
        from sessions_app.log import events as log_events

        assert Path(sessions_app.__file__).resolve().is_relative_to(tree.resolve()), sessions_app.__file__
        cpu = cpu_clock(connection)

        out = {}
        for size, n in SIZES:
            events = with_usage(make_events(size * n, seed=size, start=datetime(2026, 1, 1, tzinfo=UTC)))
            chunks = [log_events.validate_batch(chunk) for chunk in batches(events, size)]
            session_id = f"usage-{size}"
            services.create_session(session_id=session_id, agent_name="bench")
            for chunk in chunks[: n // 6]:
                services.append_events(session_id=session_id, events=chunk)
            rest = chunks[n // 6 :]
            group = max(1, len(rest) // 12)
            groups = []
            for i in range(0, len(rest) - group + 1, group):
                start = cpu()
                for chunk in rest[i : i + group]:
                    services.append_events(session_id=session_id, events=chunk)
                groups.append((cpu() - start) / group)
            out[size] = statistics.median(groups) * 1e3
        print(json.dumps(out))
    finally:
        target.teardown()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.db)
        return 0
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    figures: dict[str, list[dict]] = {"before": [], "after": []}
    print(f"{args.db}, {args.rounds} rounds per tree, {os.cpu_count()} CPUs; ms of CPU per append (batch: ms)")
    for n in range(args.rounds):
        for label in ("before", "after") if n % 2 == 0 else ("after", "before"):
            run = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), args.before, args.after, "--db", args.db, "--child"],
                cwd=trees[label], capture_output=True, text=True,
            )  # fmt: skip
            if run.returncode != 0:
                print(run.stdout, run.stderr, file=sys.stderr)
                return 1
            found = {int(size): ms for size, ms in json.loads(run.stdout.strip().splitlines()[-1]).items()}
            figures[label].append(found)
            print(f"{label:<7} " + "  ".join(f"{size}: {ms:6.3f}" for size, ms in found.items()), flush=True)
    worst = None
    for size, _ in SIZES:
        before = statistics.median(f[size] for f in figures["before"])
        after = statistics.median(f[size] for f in figures["after"])
        ratio = before / after
        worst = ratio if worst is None else min(worst, ratio)
        print(f"batch {size:>4}: before {before:6.3f} ms, after {after:6.3f} ms per append; throughput ratio {ratio:.2f}")
    print(f"worst ratio {worst:.2f} (limit >= {LIMIT:.2f}): {'met' if worst >= LIMIT else 'MISSED'}")
    return 0 if worst >= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
