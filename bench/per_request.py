"""Per-request cost under Daphne: wall time and server CPU of single requests, one client.

For each code tree given (default: this checkout; `--tree DIR` more than once
compares checkouts, e.g. a `git worktree` of an older commit, in the same run)
this starts Daphne from that tree as the tree's users do (`turnlog daphne`) on a fresh
SQLite database (migrated, a token, one session) and sends, over one
keep-alive connection, rounds of: GET of an unknown /api/ path (404: the
server's and Django's fixed cost), GET of the session, GET of 10 events, and
POST of one event. The trees' servers take turns round by round (the order
alternates), so they see the same machine. Printed per tree and request kind:
the median over rounds of wall milliseconds per request and of the server's
CPU milliseconds per request (user + system, from /proc). No target: an A/B
tool (docs/performance.md, *Measuring tools*).

    .venv/bin/python bench/per_request.py [--tree DIR ...] [--rounds 6] [--requests 150]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from _common import ROOT, Client, Target, daphne_command, free_port, make_events

KINDS = ("404", "session", "events", "append")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class TreeServer:
    def __init__(self, tree: Path, bodies: list[bytes]):
        self.tree = tree
        self.target = Target("sqlite", None, prefix="turnlog-requests")
        self.target.setup(servers=0)
        port = free_port()
        self.process = subprocess.Popen(
            daphne_command(port, tree=tree),
            cwd=tree,
            env=self.target.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client = Client(port, self.target.token)
                self.client.create_session("requests")
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"daphne from {tree} did not answer") from None
                time.sleep(0.2)
        self.bodies = iter(bodies)

    def request(self, kind: str) -> None:
        if kind == "404":
            status, _ = self.client.get("/api/v1/no-such-endpoint")
            expected = 404
        elif kind == "session":
            status, _ = self.client.get("/api/v1/sessions/requests")
            expected = 200
        elif kind == "events":
            status, _ = self.client.get("/api/v1/sessions/requests/events?since=0&limit=10")
            expected = 200
        else:
            status, _ = self.client.post("/api/v1/sessions/requests/events", next(self.bodies))
            expected = 201
        if status != expected:
            raise RuntimeError(f"{kind} answered {status} from {self.tree}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.target.teardown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", type=Path, help="a code tree to serve from (default: this checkout)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=150, help="timed requests per kind, tree and round")
    args = parser.parse_args()
    trees = args.tree or [ROOT]
    appends = (args.requests + 10) * args.rounds
    events = make_events(appends, seed=7, start=datetime(2026, 1, 1, tzinfo=UTC))
    bodies = [json.dumps({"events": [event]}).encode() for event in events]
    servers = [TreeServer(tree, bodies) for tree in trees]
    figures: dict[tuple[int, str], list[tuple[float, float]]] = {}
    try:
        for kind in KINDS:
            for round_ in range(args.rounds):
                for index in (range(len(servers)) if round_ % 2 == 0 else reversed(range(len(servers)))):
                    server = servers[index]
                    for _ in range(10):  # warm up
                        server.request(kind)
                    cpu0, wall0 = cpu_seconds(server.process.pid), time.perf_counter()
                    for _ in range(args.requests):
                        server.request(kind)
                    wall, cpu = time.perf_counter() - wall0, cpu_seconds(server.process.pid) - cpu0
                    figures.setdefault((index, kind), []).append((wall * 1000 / args.requests, cpu * 1000 / args.requests))
    finally:
        for server in servers:
            server.stop()
    print(f"per request, median of {args.rounds} rounds of {args.requests}: wall ms / server CPU ms")
    print(f"{'tree':40s} " + " ".join(f"{kind:>16s}" for kind in KINDS))
    for index, server in enumerate(servers):
        cells = []
        for kind in KINDS:
            rounds = figures[(index, kind)]
            cells.append(f"{statistics.median(w for w, _ in rounds):7.2f} / {statistics.median(c for _, c in rounds):5.2f}")
        print(f"{str(server.tree):40s} " + " ".join(f"{cell:>16s}" for cell in cells))


if __name__ == "__main__":
    main()
