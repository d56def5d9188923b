// Tests of the SDK under plain node: the schema builder, argument checks,
// results and errors as the host receives them, the host helpers, the
// stores and HTTP requests. Run with `npm test` in guest-sdk/js/test (after `npm install` there).
//
// The SDK is TypeScript that imports WIT interfaces, so it is bundled first
// with esbuild, its `toolhost:` and `wasi:` imports pointed at fake-host.ts.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, beforeEach, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const here = fileURLToPath(new URL('.', import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'toolhost-sdk-test-'));
after(() => rmSync(out, { recursive: true, force: true }));

await build({
  stdin: {
    contents: [
      "export * from '../toolhost/index.ts';",
      "export { fake, fakeTools, network } from './fake-host.ts';",
    ].join('\n'),
    resolveDir: here,
    loader: 'ts',
  },
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  outfile: join(out, 'sdk.mjs'),
  logLevel: 'warning',
  plugins: [
    {
      name: 'fake-host',
      setup(b) {
        b.onResolve({ filter: /^(toolhost|wasi):/ }, () => ({ path: join(here, 'fake-host.ts') }));
      },
    },
  ],
});
const {
  AskRefused,
  Output,
  Store,
  ToolCallError,
  ToolError,
  ask,
  callTool,
  callToolJson,
  callTools,
  callToolsJson,
  config,
  defineTool,
  fake,
  fakeTools,
  http,
  log,
  network,
  progress,
  s,
  toJsonValue,
  toolbox,
} =
  await import(pathToFileURL(join(out, 'sdk.mjs')).href);

beforeEach(() => {
  fake.reset();
  fakeTools.reset();
  network.reset();
});

const CALL = { callId: 'call_1', deadlineMs: 5000n, context: undefined };

/** Call `name` through `exported` as the host does: the result, or the thrown WIT error record. */
async function call(exported, name, args) {
  try {
    return { ok: await exported.call(name, typeof args === 'string' ? args : JSON.stringify(args), CALL) };
  } catch (err) {
    return { err };
  }
}

