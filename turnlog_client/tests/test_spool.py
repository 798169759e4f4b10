"""The durable spool: a writer killed while the server was away, restarted on the same spool once it is back,
loses nothing and stores nothing twice, also when it died between the server's answer and its record, and also
when it started while the server was down."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest
from django.db import connection

from sessions_app.models import Session
from tests.servers import DaphneServer, free_port
from turnlog_client import Backoff, Client, SeqConflict, SpoolError
from turnlog_client.spool import Spool
from turnlog_client.tests.conftest import events_of, run_script, wait_for_line
from turnlog_client.tests.faults import Faults

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


FAST = Backoff(initial=0.05, maximum=0.2)


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


def spooled_while_away_then_killed(own_server, token, tmp_path):
    """A writer that spooled events while its server was down, killed before it came back (the server is up again)."""
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
    return spool


def test_a_killed_writer_restarted_on_its_spool_loses_nothing_and_repeats_nothing(own_server, token, tmp_path):
    spool = spooled_while_away_then_killed(own_server, token, tmp_path)
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
    spool = spooled_while_away_then_killed(own_server, token, tmp_path)
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


EVENT = b'{"type":"user_message","data":{"content":"%s"},"time":"2026-01-01T00:00:00.000000Z"}'
# What the client wrote before spools could start without the server: five events, k1 delivered, k2 cut, "e" loose.
VERSION_1_FILE = b"""{"spool":1,"session":"s1","next_seq":2}
{"event":{"type":"user_message","data":{"content":"a"},"time":"2026-01-01T00:00:00.000000Z"}}
{"event":{"type":"user_message","data":{"content":"b"},"time":"2026-01-01T00:00:00.000000Z"}}
{"cut":"k1","count":2}
{"sent":"k1","next_seq":4}
{"event":{"type":"user_message","data":{"content":"c"},"time":"2026-01-01T00:00:00.000000Z"}}
{"event":{"type":"user_message","data":{"content":"d"},"time":"2026-01-01T00:00:00.000000Z"}}
{"cut":"k2","count":2}
{"event":{"type":"user_message","data":{"content":"e"},"time":"2026-01-01T00:00:00.000000Z"}}
"""


def reopened(path) -> Spool:
    spool = Spool.open(path, None)
    spool.close(remove=False)
    return spool


def test_a_spool_started_without_the_server_keeps_the_creation_and_an_unknown_count_until_answered(tmp_path):
    path = tmp_path / "agent.spool"
    spool = Spool.open(path, "s1")
    spool.start("s1", None, create={"agent_name": "bot"})
    spool.close(remove=False)
    again = reopened(path)  # no event yet: the creation alone is worth resuming
    assert (again.session_id, again.next_seq, again.create) == ("s1", None, {"agent_name": "bot"})
    spool = Spool.open(path, "s1")
    spool.add(EVENT % b"a")
    spool.cut("k1", 1)
    spool.created(None)  # the session was there: its count is still unknown
    spool.close(remove=False)
    again = reopened(path)
    assert (again.next_seq, again.create, [b.key for b in again.batches]) == (None, None, ["k1"])
    spool = Spool.open(path, "s1")
    spool.delivered("k1", 8)  # the first batch's answer tells the count
    spool.add(EVENT % b"b")
    spool.close(remove=False)
    again = reopened(path)
    assert (again.session_id, again.next_seq, again.batches, again.loose) == ("s1", 8, [], [EVENT % b"b"])


def test_a_creation_that_made_the_session_fixes_the_count_at_0(tmp_path):
    path = tmp_path / "agent.spool"
    spool = Spool.open(path, None)
    spool.start("s1", None, create={})
    spool.created(0)
    spool.add(EVENT % b"a")
    with pytest.raises(SpoolError, match="no creation"):
        spool.created(0)
    spool.close(remove=False)
    again = reopened(path)
    assert (again.next_seq, again.create, again.loose) == (0, None, [EVENT % b"a"])


def test_a_spool_with_everything_delivered_and_its_creation_answered_starts_fresh(tmp_path):
    path = tmp_path / "agent.spool"
    spool = Spool.open(path, None)
    spool.start("s1", None, create={"metadata": {"team": "a"}})
    spool.created(None)
    spool.close(remove=False)
    assert reopened(path).session_id is None  # the server knows the rest: nothing to resume


def test_a_version_1_spool_reads_as_it_was_written(tmp_path):
    path = tmp_path / "agent.spool"
    path.write_bytes(VERSION_1_FILE)
    spool = reopened(path)
    assert (spool.session_id, spool.next_seq, spool.create) == ("s1", 4, None)
    assert [(b.key, b.events) for b in spool.batches] == [("k2", [EVENT % b"c", EVENT % b"d"])] and spool.loose == [EVENT % b"e"]
    path.write_bytes(b'{"spool":3,"session":"s1","next_seq":2}\n')
    with pytest.raises(SpoolError, match="not a spool of version 1 or 2"):
        Spool.open(path, None)


def test_a_version_1_spool_left_by_the_previous_client_is_delivered(server, token, client, tmp_path):
    client.create_session("s1")
    client.append("s1", [{"type": "user_message", "data": {"content": text}} for text in ("x", "y")])
    client.append("s1", [json.loads(EVENT % t) for t in (b"a", b"b")], expected_seq=2, idempotency_key="k1")
    path = tmp_path / "agent.spool"
    path.write_bytes(VERSION_1_FILE)
    with Client(server.url, token, transport=(faults := Faults())) as api:
        with api.writer("s1", spool=path) as session:
            session.user("f")
    assert contents(client) == ["x", "y", "a", "b", "c", "d", "e", "f"]
    assert [json.loads(body).get("expected_seq") for _, body in faults.appends] == [4, 6]
    assert faults.keys()[0] == "k2"  # the batch cut before, with its own key
    assert not path.exists()


def test_a_spooled_writer_starts_without_the_server_and_creates_the_session_first_when_it_is_back(
    down_server, token, tmp_path
):  # fmt: skip
    path = tmp_path / "agent.spool"
    faults = Faults()
    with Client(down_server.url, token, timeout=2, transport=faults) as api:
        session = api.writer(spool=path, agent_name="offline-bot", metadata={"team": "a"}, backoff=FAST)
        assert re.fullmatch(r"[0-9a-f]{32}", session.session_id)
        session.user("while away")
        session.flush()  # returns: on disk, the server away
        assert reopened_while_held(path) == (session.session_id, 0, {"agent_name": "offline-bot", "metadata": {"team": "a"}})
        down_server.start()
        session.user("once back")
        session.close()
        created = api.get_session(session.session_id)
        assert (created["agent_name"], created["metadata"]) == ("offline-bot", {"team": "a"})
        assert [e["data"]["content"] for e in events_of(api, session.session_id)] == ["while away", "once back"]
        assert [json.loads(body)["expected_seq"] for _, body in faults.appends] == [0, 1]  # an id of its own: empty
    assert not path.exists()


def reopened_while_held(path) -> tuple:
    """(session, next_seq, create) in the file a writer holds, read without its lock."""
    header = json.loads(path.read_bytes().splitlines()[0])
    return header["session"], header["next_seq"], header["create"]


def test_a_spooled_writer_of_a_session_with_events_learns_the_count_from_its_first_batch(down_server, token, tmp_path):
    with Client(down_server.start().url, token) as api:
        api.create_session("s1")
        api.append("s1", [{"type": "user_message", "data": {"content": f"earlier {i}"}} for i in range(3)])
    down_server.stop()
    path = tmp_path / "agent.spool"
    faults = Faults()
    with Client(down_server.url, token, timeout=2, transport=faults) as api:
        session = api.writer("s1", spool=path, batch_size=2, backoff=FAST)
        for i in range(5):
            session.user(f"note {i}")
        session.flush()
        assert reopened_while_held(path) == ("s1", None, {})
        down_server.start()
        session.close()
        assert [e["seq"] for e in events_of(api, "s1")] == list(range(8))
        assert contents(api) == [f"earlier {i}" for i in range(3)] + [f"note {i}" for i in range(5)]
    # The first batch goes without expected_seq and its answer tells the count; the others carry it.
    assert [json.loads(body).get("expected_seq") for _, body in faults.appends] == [None, 5, 7]
    assert not path.exists()


def test_a_spooled_writer_of_a_named_session_that_did_not_exist_sends_expected_seq_from_0(down_server, token, tmp_path):
    path = tmp_path / "agent.spool"
    faults = Faults()
    with Client(down_server.url, token, timeout=2, transport=faults) as api:
        session = api.writer("named-1", spool=path, backoff=FAST)
        session.user("hello")
        session.flush()
        down_server.start()
        session.close()
        assert [e["data"]["content"] for e in events_of(api, "named-1")] == ["hello"]
    assert [json.loads(body)["expected_seq"] for _, body in faults.appends] == [0]  # the creation said it made it


def test_a_writer_closed_before_the_server_came_back_leaves_the_creation_for_the_next(down_server, token, tmp_path):
    path = tmp_path / "agent.spool"
    with Client(down_server.url, token, timeout=2) as api:
        session = api.writer(spool=path, agent_name="patient-bot", backoff=FAST, flush_timeout=0.5)
        session.close()  # no event, the server away: the session is still owed
    assert reopened(path).create == {"agent_name": "patient-bot"}
    down_server.start()
    with Client(down_server.url, token) as api:
        with api.writer(spool=path) as resumed:  # no id given: the spool's
            assert resumed.session_id == session.session_id
        assert api.get_session(session.session_id)["agent_name"] == "patient-bot"
    assert not path.exists()


KILLED_AFTER_THE_FIRST_ANSWER_TO = """
    import os, signal, sys
    import httpx
    from turnlog_client import Client

    class KilledAfterTheAnswer(httpx.HTTPTransport):
        # The server has answered the first request to this path; the process dies before the writer records it.
        def handle_request(self, request):
            response = super().handle_request(request)
            if request.method == "POST" and request.url.path.endswith(ending):
                response.read()
                os.kill(os.getpid(), signal.SIGKILL)
            return response

    url, token, spool, ending = sys.argv[1:]
    session = Client(url, token, transport=KilledAfterTheAnswer()).writer(spool=spool)
    session.flush()
