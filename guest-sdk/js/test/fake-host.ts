// Stand-ins for the component's WIT imports, so the SDK runs under plain
// node: sdk.test.mjs bundles the SDK with every `toolhost:` and `wasi:`
// import pointed here. Each records what it was given and answers what
// `fake` says; an `err` is thrown as componentize-js throws it, an error
// with the payload as its own `payload` property.

/** What the stand-ins answer, and what they were given; tests set and read it. */
export const fake = {
  logs: [] as [string, string][],
  config: {} as Record<string, string>,
  progress: [] as [number, number | undefined, string | undefined][],
  /** The answer to `ask`, or the payload of its refusal. */
  ask: { answer: '{}' } as { answer: string } | { refused: { reason: string; message: string } },
  asked: [] as [string, string][],
  /** The keys of the questions asked with one. */
  keys: [] as string[],
  /** The stores this component is granted, by name. */
  stores: new Map<string, Map<string, Uint8Array>>(),
  /** Keys per page of `list-keys`, to test paging. */
  pageSize: 2,
  /** Set to fail the next store write with `other(...)`. */
  storeFailure: undefined as string | undefined,
  reset(): void {
    this.logs = [];
    this.config = {};
    this.progress = [];
    this.ask = { answer: '{}' };
    this.asked = [];
    this.keys = [];
    this.stores = new Map();
    this.storeFailure = undefined;
  },
};

function componentError(payload: unknown): Error {
  const error = new Error('component error');
  Object.defineProperty(error, 'payload', { value: payload });
  return error;
}

// toolhost:tool/host
export function log(level: string, message: string): void {
  fake.logs.push([level, message]);
}

export function config(key: string): string | undefined {
  return fake.config[key];
}

export function progress(done: number, total?: number, message?: string): void {
  fake.progress.push([done, total, message]);
}

export function askWithKey(key: string, question: string, schema: string): string {
  fake.keys.push(key);
  return ask(question, schema);
}

export function ask(question: string, schema: string): string {
  fake.asked.push([question, schema]);
  if ('refused' in fake.ask) {
    throw componentError(fake.ask.refused);
  }
  return fake.ask.answer;
}

// wasi:keyvalue
class Bucket {
  constructor(readonly entries: Map<string, Uint8Array>) {}

  get(key: string): Uint8Array | undefined {
    return this.entries.get(key);
  }

  set(key: string, value: Uint8Array): void {
    if (fake.storeFailure !== undefined) {
      throw componentError({ tag: 'other', val: fake.storeFailure });
    }
    this.entries.set(key, value);
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  exists(key: string): boolean {
    return this.entries.has(key);
  }

  listKeys(cursor: bigint | undefined): { keys: string[]; cursor?: bigint } {
    const start = Number(cursor ?? 0n);
    const keys = [...this.entries.keys()].slice(start, start + fake.pageSize);
    const next = start + keys.length;
    return { keys, cursor: next < this.entries.size ? BigInt(next) : undefined };
  }
}

export function open(name: string): Bucket {
  const entries = fake.stores.get(name);
  if (entries === undefined) {
    throw componentError({ tag: 'access-denied' });
  }
  return new Bucket(entries);
}

export function increment(bucket: Bucket, key: string, delta: bigint): bigint {
  const text = new TextDecoder().decode(bucket.get(key) ?? new TextEncoder().encode('0'));
  if (!/^\d+$/.test(text)) {
    throw componentError({ tag: 'other', val: `not-a-counter: the value under "${key}" is not a decimal counter` });
  }
  const value = BigInt(text) + delta;
  bucket.set(key, new TextEncoder().encode(String(value)));
  return value;
}

export function getMany(bucket: Bucket, keys: string[]): ([string, Uint8Array] | undefined)[] {
  return keys.map((key) => {
    const value = bucket.get(key);
    return value === undefined ? undefined : [key, value];
  });
}

export function setMany(bucket: Bucket, entries: [string, Uint8Array][]): void {
  for (const [key, value] of entries) {
    bucket.set(key, value);
  }
}

export function deleteMany(bucket: Bucket, keys: string[]): void {
  for (const key of keys) {
    bucket.delete(key);
  }
}

// wasi:http
const dispose: typeof Symbol.dispose = Symbol.dispose ?? (Symbol.for('dispose') as typeof Symbol.dispose);

/** A request as the fake host received it. */
export interface SentRequest {
  method: string;
  scheme: string;
  authority: string;
  path: string;
  headers: [string, string][];
  body: string;
  /** Sizes of the body's writes, each at most 4096 bytes. */
  writes: number[];
  timeoutNs?: bigint;
}

/** What the fake server answers, or the error code the request fails with. */
export type Answer = { status: number; headers?: [string, string][]; body?: string } | { error: { tag: string } };

/** The fake network: the origins `handle` refuses (`authority`), the server, and what it received. */
export const network = {
  denied: new Set<string>(),
  serve: (_: SentRequest): Answer => ({ status: 200 }),
  sent: [] as SentRequest[],
  reset(): void {
    this.denied = new Set();
    this.serve = () => ({ status: 200 });
    this.sent = [];
  },
};

export class Fields {
  constructor(readonly list: [string, Uint8Array][] = []) {}