describe('schema builder', () => {
  test('writes compact strict schemas, never `default`', () => {
    const input = s.object({
      name: s.string().describe('Who to greet.'),
      times: s.integer({ minimum: 1, maximum: 5 }).optional(),
      ratio: s.number(),
      loud: s.boolean().optional(),
      unit: s.enum(['C', 'F']),
      tags: s.array(s.string(), { maxItems: 3 }),
      origin: s.object({ lat: s.number(), lon: s.number() }).describe('Where from.'),
    });
    assert.deepEqual(input.schema, {
      type: 'object',
      properties: {
        name: { type: 'string', description: 'Who to greet.' },
        times: { type: 'integer', minimum: 1, maximum: 5 },
        ratio: { type: 'number' },
        loud: { type: 'boolean' },
        unit: { type: 'string', enum: ['C', 'F'] },
        tags: { type: 'array', items: { type: 'string' }, maxItems: 3 },
        origin: {
          type: 'object',
          properties: { lat: { type: 'number' }, lon: { type: 'number' } },
          required: ['lat', 'lon'],
          additionalProperties: false,
          description: 'Where from.',
        },
      },
      required: ['name', 'ratio', 'unit', 'tags', 'origin'],
      additionalProperties: false,
    });
    assert.doesNotMatch(JSON.stringify(input.schema), /"default"|"format"/);
  });

  test('an object with no fields still says it takes none', () => {
    assert.deepEqual(s.object({}).schema, { type: 'object', properties: {}, required: [], additionalProperties: false });
  });

  test('describe and optional return new types and leave the original alone', () => {
    const base = s.string();
    const described = base.describe('A name.');
    assert.deepEqual(base.schema, { type: 'string' });
    assert.equal(described.schema.description, 'A name.');
    assert.equal(base.isOptional, false);
    assert.equal(described.optional().isOptional, true);
    assert.equal(described.optional().schema.description, 'A name.');
  });

  test('nullable types stay required and take null, for strict mode', () => {
    const input = s.object({ note: s.string().nullable(), unit: s.enum(['C', 'F']).nullable().describe('Unit.') });
    assert.deepEqual(input.schema, {
      type: 'object',
      properties: {
        note: { type: ['string', 'null'] },
        unit: { type: ['string', 'null'], enum: ['C', 'F', null], description: 'Unit.' },
      },
      required: ['note', 'unit'],
      additionalProperties: false,
    });
    assert.equal(input.problems({ note: null, unit: null }), '');
    assert.equal(input.problems({ note: 'x', unit: 'K' }), '`unit` must be one of C, F, got "K"');
    assert.equal(input.problems({}), '`note` is required; `unit` is required');
    assert.deepEqual(s.string().nullable().nullable().schema, { type: ['string', 'null'] });
  });

  test('values that fit pass through unchanged', () => {
    const input = s.object({ a: s.string(), b: s.array(s.integer()).optional(), c: s.enum(['x', 'y']) });
    const value = { a: 'hi', b: [1, 2], c: 'y' };
    assert.equal(input.parse(value), value);
    assert.deepEqual(input.parse({ a: '', c: 'x' }), { a: '', c: 'x' });
  });

  test('each problem names where it is, and all are reported at once', () => {
    const input = s.object({
      name: s.string(),
      count: s.integer(),
      unit: s.enum(['C', 'F']),
      stops: s.array(s.object({ city: s.string() })),
    });
    assert.equal(
      input.problems({ count: 1.5, unit: 'K', stops: [{ city: 'Lyon' }, { city: 3 }, {}], extra: true }),
      [
        '`name` is required',
        '`count` must be an integer, got 1.5',
        '`unit` must be one of C, F, got "K"',
        '`stops[1].city` must be a string, got number',
        '`stops[2].city` is required',
        '`extra` is not a known field (the fields are: name, count, unit, stops)',
      ].join('; '),
    );
  });

  test('wrong JSON types are named as JSON names them', () => {
    const input = s.object({ a: s.string(), b: s.number(), c: s.boolean(), d: s.array(s.string()), e: s.object({}) });
    assert.equal(
      input.problems({ a: null, b: '1', c: 0, d: {}, e: [] }),
      '`a` must be a string, got null; `b` must be a number, got string; `c` must be true or false, got number; ' +
        '`d` must be an array, got object; `e` must be an object, got array',
    );
    assert.equal(input.problems([]), 'the value must be an object, got array');
  });

  test('bounds are checked', () => {
    const input = s.object({
      n: s.number({ minimum: 0, maximum: 1 }),
      code: s.string({ minLength: 2, maxLength: 3, pattern: '^[A-Z]+$' }),
      list: s.array(s.integer(), { minItems: 1 }),
    });
    assert.equal(
      input.problems({ n: 2, code: 'abcd', list: [] }),
      '`n` must be at most 1, got 2; `code` must be at most 3 characters long; `code` must match ^[A-Z]+$, got "abcd"; ' +
        '`list` must have at least 1 items, got 0',
    );
    assert.equal(input.problems({ n: 0, code: 'AB', list: [1] }), '');
    // Lengths count characters (code points), not UTF-16 units.
    assert.equal(s.string({ maxLength: 2 }).problems('😀😀'), '');
  });

  test('at most eight problems are listed', () => {
    const shape = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`f${i}`, s.string()]));
    const problems = s.object(shape).problems({});
    assert.match(problems, /`f7` is required; and 2 more$/);
  });

  test('parse throws invalid_input, retryable', () => {
    assert.throws(
      () => s.object({ a: s.string() }).parse({}),
      (e) => e instanceof ToolError && e.kind === 'invalid_input' && e.retryable && e.message === 'the arguments do not fit the schema: `a` is required',
    );
  });
});

