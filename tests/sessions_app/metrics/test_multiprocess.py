"""Dead processes' metric files merged into one, their counts kept; a merge cut short finished by the next scrape.

Real processes write real files (prometheus-client in multi-process mode, the instruments of
sessions_app.lib.instruments) and are killed with SIGKILL; the merge then runs as a scrape runs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sessions_app.metrics import multiprocess
from sessions_app.metrics.multiprocess import MergingCollector

PROJECT_DIR = Path(__file__).resolve().parents[3]

# A process that counts like a server (an append of 5 events, a fork, an open socket), says so, and waits to be killed.
COUNTING = """
import sys
from sessions_app.lib import instruments as i
i.count_events({"user_message": 5})
i.count_append(seconds=0.003, events=5)
i.FORKS.inc()
i.SOCKETS_OPEN.labels("api_events").inc()
print("counted", flush=True)
sys.stdin.read()
"""


def start_counting(path: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", COUNTING], cwd=PROJECT_DIR, env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(path)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout.readline() == "counted\n"
    return process


def kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def scrape(path: Path) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape of `path`: (name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in MergingCollector(str(path)).collect() for s in family.samples}


def totals(path: Path) -> dict[str, float]:
    samples = scrape(path)
    return {
        "events": samples.get(("turnlog_events_appended_total", (("type", "user_message"),)), 0),
        "forks": samples.get(("turnlog_forks_total", ()), 0),
        "appends": samples.get(("turnlog_append_seconds_count", ()), 0),
        "fast appends": samples.get(("turnlog_append_seconds_bucket", (("le", "0.005"),)), 0),
        "batch events": samples.get(("turnlog_append_batch_events_sum", ()), 0),
        "sockets": samples.get(("turnlog_websockets_open", (("kind", "api_events"),)), 0),
    }


def counted(times: int, sockets: int) -> dict[str, float]:
    return {"events": 5 * times, "forks": times, "appends": times, "fast appends": times, "batch events": 5 * times, "sockets": sockets}


def files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name != multiprocess.LOCK_NAME)


def test_killed_processes_keep_their_counts_in_one_merged_file_and_lose_their_open_sockets(tmp_path):
    first, second = start_counting(tmp_path), start_counting(tmp_path)
    assert totals(tmp_path) == counted(2, sockets=2)

    kill(first)
    assert totals(tmp_path) == counted(2, sockets=1)  # the counts stay; its socket closed with it
    assert files(tmp_path) == sorted(
        ["counter_merged.db", "histogram_merged.db", f"counter_{second.pid}.db", f"histogram_{second.pid}.db", f"gauge_livesum_{second.pid}.db"]
    )

    third = start_counting(tmp_path)
    kill(second)
    kill(third)
    assert totals(tmp_path) == counted(3, sockets=0)  # two more folded into the same totals
    assert files(tmp_path) == ["counter_merged.db", "histogram_merged.db"]
    assert totals(tmp_path) == counted(3, sockets=0)  # and a scrape with nothing to merge changes nothing


def test_the_living_are_never_merged(tmp_path):
    living = start_counting(tmp_path)
    try:
        assert multiprocess.merge_dead_processes(str(tmp_path)) == set()
        assert f"counter_{living.pid}.db" in files(tmp_path)
    finally:
        kill(living)


@pytest.mark.parametrize("cut", ["before the rename", "after the rename"])
def test_a_merge_cut_short_is_finished_by_the_next_scrape_without_losing_or_doubling(tmp_path, monkeypatch, cut):
    """The merging process dies (here: an error) before its new totals replace the old, or after, before it deleted
    the files it absorbed. The journal tells the next scrape which: the counts never go down or up."""
    earlier = start_counting(tmp_path)
    kill(earlier)
    assert totals(tmp_path) == counted(1, sockets=0)  # merged once already: totals exist
    for _ in range(2):
        kill(start_counting(tmp_path))

    real_replace, real_remove = os.replace, os.remove

    class Cut(Exception):
        pass

    def replace(source, target):
        if cut == "before the rename" and str(source).endswith(".db.new"):
            raise Cut
        real_replace(source, target)

    def remove(target):
        if cut == "after the rename" and str(target).endswith(".db") and "merged" not in str(target):
            raise Cut
        real_remove(target)

    monkeypatch.setattr(multiprocess.os, "replace", replace)
    monkeypatch.setattr(multiprocess.os, "remove", remove)
    with pytest.raises(Cut):
        totals(tmp_path)
    assert any(name.endswith(".journal") for name in files(tmp_path))
    monkeypatch.undo()

    assert totals(tmp_path) == counted(3, sockets=0)
    assert files(tmp_path) == ["counter_merged.db", "histogram_merged.db"]
