"""The usage sums' own share of an append: CPU per append of `services.append_events` with
`services.usage.track` on, / with it off, in one process on one database, the two taking turns
group by group (ABBA...), so the machine's drift falls on both alike. Same workload as append_usage.py.

    .venv/bin/python bench/append_usage_share.py --db sqlite|postgres --batch 100|1 [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Target, batches, make_events  # noqa: E402
from append_usage import cpu_clock, with_usage  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    target = Target(args.db, None, prefix="turnlog-share", root=root)
    try:
        target.setup(servers=0)
        os.environ.update({"DATABASE_URL": target.url, "DJANGO_SETTINGS_MODULE": "dashboard.settings"})
        os.environ.pop("REDIS_URL", None)
        import django

        django.setup()
        from django.db import connection

        from sessions_app import services
        from sessions_app.log import events as log_events
        from sessions_app.services import event_rows

        cpu = cpu_clock(connection)

        track = event_rows.usage.track
        variants = {"on": track, "off": lambda *args, **kwargs: []}
        per = max(1200 // args.batch, 1) if args.batch > 1 else 300
        events = with_usage(make_events(args.batch * per * 2 * (args.rounds + 1), seed=args.batch, start=datetime(2026, 1, 1, tzinfo=UTC)))
        chunks = iter([log_events.validate_batch(chunk) for chunk in batches(events, args.batch)])
        for name in variants:
            services.create_session(session_id=name, agent_name="bench")
        figures: dict[str, list[float]] = {name: [] for name in variants}
        for n in range(args.rounds + 1):  # the first round warms up
            for name in ("on", "off") if n % 2 == 0 else ("off", "on"):
                event_rows.usage.track = variants[name]
                start = cpu()
                for _ in range(per):
                    services.append_events(session_id=name, events=next(chunks))
                if n:
                    figures[name].append((cpu() - start) / per * 1e3)
        event_rows.usage.track = track
    finally:
        target.teardown()
    on, off = statistics.median(figures["on"]), statistics.median(figures["off"])
    print(f"{args.db}, batches of {args.batch}, {args.rounds} rounds: ms of CPU per append with the sums {on:.3f}, without {off:.3f}")
    print(f"the sums' own share: {on / off - 1:.1%} of an append")
    return 0


if __name__ == "__main__":
    sys.exit(main())
