"""CPU per single-event append, by process, for one or more source trees side by side (an A/B harness).

Totals in events/s move with the machine (its speed has drifted by half
within minutes here), so a change to the append is decided by this instead:
each tree gets its own fresh database and its own `daphne` (run from that
tree), then N clients append one event per request to their own sessions in
rounds of a few seconds, the trees taking turns (ABBA...). Each round reads,
from /proc, the CPU seconds of that tree's daphne, of every PostgreSQL
process (0 on SQLite), of this process (the clients) and of the whole
machine, and divides them by the appends answered. The medians per tree are
printed last. No target: this measures where the CPU goes, bench/ingest.py
holds the targets.

    .venv/bin/python bench/append_cpu.py TREE[@VAR=value...] [TREE...] [--db postgres|sqlite]
        [--clients 8] [--rounds 8] [--seconds 5]

    git worktree add /tmp/before HEAD~1
    .venv/bin/python bench/append_cpu.py /tmp/before . --db postgres
    .venv/bin/python bench/append_cpu.py . .@TURNLOG_DB_THREADS=8   # one tree, two settings
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from _common import Client, Target, make_events

TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int | str) -> float:
    """User + system CPU seconds of one process (0 once it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def postgres_cpu() -> float:
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().startswith("postgres"):
                total += process_cpu(pid)
        except OSError:
            pass
    return total


def machine_cpu() -> float:
    ticks = list(map(int, Path("/proc/stat").read_text().splitlines()[0].split()[1:]))
    return (sum(ticks) - ticks[3] - ticks[4]) / TICKS  # all but idle and iowait


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


@dataclass
class Side:
    """One tree (and its settings) with its own database, daphne and clients."""

    label: str
    target: Target
    streams: list = field(default_factory=list)  # (client, path, iterator of bodies)
    rounds: list = field(default_factory=list)  # (events/s, ms of server, postgres, clients, machine per append)

    def start(self, clients: int, events_per_client: int) -> None:
        self.target.setup()
        start = datetime(2025, 1, 1, tzinfo=UTC)
        for n in range(clients):
            client = Client(self.target.port, self.target.token)
            session_id = f"cpu-{n}"
            client.create_session(session_id)
            bodies = [json.dumps({"events": [event]}).encode() for event in make_events(events_per_client, seed=n, start=start)]
            self.streams.append((client, f"/api/v1/sessions/{session_id}/events", iter(bodies)))

    def round(self, seconds: float) -> tuple[float, ...]:
        stop = time.monotonic() + seconds
        answered = [0] * len(self.streams)
        errors: list[BaseException] = []

        def append(n: int) -> None:
            client, path, bodies = self.streams[n]
            try:
                while time.monotonic() < stop:
                    status, body = client.post(path, next(bodies))
                    if status != 201:
                        raise RuntimeError(f"{self.label}: POST {path} answered {status}: {body[:300]!r}")
                    answered[n] += 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=append, args=(n,)) for n in range(len(self.streams))]
        before = (time.monotonic(), process_cpu(self.target.server.pid), postgres_cpu(), own_cpu(), machine_cpu())
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        after = (time.monotonic(), process_cpu(self.target.server.pid), postgres_cpu(), own_cpu(), machine_cpu())
        if errors:
            raise errors[0]
        count = sum(answered)
        wall, *cpu = (b - a for a, b in zip(before, after))
        figures = (count / wall, *(seconds * 1000 / count for seconds in cpu))
        self.rounds.append(figures)
        return figures


def line(label: str, figures) -> str:
    rate, server, postgres, clients, machine = figures
    return f"{label:<40} {rate:8,.0f}/s   ms per append: server {server:5.2f}  postgres {postgres:5.2f}  clients {clients:5.2f}  machine {machine:5.2f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", help="source trees, each optionally followed by @VAR=value settings")
    parser.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)

    sides = []
    for spec in args.trees:
        tree, *settings = spec.split("@")
        target = Target(args.db, None, prefix="turnlog-cpu", root=Path(tree).resolve())
        target.env.update(setting.split("=", 1) for setting in settings)
        sides.append(Side(spec, target))
    print(f"{args.db}, {args.clients} clients, {args.rounds} rounds of {args.seconds:g} s per tree, {os.cpu_count()} CPUs")
    try:
        for side in sides:
            # Enough bodies for the fastest rate seen here, with room to spare.
            side.start(args.clients, int(3000 * args.rounds * args.seconds / args.clients) + 100)
        for n in range(args.rounds):
            for side in sides if n % 2 == 0 else sides[::-1]:
                print(line(side.label, side.round(args.seconds)), flush=True)
        print("--- medians")
        for side in sides:
            print(line(side.label, [statistics.median(column) for column in zip(*side.rounds)]))
    except Exception:
        for side in sides:
            if tail := side.target.log_tail():
                print(f"--- daphne log tail ({side.label}) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        for side in sides:
            side.target.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
