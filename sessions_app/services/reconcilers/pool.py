"""The worker's reconciler threads: each round claims only as many due checks as there are idle threads and hands
them over, so a slow check endpoint holds one thread for at most its timeout and never the worker's other rounds
(recovery, retention, webhooks); what the threads finished is told at the next round."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime

from django.db import connections

from .asking import Asked, ask, claim_due

log = logging.getLogger(__name__)


def _ask_in_thread(check_id: int, now: datetime) -> Asked:
    try:
        return ask(check_id, now=now)
    finally:
        connections.close_all()  # this thread's own connections (a pool thread lives on between checks)


class Asker:
    def __init__(self, threads: int):
        self.threads = threads
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="reconciler")
        self.running: set[Future] = set()

    def start_due(self, *, now: datetime) -> list[Asked]:
        """Hand the due checks to the idle threads; the asks finished since the last call (a failed one logged)."""
        finished = self.finished()
        for check_id in claim_due(now=now, limit=self.threads - len(self.running)):
            self.running.add(self.pool.submit(_ask_in_thread, check_id, now))
        return finished

    def wait(self) -> list[Asked]:
        """Every ask still running, waited for."""
        for future in list(self.running):
            future.exception()
        return self.finished()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)

    def finished(self) -> list[Asked]:
        done = [f for f in self.running if f.done()]
        self.running.difference_update(done)
        out = []
        for future in done:
            if (error := future.exception()) is not None:
                # A bug or a database outage: the claim expires and the check is asked again.
                log.error("reconciler check failed", exc_info=error)
            else:
                out.append(future.result())
        return out
