"""Database work of async views, on a few long-lived threads that keep their connections.

Under ASGI, Django runs a sync view in a thread of its own for that request,
and that thread opens a database connection and closes it when the request
ends. On SQLite a new connection re-prepares every statement and re-reads the
schema: measured, about 3 ms of a 5 ms append (docs/benchmarks.md). The hot
endpoints (append, read events, read a session) are async instead and send
their database work here: `TURNLOG_DB_THREADS` threads, each with its own
connection, kept across requests (on PostgreSQL with the pool of settings.py,
a pool connection taken for each call and given back after it).
Several threads, so that one request waiting for SQLite's write lock or a slow
query does not hold up the others.

A kept connection is checked before its first query of each call (Django's
health check) and, when it saw an error, after the call; one that no longer
works (a restarted database server) is replaced. With `TURNLOG_DB_THREADS = 0` the
work runs on the caller's own sync thread instead, as Django's
`sync_to_async` does by default: the in-process tests use that, so that a
request sees the test's open transaction.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import SyncToAsync, sync_to_async
from django.conf import settings
from django.db import connections

P = ParamSpec("P")
R = TypeVar("R")

_executor: ThreadPoolExecutor | None = None
_executor_threads = 0
_executor_lock = threading.Lock()


def executor() -> ThreadPoolExecutor:
    global _executor, _executor_threads
    with _executor_lock:
        if _executor is None:
            _executor_threads = settings.TURNLOG_DB_THREADS
            _executor = ThreadPoolExecutor(max_workers=_executor_threads, thread_name_prefix="turnlog-db")
        return _executor


def stop() -> None:
    """Close every database thread's connections and stop the threads; the next call starts new ones.
    (A server just exits; tests stop them so that no connection outlives the test database.)"""
    global _executor
    with _executor_lock:
        stopping, _executor = _executor, None
    if stopping is None:
        return
    # One task per thread: each waits for the others, so every thread closes its own connections.
    everyone = threading.Barrier(_executor_threads)

    def close_own_connections():
        everyone.wait(timeout=30)
        connections.close_all()

    for closed in [stopping.submit(close_own_connections) for _ in range(_executor_threads)]:
        closed.result()
    stopping.shutdown()


async def run(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """fn(*args, **kwargs) on a database thread; its exceptions propagate."""
    if not settings.TURNLOG_DB_THREADS:
        return await sync_to_async(fn)(*args, **kwargs)
    loop = asyncio.get_running_loop()
    call = functools.partial(_call_and_keep_connections, loop, fn, args, kwargs)
    # Straight to the executor: sync_to_async's own bookkeeping per call (its wrapper, futures
    # and context restoring) cost more than a single append's SQL on SQLite (docs/benchmarks.md).
    return await loop.run_in_executor(executor(), contextvars.copy_context().run, call)


def caller_loop() -> asyncio.AbstractEventLoop | None:
    """On a database thread, the event loop awaiting the current call; None elsewhere."""
    return getattr(_calling, "loop", None)


_calling = threading.local()


def _call_and_keep_connections(loop, fn, args, kwargs):
    for connection in connections.all(initialized_only=True):
        connection.health_check_done = False  # checked again before its first query of this call
    _calling.loop = loop
    # What sync_to_async would set: async_to_sync on this thread runs coroutines on the caller's loop.
    SyncToAsync.threadlocal.main_event_loop = loop
    SyncToAsync.threadlocal.main_event_loop_pid = os.getpid()
    try:
        return fn(*args, **kwargs)
    finally:
        _calling.loop = None
        for connection in connections.all(initialized_only=True):
            if getattr(connection, "pool", None):
                connection.close()  # back to psycopg's pool, which checks it before handing it out again
            else:
                keep_if_usable(connection)


def keep_if_usable(connection) -> None:
    """What Django's close_if_unusable_or_obsolete does after a request, minus the age limit."""
    if connection.connection is not None and connection.errors_occurred:
        if connection.is_usable():
            connection.errors_occurred = False
        else:
            connection.close()
