"""An agent's idempotency key reaches the server's calls against a live Daphne: written by `tool_call(...,
idempotency_key=)` into the event's metadata, or found among the call's arguments (a Pydantic AI or OpenAI
Agents SDK tool with an `idempotency_key` parameter needs nothing more)."""

from __future__ import annotations

import httpx
import pytest

from turnlog_client.tests.conftest import events_of

pytestmark = pytest.mark.django_db(transaction=True)  # the server reads what the test commits


def calls_with(server, token: str, ref: str) -> list[dict]:
    response = httpx.get(f"{server.url}/api/v1/calls", params={"ref": ref}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def test_tool_call_writes_the_key_into_the_events_metadata_and_the_call_shows_it(client, server, token):
    with client.writer("s1", agent_name="billing-bot") as session:
        session.user("Charge order 42")
        with session.turn():
            with session.step():
                session.assistant("", tool_calls=[{"id": "c1", "name": "charge_card", "arguments": {"order": 42}}])
                session.tool_call("c1", "charge_card", {"order": 42}, idempotency_key="order-42-charge")
                session.tool_result("c1", '{"id": "ch_3Px"}', name="charge_card")
    [dispatch] = [e for e in events_of(client, "s1") if e["type"] == "tool_call"]
    assert dispatch["data"] == {"id": "c1", "name": "charge_card", "arguments": {"order": 42}, "metadata": {"idempotency_key": "order-42-charge"}}
    [call] = calls_with(server, token, "order-42-charge")
    assert (call["session_id"], call["call_id"], call["idempotency_key"], call["state"]) == ("s1", "c1", "order-42-charge", "completed")


def test_tool_call_without_a_key_writes_what_it_always_wrote(client):
    with client.writer("s2") as session:
        session.tool_call("c1", "lookup", {"q": 1})
    [dispatch] = [e for e in events_of(client, "s2") if e["type"] == "tool_call"]
    assert dispatch["data"] == {"id": "c1", "name": "lookup", "arguments": {"q": 1}}


def test_a_key_among_the_calls_arguments_is_the_calls_key(client, server, token):
    arguments = '{"order": 7, "idempotency_key": "order-7-refund"}'  # as a framework sends them: a JSON text
    with client.writer("s3") as session:
        session.assistant("", tool_calls=[{"id": "r1", "type": "function", "function": {"name": "issue_refund", "arguments": arguments}}])
    [call] = calls_with(server, token, "order-7-refund")
    assert (call["session_id"], call["call_id"], call["idempotency_key"]) == ("s3", "r1", "order-7-refund")
