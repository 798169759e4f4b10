"""sessions_app.lib.db_threads: database work of async views on long-lived threads that keep their connections."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

from sessions_app import services
from sessions_app.lib import db_threads, errors
from sessions_app.models import Session

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 2


@pytest.fixture
def database_threads(settings):
    settings.TURNLOG_DB_THREADS = THREADS
    db_threads.stop()
    yield
    db_threads.stop()


def where_it_ran():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return threading.current_thread().name, id(connection.connection)


def run(fn, *args, **kwargs):
    return async_to_sync(db_threads.run)(fn, *args, **kwargs)


def test_work_runs_on_the_database_threads_which_keep_their_connections(database_threads):
    def held_then_used():
        held = connection.connection is not None  # left by this thread's previous call
        return (*where_it_ran(), held)

    seen = [run(held_then_used) for _ in range(20)]
    threads = {name for name, _, _ in seen}
    assert threads <= {f"turnlog-db_{i}" for i in range(THREADS)}, threads
    first_calls = {name: next(i for i, (n, _, _) in enumerate(seen) if n == name) for name in threads}
    later = [(name, conn, held) for i, (name, conn, held) in enumerate(seen) if i != first_calls[name]]
    # PostgreSQL's pool connections too: a round trip to check each on checkout cost ~5% of an append.
    assert all(held for _, _, held in later), seen
    assert all(len({c for n, c, _ in seen if n == name}) == 1 for name in threads), seen


def gone(pids, timeout: float = 10.0) -> None:
    """Wait until the terminated backends have exited: a server going away has said so and hung up by then.
    (The kept connections' check reads that from their sockets, and cannot see a termination still on its way.)"""
    import time

    deadline = time.monotonic() + timeout
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [list(pids)])
            if cursor.fetchone()[0] == 0:
                return
        assert time.monotonic() < deadline, f"backends {sorted(pids)} still there after {timeout} s"
        time.sleep(0.01)


def test_a_connection_the_server_dropped_is_replaced_before_the_next_query(database_threads):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only (the suite's PostgreSQL pass runs it)")

    def backend_pid():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return threading.current_thread().name, cursor.fetchone()[0]

    pids = dict(run(backend_pid) for _ in range(20))
    with connection.cursor() as cursor:
        for pid in pids.values():
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    gone(pids.values())
    for _ in range(20):
        name, pid = run(backend_pid)  # none of them fails: each kept connection whose server spoke went back to the pool
        assert pid != pids.get(name)


def test_async_to_sync_on_a_database_thread_runs_on_the_callers_event_loop(database_threads):
    """As under sync_to_async: a coroutine a database thread waits for runs on the loop awaiting the call
    (the in-memory channel layer's queues belong to that loop), not on a loop of its own."""
    import asyncio

    async def the_loop():
        return asyncio.get_running_loop()

    async def caller():
        return asyncio.get_running_loop(), await db_threads.run(async_to_sync(the_loop))

    callers_loop, loop_it_ran_on = async_to_sync(caller)()
    assert loop_it_ran_on is callers_loop


def test_appends_on_sqlite_run_on_one_writer_thread_and_on_postgresql_on_any(database_threads):
    """SQLite admits one writer at a time: its appends queue on one thread instead of in its busy handler."""

    async def many_at_once():
        import asyncio

        return await asyncio.gather(*(db_threads.run_append(where_it_ran) for _ in range(12)))

    threads = {name for name, _ in async_to_sync(many_at_once)()}
    if connection.vendor == "sqlite":
        assert threads == {"turnlog-db-write_0"}
    else:
        assert threads <= {f"turnlog-db_{i}" for i in range(THREADS)}, threads
    reads = {run(where_it_ran)[0] for _ in range(4)}
    assert reads <= {f"turnlog-db_{i}" for i in range(THREADS)}, reads


def queued_behind_a_held_writer(calls):
    """Run `calls` through run_append while an earlier append holds the writer, so that they queue
    and go together; each outcome (a value or the exception), in order."""
    import asyncio

    started, release = threading.Event(), threading.Event()

    def hold():
        started.set()
        release.wait(10)

    async def all_of_them():
        held = asyncio.ensure_future(db_threads.run_append(hold))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        queued = [asyncio.ensure_future(db_threads.run_append(call)) for call in calls]
        await asyncio.sleep(0.05)  # every call is in the writer's queue
        release.set()
        await held
        return await asyncio.gather(*queued, return_exceptions=True)

    return async_to_sync(all_of_them)()


def one_event(session_id, **extra):
    from sessions_app.log.events import validate_batch

    def append():
        result = services.append_events(session_id=session_id, events=validate_batch([{"type": "user_message", "data": {"content": "hi"}}]), **extra)
        return result.first_seq, connection.in_atomic_block  # in_atomic_block: inside the batch's transaction

    return append


def test_sqlite_appends_queued_together_commit_together_and_each_succeeds_or_fails_alone(database_threads):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL's appends run on any database thread")
    for session_id in ("s1", "s2"):
        services.create_session(session_id=session_id)

    def written_then_failed():
        with transaction.atomic():
            one_event("s1")()
            raise RuntimeError("after writing")

    outcomes = queued_behind_a_held_writer([one_event("s1"), one_event("s1", expected_seq=99), written_then_failed, one_event("s2"), one_event("s1")])
    assert outcomes[0] == (0, True) and outcomes[3] == (0, True) and outcomes[4] == (1, True), outcomes
    assert isinstance(outcomes[1], errors.SeqConflict) and isinstance(outcomes[2], RuntimeError), outcomes
    assert Session.objects.get(pk="s1").event_count == 2 and Session.objects.get(pk="s2").event_count == 1
    assert list(Session.objects.get(pk="s1").events.values_list("seq", flat=True).order_by("seq")) == [0, 1]


def test_a_batch_whose_commit_fails_stores_nothing_and_answers_each_call_with_the_failure(database_threads, monkeypatch):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL's appends run on any database thread")
    from django.db import OperationalError
    from django.db.backends.sqlite3.base import DatabaseWrapper

    services.create_session(session_id="s1")
    real_commit = DatabaseWrapper._commit

    def commit(self):
        if threading.current_thread().name == "turnlog-db-write_0":
            raise OperationalError("disk I/O error")
        return real_commit(self)

    monkeypatch.setattr(DatabaseWrapper, "_commit", commit)
    outcomes = queued_behind_a_held_writer([one_event("s1"), one_event("s1")])
    assert [type(o) for o in outcomes] == [OperationalError, OperationalError], outcomes
    monkeypatch.undo()
    assert Session.objects.get(pk="s1").event_count == 0
    assert run_append_now(one_event("s1")) == (0, False)  # the writer goes on (alone: no batch transaction)


def test_a_call_that_leaves_the_batch_to_be_rolled_back_fails_the_whole_batch_rather_than_answer_stored(database_threads):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL's appends run on any database thread")
    from django.db import DatabaseError

    services.create_session(session_id="s1")

    def leaves_it_to_roll_back():
        transaction.set_rollback(True)

    outcomes = queued_behind_a_held_writer([one_event("s1"), leaves_it_to_roll_back, one_event("s1")])
    assert all(isinstance(o, DatabaseError) for o in outcomes), outcomes
    assert Session.objects.get(pk="s1").event_count == 0


def run_append_now(call):
    return async_to_sync(db_threads.run_append)(call)
