"""Run callables in threads that start together, each with its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from django.db import connections


def run_at_once(target: Callable, args: Sequence[tuple]) -> list:
    """Call target(*a) for each a in its own thread, released together by a barrier.

    Returns what each call returned, or the exception it raised, in completion order.
    """
    outcomes: list = []
    lock = threading.Lock()
    start = threading.Barrier(len(args))

    def worker(*call_args):
        start.wait()
        try:
            outcome = target(*call_args)
        except Exception as exc:  # handed to the test, which decides
            outcome = exc
        finally:
            connections.close_all()
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=worker, args=a) for a in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes
