"""A Google ADK agent run, traced by ADK's own OpenTelemetry instrumentation and exported over OTLP/HTTP:
what tests/sessions_app/otel/test_adk.py runs in a process of its own (in ADK's virtualenv, .venv-adk:
google-adk caps OpenTelemetry below the suite's), so that it can kill it in the middle of a tool.

    .venv-adk/bin/python adk_run.py URL TOKEN CONVERSATION [--content] [--crash MARKER] [--processor]

The model is scripted (a BaseLlm, no network): step 1 asks for `refund` of orders A1 and A2, step 2
answers in text. The conversation is the ADK session's id, which ADK stamps as `gen_ai.conversation.id`
on its workflow, agent and model spans (not on `execute_tool`). --content turns content capture on
(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY; ADK records none by default). With
--crash the tool writes MARKER on its second call and blocks until the process is killed. With
--processor, turnlog_client.otel.PendingSpanProcessor announces each span as it starts, ahead of the
batch processor. Protobuf only: the OTLP JSON exporter needs a newer OpenTelemetry SDK than ADK allows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

CONTENT_SETTING = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
APP = "support-app"
USER = "customer-7"
PROMPT = "Refund orders A1 and A2"
ANSWER = "Both orders are refunded."
# Token counts the scripted model reports, per step.
# Gemini's form: the prompt counts its cached part; the thoughts are beside the candidates, not in them.
USAGE = ({"prompt_token_count": 30, "candidates_token_count": 12, "cached_content_token_count": 8, "thoughts_token_count": 5},
         {"prompt_token_count": 60, "candidates_token_count": 9, "cached_content_token_count": 20})
# Each call takes longer than the batch processor's delay (50 ms), as real tools do: A1's tool span goes out
# alone, before any span that names the conversation has ended.
TOOL_SECONDS = 0.2


def capture_content(on: bool) -> None:
    """ADK reads the setting when a run starts (its TelemetryConfig); set before, whatever the caller's environment."""
    if on:
        os.environ[CONTENT_SETTING] = "SPAN_ONLY"
    else:
        os.environ.pop(CONTENT_SETTING, None)


def build_runner(*, call_prefix: str = "call", crash: Path | None = None):
    """An InMemoryRunner around one LlmAgent `support` on the scripted model, with its `refund` tool."""
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    class ScriptedModel(BaseLlm):
        model: str = "scripted"

        async def generate_content_async(self, llm_request, stream: bool = False):
            answered = any(part.function_response for content in llm_request.contents for part in content.parts or ())
            if not answered:
                parts = [types.Part(function_call=types.FunctionCall(id=f"{call_prefix}_{order.lower()}", name="refund", args={"order": order}))
                         for order in ("A1", "A2")]
            else:
                parts = [types.Part(text=ANSWER)]
            usage = USAGE[1 if answered else 0]
            yield LlmResponse(
                content=types.Content(role="model", parts=parts),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    **usage, total_token_count=usage["prompt_token_count"] + usage["candidates_token_count"] + usage.get("thoughts_token_count", 0)),
            )

    calls = []

    def refund(order: str) -> str:
        """Refund an order."""
        calls.append(order)
        time.sleep(TOOL_SECONDS)
        if crash is not None and len(calls) == 2:
            crash.write_text(order)
            while True:  # the process is killed here, inside the tool
                time.sleep(1)
        return f"refunded {order}"

    agent = LlmAgent(name="support", model=ScriptedModel(), instruction="You refund orders.", tools=[refund])
    return InMemoryRunner(agent=agent, app_name=APP)


async def run(runner, conversation: str) -> None:
    """One run in the ADK session named `conversation` (created here: the runner's sessions are in memory)."""
    from google.genai import types

    session = await runner.session_service.create_session(app_name=APP, user_id=USER, session_id=conversation)
    message = types.Content(role="user", parts=[types.Part(text=PROMPT)])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass


def exporter(url: str, token: str):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=f"{url}/otlp/v1/traces", headers={"Authorization": f"Bearer {token}"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("conversation")
    parser.add_argument("--content", action="store_true", help="capture messages, arguments and results")
    parser.add_argument("--crash", type=Path, help="write this file on the second tool call, then block until killed")
    parser.add_argument("--processor", action="store_true", help="turnlog_client.otel.PendingSpanProcessor before the batch processor")
    parser.add_argument("--call-prefix", default="call", help="the scripted model's call ids: PREFIX_a1, PREFIX_a2")
    args = parser.parse_args()

    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    capture_content(args.content)
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    if args.processor:
        from turnlog_client.otel import PendingSpanProcessor

        provider.add_span_processor(PendingSpanProcessor(exporter(args.url, args.token)))
    provider.add_span_processor(BatchSpanProcessor(exporter(args.url, args.token), schedule_delay_millis=50))
    trace.set_tracer_provider(provider)  # ADK's tracer is the global one

    asyncio.run(run(build_runner(call_prefix=args.call_prefix, crash=args.crash), args.conversation))
    provider.shutdown()


if __name__ == "__main__":
    main()
