// A Vercel AI SDK agent run, traced with the OpenTelemetry JS SDK and exported over OTLP/HTTP: what the
// OTLP tests run in a process of their own (so that they can kill it inside a tool), and what records
// the fixtures of tests/sessions_app/otel/test_conventions.py.
//
//   node agent.mjs URL TOKEN CONVERSATION [--sdk v7|v7-legacy|v6] [--encoding protobuf|json]
//       [--processor batch|simple] [--pending] [--crash MARKER] [--orders A1,A2] [--call-prefix call]
//       [--no-session] [--stream] [--no-content]
//   node agent.mjs --record FILE [same options]   (OTLP JSON as exported, to FILE; no server needed)
//
// The model is a fake (`MockLanguageModelV3` of `ai/test`, no network): step 1 asks for `refund` of
// each order (call ids PREFIX_a1, PREFIX_a2, ...), step 2 answers in text. The tool fails for an
// order starting with X. With --crash the tool writes MARKER on its last order and blocks until the
// process is killed. --sdk: v7 with `@ai-sdk/otel`'s default integration (GenAI spans), v7 with its
// `LegacyOpenTelemetry` integration (ai.* spans), or v6 (tests/js/ai6's own node_modules, ai.* spans).
// --pending puts pending-span-processor.mjs (docs/guide/otlp.md) in front of the span processor.
// --no-session passes no session id (the conversation id is then unknown to Turnlog); --no-content
// turns the SDK's recordInputs and recordOutputs off.
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';

import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { z } from 'zod';

import { PendingSpanProcessor } from './pending-span-processor.mjs';

const { values: options, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    sdk: { type: 'string', default: 'v7' },
    encoding: { type: 'string', default: 'protobuf' },
    processor: { type: 'string', default: 'batch' },
    pending: { type: 'boolean', default: false },
    crash: { type: 'string' },
    orders: { type: 'string', default: 'A1,A2' },
    'call-prefix': { type: 'string', default: 'call' },
    'no-session': { type: 'boolean', default: false },
    stream: { type: 'boolean', default: false },
    'no-content': { type: 'boolean', default: false },
    record: { type: 'string' },
  },
});

// The `ai` package of the version asked for: v6 from tests/js/ai6's node_modules.
async function importAi(sdk) {
  const root = sdk === 'v6' ? new URL('./ai6/', import.meta.url) : new URL('./', import.meta.url);
  const require = createRequire(new URL('package.json', root));
  const load = (name) => import(pathToFileURL(require.resolve(name)).href);
  return { ai: await load('ai'), test: await load('ai/test') };
}

// --record: a local OTLP/JSON receiver that keeps every request's resourceSpans.
async function recorder() {
  const requests = [];
  const server = createServer((request, response) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
      requests.push(JSON.parse(Buffer.concat(chunks).toString()));
      response.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, requests, close: () => server.close() };
}

const record = options.record ? await recorder() : null;
const [url, token, conversation] = record ? [record.url, 'none', positionals[0] ?? 'vercel-session-1'] : positionals;
const { ai, test } = await importAi(options.sdk);

const Exporter = options.encoding === 'json' || record ? JsonExporter : ProtobufExporter;
const exporter = new Exporter({ url: `${url}/otlp/v1/traces`, headers: { Authorization: `Bearer ${token}` } });
const inner = options.processor === 'simple'
  ? new SimpleSpanProcessor(exporter)
  : new BatchSpanProcessor(exporter, { scheduledDelayMillis: 50 });
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'support-agent' }),
  spanProcessors: [options.pending ? new PendingSpanProcessor(inner) : inner],
});
// As an application would: the context manager carries the current span into async code (version 6
// relies on it to parent its spans).
provider.register();
const tracer = provider.getTracer('ai');

