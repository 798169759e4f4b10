"""turnlog_client.otel's PendingSpanProcessor with the real OpenTelemetry SDK and its in-memory exporter: the
pending spans' form (Logfire's, as Turnlog reads it), which spans get one, the conversation id stamped
across a trace, the bounded queue, flush and shutdown, many threads at once, and a forked child.
(Runs against a live server: tests/sessions_app/otel/test_pydantic_ai.py.)"""

from __future__ import annotations

import ast
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import turnlog_client.otel
from tests.conftest import load_factor
from turnlog_client.otel import PendingSpanProcessor

PENDING = "pending_span"


def pending_of(spans) -> list:
    return [s for s in spans if s.attributes.get("logfire.span_type") == PENDING]


def ended_of(spans) -> list:
    return [s for s in spans if s.attributes.get("logfire.span_type") != PENDING]


def setup(*, simple: bool = True, **options) -> tuple[TracerProvider, PendingSpanProcessor, InMemorySpanExporter]:
    """The guide's setup: the pending processor first, then the ended spans' processor, on one exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    processor = PendingSpanProcessor(exporter, **options)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter) if simple else BatchSpanProcessor(exporter))
    return provider, processor, exporter


def wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds * load_factor()
    while not (value := condition()):
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.005)
    return value


class Gate(SpanExporter):
    """An exporter that holds every export until opened, and says when one is waiting."""

    def __init__(self):
        self.opened = threading.Event()
        self.waiting = threading.Event()
        self.spans: list = []

    def export(self, spans):
        self.waiting.set()
        self.opened.wait(30)
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def test_a_tool_spans_pending_span_is_exported_while_the_tool_runs_in_logfires_form():
    provider, processor, exporter = setup()
    tracer = provider.get_tracer("pydantic-ai", "1.0")
    with tracer.start_as_current_span("invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "c-1"}) as agent:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund", "gen_ai.tool.call.id": "call_a1",
                      "gen_ai.tool.call.arguments": '{"order":"A1"}'}  # fmt: skip
        with tracer.start_as_current_span("execute_tool refund", attributes=attributes) as tool:
            # No flush, no span ended: the processor's own thread sends it at once.
            pending = wait_for(lambda: [s for s in pending_of(exporter.get_finished_spans()) if s.parent.span_id == tool.get_span_context().span_id],
                               seconds=1, what="the tool's pending span")  # fmt: skip
            tool.set_attribute("gen_ai.tool.call.result", "refunded A1")
    (pending,) = pending
    real = tool.get_span_context()
    assert pending.name == "execute_tool refund" and pending.kind == tool.kind
    assert pending.context.trace_id == real.trace_id and pending.context.span_id not in (0, real.span_id)
    assert pending.parent == real and pending.start_time == pending.end_time == tool.start_time
    assert dict(pending.attributes) == {**attributes, "gen_ai.conversation.id": "c-1", "logfire.span_type": PENDING,
                                        "logfire.pending_parent_id": f"{agent.get_span_context().span_id:016x}"}  # fmt: skip
    assert pending.resource.attributes["service.name"] == "support-agent"
    assert pending.instrumentation_scope.name == "pydantic-ai" and pending.instrumentation_scope.version == "1.0"
    (agent_pending,) = [s for s in pending_of(exporter.get_finished_spans()) if s.parent == agent.get_span_context()]
    assert agent_pending.attributes["logfire.pending_parent_id"] == "0" * 16  # a root's
    # The ended spans go through the other processor unchanged; the result is only on the ended tool span.
    assert [s.name for s in ended_of(exporter.get_finished_spans())] == ["execute_tool refund", "invoke_agent support"]
    assert processor.exported == 2 and processor.dropped == processor.failed == 0


GENAI_SPANS = [
    ("invoke_agent support", {"gen_ai.operation.name": "invoke_agent"}, False),
    ("support", {"gen_ai.operation.name": "invoke_workflow"}, False),
    ("chat gpt-4o", {"gen_ai.operation.name": "chat"}, False),
    ("completion", {"gen_ai.operation.name": "text_completion"}, False),
    ("generate_content gemini-2.5-flash", {"gen_ai.operation.name": "generate_content"}, False),
    ("refund", {"gen_ai.operation.name": "EXECUTE_TOOL"}, False),
    ("chat gpt-4o", {}, False),  # the conventions' span names alone
    ("execute_tool refund", {}, False),
    ("agent run", {}, False),  # Pydantic AI's instrumentation version 2
    ("running tool", {}, False),
    ("Agent", {"openinference.span.kind": "AGENT"}, False),
    ("ChatOpenAI", {"openinference.span.kind": "LLM"}, False),
    ("refund", {"openinference.span.kind": "TOOL"}, False),
    ("LangGraph", {"openinference.span.kind": "CHAIN"}, True),  # a root chain is the run
    ("support.workflow", {"traceloop.span.kind": "workflow"}, False),
    ("refund.tool", {"traceloop.span.kind": "tool"}, False),
    ("openai.chat", {"llm.request.type": "chat"}, False),
    ("ai.generateText", {}, False),  # the Vercel AI SDK
    ("ai.streamText.doStream", {}, False),
    ("ai.generateObject.doGenerate", {}, False),
    ("ai.toolCall", {}, False),
]
OTHER_SPANS = [
    ("GET /orders", {"http.request.method": "GET"}, True),
    ("SELECT orders", {"db.system.name": "postgresql"}, False),
    ("create_agent support", {"gen_ai.operation.name": "create_agent"}, False),
    ("embeddings text-embedding-3", {"gen_ai.operation.name": "embeddings"}, False),
    ("RunnableSequence", {"openinference.span.kind": "CHAIN"}, False),  # a nested chain is plumbing
    ("retrieve", {"openinference.span.kind": "RETRIEVER"}, False),
    ("chat gpt-4o", {"openinference.span.kind": "RETRIEVER"}, False),  # the family's kind decides
    ("node.task", {"traceloop.span.kind": "task"}, False),
    ("ai.embed", {}, False),
    ("chatter", {}, False),
]


@pytest.mark.parametrize(("name", "attributes", "root"), GENAI_SPANS + OTHER_SPANS, ids=[f"{n}-{a}" for n, a, _ in GENAI_SPANS + OTHER_SPANS])
def test_agent_model_and_tool_spans_get_a_pending_span_and_other_spans_none(name, attributes, root):
    provider, processor, exporter = setup()
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("GET /agent") if not root else _nothing():
        with tracer.start_as_current_span(name, attributes=attributes):
            pass
    assert processor.force_flush()
    sent = [s.name for s in pending_of(exporter.get_finished_spans())]
    assert sent == ([name] if (name, attributes, root) in GENAI_SPANS else [])


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_an_unsampled_span_gets_no_pending_span():
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    processor = PendingSpanProcessor(exporter)
    provider.add_span_processor(processor)
    with provider.get_tracer("test").start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
        pass
    assert processor.force_flush() and exporter.get_finished_spans() == ()


@pytest.mark.parametrize("key", turnlog_client.otel.CONVERSATION_KEYS)
def test_the_first_conversation_id_of_a_trace_is_stamped_on_its_later_spans_pending_and_ended(key):
    provider, processor, exporter = setup()
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("GET /chat"):  # before the run: nothing to stamp yet
        with tracer.start_as_current_span("Agent", attributes={"openinference.span.kind": "AGENT", key: "c-7"}):
            with tracer.start_as_current_span("ChatOpenAI", attributes={"openinference.span.kind": "LLM"}):
                with tracer.start_as_current_span("POST /v1/chat/completions"):  # a span of no family: stamped too
                    pass
            with tracer.start_as_current_span("refund", attributes={"openinference.span.kind": "TOOL", "session.id": "c-other"}):
                pass  # a span that names its own keeps it
    assert processor.force_flush()
    spans = exporter.get_finished_spans()
    conversation = {(s.name, s.attributes.get("logfire.span_type") == PENDING): s.attributes.get("gen_ai.conversation.id") for s in spans}
    assert conversation == {
        ("GET /chat", False): None,
        ("Agent", True): "c-7", ("Agent", False): "c-7",
        ("ChatOpenAI", True): "c-7", ("ChatOpenAI", False): "c-7",
        ("POST /v1/chat/completions", False): "c-7",
        ("refund", True): "c-other", ("refund", False): "c-other",
    }  # fmt: skip
    assert processor._conversations == {}  # the root ended: the trace is forgotten


def test_a_trace_is_forgotten_when_its_root_ends_and_the_oldest_beyond_the_bound():
    provider, processor, exporter = setup(max_traces=2)
    tracer = provider.get_tracer("test")
    roots = [tracer.start_span(f"invoke_agent a{i}", attributes={"gen_ai.conversation.id": f"c-{i}"}) for i in range(3)]
    assert sorted(processor._conversations.values()) == ["c-1", "c-2"]  # c-0's trace was the oldest
    roots[1].end()
    assert list(processor._conversations.values()) == ["c-2"]
    roots[0].end()
    roots[2].end()
    assert processor._conversations == {}
    # A span of another process's trace (a remote parent) is a local root: it too is forgotten when it ends.
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    with tracer.start_as_current_span("invoke_agent b", context=trace.set_span_in_context(NonRecordingSpan(remote)),
                                      attributes={"gen_ai.conversation.id": "c-b"}):  # fmt: skip
        assert list(processor._conversations.values()) == ["c-b"]
    assert processor._conversations == {}
    assert processor.force_flush()
    (pending,) = [s for s in pending_of(exporter.get_finished_spans()) if s.name == "invoke_agent b"]
    assert pending.attributes["logfire.pending_parent_id"] == f"{0xDEF:016x}"


def test_when_the_queue_is_full_pending_spans_are_dropped_and_counted_without_waiting():
    gate = Gate()
    processor = PendingSpanProcessor(gate, max_queue=3, max_batch=2)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    tracer.start_span("chat first", attributes={"gen_ai.operation.name": "chat"}).end()
    assert gate.waiting.wait(5)  # the thread holds the first in its export
    took = []
    for i in range(6):
        t0 = time.perf_counter()
        tracer.start_span(f"execute_tool t{i}").end()
        took.append(time.perf_counter() - t0)
    assert processor.dropped == 3 and max(took) < 0.05 * load_factor()
    assert not processor.force_flush(timeout_millis=100)  # the export is still held
    gate.opened.set()
    assert processor.force_flush(timeout_millis=5000)
    assert [s.name for s in gate.spans] == ["chat first", "execute_tool t0", "execute_tool t1", "execute_tool t2"]
    assert processor.exported == 4 and processor.dropped == 3


def test_a_failed_export_is_counted_and_the_thread_goes_on():
    class Failing(SpanExporter):
        calls = 0

        def export(self, spans):
            self.calls += 1
            if self.calls == 1:
                raise ConnectionError("the collector is down")
            return SpanExportResult.FAILURE if self.calls == 2 else SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    exporter = Failing()
    processor = PendingSpanProcessor(exporter)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    for i in range(3):
        provider.get_tracer("test").start_span(f"chat m{i}").end()
        assert processor.force_flush()
    assert (processor.failed, processor.exported, exporter.calls) == (2, 1, 3)


def test_shutdown_exports_what_is_queued_stops_the_thread_and_leaves_the_exporter_to_the_batch_processor():
    gate = Gate()
    provider = TracerProvider()
    processor = PendingSpanProcessor(gate)
    provider.add_span_processor(processor)
    batch = BatchSpanProcessor(gate, schedule_delay_millis=60_000)
    provider.add_span_processor(batch)
    tracer = provider.get_tracer("test")
    for i in range(5):
        tracer.start_span(f"execute_tool t{i}").end()
    gate.opened.set()
    provider.shutdown()  # ours first: it flushes, then the batch processor flushes and shuts the exporter down
    assert not processor._worker.is_alive()
    names = [s.name for s in gate.spans]
    assert sorted(names) == sorted([f"execute_tool t{i}" for i in range(5)] * 2)  # 5 pending, 5 ended
    tracer.start_span("execute_tool late").end()
    assert processor.force_flush() and len(gate.spans) == 10  # nothing after shutdown
    processor.shutdown()  # twice is harmless


def test_with_a_batch_processor_the_pending_spans_go_out_at_once_and_the_ended_ones_on_its_clock():
    provider, processor, exporter = setup(simple=False)  # the SDK's default delay: 5 s
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span("execute_tool refund", attributes={"gen_ai.operation.name": "execute_tool"}):
            wait_for(lambda: len(exporter.get_finished_spans()) == 2, seconds=1, what="both pending spans")
    assert all(s.attributes["logfire.span_type"] == PENDING for s in exporter.get_finished_spans())
    provider.shutdown()
    assert len(ended_of(exporter.get_finished_spans())) == 2


def test_many_threads_at_once_each_get_their_pending_spans_and_their_own_conversation():
    provider, processor, exporter = setup(max_queue=100_000)  # the simple processor exports from every thread too
    tracer = provider.get_tracer("test")
    threads, runs = 8, 100
    barrier = threading.Barrier(threads)

    def agent(number: int) -> None:
        barrier.wait()
        for run in range(runs):
            with tracer.start_as_current_span("invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": f"c-{number}"}):
                with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
                    pass
                with tracer.start_as_current_span("execute_tool refund", attributes={"gen_ai.tool.call.id": f"call-{number}-{run}"}):
                    pass

    workers = [threading.Thread(target=agent, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    provider.shutdown()
    spans = exporter.get_finished_spans()
    pending, ended = pending_of(spans), ended_of(spans)
    assert len(ended) == len(pending) == threads * runs * 3 and processor.dropped == 0
    assert {s.parent.span_id for s in pending} == {s.context.span_id for s in ended}  # one each
    assert len({s.context.span_id for s in pending}) == len(pending)
    by_trace = {s.context.trace_id: s.attributes["gen_ai.conversation.id"] for s in ended if s.parent is None}
    assert all(s.attributes["gen_ai.conversation.id"] == by_trace[s.context.trace_id] for s in spans)
    assert processor._conversations == {}


def test_on_start_and_on_end_cost_the_agent_less_than_a_millisecond_a_span():
    provider, processor, exporter = setup(simple=False, max_queue=100_000)
    tracer = provider.get_tracer("test")
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "refund", "gen_ai.tool.call.arguments": "x" * 2000}
    spans = 2000
    t0 = time.perf_counter()
    for _ in range(spans):
        span = tracer.start_span("execute_tool refund", attributes=attributes)
        processor.on_end(span)  # the processor's own on_end, on top of the SDK's call of it
    took = (time.perf_counter() - t0) / spans
    assert took < 0.001 * load_factor(), f"{took * 1e6:.0f} µs a span"
    provider.shutdown()


def test_a_forked_child_gets_a_thread_of_its_own(tmp_path):
    class ToFile(SpanExporter):
        def export(self, spans):
            with open(tmp_path / f"{os.getpid()}.txt", "a") as out:
                out.writelines(s.name + "\n" for s in spans)
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    processor = PendingSpanProcessor(ToFile())
    provider = TracerProvider()
    provider.add_span_processor(processor)
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's exit status is the assertion)
        provider.get_tracer("test").start_span("chat in-child").end()
        os._exit(0 if processor.force_flush(timeout_millis=5000) else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / f"{child}.txt").read_text() == "chat in-child\n"


def test_the_module_imports_only_the_standard_library_and_opentelemetry():
    tree = ast.parse(Path(turnlog_client.otel.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
    assert imported - {"__future__", "opentelemetry"} <= set(sys.stdlib_module_names), imported
    assert "opentelemetry" in imported