"""


@pytest.mark.parametrize(
    ("earlier", "ending"),
    [(0, "/sessions"), (2, "/events")],
    ids=["after-the-creation-made-the-session", "after-the-first-batch-of-a-session-with-events"],
)
def test_a_writer_killed_between_an_answer_that_tells_the_count_and_its_record_delivers_once(
    down_server, token, tmp_path, earlier, ending
):  # fmt: skip
    if earlier:
        with Client(down_server.start().url, token) as api:
            api.create_session("s1")
            api.append("s1", [{"type": "user_message", "data": {"content": f"earlier {i}"}} for i in range(earlier)])
        down_server.stop()
    path = tmp_path / "agent.spool"
    with Client(down_server.url, token, timeout=2) as api:
        session = api.writer("s1", spool=path, backoff=FAST, flush_timeout=0.2)
        session.user("note 0")
        session.flush()
        session.user("note 1")
        session.close()  # the server away: all of it stays in the spool
    down_server.start()
    process = run_script(KILLED_AFTER_THE_FIRST_ANSWER_TO, down_server.url, token, str(path), ending)
    assert process.wait(timeout=60) == -signal.SIGKILL, process.stderr.read()
    resumed = run_script(RESUME, down_server.url, token, str(path))
    assert resumed.wait(timeout=60) == 0, resumed.stderr.read()
    with Client(down_server.url, token) as api:
        assert contents(api) == [f"earlier {i}" for i in range(earlier)] + ["note 0", "note 1", "after the restart"]
        assert [e["seq"] for e in events_of(api, "s1")] == list(range(earlier + 3))
    assert not path.exists()


def test_a_spooled_writer_refuses_at_once_what_the_server_would_refuse_for_certain(token, tmp_path):
    path = tmp_path / "agent.spool"
    with Client(f"http://127.0.0.1:{free_port()}", token, timeout=1) as nowhere:
        with pytest.raises(ValueError, match="must be 1 to 128 characters"):
            nowhere.writer("bad id!", spool=path)
        with pytest.raises(ValueError):
            nowhere.writer("s1", spool=path, metadata={"score": float("nan")})
    Spool.open(path, "s1").close(remove=True)  # not held any more
    assert not path.exists()


AGENT = """
    import sys, time
    import httpx
    from turnlog_client import Backoff, Client

    class Paced(httpx.HTTPTransport):
        # Slow enough for the test to kill a process while the events are being delivered.
        def handle_request(self, request):
            if request.method == "POST" and request.url.path.endswith("/events"):
                time.sleep(0.1)
            return super().handle_request(request)

    url, token, spool, session_id, first, last = sys.argv[1:]
    client = Client(url, token, timeout=2, transport=Paced())
    session = client.writer(
        session_id or None, spool=spool, agent_name="offline-bot", batch_size=8, backoff=Backoff(initial=0.05, maximum=0.5)
    )
    for i in range(int(first), int(last)):
        session.user(f"event {i}")
        if i % 37 == 36:
            session.flush()  # returns while the server is away: the events are on disk
    print("SPOOLED", session.session_id, flush=True)
    if sys.stdin.readline().strip() == "close":
        session.close(timeout=120)
        print("DELIVERED", session.writer.pending, flush=True)
    time.sleep(600)
