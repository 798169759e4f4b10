"""Client.resume: a session's fold as OpenAI chat messages, refused while a turn is open or a call has no result
(against a live Daphne), and the conversion of each kind of fold message (pure)."""

from __future__ import annotations

import asyncio
import json

import pytest

from turnlog_client import AsyncClient, Client, NotFound, RecoveryNeeded
from turnlog_client.resume import chat_message, chat_messages
from turnlog_client.tests.histories import ASK, EVIDENCE, OPEN_TURN, SUMMARY, SYSTEM, record_charge_verdict, write_crashed_session

live = pytest.mark.django_db(transaction=True)  # the server reads what the test commits

CALLS = [
    {"id": "c1", "type": "function", "function": {
        "name": "charge_card", "arguments": '{"order":42,"amount_cents":1200,"idempotency_key":"order-42"}'}},
    {"id": "c2", "type": "function", "function": {"name": "send_email", "arguments": '{"to":"dana@example.com","subject":"Receipt"}'}},
]  # fmt: skip


@live
def test_resume_after_recovery_with_context_gives_the_fold_with_the_synthetic_result_and_the_context(server, client, operator_token):
    session_id = write_crashed_session(client)
    record_charge_verdict("operator", session_id)
    with Client(server.url, operator_token) as operator:
        appended = operator.recover(session_id, context=True)["appended"]
    synthetic, turn_end, context = appended
    assert (synthetic["type"], turn_end["type"], context["type"]) == ("tool_result", "turn_end", "system_message")
    assert synthetic["data"]["tool_call_id"] == "c1" and synthetic["data"]["metadata"]["risk"] == "tool_outcome_unknown"
    # The verdict reaches the agent: in the synthetic result (stated and in its metadata) and in the context.
    assert synthetic["data"]["metadata"]["verdict"]["outcome"] == "happened" and EVIDENCE in synthetic["data"]["content"]
    assert "verified happened by operator" in context["data"]["content"] and "ch_demo_1" in context["data"]["content"]
    assert context["data"]["metadata"] == {"synthetic": True, "recovery_context": True} and "charge_card" in context["data"]["content"]

    assert client.resume(session_id) == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": SUMMARY},  # the compaction, in the place of the turn it replaced
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": "Charging, then emailing.", "tool_calls": CALLS},  # reasoning dropped
        {"role": "tool", "tool_call_id": "c2", "content": "queued message <m1@mail.test>"},
        {"role": "tool", "tool_call_id": "c1", "content": synthetic["data"]["content"]},
        {"role": "system", "content": context["data"]["content"]},
    ]


@live
def test_resume_refuses_an_open_turn_and_names_the_fix(server, token, client):
    session_id = write_crashed_session(client)
    with pytest.raises(RecoveryNeeded) as refused:
        client.resume(session_id)
    assert refused.value.open_turns == [OPEN_TURN] and refused.value.session_id == session_id
    assert f"client.recover({session_id!r}, context=True)" in str(refused.value)
    # Not strict: the history as it stands, charge_card's call still without a result.
    messages = client.resume(session_id, strict=False)
    assert [m["role"] for m in messages] == ["system", "user", "user", "assistant", "tool"]
    with pytest.raises(RecoveryNeeded) as async_refused:
        asyncio.run(_async_resume(server.url, token, session_id))
    assert async_refused.value.open_turns == [OPEN_TURN]


async def _async_resume(url: str, token: str, session_id: str):
    async with AsyncClient(url, token) as api:
        return await api.resume(session_id)


@live
def test_resume_refuses_a_call_without_result_outside_any_turn_until_it_is_patched(server, client, operator_token):
    client.create_session("s1")
    client.append("s1", [
        {"type": "user_message", "data": {"content": "hi"}},
        {"type": "assistant_message", "data": {"content": None, "tool_calls": {"id": 7, "name": "ping", "arguments": {}}}},
    ])  # fmt: skip
    with pytest.raises(RecoveryNeeded) as refused:
        client.resume("s1")
    assert refused.value.unanswered == ["7"] and "client.patch_dangling_calls('s1')" in str(refused.value)
    with Client(server.url, operator_token) as operator:
        operator.patch_dangling_calls("s1")
    assert client.resume("s1")[1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "7", "type": "function", "function": {"name": "ping", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "7", "content": "Tool call was interrupted and not executed. Please retry if needed."},
    ]  # fmt: skip


@live
def test_resume_of_an_unknown_session_is_not_found(client):
    with pytest.raises(NotFound):
        client.resume("nope")


def fold_message(role: str, **fields) -> dict:
    return {"seq": 0, "role": role, "content": None, "tool_calls": [], "tool_call_id": None, "name": None,
            "metadata": {}, "reasoning_content": None, "created_at": "2026-01-01T00:00:00Z", **fields}  # fmt: skip


def test_a_tool_result_that_is_not_text_becomes_its_json_text():
    assert chat_message(fold_message("tool", tool_call_id="c1", content={"ok": True, "n": 1})) == {
        "role": "tool", "tool_call_id": "c1", "content": '{"ok":true,"n":1}'
    }  # fmt: skip
    assert chat_message(fold_message("tool", tool_call_id="c1", content=[{"type": "text", "text": "hi"}]))["content"] == (
        '[{"type":"text","text":"hi"}]'
    )
    assert chat_message(fold_message("tool", id=3, content=None)) == {"role": "tool", "tool_call_id": "3", "content": "null"}


def test_calls_in_either_shape_become_openai_calls_and_calls_without_an_id_are_left_out():
    message = fold_message("assistant", content="", reasoning_content="hidden", tool_calls=[
        {"id": "a", "name": "own", "arguments": {"x": [1, "é"]}},
        {"id": "b", "type": "function", "function": {"name": "openai", "arguments": "{\"y\": 2}"}},
        {"tool_call_id": True, "name": 5},
        {"name": "no_id", "arguments": {}},
        "not a call",
    ])  # fmt: skip
    assert chat_message(message) == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "own", "arguments": json.dumps({"x": [1, "é"]}, ensure_ascii=False, separators=(",", ":"))}},
        {"id": "b", "type": "function", "function": {"name": "openai", "arguments": "{\"y\": 2}"}},
        {"id": "true", "type": "function", "function": {"name": "5", "arguments": "{}"}},
    ]}  # fmt: skip


def test_user_content_parts_stay_parts_and_other_values_become_json_text():
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]
    assert chat_message(fold_message("user", content=parts)) == {"role": "user", "content": parts}
    assert chat_message(fold_message("system", content={"k": 1})) == {"role": "system", "content": '{"k":1}'}
    # As OpenTelemetry ingest keeps them: plain strings, and text parts with "content".
    assert chat_message(fold_message("system", content=["one", {"type": "text", "content": "two"}, {"type": "uri", "uri": "u"}])) == {
        "role": "system", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}, {"type": "uri", "uri": "u"}]
    }  # fmt: skip
    assert chat_message(fold_message("user", content=None)) == {"role": "user", "content": ""}
    assert chat_message(fold_message("assistant", content=None)) == {"role": "assistant", "content": ""}


def test_not_strict_keeps_an_open_turn_and_unanswered_calls():
    fold = [fold_message("assistant", tool_calls=[{"id": "c1", "name": "t", "arguments": {}}])]
    with pytest.raises(RecoveryNeeded):
        chat_messages("s", fold, [], strict=True)
    assert chat_messages("s", fold, [3], strict=False)[0]["tool_calls"][0]["id"] == "c1"
