"""turnlog_client.pydantic_ai: a recovered session continues as a Pydantic AI agent's message history
(a real Agent over a FunctionModel, against a live Daphne), and the grouping of chat messages into requests and responses."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart,
)  # fmt: skip
from pydantic_ai.models.function import AgentInfo, FunctionModel

from turnlog_client import Client
from turnlog_client.pydantic_ai import message_history, model_messages
from turnlog_client.tests.histories import ASK, SUMMARY, SYSTEM, record_charge_verdict, write_crashed_session


def described(parts) -> list[tuple]:
    """Parts without their timestamps: (kind, content or tool name, arguments, call id)."""
    return [
        (type(p).__name__, getattr(p, "content", getattr(p, "tool_name", None)), getattr(p, "args", None), getattr(p, "tool_call_id", None))
        if not isinstance(p, ToolReturnPart) else ("ToolReturnPart", p.tool_name, p.content, p.tool_call_id)
        for p in parts
    ]


def texts(message: ModelMessage) -> list[str]:
    return [part.content for part in message.parts if isinstance(getattr(part, "content", None), str)]


@pytest.mark.django_db(transaction=True)
def test_a_recovered_session_continues_in_an_agent_that_sees_the_synthetic_result_and_the_context(server, client, operator_token):
    session_id = write_crashed_session(client)
    record_charge_verdict("operator", session_id)
    with Client(server.url, operator_token) as operator:
        synthetic, _, context = operator.recover(session_id, context=True)["appended"]

    history = message_history(client, session_id)
    assert [type(m) for m in history] == [ModelRequest, ModelResponse, ModelRequest]
    assert described(history[0].parts) == described([SystemPromptPart(SYSTEM), UserPromptPart(SUMMARY), UserPromptPart(ASK)])
    response = history[1].parts
    assert [type(p) for p in response] == [TextPart, ToolCallPart, ToolCallPart]
    assert [(p.tool_name, p.tool_call_id, p.args_as_dict()) for p in response[1:]] == [
        ("charge_card", "c1", {"order": 42, "amount_cents": 1200, "idempotency_key": "order-42"}),
        ("send_email", "c2", {"to": "dana@example.com", "subject": "Receipt"}),
    ]
    returns, system = history[2].parts[:2], history[2].parts[2]
    assert [(p.tool_name, p.tool_call_id) for p in returns] == [("send_email", "c2"), ("charge_card", "c1")]
    assert returns[1].content == synthetic["data"]["content"] and described([system]) == described([SystemPromptPart(context["data"]["content"])])

    seen: list[list[ModelMessage]] = []
    charged: list[dict] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart("The charge went through before the crash; I will not charge again.")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def charge_card(order: int, amount_cents: int, idempotency_key: str) -> str:
        charged.append({"order": order})
        return "charged"

    result = agent.run_sync("Go on.", message_history=history)
    assert result.output.startswith("The charge went through") and charged == [] and len(seen) == 1
    sent = seen[0]
    returned = [p for m in sent for p in m.parts if isinstance(p, ToolReturnPart)]
    # Pydantic AI puts the results in the order of the calls they answer.
    assert {p.tool_call_id: p.content for p in returned} == {"c1": synthetic["data"]["content"], "c2": "queued message <m1@mail.test>"}
    # The context reaches the model: as a system part, or as <system>-tagged user text for a model without that channel.
    assert any(context["data"]["content"] in text for text in texts(sent[-1]))
    assert any(text.endswith("Go on.") for text in texts(sent[-1]))


def test_messages_group_into_requests_and_responses_and_results_take_their_calls_names():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "seen"},
        {"role": "system", "content": "context"},
        {"role": "assistant", "content": None},
        {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]  # fmt: skip
    history = model_messages(messages)
    assert [type(m) for m in history] == [ModelRequest, ModelResponse, ModelRequest, ModelResponse, ModelRequest]
    assert history[0].parts[0].content[0] == "see" and history[0].parts[0].content[1].url == "https://x.test/a.png"
    assert history[1].parts == [ToolCallPart("look", "{}", "a")]
    assert described(history[2].parts) == described([ToolReturnPart("look", "seen", "a"), SystemPromptPart("context")])
    assert history[3].parts == [TextPart("")] and described(history[4].parts) == described([SystemPromptPart("a\nb")])
    assert [described(m.parts) for m in message_history(messages)] == [described(m.parts) for m in history]
    with pytest.raises(TypeError):
        message_history(Client("http://127.0.0.1:9", "t"))
