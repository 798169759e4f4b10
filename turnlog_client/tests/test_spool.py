"""The durable spool: a writer killed while the server was away, restarted on the same spool once it is back,
loses nothing and stores nothing twice, also when it died between the server's answer and its record."""

from __future__ import annotations

import signal

import pytest

from turnlog_client import Client, SeqConflict, SpoolError
from turnlog_client.spool import Spool
from turnlog_client.tests.conftest import events_of, run_script, wait_for_line

pytestmark = pytest.mark.django_db(transaction=True)  # the server reads what the test commits

WRITE_WHILE_AWAY = """
    import sys, time
    from turnlog_client import Client

    url, token, spool = sys.argv[1:]
    session = Client(url, token, timeout=2).writer("s1", spool=spool, flush_interval=3600)
    session.user("note 0")
    session.user("note 1")
    session.flush()
    print("UP", flush=True)
    sys.stdin.readline()  # the test stops the server meanwhile
    session.user("note 2")
    session.start_turn()
    session.start_step()
    session.tool_call("c1", "charge_card", {"order": 42})  # flushed: on disk, the server being away
    session.user("note 3")
    session.user("note 4")  # written to the spool, never cut into a batch
    print("SPOOLED", flush=True)
    time.sleep(600)
"""

RESUME = """
    import sys
    from turnlog_client import Client

    url, token, spool = sys.argv[1:]
    with Client(url, token).writer("s1", spool=spool) as session:
        session.user("after the restart")
"""

KILLED_AFTER_THE_ANSWER = """
    import os, signal, sys
    import httpx
    from turnlog_client import Client

    class KilledAfterTheAnswer(httpx.HTTPTransport):
        # The server has stored the batch and answered; the process dies before the writer records it.
        def handle_request(self, request):
            response = super().handle_request(request)
            if request.method == "POST" and request.url.path.endswith("/events"):
                response.read()
                os.kill(os.getpid(), signal.SIGKILL)
            return response

    url, token, spool = sys.argv[1:]
    session = Client(url, token, transport=KilledAfterTheAnswer()).writer("s1", spool=spool)
    for i in range(3):
        session.user(f"note {i}")
    session.flush()
"""


def contents(api: Client) -> list:
    return [e["data"].get("content", e["type"]) for e in events_of(api, "s1")]


def undelivered(path) -> list[str]:
    """The keys of the batches the spool at `path` still has to deliver."""
    spool = Spool.open(path, None)
    try:
        return [batch.key for batch in spool.batches]
    finally:
        spool.close(remove=False)


def killed(process) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def test_a_killed_writer_restarted_on_its_spool_loses_nothing_and_repeats_nothing(own_server, token, tmp_path):
    spool = tmp_path / "agent.spool"
    process = run_script(WRITE_WHILE_AWAY, own_server.url, token, str(spool))
    try:
        wait_for_line(process, "UP")
        own_server.stop()
        process.stdin.write("go\n")
        process.stdin.flush()
        wait_for_line(process, "SPOOLED")
    finally:
        killed(process)
    own_server.start()
    resumed = run_script(RESUME, own_server.url, token, str(spool))
    assert resumed.wait(timeout=60) == 0, resumed.stderr.read()
    with Client(own_server.url, token) as api:
        assert contents(api) == [
            "note 0", "note 1", "note 2", "turn_start", "step_start", "tool_call", "note 3", "note 4", "after the restart"
        ]  # fmt: skip
        assert [e["seq"] for e in events_of(api, "s1")] == list(range(9))
    assert not spool.exists()  # everything delivered: nothing left for a next run


def test_a_writer_killed_between_the_answer_and_its_record_is_answered_from_the_key(server, token, client, tmp_path):
    spool = tmp_path / "agent.spool"
    process = run_script(KILLED_AFTER_THE_ANSWER, server.url, token, str(spool))
    assert process.wait(timeout=60) == -signal.SIGKILL, process.stderr.read()
    assert contents(client) == ["note 0", "note 1", "note 2"]  # stored, and the spool does not know it
    assert len(undelivered(spool)) == 1
    resumed = run_script(RESUME, server.url, token, str(spool))
    assert resumed.wait(timeout=60) == 0, resumed.stderr.read()
    assert contents(client) == ["note 0", "note 1", "note 2", "after the restart"]


def test_a_session_recovered_while_the_writer_was_dead_is_a_conflict_and_the_spool_keeps_the_events(
    own_server, token, operator_token, tmp_path
):  # fmt: skip
    spool = tmp_path / "agent.spool"
    process = run_script(WRITE_WHILE_AWAY, own_server.url, token, str(spool))
    try:
        wait_for_line(process, "UP")
        own_server.stop()
        process.stdin.write("go\n")
        process.stdin.flush()
        wait_for_line(process, "SPOOLED")
    finally:
        killed(process)
    own_server.start()
    with Client(own_server.url, operator_token) as operator:
        operator.append("s1", [{"type": "user_message", "data": {"content": "someone else"}}])
    with Client(own_server.url, token) as api:
        session = api.writer("s1", spool=spool)
        with pytest.raises(SeqConflict) as conflict:
            session.close()
        assert conflict.value.next_seq == 3
        assert contents(api) == ["note 0", "note 1", "someone else"]
    assert len(undelivered(spool)) == 2  # both undelivered batches are kept, with their keys


def test_the_spool_file_survives_a_torn_last_line_and_is_held_by_one_writer(tmp_path):
    path = tmp_path / "agent.spool"
    spool = Spool.open(path, "s1")
    spool.start("s1", 5)
    spool.add(b'{"type":"user_message","data":{"content":"kept"},"time":"2026-01-01T00:00:00Z"}')
    spool.cut("k1", 1)
    spool.add(b'{"type":"user_message","data":{"content":"loose"},"time":"2026-01-01T00:00:00Z"}')
    with pytest.raises(SpoolError, match="in use"):
        Spool.open(path, "s1")
    spool.close(remove=False)
    with path.open("ab") as file:
        file.write(b'{"event":{"type":"user_mess')  # the process died inside a write
    again = Spool.open(path, "s1")
    assert again.next_seq == 5 and [b.key for b in again.batches] == ["k1"] and len(again.loose) == 1
    assert path.read_bytes().endswith(b"}\n")
    again.close(remove=False)
    with pytest.raises(SpoolError, match="undelivered events of session 's1'"):
        Spool.open(path, "s2")


def test_a_writer_that_cannot_start_releases_its_spool(token, tmp_path):
    from tests.servers import free_port
    from turnlog_client import TransportError

    path = tmp_path / "agent.spool"
    with Client(f"http://127.0.0.1:{free_port()}", token, timeout=1) as nowhere, pytest.raises(TransportError):
        nowhere.writer("s1", spool=path)  # a fresh spool: the session's count must come from the server
    Spool.open(path, "s1").close(remove=True)  # not held any more