describe('tools', () => {
  const greet = defineTool({
    name: 'greet',
    title: 'Greet',
    description: 'Greet someone.',
    input: { name: s.string(), times: s.integer({ minimum: 1 }).optional() },
    readOnly: true,
    idempotent: true,
    run: ({ name, times }) => `Hello, ${name}${'!'.repeat(times ?? 1)}`,
  });

  test('a spec carries the schemas as JSON text and every hint', () => {
    assert.deepEqual(greet.spec, {
      name: 'greet',
      title: 'Greet',
      description: 'Greet someone.',
      inputSchema:
        '{"type":"object","properties":{"name":{"type":"string"},"times":{"type":"integer","minimum":1}},"required":["name"],"additionalProperties":false}',
      outputSchema: undefined,
      hints: { readOnly: true, destructive: false, idempotent: true, openWorld: false },
    });
    assert.deepEqual(toolbox(greet).tools(), [greet.spec]);
  });

  test('a string result is one text block', async () => {
    const { ok } = await call(toolbox(greet), 'greet', { name: 'Ada', times: 2 });
    assert.deepEqual(ok, { content: [{ tag: 'text', val: 'Hello, Ada!!' }] });
  });

  test('arguments that do not fit are invalid_input, retryable, and run is not called', async () => {
    let ran = false;
    const t = defineTool({ name: 't', description: 'd', input: { n: s.number() }, run: () => ((ran = true), 'x') });
    assert.deepEqual((await call(toolbox(t), 't', { n: 'one' })).err, {
      kind: 'invalid_input',
      message: 'the arguments do not fit the schema: `n` must be a number, got string',
      retryable: true,
    });
    assert.equal((await call(toolbox(t), 't', '{"n":')).err.kind, 'invalid_input');
    assert.equal((await call(toolbox(t), 't', '[1]')).err.message, 'the arguments do not fit the schema: the value must be an object, got array');
    assert.equal(ran, false);
  });

  test('an integer JavaScript cannot hold exactly is refused, not rounded', async () => {
    const t = defineTool({ name: 't', description: 'd', input: { id: s.integer() }, run: ({ id }) => String(id) });
    const { err } = await call(toolbox(t), 't', '{"id":9007199254740993}');
    assert.equal(err.kind, 'invalid_input');
    assert.match(err.message, /beyond the integers JavaScript holds exactly/);
    assert.equal((await call(toolbox(t), 't', { id: 9007199254740991 })).ok.content[0].val, '9007199254740991');
  });

  test('what a plain JavaScript tool gets wrong fails the call, never the instance', async () => {
    const numberText = defineTool({ name: 'n', description: 'd', input: {}, run: () => Output.text(42) });
    assert.match((await call(toolbox(numberText), 'n', {})).err.message, /content block 0 \(text\): the text must be a string/);
    const arrayImage = defineTool({ name: 'i', description: 'd', input: {}, run: () => new Output().withImage('image/png', [1, 2]) });
    assert.match((await call(toolbox(arrayImage), 'i', {})).err.message, /must be a Uint8Array/);
    const oddError = defineTool({ name: 'e', description: 'd', input: {}, run: () => { throw new ToolError(404, 7); } });
    assert.deepEqual((await call(toolbox(oddError), 'e', {})).err, { kind: '404', message: '7', retryable: false });
    assert.throws(() => defineTool({ name: 'x', input: {}, run: () => '' }), /needs a description/);
  });

  test('an unknown tool is unknown_tool', async () => {
    assert.deepEqual((await call(toolbox(greet), 'nope', {})).err, {
      kind: 'unknown_tool',
      message: 'this component has no tool named "nope"; it has: greet',
      retryable: false,
    });
  });

  test('a thrown ToolError reaches the host as it is', async () => {
    const t = defineTool({
      name: 't',
      description: 'd',
      input: {},
      run() {
        throw ToolError.notFound('no such city');
      },
    });
    assert.deepEqual((await call(toolbox(t), 't', {})).err, { kind: 'not_found', message: 'no such city', retryable: true });
    assert.deepEqual(fake.logs, []);
  });

  test('anything else thrown becomes internal with its text, and its stack goes to the log', async () => {
    const t = defineTool({
      name: 't',
      description: 'd',
      input: {},
      run() {
        return null.boom;
      },
    });
    const { err } = await call(toolbox(t), 't', {});
    assert.equal(err.kind, 'internal');
    assert.match(err.message, /^TypeError: /);
    assert.equal(err.retryable, false);
    assert.equal(fake.logs[0][0], 'error');
    assert.match(fake.logs[0][1], /^t: uncaught TypeError: [^]*\n/);

    const strings = defineTool({ name: 's', description: 'd', input: {}, run: () => Promise.reject('plain text') });
    assert.deepEqual((await call(toolbox(strings), 's', {})).err, { kind: 'internal', message: 'plain text', retryable: false });
  });

  test('the error thrown to the host is a plain record, not an Error (which would trap)', async () => {
    const { err } = await call(toolbox(greet), 'nope', {});
    assert.equal(err instanceof Error, false);
    assert.deepEqual(Object.keys(err), ['kind', 'message', 'retryable']);
  });

  test('an object result is JSON text, and structured only with an output schema', async () => {
    const input = { n: s.number() };
    const withOutput = defineTool({ name: 'a', description: 'd', input, output: { double: s.number() }, run: ({ n }) => ({ double: n * 2 }) });
    const without = defineTool({ name: 'b', description: 'd', input, run: ({ n }) => ({ double: n * 2 }) });
    const both = toolbox(withOutput, without);
    assert.equal(withOutput.spec.outputSchema, '{"type":"object","properties":{"double":{"type":"number"}},"required":["double"],"additionalProperties":false}');
    assert.deepEqual((await call(both, 'a', { n: 2 })).ok, { content: [{ tag: 'text', val: '{"double":4}' }], structured: '{"double":4}' });
    assert.deepEqual((await call(both, 'b', { n: 2 })).ok, { content: [{ tag: 'text', val: '{"double":4}' }], structured: undefined });
  });

  test('an Output carries several blocks, structured JSON and an artifact', async () => {
    const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47]);
    const t = defineTool({
      name: 't',
      description: 'd',
      input: {},
      run: () =>
        Output.text('A chart:')
          .withImage('image/png', png)
          .withLink('https://example.org/c', 'chart', { description: 'the data' })
          .withResource('mem://notes', 'a note', 'text/plain')
          .withStructured({ points: 3 })
          .withArtifact({ raw: [1, 2, 3] }),
    });
    assert.deepEqual((await call(toolbox(t), 't', {})).ok, {
      content: [
        { tag: 'text', val: 'A chart:' },
        { tag: 'image', val: { mimeType: 'image/png', data: png } },
        { tag: 'resource-link', val: { uri: 'https://example.org/c', name: 'chart', mimeType: undefined, description: 'the data' } },
        { tag: 'embedded', val: { uri: 'mem://notes', mimeType: 'text/plain', contents: { tag: 'text', val: 'a note' } } },
      ],
      structured: '{"points":3}',
      artifact: '{"raw":[1,2,3]}',
    });
  });

  test('run may be async and sees the call context', async () => {
    const t = defineTool({
      name: 't',
      description: 'd',
      input: {},
      run: async (_, ctx) => {
        await Promise.resolve();
        return `${ctx.callId} ${ctx.deadlineMs} ${JSON.stringify(ctx.contextJson())}`;
      },
    });
    assert.equal((await call(toolbox(t), 't', {})).ok.content[0].val, 'call_1 5000 undefined');
  });

  test('returning nothing, or what JSON cannot hold, is internal', async () => {
    const none = defineTool({ name: 'a', description: 'd', input: {}, run: () => undefined });
    const big = defineTool({ name: 'b', description: 'd', input: {}, run: () => ({ n: 1n }) });
    const both = toolbox(none, big);
    assert.match((await call(both, 'a', {})).err.message, /returned nothing/);
    assert.match((await call(both, 'b', {})).err.message, /cannot be written as JSON/);
  });

  test('mistakes in a definition fail when the module loads, that is at build time', () => {
    assert.throws(() => defineTool({ name: 'has space', description: 'd', input: {}, run: () => '' }), /must match/);
    assert.throws(() => defineTool({ name: 't', description: 'd', input: s.string(), run: () => '' }), /must be objects/);
    assert.throws(() => toolbox(greet, greet), /two tools are named "greet"/);
  });
});

