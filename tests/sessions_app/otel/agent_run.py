"""A Pydantic AI agent run, instrumented through OpenTelemetry and exported over OTLP/HTTP: what the
OTLP tests run in a process of its own, so that they can kill it in the middle of a tool.

    python agent_run.py URL TOKEN CONVERSATION [--crash MARKER] [--pending | --processor] [--simple | --schedule-delay MS]
                        [--encoding json] [--no-content] [--anthropic BASE_URL]

The model is scripted (FunctionModel, no network): step 1 asks for `refund` of orders A1 and A2,
step 2 answers in text. With --anthropic it is Pydantic AI's AnthropicModel (claude-sonnet-4-5) over the
real `anthropic` SDK, asking the Messages API at BASE_URL (a local server the test scripts the same way). With --crash the tool writes MARKER on its second call and blocks
until the process is killed. With --pending a span processor emits Logfire's pending spans: a
zero-length twin of each span as it starts, child of the real span, with the real parent in
`logfire.pending_parent_id` (logfire's PendingSpanProcessor does the same) through the batch processor;
with --processor turnlog_client.otel's PendingSpanProcessor sends them itself, as the guide sets it up.
Ended spans go through a BatchSpanProcessor (its delay --schedule-delay, 50 ms unless given; the SDK's
default is 5000), or with --simple a SimpleSpanProcessor (each span exported as it ends).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings


class PendingSpans(SpanProcessor):
    """Logfire's pending spans in front of another processor."""

    def __init__(self, inner: SpanProcessor):
        self.inner = inner

    def on_start(self, span, parent_context=None):
        self.inner.on_start(span, parent_context)
        real = span.get_span_context()
        parent = span.parent.span_id if span.parent else 0
        pending = ReadableSpan(
            name=f"{span.name} (pending)",
            context=trace.SpanContext(real.trace_id, random.getrandbits(64), is_remote=False, trace_flags=real.trace_flags),
            parent=real,
            resource=span.resource,
            attributes={**(span.attributes or {}), "logfire.span_type": "pending_span", "logfire.pending_parent_id": f"{parent:016x}"},
            kind=span.kind,
            start_time=span.start_time,
            end_time=span.start_time,
            instrumentation_scope=span.instrumentation_scope,
        )
        self.inner.on_end(pending)

    def on_end(self, span):
        self.inner.on_end(span)

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000):
        return self.inner.force_flush(timeout_millis)


def exporter(url: str, token: str, encoding: str):
    headers = {"Authorization": f"Bearer {token}"}
    if encoding == "json":
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter(endpoint=f"{url}/otlp/v1/traces", headers=headers)


def anthropic_model(base_url: str):
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    return AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(base_url=base_url, api_key="sk-ant-test"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("conversation")
    parser.add_argument("--crash", type=Path)
    parser.add_argument("--pending", action="store_true")
    parser.add_argument("--processor", action="store_true", help="turnlog_client.otel.PendingSpanProcessor")
    parser.add_argument("--simple", action="store_true", help="a SimpleSpanProcessor instead of the batch one")
    parser.add_argument("--schedule-delay", type=int, default=50, help="the batch processor's delay, ms")
    parser.add_argument("--encoding", choices=["protobuf", "json"], default="protobuf")
    parser.add_argument("--no-content", action="store_true")
    parser.add_argument("--anthropic", metavar="BASE_URL", help="Pydantic AI's AnthropicModel against this Messages API")
    parser.add_argument("--call-prefix", default="call", help="the scripted model's call ids: PREFIX_a1, PREFIX_a2")
    args = parser.parse_args()

    export = exporter(args.url, args.token, args.encoding)
    ended = SimpleSpanProcessor(export) if args.simple else BatchSpanProcessor(export, schedule_delay_millis=args.schedule_delay)
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    pending = None
    if args.processor:
        from turnlog_client.otel import PendingSpanProcessor

        pending = PendingSpanProcessor(export)
        provider.add_span_processor(pending)
    provider.add_span_processor(PendingSpans(ended) if args.pending else ended)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider, include_content=not args.no_content))

    def model(messages, info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"order": order}, tool_call_id=f"{args.call_prefix}_{order.lower()}") for order in ("A1", "A2")])
        return ModelResponse(parts=[TextPart("Both orders are refunded.")])

    agent = Agent(anthropic_model(args.anthropic) if args.anthropic else FunctionModel(model), name="support", instructions="You refund orders.")
    calls = []

    @agent.tool_plain(sequential=True)
    def refund(order: str) -> str:
        calls.append(order)
        if args.crash and len(calls) == 2:
            args.crash.write_text(order)
            while True:  # the process is killed here, inside the tool
                time.sleep(1)
        return f"refunded {order}"

    agent.run_sync("Refund orders A1 and A2", conversation_id=args.conversation)
    provider.shutdown()
    if pending is not None:
        print(f"pending spans: exported={pending.exported} dropped={pending.dropped} failed={pending.failed}")


if __name__ == "__main__":
    main()