const orders = options.orders.split(',');
const callId = (order) => `${options['call-prefix']}_${order.toLowerCase()}`;
// The provider's usage in the V3 specification's form: totals that count the cache and the reasoning.
const usage = (input, output, cached, written, reasoning) => ({
  inputTokens: { total: input, noCache: input - cached - written, cacheRead: cached, cacheWrite: written },
  outputTokens: { total: output, text: output - reasoning, reasoning },
});
const steps = [
  {
    content: [
      { type: 'text', text: 'Let me refund them.' },
      ...orders.map((order) => ({
        type: 'tool-call', toolCallId: callId(order), toolName: 'refund', input: JSON.stringify({ order }),
      })),
    ],
    finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
    usage: usage(30, 12, 8, 4, 5),
  },
  {
    content: [{ type: 'text', text: 'Both orders are refunded.' }],
    finishReason: { unified: 'stop', raw: 'stop' },
    usage: usage(60, 9, 20, 0, 0),
  },
];
let step = 0;
const streamed = (result) => ({
  stream: test.simulateReadableStream({
    chunks: [
      { type: 'stream-start', warnings: [] },
      ...result.content.flatMap((part, i) => part.type === 'text'
        ? [{ type: 'text-start', id: `t${i}` }, { type: 'text-delta', id: `t${i}`, delta: part.text }, { type: 'text-end', id: `t${i}` }]
        : [part]),
      { type: 'finish', finishReason: result.finishReason, usage: result.usage },
    ],
  }),
});
const model = new test.MockLanguageModelV3({
  provider: 'mock-provider',
  modelId: 'scripted',
  doGenerate: async () => ({ ...steps[step++], warnings: [] }),
  doStream: async () => streamed(steps[step++]),
});

let calls = 0;
const refund = ai.tool({
  description: 'Refund an order.',
  inputSchema: z.object({ order: z.string() }),
  execute: async ({ order }) => {
    calls += 1;
    if (options.crash && calls === orders.length) {
      writeFileSync(options.crash, order);
      setInterval(() => {}, 1000); // the process is killed here, inside the tool
      await new Promise(() => {});
    }
    if (order.startsWith('X')) throw new Error(`no such order: ${order}`);
    return `refunded ${order}`;
  },
});

const session = options['no-session'] ? {} : { sessionId: conversation };
const recording = options['no-content'] ? { recordInputs: false, recordOutputs: false } : {};
let telemetry;
let runtime = {};
if (options.sdk === 'v6') {
  telemetry = { experimental_telemetry: { isEnabled: true, functionId: 'support', metadata: session, tracer, ...recording } };
} else {
  // Version 7 passes what the spans should name through the runtime context (`ai.settings.context.*`);
  // the default integration writes the conversation id where the GenAI conventions put it.
  const otel = await import('@ai-sdk/otel');
  const integration = options.sdk === 'v7-legacy'
    ? new otel.LegacyOpenTelemetry({ tracer })
    : new otel.OpenTelemetry({
      tracer,
      enrichSpan: ({ runtimeContext }) => (runtimeContext?.sessionId
        ? { 'gen_ai.conversation.id': runtimeContext.sessionId } : undefined),
    });
  telemetry = {
    telemetry: {
      isEnabled: true, functionId: 'support', integrations: [integration],
      includeRuntimeContext: { sessionId: true }, ...recording,
    },
  };
  runtime = { runtimeContext: session };
}

const call = {
  model,
  tools: { refund },
  system: 'You refund orders.',
  prompt: 'Refund orders A1 and A2',
  stopWhen: ai.stepCountIs(5),
  ...telemetry,
  ...runtime,
};
if (options.stream) {
  const result = ai.streamText(call);
  await result.consumeStream();
  await result.text;
} else {
  await ai.generateText(call);
}
await provider.shutdown();

if (record) {
  record.close();
  const resourceSpans = record.requests.flatMap((request) => request.resourceSpans ?? []);
  const versions = createRequire(new URL(options.sdk === 'v6' ? './ai6/package.json' : './package.json', import.meta.url));
  const version = (name) => versions(`${name}/package.json`).version;
  const packages = options.sdk === 'v6'
    ? `ai ${version('ai')}`
    : `ai ${version('ai')}, @ai-sdk/otel ${version('@ai-sdk/otel')} (${options.sdk === 'v7-legacy' ? 'LegacyOpenTelemetry' : 'OpenTelemetry'})`;
  const sdkVersion = createRequire(import.meta.url)('@opentelemetry/sdk-trace-node/package.json').version;
  const document = {
    source: `recorded by tests/js/agent.mjs --record (${options.stream ? 'streamText' : 'generateText'}, orders ${options.orders}`
      + `${options['no-content'] ? ', recordInputs and recordOutputs off' : ''}) `
      + `with ${packages}, @opentelemetry/sdk-trace-node ${sdkVersion}, OTLP/JSON as exported`,
    request: { resourceSpans },
  };
  writeFileSync(options.record, JSON.stringify(document, null, 1) + '\n');
  console.log(`${options.record}: ${resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)).length} spans`);
}