describe('host helpers', () => {
  test('log, config and progress go to the host as given', () => {
    fake.config.precision = '3';
    log('info', 'hello');
    progress(1, 4, 'one of four');
    progress(2);
    assert.equal(config('precision'), '3');
    assert.equal(config('missing'), undefined);
    assert.deepEqual(fake.logs, [['info', 'hello']]);
    assert.deepEqual(fake.progress, [
      [1, 4, 'one of four'],
      [2, undefined, undefined],
    ]);
  });

  test('ask sends the form as a strict object schema and returns the answer', () => {
    fake.ask = { answer: '{"confirm":true,"why":"old"}' };
    const answer = ask('Delete?', { confirm: s.boolean().describe('Delete them?'), why: s.string().optional() });
    assert.deepEqual(answer, { confirm: true, why: 'old' });
    assert.deepEqual(fake.asked, [
      [
        'Delete?',
        '{"type":"object","properties":{"confirm":{"type":"boolean","description":"Delete them?"},"why":{"type":"string"}},"required":["confirm"],"additionalProperties":false}',
      ],
    ]);
  });

  test('ask with a key asks under it; without one, under none', () => {
    fake.ask = { answer: '{"name":"Ada"}' };
    assert.deepEqual(ask('Name?', { name: s.string() }, { key: 'user_name' }), { name: 'Ada' });
    ask('Again?', { name: s.string() });
    assert.deepEqual(fake.keys, ['user_name']);
    assert.deepEqual(
      fake.asked.map(([question]) => question),
      ['Name?', 'Again?'],
    );
  });

  test('a refusal is an AskRefused ToolError of the matching kind', () => {
    for (const [reason, kind] of [
      ['declined', 'declined'],
      ['cancelled', 'cancelled'],
      ['unavailable', 'unavailable'],
      ['invalid-question', 'invalid_question'],
    ]) {
      fake.ask = { refused: { reason, message: 'because' } };
      assert.throws(
        () => ask('Sure?', { ok: s.boolean() }),
        (e) => e instanceof AskRefused && e instanceof ToolError && e.reason === reason && e.kind === kind && !e.retryable,
      );
    }
  });

  test('an answer that does not fit the form is invalid_question', () => {
    fake.ask = { answer: '{"ok":"yes"}' };
    assert.throws(() => ask('Sure?', { ok: s.boolean() }), {
      kind: 'invalid_question',
      message: 'the answer does not fit the form asked for: `ok` must be true or false, got string',
    });
  });
});

