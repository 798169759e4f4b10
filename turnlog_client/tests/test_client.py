"""Client and AsyncClient against a live Daphne: every endpoint, and the API's refusals as typed exceptions."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from turnlog_client import (
    AsyncClient, Client, Forbidden, IdempotencyKeyReused, Invalid, InvalidEvent, NotFound, SeqConflict, SessionExists,
    ServiceUnavailable, StalePlan, TransportError, Unauthenticated,
)  # fmt: skip
from turnlog_client.errors import OpenTurn
from turnlog_client.tests.conftest import events_of
from tests.servers import free_port


pytestmark = pytest.mark.django_db(transaction=True)  # the server reads what the test commits

TURN = [
    {"type": "user_message", "data": {"content": "charge order 42"}},
    {"type": "turn_start", "data": {"turn": 1}},
    {"type": "step_start", "data": {"turn": 1, "step": 1}},
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [{"id": "c1", "name": "charge", "arguments": {}}]}},
    {"type": "tool_call", "data": {"id": "c1", "name": "charge"}},
]


def test_sessions_are_created_read_and_listed(client):
    created = client.create_session("s1", agent_name="billing-bot", metadata={"team": "a"})
    assert created["id"] == "s1" and created["event_count"] == 0 and created["metadata"] == {"team": "a"}
    assert client.get_session("s1")["agent_name"] == "billing-bot"
    generated = client.create_session()
    assert len(generated["id"]) == 32
    assert [s["id"] for s in client.iter_sessions(limit=1)] == [generated["id"], "s1"]  # two pages of one
    with pytest.raises(SessionExists) as refused:
        client.create_session("s1")
    assert refused.value.status == 409 and refused.value.error == "session_exists" and "s1" in refused.value.detail
    with pytest.raises(NotFound):
        client.get_session("nope")
    with pytest.raises(Invalid) as invalid:
        client.create_session("bad id!")
    assert invalid.value.error == "invalid_session_id"


def test_append_with_expected_seq_and_idempotency_key(client):
    client.create_session("s1")
    assert client.append("s1", TURN[:2], expected_seq=0, idempotency_key="k1") == {"first_seq": 0, "next_seq": 2}
    assert client.append("s1", TURN[:2], expected_seq=0, idempotency_key="k1") == {"first_seq": 0, "next_seq": 2}  # replayed
    with pytest.raises(SeqConflict) as conflict:
        client.append("s1", TURN[2:], expected_seq=0)
    assert conflict.value.next_seq == 2
    with pytest.raises(IdempotencyKeyReused):
        client.append("s1", TURN[2:], idempotency_key="k1")
    with pytest.raises(InvalidEvent) as invalid:
        client.append("s1", [TURN[2], {"type": "bogus", "data": {}}])
    assert (invalid.value.index, invalid.value.reason) == (1, "unknown_event_type")
    assert [e["type"] for e in events_of(client, "s1")] == ["user_message", "turn_start"]
    assert client.events("s1", since=1)["events"][0]["seq"] == 1 and client.events("s1", since=1)["next_seq"] == 2
    assert [m["role"] for m in client.messages("s1")] == ["user"]


def test_recovery_plan_recover_fork_export_and_import(server, client, operator_token):
    client.create_session("s1")
    client.append("s1", TURN)
    plan = client.recovery_plan("s1")
    assert plan["interrupted"] and [r["type"] for r in plan["repairs"]] == ["tool_result", "turn_end"]
    assert plan["repairs"][0]["data"]["metadata"]["risk"] == "tool_outcome_unknown"
    with pytest.raises(Forbidden):
        client.recover("s1")
    with pytest.raises(OpenTurn) as open_turn:
        client.fork("s1", boundary=2)
    assert open_turn.value.body["seq"] == 1
    with Client(server.url, operator_token) as operator:
        client.append("s1", [{"type": "user_message", "data": {"content": "still there?"}}])
        with pytest.raises(StalePlan) as stale:
            operator.recover("s1", digest=plan["digest"])
        assert stale.value.plan["next_seq"] == 6
        applied = operator.recover("s1", digest=stale.value.plan["digest"], note="checked by hand")
    assert [e["type"] for e in applied["appended"]] == ["tool_result", "turn_end"] and applied["next_seq"] == 8
    fork = client.fork("s1", new_id="s1-fork")
    assert fork["parent"] == {"session_id": "s1", "seed_length": 8}
    blob = client.export("s1")
    imported = client.import_session(blob, session_id="s1-copy")
    assert imported["session"]["event_count"] == 8
    assert events_of(client, "s1-copy") == events_of(client, "s1")


def test_refusals_carry_the_error_code_and_detail(server):
    with Client(server.url, "tl_not-a-token") as stranger, pytest.raises(Unauthenticated) as refused:
        stranger.list_sessions()
    assert refused.value.status == 401 and refused.value.error == "unauthenticated" and "unknown token" in refused.value.detail
    with Client(f"http://127.0.0.1:{free_port()}", "t", timeout=2) as nowhere, pytest.raises(TransportError):
        nowhere.list_sessions()


def test_the_async_client_has_the_same_endpoints(server, token):
    async def scenario():
        async with AsyncClient(server.url, token) as api:
            await api.create_session("a1", agent_name="async-bot")
            assert await api.append("a1", TURN, expected_seq=0, idempotency_key="k") == {"first_seq": 0, "next_seq": 5}
            with pytest.raises(SeqConflict):
                await api.append("a1", TURN, expected_seq=0)
            seen = [e["seq"] async for e in api.iter_events("a1")]
            plan = await api.recovery_plan("a1")
            sessions = [s["id"] async for s in api.iter_sessions()]
            stream = api.stream("a1", after=2)
            streamed = [(await anext(stream))["seq"] for _ in range(2)]
            await stream.aclose()
            return seen, plan, sessions, streamed, await api.messages("a1")

    seen, plan, sessions, streamed, messages = asyncio.run(scenario())
    assert seen == [0, 1, 2, 3, 4] and sessions == ["a1"] and streamed == [3, 4]
    assert plan["repairs"][0]["data"]["metadata"]["risk"] == "tool_outcome_unknown"
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_a_writer_without_a_spool_that_cannot_reach_the_server_says_how_to_start_without_it(token, tmp_path):
    with Client(f"http://127.0.0.1:{free_port()}", token, timeout=1) as nowhere:
        with pytest.raises(TransportError, match=r"ConnectError.*spool='agent.spool'") as refused:
            nowhere.writer("s1")
        assert isinstance(refused.value.__cause__.__cause__, httpx.ConnectError)
        spooled = nowhere.writer("s1", spool=tmp_path / "agent.spool", flush_timeout=0.2)
        assert spooled.session_id == "s1"
        spooled.close()  # the creation stays in the spool


def test_a_writer_without_a_spool_facing_an_unavailable_database_says_how_to_start_without_it(tmp_path):
    unavailable = httpx.MockTransport(lambda request: httpx.Response(503, json={"error": "database_unavailable", "detail": "down"}))
    with Client("http://turnlog.invalid", "t", transport=unavailable) as api:
        with pytest.raises(ServiceUnavailable) as refused:
            api.writer("s1")
        assert any("spool='agent.spool'" in note for note in refused.value.__notes__)
        spooled = api.writer("s1", spool=tmp_path / "agent.spool", flush_timeout=0.2)
        assert spooled.writer.next_seq is None  # a session it named: its count is learnt when the server is back
        spooled.close()
