"""The OTLP benchmark's workload: Pydantic AI runs traced by the real OpenTelemetry SDK, as OTLP and as native events.

Conversations of a few runs each (a run = one `agent.run`: an `invoke_agent`
root, `chat` spans whose answers request tool calls, `execute_tool` spans,
GenAI semantic-convention attributes with content and usage) run side by side
under Pydantic AI's own instrumentation, with a scripted model
(`FunctionModel`, no network). Spans are collected in the order the SDK ends
them, which is the order its batch processor exports them, and cut into
batches of 512 (the batch processor's default `max_export_batch_size`), each
encoded with the OTLP exporter's own encoder. One extra conversation is a
crashed run: the process "dies" inside a tool call, so only the spans that had
ended before reach the exporter and its root never does.

The same runs as native events (bench/otlp.py sends them to
`POST /api/v1/sessions/{id}/events`) are derived span by span, so that the
events of one OTLP batch are the native requests of that batch: a chat span
gives step_start, assistant_message and a tool_call per requested call (the
run's first one also the system and user messages and turn_start; a later one
the previous step's step_end), a tool span its tool_result, the root the last
step_end and turn_end.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import random
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from _common import TOOLS, _text, iso
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from pydantic_ai import Agent, InstrumentationSettings, RunContext  # RunContext: a tool's annotation, resolved here
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

AGENT_NAME = "support"
MODEL_NAME = "bench-model-1"
INSTRUCTIONS = "You are the support agent of an online shop: look orders and customers up before you answer."
# Every chat span's answer starts with a marker naming it, so a reader can tell which span an event came from.
MARKER = re.compile(r"\[m:([0-9a-z.]+)\]")


@dataclass(frozen=True)
class SpanInfo:
    trace_id: str  # hex, as Phoenix's API shows it
    span_id: str
    kind: str  # "agent" (the run's root), "chat", "tool"
    session: str  # the conversation id, which is Turnlog's session id
    key: str  # what shows the span in Turnlog: the chat's marker, the tool's call id, "" for a root


@dataclass
class Crash:
    conversation: str = ""
    trace_id: str = ""
    owed_call: str = ""  # the call whose tool was running when the process died
    answered_call: str = ""  # a call of the same step whose tool span ended before
    exported: int = 0  # spans of the crashed run that reached the exporter


@dataclass
class Workload:
    spans: list[SpanInfo]
    bodies: list[bytes]  # one ExportTraceServiceRequest (protobuf) per batch
    batch_spans: list[range]  # indexes into spans, per batch
    native: list[list[tuple[str, bytes, int]]]  # per batch: (session, request body, events) in order
    sessions: list[str]  # conversations in order of first appearance
    crash: Crash
    runs: int = 0
    native_events: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # spans per kind

    @property
    def otlp_bytes(self) -> int:
        return sum(len(b) for b in self.bodies)

    @property
    def native_bytes(self) -> int:
        return sum(len(body) for batch in self.native for _, body, _ in batch)


class _Died(Exception):
    """Raised inside the crashed run's tool: the process dies there."""


