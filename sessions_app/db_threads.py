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
from django.db import DEFAULT_DB_ALIAS, connections

P = ParamSpec("P")
R = TypeVar("R")

# name -> (executor, its number of threads): "read" has TURNLOG_DB_THREADS, "write" (SQLite's appends) one.
_executors: dict[str, tuple[ThreadPoolExecutor, int]] = {}
_executor_lock = threading.Lock()


def executor(name: str = "read") -> ThreadPoolExecutor:
    with _executor_lock:
        if name not in _executors:
            threads = settings.TURNLOG_DB_THREADS if name == "read" else 1
            prefix = "turnlog-db" if name == "read" else f"turnlog-db-{name}"
            _executors[name] = (ThreadPoolExecutor(max_workers=threads, thread_name_prefix=prefix), threads)
        return _executors[name][0]


def stop() -> None:
    """Close every database thread's connections and stop the threads; the next call starts new ones.
    (A server just exits; tests stop them so that no connection outlives the test database.)"""
    with _executor_lock:
        stopping = list(_executors.values())
        _executors.clear()
    for pool, threads in stopping:
        # One task per thread: each waits for the others, so every thread closes its own connections.
        everyone = threading.Barrier(threads)

        def close_own_connections():
            everyone.wait(timeout=30)
            connections.close_all()

        for closed in [pool.submit(close_own_connections) for _ in range(threads)]:
            closed.result()
        pool.shutdown()


async def run(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """fn(*args, **kwargs) on a database thread; its exceptions propagate."""
    if not settings.TURNLOG_DB_THREADS:
        return await sync_to_async(fn)(*args, **kwargs)
    return await _run_on(executor(), fn, args, kwargs)


async def run_append(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """fn(*args, **kwargs), an append, on a database thread: on SQLite always the same one.

    SQLite lets one writer in at a time. Appends from several threads of a
    process queued for its lock in SQLite's busy handler, and each thread's
    turn cost GIL and lock hand-offs: with 8 clients a single append took
    ~50% more CPU than with one (docs/benchmarks.md). One writer thread
    queues them in the process instead; reads keep the other threads.
    PostgreSQL locks each session's row, so its appends run on any thread.
    """
    if not settings.TURNLOG_DB_THREADS:
        return await sync_to_async(fn)(*args, **kwargs)
    return await _run_on(executor("write" if _one_writer_at_a_time() else "read"), fn, args, kwargs)


async def _run_on(pool: ThreadPoolExecutor, fn, args, kwargs):
    loop = asyncio.get_running_loop()
    call = functools.partial(_call_and_keep_connections, loop, fn, args, kwargs)
    # Straight to the executor: sync_to_async's own bookkeeping per call (its wrapper, futures
    # and context restoring) cost more than a single append's SQL on SQLite (docs/benchmarks.md).
    return await loop.run_in_executor(pool, contextvars.copy_context().run, call)


def _one_writer_at_a_time() -> bool:
    return connections[DEFAULT_DB_ALIAS].vendor == "sqlite"


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