describe('stores', () => {
  test('a store not granted is permission_denied naming the manifest lines', () => {
    assert.throws(() => Store.open('notes'), (e) => {
      assert.equal(e.kind, 'permission_denied');
      assert.equal(e.retryable, false);
      assert.match(e.message, /stores = \["notes"\]/);
      assert.match(e.message, /\[store\.notes\]/);
      return true;
    });
  });

  test('get, set, exists, delete, JSON, counters and keys over pages', () => {
    fake.stores.set('notes', new Map());
    const notes = Store.open('notes');
    assert.equal(notes.get('a'), undefined);
    notes.set('a', 'hello');
    assert.deepEqual(notes.get('a'), new TextEncoder().encode('hello'));
    assert.equal(notes.getText('a'), 'hello');
    assert.equal(notes.exists('a'), true);
    notes.setJson('j', { n: [1, 2] });
    assert.deepEqual(notes.getJson('j'), { n: [1, 2] });
    assert.throws(() => notes.getJson('a'), { kind: 'invalid_input' });
    assert.equal(notes.increment('visits'), 1);
    assert.equal(notes.increment('visits', 5), 6);
    assert.throws(() => notes.increment('a'), { kind: 'invalid_input' });
    assert.throws(() => notes.increment('visits', -1), RangeError);
    notes.setMany([
      ['x', '1'],
      ['y', new Uint8Array([2])],
    ]);
    assert.deepEqual(notes.getMany(['x', 'nope']), [new TextEncoder().encode('1'), undefined]);
    assert.deepEqual(notes.keys().sort(), ['a', 'j', 'visits', 'x', 'y']);
    notes.deleteMany(['x', 'y']);
    notes.delete('a');
    assert.deepEqual(notes.keys().sort(), ['j', 'visits']);
  });

  test('the host\'s store failures become typed errors', () => {
    fake.stores.set('notes', new Map());
    const notes = Store.open('notes');
    for (const [failure, kind, retryable] of [
      ['quota-exceeded: 10 keys at most', 'quota_exceeded', false],
      ['too-large: values are 64 KiB at most', 'invalid_input', true],
      ['limit: 1000 operations per call', 'limit', false],
      ['unavailable: the database is locked', 'unavailable', true],
      ['in-use: held by process 42; stop it or use redis://', 'unavailable', false],
      ['invalid-cursor: start the listing again', 'invalid_input', true],
      ['something else', 'store', false],
    ]) {
      fake.storeFailure = failure;
      assert.throws(() => notes.set('k', 'v'), (e) => e.kind === kind && e.retryable === retryable && e.message.startsWith('store "notes": '));
    }
  });
});