def generate(n_spans: int, *, seed: int, runs_per_conversation: int, concurrency: int, pending: bool = False) -> tuple[list, Crash, int]:
    """Run Pydantic AI agents until at least n_spans spans have ended; (ReadableSpans in end order, crash, runs).
    With `pending`, turnlog_client.otel's PendingSpanProcessor adds each span's pending span as it starts (bench/pending_processor.py)."""
    ended: list = []
    died: set[int] = set()  # trace ids whose process died: nothing ends after that

    class Collect(SpanExporter):
        def export(self, spans):
            ended.extend(s for s in spans if s.context.trace_id not in died)
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    provider = TracerProvider()
    if pending:
        from turnlog_client.otel import PendingSpanProcessor

        provider.add_span_processor(PendingSpanProcessor(Collect(), max_queue=10**7))
    provider.add_span_processor(SimpleSpanProcessor(Collect()))
    script: contextvars.ContextVar[list] = contextvars.ContextVar("script")
    results: dict[str, object] = {}  # call id -> the tool's answer (or _Died)

    async def model(messages, info: AgentInfo) -> ModelResponse:
        text, calls, usage = script.get().pop(0)
        parts = [TextPart(text)] + [ToolCallPart(name, args, tool_call_id=call_id) for call_id, name, args in calls]
        return ModelResponse(parts=parts, usage=RequestUsage(**usage), model_name=MODEL_NAME)

    async def tool(ctx: RunContext, query: str, limit: int) -> str:
        answer = results.pop(ctx.tool_call_id)
        if answer is _Died:
            await asyncio.sleep(0.01)  # the step's other tool ends first
            died.add(otel_trace.get_current_span().get_span_context().trace_id)
            raise _Died
        return answer

    agent = Agent(
        FunctionModel(model, model_name=MODEL_NAME),
        name=AGENT_NAME,
        instructions=INSTRUCTIONS,
        capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=provider, include_content=True))],
    )
    for name in TOOLS[:4]:
        agent.tool(tool, name=name)

    crash = Crash()
    runs = 0

    def usage(rng: random.Random) -> dict:
        return {"input_tokens": rng.randint(500, 5000), "output_tokens": rng.randint(20, 400), "cache_read_tokens": rng.randint(0, 400)}

    def call(rng: random.Random, call_id: str) -> tuple[str, str, dict]:
        results[call_id] = _text(rng, rng.randint(200, 600))
        return call_id, rng.choice(TOOLS[:4]), {"query": _text(rng, 40), "limit": 10}

    async def conversation(number: int, crashed: bool) -> None:
        nonlocal runs
        rng = random.Random(seed * 1_000_003 + number)
        conv = f"conv-{number:05d}"
        history: list = []
        for run in range(1 if crashed else runs_per_conversation):
            if len(ended) >= n_spans and not crashed:
                return
            steps = 2 if crashed else rng.choice([1, 2, 2, 3])
            plan = []
            for step in range(steps):
                if crashed and step == 1:  # two parallel calls: the second one's tool is running when the process dies
                    calls = [call(rng, f"{conv}-{run}-{step}-{i}") for i in range(2)]
                    results[calls[1][0]] = _Died
                    crash.answered_call, crash.owed_call = calls[0][0], calls[1][0]
                else:
                    n_calls = 0 if step == steps - 1 and not crashed else rng.choice([1, 1, 2, 3])
                    calls = [call(rng, f"{conv}-{run}-{step}-{i}") for i in range(n_calls)]
                plan.append((f"[m:{number}.{run}.{step}] {_text(rng, rng.randint(100, 500))}", calls, usage(rng)))
            script.set(plan)
            try:
                result = await agent.run(_text(rng, rng.randint(150, 400)), message_history=history, conversation_id=conv)
            except _Died:
                crash.conversation = conv
                crash.trace_id = f"{next(iter(died)):032x}"
                return
            history = result.all_messages()
            runs += 1

    async def main() -> None:
        counter = iter(range(1, 10**6))
        crash_due = True

        async def worker() -> None:
            nonlocal crash_due
            while len(ended) < n_spans:
                number = next(counter)
                crashed = crash_due and len(ended) >= n_spans // 2
                crash_due = crash_due and not crashed
                await conversation(number, crashed)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    asyncio.run(main())
    provider.shutdown()
    crash.exported = sum(1 for s in ended if f"{s.context.trace_id:032x}" == crash.trace_id)
    return ended, crash, runs


def _messages(span, key: str) -> list:
    value = span.attributes.get(key)
    return json.loads(value) if value else []


def _time(ns: int) -> str:
    return iso(datetime.fromtimestamp(ns / 1e9, tz=UTC))