  static fromList(list: [string, Uint8Array][]): Fields {
    if (list.some(([name]) => !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name) || name.toLowerCase() === 'host')) {
      throw componentError({ tag: 'invalid-syntax' });
    }
    return new Fields(list);
  }

  entries(): [string, Uint8Array][] {
    return this.list;
  }

  [dispose](): void {}
}

class OutputStream {
  disposed = false;
  constructor(readonly request: SentRequest) {}

  blockingWriteAndFlush(bytes: Uint8Array): void {
    if (bytes.length > 4096) {
      throw new Error('wrote more than 4096 bytes at once');
    }
    this.request.writes.push(bytes.length);
    this.request.body += new TextDecoder().decode(bytes);
  }

  [dispose](): void {
    this.disposed = true;
  }
}

export class OutgoingBody {
  stream: OutputStream | undefined;
  finished = false;
  constructor(readonly request: SentRequest) {}

  write(): OutputStream {
    this.stream = new OutputStream(this.request);
    return this.stream;
  }

  static finish(body: OutgoingBody): void {
    if (body.stream !== undefined && !body.stream.disposed) {
      throw new Error('trap: the body was finished while its stream was alive');
    }
    body.finished = true;
  }
}

export class OutgoingRequest {
  readonly sent: SentRequest;
  readonly outgoing: OutgoingBody;

  constructor(fields: Fields) {
    const decoder = new TextDecoder();
    this.sent = {
      method: '',
      scheme: '',
      authority: '',
      path: '',
      headers: fields.list.map(([name, value]) => [name, decoder.decode(value)]),
      body: '',
      writes: [],
    };
    this.outgoing = new OutgoingBody(this.sent);
  }

  setMethod(method: { tag: string; val?: string }): void {
    this.sent.method = method.val ?? method.tag;
  }

  setScheme(scheme: { tag: string }): void {
    this.sent.scheme = scheme.tag;
  }

  setAuthority(authority: string): void {
    this.sent.authority = authority;
  }

  setPathWithQuery(path: string): void {
    this.sent.path = path;
  }

  body(): OutgoingBody {
    return this.outgoing;
  }
}

export class RequestOptions {
  timeoutNs: bigint | undefined;

  setConnectTimeout(ns: bigint): void {
    this.timeoutNs = ns;
  }

  setFirstByteTimeout(ns: bigint): void {
    this.timeoutNs = ns;
  }
}

class InputStream {
  disposed = false;
  #rest: Uint8Array;

  constructor(body: Uint8Array) {
    this.#rest = body;
  }

  blockingRead(len: bigint): Uint8Array {
    if (this.#rest.length === 0) {
      throw componentError({ tag: 'closed' });
    }
    const chunk = this.#rest.subarray(0, Number(len));
    this.#rest = this.#rest.subarray(chunk.length);
    return chunk;
  }

  [dispose](): void {
    this.disposed = true;
  }
}

export class IncomingBody {
  stream_: InputStream;

  constructor(body: Uint8Array) {
    this.stream_ = new InputStream(body);
  }

  stream(): InputStream {
    return this.stream_;
  }

