"""The writer against a live Daphne: batching, retries that store each event once, and refusals it must not paper over."""

from __future__ import annotations

import json
import time

import pytest

from tests.servers import free_port
from turnlog_client import Backoff, Client, FlushTimeout, InvalidEvent, NotFound, SeqConflict, Writer
from turnlog_client.spool import Spool
from turnlog_client.tests.conftest import events_of, run_script
from turnlog_client.tests.faults import DROP, REFUSE, Faults, foreign_append, status


pytestmark = pytest.mark.django_db(transaction=True)  # the server reads what the test commits

FAST = Backoff(initial=0.05, maximum=0.2)


def notes(n: int, start: int = 0) -> list[str]:
    return [f"note {i}" for i in range(start, start + n)]


def write(session, texts) -> None:
    for text in texts:
        session.user(text)


def contents(api: Client, session_id: str) -> list:
    return [e["data"].get("content") for e in events_of(api, session_id)]


def wait_until(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return result


def test_a_full_batch_is_sent_at_once_and_the_rest_on_close(server, token):
    faults = Faults()
    with Client(server.url, token, transport=faults) as api:
        with api.writer("s1", batch_size=10, flush_interval=60) as session:
            write(session, notes(25))
            wait_until(lambda: len(faults.appends) == 2)  # two full batches went without waiting for the interval
        assert [len(b) for b in faults.batches()] == [10, 10, 5]
        assert contents(api, "s1") == notes(25)
        assert [json.loads(body)["expected_seq"] for _, body in faults.appends] == [0, 10, 20]


def test_events_go_after_the_flush_interval_without_a_flush(client):
    session = client.writer("s1", flush_interval=0.3)
    write(session, notes(3))
    assert wait_until(lambda: contents(client, "s1")) == notes(3)
    session.close()


def test_a_writer_never_closed_delivers_at_interpreter_exit(server, token, client):
    script = run_script(
        """
        import sys
        from turnlog_client import Client
        session = Client(sys.argv[1], sys.argv[2]).writer("exit-1", flush_interval=3600)
        for i in range(5):
            session.user(f"note {i}")
        """,
        server.url, token,
    )  # fmt: skip
    assert script.wait(timeout=60) == 0, script.stderr.read()
    assert contents(client, "exit-1") == notes(5)


def test_a_retry_after_a_lost_answer_stores_each_event_once(server, token):
    faults = Faults(DROP, DROP)
    with Client(server.url, token, transport=faults) as api:
        with api.writer("s1", backoff=FAST) as session:
            write(session, notes(3))
            session.flush()
            write(session, notes(2, start=3))
        assert contents(api, "s1") == notes(5)
        first, *rest = faults.appends
        assert rest[:2] == [first, first]  # the same key and the very same body, twice more
        assert faults.answers == ["lost", "lost", 201, 201]
        assert api.get_session("s1")["event_count"] == 5


@pytest.mark.parametrize("answer", [status(503, retry_after=1), status(429, retry_after=1), status(502)])
def test_overload_and_server_errors_are_retried_after_retry_after(server, token, answer):
    faults = Faults(answer)
    with Client(server.url, token, transport=faults) as api:
        with api.writer("s1", backoff=FAST) as session:
            session.user("hello")
            started = time.monotonic()
            session.flush()
            waited = time.monotonic() - started
        assert faults.answers == [answer[0], 201] and len(set(faults.keys())) == 1
        assert contents(api, "s1") == ["hello"]
        if "Retry-After" in answer[1]:
            assert waited >= 0.95
        else:
            assert waited < 1


def test_a_lost_answer_then_another_writer_is_settled_by_the_key(server, token):
    """The first attempt was stored and its answer lost; another writer appends before the retry. The retry is
    answered from its key (stored once); the writer's next batch then meets the other writer's event: SeqConflict."""
    faults = Faults(DROP, foreign_append(server.url, token, "s1"))
    with Client(server.url, token, transport=faults) as api:
        session = api.writer("s1", backoff=FAST)
        write(session, notes(2))
        session.flush()
        session.user("after the other writer")
        with pytest.raises(SeqConflict) as conflict:
            session.flush()
        assert conflict.value.next_seq == 3
        assert contents(api, "s1") == ["note 0", "note 1", "another writer"]
        assert faults.answers == ["lost", 201, 409] and len(set(faults.keys())) == 2  # never re-sent under a new key
        with pytest.raises(SeqConflict):
            session.user("one more")
        assert session.writer.pending == 1
        with pytest.raises(SeqConflict):
            session.close()


def test_an_attempt_that_never_arrived_is_not_resent_past_a_conflict(server, token):
    faults = Faults(REFUSE, foreign_append(server.url, token, "s1"))
    with Client(server.url, token, transport=faults) as api:
        session = api.writer("s1", backoff=FAST)
        write(session, notes(2))
        with pytest.raises(SeqConflict):
            session.flush()
        assert faults.answers == ["refused", 409] and len(set(faults.keys())) == 1
        assert contents(api, "s1") == ["another writer"]
        with pytest.raises(SeqConflict):
            session.close()


def test_a_refused_batch_stops_the_writer_with_the_api_error(client):
    session = client.writer("s1")
    session.user("fine")
    session.user("nul \x00 inside")
    with pytest.raises(InvalidEvent) as refused:
        session.flush()
    assert (refused.value.index, refused.value.reason) == (1, "invalid_data")
    assert contents(client, "s1") == []  # all or nothing
    with pytest.raises(InvalidEvent):
        session.close()


def test_the_writer_refuses_what_the_api_would_before_sending(client):
    session = client.writer("s1")
    with pytest.raises(ValueError):
        session.event("bogus", {})
    with pytest.raises(ValueError):
        session.user(float("nan"))
    with pytest.raises(ValueError):
        session.user("lone \ud800 surrogate")
    session.close()


def test_a_flush_that_cannot_reach_the_server_times_out_and_keeps_the_events(token):
    with Client(f"http://127.0.0.1:{free_port()}", token, timeout=1) as api:
        writer = Writer(api, "s1", next_seq=0, backoff=FAST, flush_timeout=0.5)
        writer.add("user_message", {"content": "hello"})
        with pytest.raises(FlushTimeout) as timed_out:
            writer.flush()
        assert "not delivered" in str(timed_out.value) and timed_out.value.last_error is not None
        assert writer.pending == 1
        with pytest.raises(FlushTimeout):
            writer.close()


def test_a_creation_refused_for_good_stops_the_writer_and_the_spool_keeps_everything(down_server, token, tmp_path):
    path = tmp_path / "agent.spool"
    with Client(down_server.url, token, timeout=2) as api:
        session = api.writer("s1", project="no-such-project", spool=path, backoff=FAST)
        write(session, notes(2))
        session.flush()
        down_server.start()
        assert isinstance(wait_until(lambda: session.writer.failure), NotFound)
        with pytest.raises(NotFound):
            session.flush()
        with pytest.raises(NotFound):
            session.close()
        with pytest.raises(NotFound):
            api.get_session("s1")
    kept = Spool.open(path, "s1")
    assert kept.create == {"project": "no-such-project"} and len(kept.batches) == 1
    kept.close(remove=False)