describe('http', () => {
  test('a GET names the method, scheme, host and path, and reads the whole response', () => {
    network.serve = () => ({ status: 200, headers: [['Content-Type', 'application/json']], body: '{"ok":true}' });
    const response = http.get('https://api.example.org:8443/items?q=a b#top', { headers: { accept: 'application/json' } });
    assert.deepEqual(network.sent[0], {
      method: 'get',
      scheme: 'HTTPS',
      authority: 'api.example.org:8443',
      path: '/items?q=a%20b',
      headers: [['accept', 'application/json']],
      body: '',
      writes: [],
      timeoutNs: undefined,
    });
    assert.equal(response.status, 200);
    assert.equal(response.ok, true);
    assert.equal(response.header('content-type'), 'application/json');
    assert.deepEqual(response.json(), { ok: true });
    assert.equal(response.url, 'https://api.example.org:8443/items?q=a b#top');
  });

  test('a body is sent with its length, in writes of at most 4096 bytes', () => {
    const text = 'x'.repeat(10_000);
    http.post('http://127.0.0.1:8081/echo', { json: { text } });
    const sent = network.sent[0];
    assert.equal(sent.method, 'post');
    assert.equal(sent.scheme, 'HTTP');
    const body = JSON.stringify({ text });
    assert.equal(sent.body, body);
    assert.deepEqual(sent.headers, [
      ['content-type', 'application/json'],
      ['content-length', String(body.length)],
    ]);
    assert.deepEqual(sent.writes, [4096, 4096, body.length - 8192]);
  });

  test('an unusual method, a timeout, and bytes', () => {
    http.request(new URL('https://a.test/x'), { method: 'purge', body: new Uint8Array([104, 105]), timeoutMs: 1500 });
    assert.equal(network.sent[0].method, 'PURGE');
    assert.equal(network.sent[0].body, 'hi');
    assert.equal(network.sent[0].timeoutNs, 1_500_000_000n);
  });

  test('redirects are followed, relative ones resolved, and a POST becomes a GET after 303', () => {
    network.serve = (req) => {
      if (req.path === '/start') return { status: 303, headers: [['location', 'next?step=2']] };
      if (req.path === '/next?step=2') return { status: 307, headers: [['location', '//b.test/final']] };
      return { status: 200, body: `at ${req.authority}${req.path} by ${req.method}` };
    };
    const response = http.post('https://a.test/start', { body: 'payload' });
    assert.equal(response.text(), 'at b.test/final by get');
    assert.equal(response.url, 'https://b.test/final');
    assert.deepEqual(
      network.sent.map((r) => [r.method, r.body]),
      [
        ['post', 'payload'],
        ['get', ''],
        ['get', ''],
      ],
    );
  });

  test('credentials stay with their origin, and a body\'s type with its body', () => {
    network.serve = (req) => {
      if (req.path === '/a') return { status: 307, headers: [['location', '/b']] };
      if (req.path === '/b') return { status: 303, headers: [['location', 'https://other.test/c']] };
      return { status: 200 };
    };
    http.post('https://a.test/a', { json: {}, headers: { Authorization: 'Bearer t', 'x-keep': '1' } });
    assert.deepEqual(
      network.sent.map((r) => `${r.authority}${r.path} ${r.headers.map(([n]) => n).join(',')}`),
      [
        'a.test/a Authorization,x-keep,content-type,content-length',
        'a.test/b Authorization,x-keep,content-type,content-length',
        'other.test/c x-keep',
      ],
    );
  });

  test('maxRedirects 0 returns the redirect; too many redirects are unavailable', () => {
    network.serve = () => ({ status: 302, headers: [['location', '/again']] });
    assert.equal(http.get('https://a.test/', { maxRedirects: 0 }).status, 302);
    assert.throws(() => http.get('https://a.test/', { maxRedirects: 2 }), {
      kind: 'unavailable',
      message: 'too many redirects (more than 2), last to https://a.test/again',
    });
  });

  test('a refused origin is permission_denied naming it and allow_hosts, for a redirect\'s target too', () => {
    network.denied.add('evil.test');
    const expected = {
      kind: 'permission_denied',
      retryable: false,
      message:
        'request to https://evil.test denied: this tool is not granted that origin; ' +
        'to allow it, add allow_hosts = ["https://evil.test"] to its [[tool]] in toolhost.toml',
    };
    assert.throws(() => http.get('https://evil.test/x'), expected);
    network.serve = () => ({ status: 302, headers: [['location', 'https://evil.test/']] });
    assert.throws(() => http.get('https://a.test/'), expected);
  });

  test('transport failures and oversized bodies are unavailable, retryable', () => {
    network.serve = () => ({ error: { tag: 'connection-refused' } });
    assert.throws(() => http.get('http://a.test/'), {
      kind: 'unavailable',
      retryable: true,
      message: 'request to http://a.test failed: connection-refused',
    });
    network.serve = () => ({ status: 200, body: 'x'.repeat(100) });
    assert.throws(() => http.get('http://a.test/', { maxBody: 99 }), {
      kind: 'unavailable',
      message: 'the response from http://a.test is larger than the 99-byte limit (maxBody)',
    });
    assert.equal(http.get('http://a.test/', { maxBody: 100 }).body.length, 100);
  });

  test('URLs that are not absolute http(s), and headers the host refuses, are invalid_input', () => {
    for (const url of ['/relative', 'ftp://a.test/', 'not a url', 'https://']) {
      assert.throws(() => http.get(url), { kind: 'invalid_input', retryable: true }, url);
    }
    assert.throws(() => http.get('https://a.test/', { headers: { 'bad name': 'x' } }), {
      kind: 'invalid_input',
      message: 'invalid request to https://a.test/: the host refused the headers (a name or value HTTP does not allow, or one the host sets itself)',
    });
    assert.equal(network.sent.length, 0);
  });

  test('a body that is not JSON is unavailable, naming the status', () => {
    network.serve = () => ({ status: 502, body: '<html>' });
    const response = http.get('https://a.test/api');
    assert.equal(response.ok, false);
    assert.throws(() => response.json(), { kind: 'unavailable', message: 'https://a.test/api answered 502 with a body that is not JSON' });
  });
});