  static finish(body: IncomingBody): { [dispose](): void } {
    if (!body.stream_.disposed) {
      throw new Error('trap: the body was finished while its stream was alive');
    }
    return { [dispose]() {} };
  }
}

class IncomingResponse {
  constructor(readonly answer: { status: number; headers?: [string, string][]; body?: string }) {}

  status(): number {
    return this.answer.status;
  }

  headers(): Fields {
    const encoder = new TextEncoder();
    return new Fields((this.answer.headers ?? []).map(([name, value]) => [name, encoder.encode(value)]));
  }

  consume(): IncomingBody {
    return new IncomingBody(new TextEncoder().encode(this.answer.body ?? ''));
  }

  [dispose](): void {}
}

class FutureIncomingResponse {
  constructor(readonly request: OutgoingRequest) {}

  subscribe(): { block(): void; [dispose](): void } {
    return { block() {}, [dispose]() {} };
  }

  get(): unknown {
    if (!this.request.outgoing.finished) {
      throw new Error('the response was awaited before the body was finished');
    }
    network.sent.push(this.request.sent);
    const answer = network.serve(this.request.sent);
    if ('error' in answer) {
      return { tag: 'ok', val: { tag: 'err', val: answer.error } };
    }
    return { tag: 'ok', val: { tag: 'ok', val: new IncomingResponse(answer) } };
  }

  [dispose](): void {}
}

export function handle(request: OutgoingRequest, options: RequestOptions | undefined): FutureIncomingResponse {
  if (network.denied.has(request.sent.authority)) {
    throw componentError({ tag: 'HTTP-request-denied' });
  }
  request.sent.timeoutNs = options?.timeoutNs;
  return new FutureIncomingResponse(request);
}

// toolhost:tool/tools
/** A tool of the fake host: its result, or the `tool-error` it fails with. */
export type FakeTool = (args: unknown) => { ok: unknown } | { err: { kind: string; message: string; retryable: boolean } };

/** The tools `call-tool` reaches, what each call was given, and each host call's batch. */
export const fakeTools = {
  tools: new Map<string, FakeTool>(),
  calls: [] as [string, string][],
  batches: [] as number[],
  /** Set to answer `call-tools` with one result too few, as a broken host would. */
  dropLast: false,
  /** Calls the host runs before it refuses the rest as `budget_exhausted`. */
  budget: Infinity,
  reset(): void {
    this.tools = new Map();
    this.calls = [];
    this.batches = [];
    this.dropLast = false;
    this.budget = Infinity;
  },
};

type WireOutput = { content: { tag: 'text'; val: string }[]; structured?: string };
type WireResult = { tag: 'ok'; val: WireOutput } | { tag: 'err'; val: { kind: string; message: string; retryable: boolean } };

function runFakeTool(name: string, args: string): WireResult {
  if (fakeTools.calls.length >= fakeTools.budget) {
    return { tag: 'err', val: { kind: 'budget_exhausted', message: 'all calls of the budget are made', retryable: false } };
  }
  fakeTools.calls.push([name, args]);
  const tool = fakeTools.tools.get(name);
  if (tool === undefined) {
    return { tag: 'err', val: { kind: 'unknown_tool', message: `no tool is named "${name}"`, retryable: true } };
  }
  const answer = tool(JSON.parse(args));
  if ('err' in answer) {
    return { tag: 'err', val: answer.err };
  }
  const value = answer.ok;
  return typeof value === 'string'
    ? { tag: 'ok', val: { content: [{ tag: 'text', val: value }] } }
    : { tag: 'ok', val: { content: [{ tag: 'text', val: JSON.stringify(value) }], structured: JSON.stringify(value) } };
}

export function callTool(name: string, args: string): WireOutput {
  fakeTools.batches.push(1);
  const result = runFakeTool(name, args);
  if (result.tag === 'err') {
    throw componentError(result.val);
  }
  return result.val;
}

export function callTools(calls: { name: string; arguments: string }[]): WireResult[] {
  if (calls.length > 1024) {
    throw new Error(`trap: a list of ${calls.length} calls; the host takes at most 1024`);
  }
  fakeTools.batches.push(calls.length);
  const results = calls.map((call) => runFakeTool(call.name, call.arguments));
  return fakeTools.dropLast ? results.slice(0, -1) : results;
}