"""


def spooled(process) -> str:
    """The session id the agent printed once its events were accepted (its stderr if it died first)."""
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("SPOOLED "):
        process.kill()
        process.wait(timeout=10)
        raise AssertionError(f"the agent did not start: {line!r} {process.stderr.read()}")
    return line.split()[1]


def stored(session_id: str) -> int:
    """The session's event count, read from the database (the server may be down)."""
    return Session.objects.filter(id=session_id).values_list("event_count", flat=True).first() or 0


def wait_until_stored(session_id: str, count: int) -> int:
    deadline = time.monotonic() + 60
    while (now := stored(session_id)) < count:
        assert time.monotonic() < deadline, f"{now} events of {session_id} stored, waiting for {count}"
        time.sleep(0.02)
    return now


@pytest.mark.parametrize("existing", [False, True], ids=["new-session", "session-with-events"])
def test_a_writer_started_while_the_server_is_down_delivers_everything_once_across_kills_of_agent_and_server(
    transactional_db, token, tmp_path, existing
):  # fmt: skip
    daphne = DaphneServer(connection.settings_dict, tmp_path / "daphne.log")
    spool = tmp_path / "agent.spool"
    earlier = [f"earlier {i}" for i in range(5)] if existing else []
    agents = []
    try:
        if existing:
            with Client(daphne.start().url, token) as api:
                api.create_session("s-old")
                api.append("s-old", [{"type": "user_message", "data": {"content": text}} for text in earlier])
            daphne.stop()
        given = "s-old" if existing else ""  # a new session: the agent names none, the writer makes its id
        base = len(earlier)

        # The server is down: the agent starts, accepts 100 events, and is killed.
        agents.append(run_script(AGENT, daphne.url, token, str(spool), given, "0", "100"))
        session_id = spooled(agents[-1])
        killed(agents[-1])
        assert spool.exists() and stored(session_id) == base

        # Still down: the restarted agent resumes the spool, accepts 100 more, and is killed while delivering.
        agents.append(run_script(AGENT, daphne.url, token, str(spool), given, "100", "200"))
        assert spooled(agents[-1]) == session_id
        daphne.start()
        wait_until_stored(session_id, base + 16)
        killed(agents[-1])
        assert base + 16 <= stored(session_id) < base + 200

        # The third agent resumes with the server up and accepts 100 more; the server is killed during delivery.
        reached = stored(session_id)
        agents.append(run_script(AGENT, daphne.url, token, str(spool), given, "200", "300"))
        reached = wait_until_stored(session_id, reached + 16)
        daphne.stop(kill=True)
        assert reached <= stored(session_id) < base + 300
        daphne.start()
        assert spooled(agents[-1]) == session_id
        agents[-1].stdin.write("close\n")
        agents[-1].stdin.flush()
        wait_for_line(agents[-1], "DELIVERED 0")

        with Client(daphne.url, token) as api:
            events = events_of(api, session_id)
            created = api.get_session(session_id)
        assert [e["seq"] for e in events] == list(range(base + 300))
        assert [e["data"]["content"] for e in events] == earlier + [f"event {i}" for i in range(300)]
        assert created["event_count"] == base + 300
        if not existing:
            assert re.fullmatch(r"[0-9a-f]{32}", session_id)  # the form of the ids the server makes
            assert created["agent_name"] == "offline-bot"
        assert not spool.exists()  # everything delivered
    finally:
        for agent in agents:
            agent.kill()
            agent.wait(timeout=10)
        daphne.stop()