describe('calling tools', () => {
  beforeEach(() => {
    fakeTools.tools.set('calc', ({ expression }) => (expression === '6*7' ? { ok: { value: 42 } } : { err: { kind: 'bad_expression', message: `cannot read ${expression}`, retryable: true } }));
    fakeTools.tools.set('echo', (args) => ({ ok: `echo ${JSON.stringify(args)}` }));
  });

  test('callTool returns the structured result, else the text', () => {
    assert.deepEqual(callTool('calc', { expression: '6*7' }), { value: 42 });
    assert.equal(callTool('echo'), 'echo {}');
    assert.deepEqual(fakeTools.calls, [['calc', '{"expression":"6*7"}'], ['echo', '{}']]);
  });

  test('a failed call throws a ToolCallError, a ToolError with the callee\'s kind', () => {
    let error;
    try {
      callTool('calc', { expression: '1/' });
    } catch (e) {
      error = e;
    }
    assert.ok(error instanceof ToolCallError);
    assert.ok(error instanceof ToolError);
    assert.equal(error.tool, 'calc');
    assert.equal(error.kind, 'bad_expression');
    assert.equal(error.message, 'cannot read 1/');
    assert.equal(error.retryable, true);
    assert.throws(() => callTool('nope'), { name: 'ToolCallError', kind: 'unknown_tool', tool: 'nope' });
  });

  test('left uncaught in run, it fails the calling tool with the callee\'s kind', async () => {
    const t = defineTool({ name: 't', description: 'd', input: {}, run: () => callTool('calc', { expression: 'x' }) });
    assert.deepEqual((await call(toolbox(t), 't', {})).err, { kind: 'bad_expression', message: 'cannot read x', retryable: true });
  });

  test('callTools makes one host call and settles each call in order', () => {
    const settled = callTools([{ name: 'calc', arguments: { expression: '6*7' } }, { name: 'calc', arguments: { expression: '?' } }, { name: 'echo' }]);
    assert.deepEqual(fakeTools.batches, [3]);
    assert.deepEqual(settled[0], { status: 'fulfilled', value: { value: 42 } });
    assert.equal(settled[1].status, 'rejected');
    assert.ok(settled[1].reason instanceof ToolCallError);
    assert.equal(settled[1].reason.kind, 'bad_expression');
    assert.deepEqual(settled[2], { status: 'fulfilled', value: 'echo {}' });
    assert.deepEqual(callTools([]), []);
    assert.deepEqual(fakeTools.batches, [3]);
  });

  test('the Json variants take arguments as text, and a result the host leaves out is a rejection', () => {
    assert.deepEqual(callToolJson('calc', '{"expression":"6*7"}'), { value: 42 });
    fakeTools.dropLast = true;
    const settled = callToolsJson([{ name: 'echo', arguments: '{}' }, { name: 'echo', arguments: '{"a":1}' }]);
    assert.deepEqual(settled[0], { status: 'fulfilled', value: 'echo {}' });
    assert.equal(settled[1].status, 'rejected');
    assert.equal(settled[1].reason.kind, 'internal');
    assert.equal(settled[1].reason.message, 'the host returned no result for this call');
  });

  test('more calls than a host list holds go in lists of 1024, in order', () => {
    const settled = callTools(Array.from({ length: 2500 }, (_, i) => ({ name: 'echo', arguments: { i } })));
    assert.deepEqual(fakeTools.batches, [1024, 1024, 452]);
    assert.equal(settled.length, 2500);
    assert.deepEqual(settled[2499], { status: 'fulfilled', value: 'echo {"i":2499}' });
  });

  test('arguments that are not a plain JSON object are a TypeError, and nothing is called', () => {
    for (const [args, message] of [
      [[1, 2], /must be a plain object like \{ key: value \}, got an array/],
      ['6*7', /got string/],
      [null, /got null/],
      [new Map(), /got an object of a class/],
      [{ n: 10n }, /the arguments of calc\.n is a BigInt/],
      [{ f() {} }, /the arguments of calc\.f is a function/],
      [{ x: NaN }, /the arguments of calc\.x is NaN/],
      [{ list: [1, undefined] }, /the arguments of calc\.list\[1\] is undefined/],
    ]) {
      assert.throws(() => callTool('calc', args), { name: 'TypeError', message });
    }
    const cyclic = {};
    cyclic.self = cyclic;
    assert.throws(() => callTools([{ name: 'echo' }, { name: 'calc', arguments: cyclic }]), /calc\.self is a cycle/);
    assert.deepEqual(fakeTools.calls, []);
    // An undefined field is left out, as JSON.stringify does.
    assert.equal(callTool('echo', { a: 1, b: undefined }), 'echo {"a":1}');
  });
});

