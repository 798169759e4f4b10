"""A billing agent's session, written over the API, that crashed while charging a card: an earlier turn compacted
into a summary, a completed email, a charge whose outcome is unknown, and a person's verdict on that charge."""

from __future__ import annotations

from sessions_app.selectors import access
from sessions_app.services.verdicts import record_verdict
from turnlog_client import Client

SYSTEM = "You are billing-bot. Never charge a card twice."
SUMMARY = "Summary so far: customer cus_1 is Dana Okafor, card on file visa 4242."
ASK = "Charge order 42 ($12.00) and email Dana the receipt."
EVIDENCE = "payments table: charge ch_demo_1 found by idempotency key order-42"

EVENTS = [
    {"type": "system_message", "data": {"content": SYSTEM, "name": None, "metadata": {}}},
    {"type": "user_message", "data": {"content": "Who is customer cus_1?", "metadata": {}}},
    {"type": "turn_start", "data": {"turn": 1}},
    {"type": "step_start", "data": {"turn": 1, "step": 1}},
    {"type": "assistant_message", "data": {"content": "", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "lookup_customer", "arguments": "{\"id\": \"cus_1\"}"}}]}},
    {"type": "tool_result", "data": {"tool_call_id": "c0", "name": "lookup_customer", "content": {"name": "Dana Okafor"}}},
    {"type": "step_end", "data": {"turn": 1, "step": 1, "outcome": "ok"}},
    {"type": "step_start", "data": {"turn": 1, "step": 2}},
    {"type": "assistant_message", "data": {"content": "That is Dana Okafor.", "reasoning_content": "Easy."}},
    {"type": "step_end", "data": {"turn": 1, "step": 2, "outcome": "ok"}},
    {"type": "turn_end", "data": {"turn": 1, "steps": 2, "reason": "complete"}},
    # seq 11: the first turn compacted into a summary standing in its place
    {"type": "user_message", "data": {"content": SUMMARY, "surface_op": ["replace", 1, 10], "metadata": {"compaction": True}}},
    {"type": "user_message", "data": {"content": ASK}},
    {"type": "turn_start", "data": {"turn": 2}},
    {"type": "step_start", "data": {"turn": 2, "step": 1}},
    {"type": "assistant_message", "data": {"content": "Charging, then emailing.", "reasoning_content": "Two calls.", "tool_calls": [
        {"id": "c1", "name": "charge_card", "arguments": {"order": 42, "amount_cents": 1200, "idempotency_key": "order-42"}},
        {"id": "c2", "name": "send_email", "arguments": {"to": "dana@example.com", "subject": "Receipt"}}]}},
    {"type": "tool_call", "data": {"id": "c1", "name": "charge_card"}},
    {"type": "tool_call", "data": {"id": "c2", "name": "send_email"}},
    {"type": "tool_result", "data": {"tool_call_id": "c2", "name": "send_email", "content": "queued message <m1@mail.test>"}},
    # the process died here: charge_card's result never came back
]
OPEN_TURN = 13


def write_crashed_session(client: Client, session_id: str = "billing-1") -> str:
    client.create_session(session_id, agent_name="billing-bot")
    client.append(session_id, EVENTS)
    return session_id


def record_charge_verdict(username: str, session_id: str) -> None:
    """The operator checked the payments table: the charge happened (the service the API's verdict endpoint calls)."""
    from django.contrib.auth import get_user_model

    actor = access.Actor(user=get_user_model().objects.get(username=username))
    record_verdict(actor=actor, session_id=session_id, call_id="c1", outcome="happened", evidence=EVIDENCE, external_ref="ch_demo_1")
