"""Several processes, one scrape: dead processes' files merged into one, their counts kept.

In multi-process mode (PROMETHEUS_MULTIPROC_DIR) prometheus-client gives each process its own files
(`counter_<pid>.db`, `histogram_<pid>.db`, `gauge_livesum_<pid>.db`) and a scrape adds them all up.
Files of processes that ended stay (their counts must: a counter never goes backwards), so without
this module a directory of a long-lived deployment, its Daphnes and workers restarted many times,
would be read file by file on every scrape. Here each scrape first folds the additive files
(counters, histograms) of dead processes into one `<type>_merged.db` per type, and drops their live
gauges as prometheus-client's `mark_process_dead` does.

Everything happens under an exclusive lock on `merge.lock` in the directory, taken by every scrape
(scrapes are seconds apart: they may queue). A merge writes the new totals to `<type>_merged.db.new`
(not `*.db`: invisible to scrapes), records the files it absorbs in `<type>_merged.journal`, renames
the new totals over the old and deletes the absorbed files. A merge cut short (the process killed) is
finished by the next scrape from the journal: if the `.new` file is still there the rename did not
happen and the dead files are counted once, where they are; otherwise they are already in the totals
and only their deletion is left. Either way no count is lost or counted twice.

A process is dead when its pid is gone (`os.kill(pid, 0)`): the directory belongs to the processes
of one host (one pid namespace), which is how the launchers use it.
"""

from __future__ import annotations

import collections
import fcntl
import glob
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

ENVIRONMENT_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
MERGED = "merged"  # in place of a pid: the totals of dead processes
ADDITIVE_TYPES = ("counter", "histogram", "summary")  # whose samples add up across processes
LOCK_NAME = "merge.lock"


def directory() -> str | None:
    """The multi-process directory this process writes to, or None (single-process mode)."""
    return os.environ.get(ENVIRONMENT_VARIABLE) or None


def _owner(path: str) -> tuple[str, str, int | None]:
    """(type, gauge mode or "", pid) of a metrics file (pid None: the merged totals)."""
    parts = os.path.basename(path)[: -len(".db")].split("_")
    pid = parts[-1]
    return parts[0], "_".join(parts[1:-1]), None if pid == MERGED else int(pid)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


@contextmanager
def locked(path: str) -> Iterator[None]:
    fd = os.open(os.path.join(path, LOCK_NAME), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def merge_dead_processes(path: str) -> set[int]:
    """Fold the files of the processes that ended into the merged totals; their pids. The caller holds `locked(path)`."""
    _finish_interrupted(path)
    files = glob.glob(os.path.join(path, "*.db"))
    owners = {f: _owner(f) for f in files}
    dead = {pid for _, _, pid in owners.values() if pid is not None and not alive(pid)}
    if not dead:
        return dead
    for typ in ADDITIVE_TYPES:
        sources = sorted(f for f, (t, _, pid) in owners.items() if t == typ and pid in dead)
        if sources:
            _absorb(path, typ, sources)
    # Gauges: a dead process's live ones go (as mark_process_dead); the other modes keep their values by design.
    for f, (typ, mode, pid) in owners.items():
        if typ == "gauge" and mode.startswith("live") and pid in dead:
            os.remove(f)
    return dead


def _paths(path: str, typ: str) -> tuple[str, str, str]:
    totals = os.path.join(path, f"{typ}_{MERGED}.db")
    return totals, totals + ".new", os.path.join(path, f"{typ}_{MERGED}.journal")


def _absorb(path: str, typ: str, sources: list[str]) -> None:
    totals_path, fresh_path, journal_path = _paths(path, typ)
    totals: dict[str, float] = collections.defaultdict(float)
    for f in ([totals_path] if os.path.exists(totals_path) else []) + sources:
        for key, value, _timestamp, _pos in MmapedDict.read_all_values_from_file(f):
            totals[key] += value
    if os.path.exists(fresh_path):  # left by a merge cut short before its journal: never used
        os.remove(fresh_path)
    fresh = MmapedDict(fresh_path)
    try:
        for key, value in totals.items():
            fresh.write_value(key, value, 0.0)
    finally:
        fresh.close()
    _write_atomically(journal_path, json.dumps([os.path.basename(f) for f in sources]))
    os.replace(fresh_path, totals_path)
    for f in sources:
        os.remove(f)
    os.remove(journal_path)


def _finish_interrupted(path: str) -> None:
    for journal_path in glob.glob(os.path.join(path, f"*_{MERGED}.journal")):
        typ = os.path.basename(journal_path).split("_")[0]
        _, fresh_path, _ = _paths(path, typ)
        if os.path.exists(fresh_path):  # not renamed: the totals lack the sources, which are all still there
            os.remove(fresh_path)
        else:  # renamed: the totals hold the sources; only their deletion was left
            with open(journal_path) as journal:
                for name in json.load(journal):
                    if os.path.exists(source := os.path.join(path, name)):
                        os.remove(source)
        os.remove(journal_path)


def _write_atomically(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(path + ".tmp", path)


class MergingCollector:
    """prometheus-client's MultiProcessCollector, reading the directory after merging dead processes, under the lock."""

    def __init__(self, path: str):
        self.path = path

    def collect(self):
        with locked(self.path):
            merge_dead_processes(self.path)
            return list(MultiProcessCollector.merge(glob.glob(os.path.join(self.path, "*.db")), accumulate=True))