describe('checked JSON', () => {
  test('plain values are copied, toJSON is honoured, shared objects are fine', () => {
    const shared = { x: 1 };
    const date = new Date(0);
    assert.deepEqual(toJsonValue({ a: [shared, shared], d: date, n: null, s: 'é', __proto__: null }, 'result'), {
      a: [{ x: 1 }, { x: 1 }],
      d: '1970-01-01T00:00:00.000Z',
      n: null,
      s: 'é',
    });
  });

  test('each value JSON cannot hold is named by its path', () => {
    const cyclic = { items: [] };
    cyclic.items.push({ parent: cyclic });
    const cases = [
      [undefined, 'result is undefined'],
      [{ items: [1, 2, 3, () => 1] }, 'result.items[3] is a function'],
      [{ 'a b': Symbol('s') }, 'result["a b"] is a symbol'],
      [[1n], 'result[0] is a BigInt (1n)'],
      [{ x: Infinity }, 'result.x is Infinity'],
      [cyclic, 'result.items[0].parent is a cycle'],
      [{ p: Promise.resolve(1) }, 'result.p is a Promise: did you forget `await`?'],
      [new Set([1]), 'result is a Set'],
      [{ get boom() { throw new RangeError('no'); } }, 'result.boom cannot be read: RangeError: no'],
      [new Proxy({}, { ownKeys() { throw 7; } }), 'result cannot be read: a thrown number'],
    ];
    for (const [value, message] of cases) {
      assert.throws(() => toJsonValue(value, 'result'), (e) => e instanceof TypeError && e.message.startsWith(message), message);
    }
    let deep = 1;
    for (let i = 0; i < 200; i++) deep = [deep];
    assert.throws(() => toJsonValue(deep, 'result'), /nested more than 100 levels deep/);
  });
});
