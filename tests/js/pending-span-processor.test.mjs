// The guide's pending-span processor (docs/guide/otlp.md) with the real OpenTelemetry JS SDK, in front of
// its batch and its simple span processor: what it sends on each span's start, and the conversation id
// it stamps. Run by tests/sessions_app/otel/test_vercel_ai.py (`node --test`).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { context, trace } from '@opentelemetry/api';
import {
  BatchSpanProcessor, InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-node';

import { PendingSpanProcessor } from './pending-span-processor.mjs';

const ZEROS = '0000000000000000';

for (const [kind, Processor] of [['batch', BatchSpanProcessor], ['simple', SimpleSpanProcessor]]) {
  test(`${kind}: each agent, model and tool span's start is announced, and the trace's session stamped`, async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new NodeTracerProvider({ spanProcessors: [new PendingSpanProcessor(new Processor(exporter))] });
    const tracer = provider.getTracer('test');
    const under = (parent) => trace.setSpan(context.active(), parent);

    const http = tracer.startSpan('POST /chat'); // not GenAI: no pending span, but the root of the trace
    const agent = tracer.startSpan('ai.generateText', {
      attributes: { 'ai.operationId': 'ai.generateText', 'ai.telemetry.metadata.sessionId': 's-1' },
    }, under(http));
    const model = tracer.startSpan('chat m', { attributes: { 'gen_ai.operation.name': 'chat' } }, under(agent));
    model.end();
    const tool = tracer.startSpan('ai.toolCall', {
      attributes: { 'ai.toolCall.id': 'call_1', 'ai.toolCall.name': 'refund' },
    }, under(agent));
    await provider.forceFlush();
    // Before the tool ends, its start is out: the pending span, announcing it with its call id.
    const early = exporter.getFinishedSpans().filter((s) => s.attributes['logfire.span_type'] === 'pending_span');
    assert.deepEqual(early.map((s) => s.name), ['ai.generateText', 'chat m', 'ai.toolCall']);
    tool.end();
    agent.end();
    http.end();
    await provider.forceFlush();

    const spans = exporter.getFinishedSpans();
    const real = Object.fromEntries(spans.filter((s) => !s.attributes['logfire.span_type']).map((s) => [s.name, s]));
    const pending = spans.filter((s) => s.attributes['logfire.span_type'] === 'pending_span');
    assert.equal(pending.length, 3);
    for (const announced of pending) {
      const of = real[announced.name];
      assert.equal(announced.parentSpanContext.spanId, of.spanContext().spanId); // a child of the real span
      assert.equal(announced.spanContext().traceId, of.spanContext().traceId);
      assert.notEqual(announced.spanContext().spanId, of.spanContext().spanId);
      assert.match(announced.spanContext().spanId, /^[0-9a-f]{16}$/);
      assert.equal(announced.attributes['logfire.pending_parent_id'], of.parentSpanContext?.spanId ?? ZEROS);
      assert.deepEqual(announced.startTime, of.startTime);
      assert.deepEqual(announced.endTime, of.startTime); // zero-length
    }
    const toolStart = pending.find((s) => s.name === 'ai.toolCall');
    assert.equal(toolStart.attributes['ai.toolCall.id'], 'call_1');
    assert.equal(toolStart.attributes['gen_ai.conversation.id'], 's-1'); // stamped before it was copied
    // The first span naming the session names it for every later span of the trace; earlier ones keep theirs.
    assert.equal(real['POST /chat'].attributes['gen_ai.conversation.id'], undefined);
    for (const name of ['ai.generateText', 'chat m', 'ai.toolCall']) {
      assert.equal(real[name].attributes['gen_ai.conversation.id'], 's-1');
    }
    await provider.shutdown();
  });
}

test('a trace without a session gets none, and a span that names its own keeps it', async () => {
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({
    spanProcessors: [new PendingSpanProcessor(new SimpleSpanProcessor(exporter))],
  });
  const tracer = provider.getTracer('test');
  const alone = tracer.startSpan('invoke_agent a', { attributes: { 'gen_ai.operation.name': 'invoke_agent' } });
  alone.end();
  const root = tracer.startSpan('invoke_agent b', {
    attributes: { 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.conversation.id': 'c-1' },
  });
  const own = tracer.startSpan('execute_tool t', {
    attributes: { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.conversation.id': 'c-2' },
  }, trace.setSpan(context.active(), root));
  own.end();
  root.end();
  await provider.forceFlush();
  const spans = exporter.getFinishedSpans().filter((s) => !s.attributes['logfire.span_type']);
  assert.deepEqual(spans.map((s) => [s.name, s.attributes['gen_ai.conversation.id']]), [
    ['invoke_agent a', undefined], ['execute_tool t', 'c-2'], ['invoke_agent b', 'c-1']]);
  await provider.shutdown();
});
