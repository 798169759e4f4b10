import { randomBytes } from 'node:crypto';

// Where a run names its conversation: the GenAI conventions, OpenInference, the Vercel AI SDK's
// metadata (version 6 and earlier) and runtime context (version 7).
const CONVERSATION_KEYS = [
  'gen_ai.conversation.id', 'session.id',
  'ai.telemetry.metadata.sessionId', 'ai.telemetry.metadata.conversationId',
  'ai.settings.context.sessionId', 'ai.settings.context.conversationId',
];
const GENAI_OPERATIONS = new Set([
  'invoke_agent', 'invoke_workflow', 'chat', 'text_completion', 'generate_content', 'execute_tool',
]);
const MAX_TRACES = 10000; // conversation ids kept for traces whose root span has not ended yet

// Announces every agent, model and tool span as it starts, with Logfire's "pending span": Turnlog
// then knows a tool was dispatched even if the process dies before the tool's span ends. Also puts
// the run's conversation id on every span of the trace after the first one that names it.
export class PendingSpanProcessor {
  constructor(inner) {
    this.inner = inner; // the BatchSpanProcessor or SimpleSpanProcessor of your OTLP exporter
    this.conversations = new Map(); // trace id -> conversation id
  }

  onStart(span, parentContext) {
    const traceId = span.spanContext().traceId;
    if (!this.conversations.has(traceId)) {
      const named = CONVERSATION_KEYS.map((key) => span.attributes[key]).find((v) => typeof v === 'string' && v);
      if (named !== undefined) {
        this.conversations.set(traceId, named);
        if (this.conversations.size > MAX_TRACES) this.conversations.delete(this.conversations.keys().next().value);
      }
    }
    const conversation = this.conversations.get(traceId);
    if (conversation !== undefined && span.attributes['gen_ai.conversation.id'] === undefined) {
      span.setAttribute('gen_ai.conversation.id', conversation);
    }
    this.inner.onStart(span, parentContext);
    const operation = span.attributes['gen_ai.operation.name'];
    if (GENAI_OPERATIONS.has(operation) || span.name.startsWith('ai.')) {
      this.inner.onEnd(pendingSpan(span)); // queued like any ended span: the agent does not wait
    }
  }

  onEnd(span) {
    this.inner.onEnd(span);
    if (!(span.parentSpanContext ?? span.parentSpanId)) this.conversations.delete(span.spanContext().traceId);
  }

  forceFlush() {
    return this.inner.forceFlush();
  }

  shutdown() {
    return this.inner.shutdown();
  }
}

// A zero-length child of `span`, with its attributes so far and its parent's id in
// `logfire.pending_parent_id` (zeros for a root).
function pendingSpan(span) {
  const real = span.spanContext();
  const context = { traceId: real.traceId, spanId: randomBytes(8).toString('hex'), traceFlags: real.traceFlags };
  const parentId = span.parentSpanContext?.spanId ?? span.parentSpanId ?? '0000000000000000';
  return {
    name: span.name,
    kind: span.kind,
    spanContext: () => context,
    parentSpanContext: real,
    parentSpanId: real.spanId,
    startTime: span.startTime,
    endTime: span.startTime,
    duration: [0, 0],
    ended: true,
    status: { code: 0 },
    attributes: { ...span.attributes, 'logfire.span_type': 'pending_span', 'logfire.pending_parent_id': parentId },
    links: [],
    events: [],
    resource: span.resource,
    instrumentationScope: span.instrumentationScope,
    droppedAttributesCount: 0,
    droppedEventsCount: 0,
    droppedLinksCount: 0,
  };
}
