"""Database work of async views, on a few long-lived threads that keep their connections.

Under ASGI, Django runs a sync view in a thread of its own for that request,
and that thread opens a database connection and closes it when the request
ends. On SQLite a new connection re-prepares every statement and re-reads the
schema: measured, about 3 ms of a 5 ms append (docs/performance.md). The hot
endpoints (append, read events, read a session) are async instead and send
their database work here: `TURNLOG_DB_THREADS` threads, each with its own
connection, kept across requests (on PostgreSQL one taken from the pool of
settings.py). Several threads, so that a slow query does not hold up the
others; SQLite's appends all go to one more thread of their own, which
commits the appends queued together in one transaction (run_append).

A kept connection is checked before its first query of each call (Django's
health check; for a PostgreSQL pool connection, `quiet`, which sends it back
to the pool to be checked there when its server has spoken) and, when it saw
an error, after the call; one that no longer works (a restarted database
server) is replaced. With `TURNLOG_DB_THREADS = 0` the
work runs on the caller's own sync thread instead, as Django's
`sync_to_async` does by default: the in-process tests use that, so that a
request sees the test's open transaction.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import queue
import select
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import SyncToAsync, sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

P = ParamSpec("P")
R = TypeVar("R")

_executor: ThreadPoolExecutor | None = None
_executor_threads = 0
_writer_thread: _Writer | None = None
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
    global _executor, _writer_thread
    with _executor_lock:
        stopping, _executor = _executor, None
        writer, _writer_thread = _writer_thread, None
    if writer is not None:
        writer.stop()  # it closes its own connections
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
    return await _run_on(executor(), fn, args, kwargs)


async def run_append(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """fn(*args, **kwargs), an append, on a database thread: on SQLite always the same one (_Writer).

    SQLite lets one writer in at a time. Appends from several threads of a
    process queued for its lock in SQLite's busy handler, and each thread's
    turn cost GIL and lock hand-offs: with 8 clients a single append took
    ~50% more CPU than with one (docs/performance.md). One writer thread
    queues them in the process instead; reads keep the other threads.
    PostgreSQL locks each session's row, so its appends run on any thread.
    """
    if not settings.TURNLOG_DB_THREADS:
        return await sync_to_async(fn)(*args, **kwargs)
    if not _one_writer_at_a_time():
        return await _run_on(executor(), fn, args, kwargs)
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    _writer().put((loop, future, contextvars.copy_context(), functools.partial(fn, *args, **kwargs)))
    return await future


def _writer() -> _Writer:
    global _writer_thread
    with _executor_lock:
        if _writer_thread is None:
            _writer_thread = _Writer()
        return _writer_thread


class _Writer(threading.Thread):
    """SQLite's one writer: the appends queued while it was busy go in one transaction, each in a savepoint.

    SQLite commits one transaction at a time; with 8 clients, appends arrive
    while one commits. Taking them together saves a BEGIN, a COMMIT and a
    thread hand-off each (docs/performance.md). Each still succeeds or fails
    alone (its own savepoint), and each is answered after the commit that made it durable.
    """

    BATCH = 64

    def __init__(self):
        super().__init__(name="turnlog-db-write_0", daemon=True)
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        self.start()

    def put(self, call) -> None:
        self.calls.put(call)

    def run(self) -> None:
        while (call := self.calls.get()) is not None:
            batch = [call]
            while len(batch) < self.BATCH:
                try:
                    call = self.calls.get_nowait()
                except queue.Empty:
                    break
                if call is None:
                    self.calls.put(None)  # stop after this batch
                    break
                batch.append(call)
            self.serve(batch)
        connections.close_all()

    def serve(self, batch) -> None:
        from django.db import DatabaseError, transaction

        outcomes: list[tuple[bool, object]] = []

        def each():
            for loop, _, context, fn in batch:
                try:
                    outcomes.append((True, context.run(_call_and_keep_connections, loop, fn, (), {})))
                except BaseException as error:  # answered to its caller below
                    outcomes.append((False, error))

        if len(batch) == 1:
            each()
        else:
            try:
                with transaction.atomic():
                    each()
                    if transaction.get_rollback():  # a call left the batch to be rolled back: nobody's writes stand
                        raise DatabaseError("an append of this batch left its transaction to be rolled back; nothing was stored")
            except BaseException as error:  # the commit failed, or the above: nothing of the batch is stored
                outcomes = [(False, error)] * len(batch)
        for (loop, future, _, _), (ok, value) in zip(batch, outcomes):
            try:
                loop.call_soon_threadsafe(_settle, future, ok, value)
            except RuntimeError:  # the caller's loop closed meanwhile
                pass

    def stop(self) -> None:
        self.calls.put(None)
        self.join(timeout=30)


def _settle(future: asyncio.Future, ok: bool, value) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


async def _run_on(pool: ThreadPoolExecutor, fn, args, kwargs):
    loop = asyncio.get_running_loop()
    call = functools.partial(_call_and_keep_connections, loop, fn, args, kwargs)
    # Straight to the executor: sync_to_async's own bookkeeping per call (its wrapper, futures
    # and context restoring) cost more than a single append's SQL on SQLite (docs/performance.md).
    return await loop.run_in_executor(pool, contextvars.copy_context().run, call)


@functools.cache  # a process serves one database; looking its connection up from the event loop cost 2% of an append
def _one_writer_at_a_time() -> bool:
    return connections[DEFAULT_DB_ALIAS].vendor == "sqlite"


def caller_loop() -> asyncio.AbstractEventLoop | None:
    """On a database thread, the event loop awaiting the current call; None elsewhere."""
    return getattr(_calling, "loop", None)


_calling = threading.local()


def _call_and_keep_connections(loop, fn, args, kwargs):
    for connection in connections.all(initialized_only=True):
        connection.health_check_done = False  # checked again before its first query of this call
        if getattr(connection, "pool", None) and connection.connection is not None and not quiet(connection.connection):
            connection.close()  # back to the pool, which checks it (and replaces it) before handing it out again
    _calling.loop = loop
    # What sync_to_async would set: async_to_sync on this thread runs coroutines on the caller's loop.
    SyncToAsync.threadlocal.main_event_loop = loop
    SyncToAsync.threadlocal.main_event_loop_pid = os.getpid()
    try:
        return fn(*args, **kwargs)
    finally:
        _calling.loop = None
        for connection in connections.all(initialized_only=True):
            keep_if_usable(connection)


def quiet(driver_connection) -> bool:
    """Whether a kept PostgreSQL connection is idle with nothing from its server waiting on its socket.

    Between two calls the server has nothing to say to an idle connection,
    except that it is going away: a terminated backend or a server shutting
    down sends its notice and closes the socket, which makes it readable.
    Looking costs a system call; psycopg_pool's check on checkout, which
    these connections skipped, costs a round trip (~0.15 ms of a 3 ms append).
    """
    from psycopg.pq import TransactionStatus

    if driver_connection.closed or driver_connection.broken or driver_connection.info.transaction_status != TransactionStatus.IDLE:
        return False
    readable, _, _ = select.select([driver_connection.fileno()], [], [], 0)
    return not readable


def keep_if_usable(connection) -> None:
    """What Django's close_if_unusable_or_obsolete does after a request, minus the age limit."""
    if connection.connection is not None and connection.errors_occurred:
        if connection.is_usable():
            connection.errors_occurred = False
        else:
            connection.close()