class _Native:
    """Span by span, the native events of the same runs (see the module's docstring)."""

    def __init__(self):
        self.turns: dict[str, int] = {}  # session -> turns opened
        self.systems: set[str] = set()
        self.steps: dict[str, int] = {}  # trace -> steps opened

    def events(self, span, info: SpanInfo) -> list[dict]:
        def event(type_: str, data: dict) -> dict:
            return {"type": type_, "time": _time(span.end_time), "data": data}

        out: list[dict] = []
        turn = self.turns.get(info.session, 0)
        step = self.steps.get(info.trace_id, 0)
        attrs = span.attributes
        if info.kind == "chat":
            if step == 0:
                if info.session not in self.systems:
                    self.systems.add(info.session)
                    out.append(event("system_message", {"content": INSTRUCTIONS, "name": None, "metadata": {}}))
                user = [m for m in _messages(span, "gen_ai.input.messages") if m["role"] == "user"][-1]
                out.append(event("user_message", {"content": user["parts"][0]["content"], "name": None, "metadata": {}}))
                turn += 1
                self.turns[info.session] = turn
                out.append(event("turn_start", {"turn": turn}))
            else:
                out.append(event("step_end", {"turn": turn, "step": step, "outcome": "ok"}))
            step += 1
            self.steps[info.trace_id] = step
            parts = _messages(span, "gen_ai.output.messages")[0]["parts"]
            calls = [{"id": p["id"], "name": p["name"], "arguments": p["arguments"]} for p in parts if p["type"] == "tool_call"]
            usage = {k: attrs[f"gen_ai.usage.{k}"] for k in ("input_tokens", "output_tokens") if f"gen_ai.usage.{k}" in attrs}
            out.append(event("step_start", {"turn": turn, "step": step}))
            out.append(
                event(
                    "assistant_message",
                    {
                        "content": "".join(p["content"] for p in parts if p["type"] == "text"),
                        "name": None,
                        "metadata": {"model": attrs.get("gen_ai.response.model"), "usage": usage},
                        "tool_calls": calls,
                    },
                )
            )
            out += [event("tool_call", {"id": c["id"], "name": c["name"]}) for c in calls]
        elif info.kind == "tool":
            out.append(
                event(
                    "tool_result",
                    {"tool_call_id": info.key, "content": attrs.get("gen_ai.tool.call.result"), "name": attrs["gen_ai.tool.name"], "metadata": {}},
                )
            )
        else:
            out.append(event("step_end", {"turn": turn, "step": step, "outcome": "ok"}))
            out.append(event("turn_end", {"turn": turn, "steps": step, "reason": "complete"}))
        return out


def build(n_spans: int, *, seed: int = 1, batch: int = 512, runs_per_conversation: int = 5, concurrency: int = 8) -> Workload:
    ended, crash, runs = generate(n_spans, seed=seed, runs_per_conversation=runs_per_conversation, concurrency=concurrency)
    spans: list[SpanInfo] = []
    sessions: dict[str, None] = {}
    counts = {"agent": 0, "chat": 0, "tool": 0}
    for s in ended:
        attrs = s.attributes
        operation = attrs.get("gen_ai.operation.name")
        kind = {"invoke_agent": "agent", "chat": "chat", "execute_tool": "tool"}[operation]
        key = ""
        if kind == "chat":
            key = MARKER.search(_messages(s, "gen_ai.output.messages")[0]["parts"][0]["content"]).group(1)
        elif kind == "tool":
            key = attrs["gen_ai.tool.call.id"]
        session = attrs["gen_ai.conversation.id"]
        sessions.setdefault(session)
        counts[kind] += 1
        spans.append(SpanInfo(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}", kind, session, key))

    native = _Native()
    bodies, batch_spans, native_batches, native_events = [], [], [], 0
    for start in range(0, len(ended), batch):
        part = range(start, min(start + batch, len(ended)))
        batch_spans.append(part)
        bodies.append(encode_spans([ended[i] for i in part]).SerializeToString())
        per_session: dict[str, list[dict]] = {}
        for i in part:
            per_session.setdefault(spans[i].session, []).extend(native.events(ended[i], spans[i]))
        requests = [(session, json.dumps({"events": events}).encode(), len(events)) for session, events in per_session.items()]
        native_events += sum(n for *_, n in requests)
        native_batches.append(requests)
    return Workload(spans, bodies, batch_spans, native_batches, list(sessions), crash, runs, native_events, counts)
