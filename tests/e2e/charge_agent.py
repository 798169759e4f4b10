"""A Pydantic AI agent that charges a card, instrumented with OpenTelemetry's SimpleSpanProcessor and
exported over OTLP/HTTP to Turnlog: what the settled-crash test runs in a process of its own.

    python charge_agent.py URL TOKEN CONVERSATION PAYMENTS_DB [--crash-after-charge MARKER | --crash-before-charge MARKER] [--resume]

The model is scripted (FunctionModel, no network). A first run asks for `charge_card(order, amount,
idempotency_key)`; the tool writes the charge to the payments table (a SQLite file), then, with a
--crash option, blocks until the process is killed (after or before writing). With --resume the
agent continues from the recovered session: its history comes from Turnlog's client
(`turnlog_client.pydantic_ai.message_history`), and the model charges again only if the history
says the charge was verified as not made.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
import uuid
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

ORDER, AMOUNT, KEY = "A1", 4200, "order-A1-charge"


def exporter(url: str, token: str):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=f"{url}/otlp/v1/traces", headers={"Authorization": f"Bearer {token}"})


def charge_results(messages) -> list[str]:
    """The contents of every charge_card result the model has seen, oldest first."""
    return [
        part.model_response_str() if not isinstance(part.content, str) else part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == "charge_card"
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("conversation")
    parser.add_argument("payments", type=Path)
    parser.add_argument("--crash-after-charge", type=Path)
    parser.add_argument("--crash-before-charge", type=Path)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    provider = TracerProvider(resource=Resource.create({"service.name": "billing-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter(args.url, args.token)))
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))

    def model(messages, info: AgentInfo) -> ModelResponse:
        results = charge_results(messages)
        if not results:
            return ModelResponse(parts=[ToolCallPart("charge_card", {"order": ORDER, "amount": AMOUNT, "idempotency_key": KEY}, tool_call_id=f"charge_{uuid.uuid4().hex[:8]}")])
        last = results[-1]
        if "verified as not having happened" in last:  # Turnlog's recovery says what the reconciler found
            return ModelResponse(parts=[ToolCallPart("charge_card", {"order": ORDER, "amount": AMOUNT, "idempotency_key": KEY}, tool_call_id=f"charge_{uuid.uuid4().hex[:8]}")])
        return ModelResponse(parts=[TextPart(f"Order {ORDER} is charged.")])

    agent = Agent(FunctionModel(model), name="billing", instructions="You charge orders.")

    @agent.tool_plain
    def charge_card(order: str, amount: int, idempotency_key: str) -> str:
        if args.crash_before_charge:
            args.crash_before_charge.write_text(order)
            while True:  # killed here, before the charge is made
                time.sleep(1)
        charge_id = f"ch_{uuid.uuid4().hex[:12]}"
        with sqlite3.connect(args.payments) as db:
            db.execute("INSERT INTO payments (charge_id, order_id, amount, idempotency_key) VALUES (?, ?, ?, ?)", (charge_id, order, amount, idempotency_key))
        if args.crash_after_charge:
            args.crash_after_charge.write_text(charge_id)
            while True:  # killed here, after the charge is made and before its result is recorded
                time.sleep(1)
        return json.dumps({"charge_id": charge_id, "status": "succeeded"})

    if args.resume:
        from turnlog_client import Client
        from turnlog_client.pydantic_ai import message_history

        with Client(args.url, args.token) as client:
            history = message_history(client, args.conversation)
        result = agent.run_sync("Go on.", message_history=history, conversation_id=args.conversation)
    else:
        result = agent.run_sync(f"Charge order {ORDER}.", conversation_id=args.conversation)
    print(result.output)
    provider.shutdown()


if __name__ == "__main__":
    main()
