"""An OpenTelemetry span processor that tells Turnlog a GenAI span has started, the moment it starts.

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from turnlog_client.otel import PendingSpanProcessor

    exporter = OTLPSpanExporter()  # OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT/otlp, a token in its headers
    provider = TracerProvider()
    provider.add_span_processor(PendingSpanProcessor(exporter))  # first: it flushes before the batch shuts the exporter down
    provider.add_span_processor(BatchSpanProcessor(exporter))

Needs the optional extra `otel` (opentelemetry-sdk): `pip install './turnlog_client[otel]'`. It imports
nothing else: no instrumentation, no Turnlog client.

Why: an OpenTelemetry SDK exports a span only when it ends, so a process killed inside a tool may have
sent nothing of that call (a batch processor holds ended spans up to 5 s; some frameworks end the model
span that asked for the tool only after the tool). For every agent, model and tool span this processor
sends a *pending span* as the span starts, in Logfire's form, which Turnlog reads as that span's start: a
zero-length child of the real span with the attributes known at start, `logfire.span_type =
"pending_span"` and `logfire.pending_parent_id` = the real span's parent id (16 hex digits, zeros for a
root). A tool's pending span proves its dispatch: recovery owes that call as `tool_outcome_unknown`.

- `on_start` only copies the span's attributes and queues them (bounded: when full the pending span is
  dropped and counted in `dropped`, never waited for). A daemon thread of its own builds the pending
  spans and exports them through `exporter` in small batches at once, with instrumentation suppressed.
- It stamps the run's conversation id: per trace it remembers the first conversation id a span names
  at start (`gen_ai.conversation.id`, OpenInference `session.id`,
  `traceloop.association.properties.session_id`, the Vercel AI SDK's `ai.telemetry.metadata.sessionId`
  or `conversationId`, its version 7's `ai.settings.context.sessionId` or `conversationId`) and sets `gen_ai.conversation.id` on each later span of the trace that has none,
  so their pending and ended spans both name the session. A trace is forgotten when its local root ends.
- `force_flush` waits until what is queued has been exported; `shutdown` flushes and stops the thread.
  Neither shuts the exporter down: it belongs to the processor you also gave it to.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, Context, attach, set_value
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import SpanContext

__all__ = ["CONVERSATION_KEYS", "PendingSpanProcessor", "is_genai_span"]

logger = logging.getLogger(__name__)

CONVERSATION = "gen_ai.conversation.id"
# Where a span may name its conversation, first listed first read.
CONVERSATION_KEYS = (CONVERSATION, "session.id", "traceloop.association.properties.session_id",
                     "ai.telemetry.metadata.sessionId", "ai.telemetry.metadata.conversationId",
                     "ai.settings.context.sessionId", "ai.settings.context.conversationId")

# What an agent, model or tool span says at start, per family (sessions_app/otel/conventions/table.py
# reads the same families when the spans arrive).
GENAI_OPERATIONS = frozenset({"invoke_agent", "invoke_workflow", "chat", "text_completion", "generate_content",
                              "execute_tool"})
# Span names of the conventions (`chat gpt-4o`) and of Pydantic AI's instrumentation version 2.
GENAI_NAME_WORDS = ("invoke_agent", "invoke_workflow", "chat", "text_completion", "generate_content",
                    "execute_tool", "agent run", "running tool")
OPENINFERENCE_KINDS = frozenset({"AGENT", "LLM", "TOOL"})  # and a root CHAIN (LangGraph's graph)
OPENLLMETRY_KINDS = frozenset({"workflow", "agent", "tool"})
OPENLLMETRY_REQUESTS = frozenset({"chat", "completion"})
VERCEL_NAMES = frozenset({"ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject", "ai.toolCall"})
VERCEL_MODEL_CALLS = (".doGenerate", ".doStream")

PENDING_ATTRIBUTES = {"logfire.span_type": "pending_span"}
ROOT_PARENT = "0" * 16


def is_genai_span(name: str, attributes: Mapping[str, Any], is_root: bool) -> bool:
    """Whether a span, by what it says at start, is an agent run, a model call or a tool call."""
    operation = attributes.get("gen_ai.operation.name")
    if isinstance(operation, str) and operation.lower() in GENAI_OPERATIONS:
        return True
    kind = attributes.get("openinference.span.kind")
    if isinstance(kind, str):
        kind = kind.upper()
        return kind in OPENINFERENCE_KINDS or (kind == "CHAIN" and is_root)
    kind = attributes.get("traceloop.span.kind")
    if isinstance(kind, str) and kind.lower() in OPENLLMETRY_KINDS:
        return True
    request = attributes.get("llm.request.type")
    if isinstance(request, str) and request.lower() in OPENLLMETRY_REQUESTS:
        return True
    if name.startswith("ai."):  # the Vercel AI SDK: `ai.generateText`, `ai.generateText.doGenerate`, `ai.toolCall`
        return name in VERCEL_NAMES or (name.endswith(VERCEL_MODEL_CALLS) and name.rsplit(".", 1)[0] in VERCEL_NAMES)
    return any(name == word or name.startswith(word + " ") for word in GENAI_NAME_WORDS)


def conversation_of(attributes: Mapping[str, Any]) -> str | None:
    for key in CONVERSATION_KEYS:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


class PendingSpanProcessor(SpanProcessor):
    """Sends Logfire's pending span of each GenAI span as it starts, through `exporter`, from a thread of its own.

    `max_queue` pending spans wait at most (beyond it they are dropped and counted in `dropped`), exported
    `max_batch` at a time; `max_traces` traces' conversation ids are remembered at most (the oldest is
    forgotten first). `failed` counts pending spans whose export failed.
    """

    def __init__(self, exporter: SpanExporter, *, max_queue: int = 2048, max_batch: int = 64, max_traces: int = 4096):
        self.exporter = exporter
        self.max_queue, self.max_batch, self.max_traces = max_queue, max_batch, max_traces
        self.dropped = 0
        self.failed = 0
        self.exported = 0
        self._conversations: dict[int, str] = {}  # trace id -> the conversation a span of it named first
        self._shutdown = False
        self._start_worker()
        if hasattr(os, "register_at_fork"):  # a forked child has no worker thread: give it one
            this = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: (p := this()) is not None and not p._shutdown and p._start_worker())

    def _start_worker(self) -> None:
        # New locks too: another thread may have held one when the process forked.
        self._traces_lock = threading.Lock()
        self._condition = threading.Condition(threading.Lock())
        self._queue: deque = deque()
        self._unfinished = 0  # queued or being exported
        self._stopping = False
        self._worker = threading.Thread(target=self._run, name="turnlog-pending-spans", daemon=True)
        self._worker.start()

    # -- the agent's threads -------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self._shutdown:
            return
        attributes = span.attributes or {}
        context = span.get_span_context()
        self._stamp(span, context.trace_id, attributes)
        if not context.trace_flags.sampled or not is_genai_span(span.name, attributes, span.parent is None):
            return
        item = (span, span.name, dict(attributes))  # the attributes known now; the span goes on changing
        with self._condition:
            if len(self._queue) >= self.max_queue:
                self.dropped += 1
                return
            self._queue.append(item)
            self._unfinished += 1
            self._condition.notify()

    def _stamp(self, span: Span, trace_id: int, attributes: Mapping[str, Any]) -> None:
        own = attributes.get(CONVERSATION)
        if isinstance(own, str) and own:
            named = own
        else:
            named = conversation_of(attributes)
            known = named or self._conversations.get(trace_id)
            if known is not None:
                span.set_attribute(CONVERSATION, known)
        if named is not None and trace_id not in self._conversations:
            with self._traces_lock:
                if trace_id not in self._conversations:
                    if len(self._conversations) >= self.max_traces:
                        del self._conversations[next(iter(self._conversations))]
                    self._conversations[trace_id] = named

    def on_end(self, span: ReadableSpan) -> None:
        if (span.parent is None or span.parent.is_remote) and span.context is not None:
            with self._traces_lock:
                self._conversations.pop(span.context.trace_id, None)

    # -- its own thread ------------------------------------------------------------------------

    def _run(self) -> None:
        attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))  # the export's own HTTP calls make no spans
        while True:
            with self._condition:
                while not self._queue and not self._stopping:
                    self._condition.wait()
                if not self._queue:
                    return
                items = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
            try:
                self._export([pending_span(*item) for item in items])
            finally:
                with self._condition:
                    self._unfinished -= len(items)
                    self._condition.notify_all()

    def _export(self, spans: list[ReadableSpan]) -> None:
        try:
            result = self.exporter.export(spans)
        except Exception:
            logger.exception("exporting %d pending spans failed", len(spans))
            self.failed += len(spans)
            return
        if getattr(result, "name", "SUCCESS") == "SUCCESS":
            self.exported += len(spans)
        else:
            self.failed += len(spans)

    # -- the provider's calls ------------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """True once everything queued before this call has been exported (or failed); False after `timeout_millis`."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._condition:
            while self._unfinished:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._worker.is_alive():
                    return False
                self._condition.wait(remaining)
        return True

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        self.force_flush()
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        self._worker.join(timeout=5)
        with self._traces_lock:
            self._conversations.clear()


def pending_span(span: Span, name: str, attributes: dict[str, Any]) -> ReadableSpan:
    """Logfire's pending span of `span`: its zero-length child, with its attributes at start."""
    real = span.get_span_context()
    parent = span.parent
    span_id = 0
    while not span_id:
        span_id = random.getrandbits(64)
    return ReadableSpan(
        name=name,
        context=SpanContext(real.trace_id, span_id, is_remote=False, trace_flags=real.trace_flags, trace_state=real.trace_state),
        parent=real,
        resource=span.resource,
        attributes={**attributes, **PENDING_ATTRIBUTES,
                    "logfire.pending_parent_id": f"{parent.span_id:016x}" if parent is not None else ROOT_PARENT},
        kind=span.kind,
        start_time=span.start_time,
        end_time=span.start_time,
        instrumentation_scope=span.instrumentation_scope,
    )
