/**
 * Outgoing HTTP through `wasi:http`.
 *
 * The host sends a request only to the origins the manifest grants the
 * component (`allow_hosts = ["https://api.example.org"]`); anything else
 * fails with a ToolError `permission_denied` that names the origin and the
 * manifest line that would allow it. Redirects are followed (up to
 * `maxRedirects`), and the host checks every hop again, so a redirect
 * cannot lead a tool out of its grants; credentials (`authorization`,
 * `cookie`) are not sent on to another origin.
 *
 * Requests block until the whole response is read; `run` needs no `await`.
 * The engine's `fetch` also works, but it does not follow redirects, and its
 * errors do not say whether the host refused the origin.
 *
 * @example
 * const page = http.get('https://example.org/').text();
 * const created = http.post('https://api.example.org/items', { json: { name: 'x' } });
 * if (!created.ok) throw ToolError.unavailable(`the API answered ${created.status}`);
 */

import { handle } from 'wasi:http/outgoing-handler@0.2.12';
import {
  Fields,
  OutgoingBody,
  OutgoingRequest,
  RequestOptions as WasiRequestOptions,
  IncomingBody,
  type ErrorCode,
  type Method,
} from 'wasi:http/types@0.2.12';
import type { StreamError } from 'wasi:io/streams@0.2.12';
import { ToolError, witError } from './errors';

/**
 * Response bodies larger than this are refused unless the request raises
 * `maxBody`: a tool's memory is limited, and a runaway download should fail
 * with a clear error rather than an out-of-memory trap.
 */
export const DEFAULT_MAX_BODY = 8 * 1024 * 1024;

/** How many redirects a request follows by default. */
export const DEFAULT_MAX_REDIRECTS = 5;

/** `blocking-write-and-flush` takes at most this many bytes per call. */
const WRITE_CHUNK = 4096;

/** Bytes asked for per read of a response body. */
const READ_CHUNK = 64n * 1024n;

/** The resources' disposer: componentize-js uses `Symbol.dispose`, or its registered stand-in where the engine has none. */
const dispose: typeof Symbol.dispose = Symbol.dispose ?? (Symbol.for('dispose') as typeof Symbol.dispose);

/** How to send a request. */
export interface RequestOptions {
  /** `GET` (the default), `POST`, `PUT`, `DELETE`, `PATCH`, `HEAD`, ... */
  method?: string;
  /** Headers, as an object or as name-value pairs (to repeat a name). */
  headers?: Record<string, string> | [string, string][];
  /** The body: text (sent as UTF-8) or bytes. */
  body?: string | Uint8Array;
  /** A body sent as JSON, with `content-type: application/json` unless `headers` set one. */
  json?: unknown;
  /** Give up connecting, and waiting for the first byte, after this many milliseconds. The host's deadline for the call applies regardless. */
  timeoutMs?: number;
  /** Refuse response bodies larger than this many bytes (default {@link DEFAULT_MAX_BODY}). */
  maxBody?: number;
  /** Follow at most this many redirects (default {@link DEFAULT_MAX_REDIRECTS}; 0 returns them). */
  maxRedirects?: number;
}

/** A response, its whole body read. */
export class Response {
  /** The HTTP status code. */
  readonly status: number;
  /** The headers in the order received, names in lower case. */
  readonly headers: [string, string][];
  /** The body's bytes. */
  readonly body: Uint8Array;
  /** The URL that answered, after redirects. */
  readonly url: string;

  /** A response as read from the host. */
  constructor(status: number, headers: [string, string][], body: Uint8Array, url: string) {
    this.status = status;
    this.headers = headers;
    this.body = body;
    this.url = url;
  }

  /** Whether the status is 2xx. */
  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  /** The first value of header `name` (case-insensitive), or `undefined`. */
  header(name: string): string | undefined {
    const wanted = name.toLowerCase();
    return this.headers.find(([n]) => n.toLowerCase() === wanted)?.[1];
  }

  /** The body as UTF-8 text, invalid sequences replaced with U+FFFD. */
  text(): string {
    return new TextDecoder().decode(this.body);
  }

  /** The body parsed as JSON; a body that is not JSON is ToolError `unavailable`, naming the status. */
  json<T = unknown>(): T {
    try {
      return JSON.parse(this.text()) as T;
    } catch {
      throw ToolError.unavailable(`${this.url} answered ${this.status} with a body that is not JSON`);
    }
  }
}

/** Shorthands over {@link request}. */
export const http = {
  /** Send a request to an absolute http(s) `url` and read the whole response. See {@link request}. */
  request,

  /** `GET url`. */
  get(url: string | URL, options: Omit<RequestOptions, 'method'> = {}): Response {
    return request(url, { ...options, method: 'GET' });
  },

  /** `POST url`, with `body` or `json` in `options`. */
  post(url: string | URL, options: Omit<RequestOptions, 'method'> = {}): Response {
    return request(url, { ...options, method: 'POST' });
  },
};

/**
 * Send a request to an absolute http(s) `url` and read the whole response.
 * Any status is a response; only failing to get one throws:
 * - `permission_denied` when the host does not allow the origin (a
 *   redirect's target too): grant it with `allow_hosts` in toolhost.toml;
 * - `invalid_input` (retryable) for a URL that is not absolute http(s);
 * - `unavailable` (retryable) for DNS, connection, TLS and timeout
 *   failures, a body past `maxBody`, or too many redirects.
 */
export function request(url: string | URL, options: RequestOptions = {}): Response {
  const maxRedirects = options.maxRedirects ?? DEFAULT_MAX_REDIRECTS;
  let headers = headerList(options);
  let method = (options.method ?? 'GET').toUpperCase();
  let body = requestBody(options);
  let target = String(url);
  for (let hop = 0; hop <= maxRedirects; hop += 1) {
    const response = sendOnce(method, target, headers, body, options);
    const location = [301, 302, 303, 307, 308].includes(response.status) ? response.header('location') : undefined;
    if (location === undefined || maxRedirects === 0) {
      return response;
    }
    // Relative locations resolve against the URL that sent them, as browsers do.
    const next = new URL(location, target);
    // Credentials meant for one origin are not handed to another, as browsers do.
    if (next.origin !== new URL(target).origin) {
      headers = withoutHeaders(headers, CREDENTIALS);
    }
    target = next.href;
    // 303 always, and 301/302 after POST by long-standing practice, become GET.
    if (response.status === 303 || (response.status !== 307 && response.status !== 308 && method === 'POST')) {
      method = 'GET';
      body = new Uint8Array();
      headers = headers.filter(([name]) => !name.toLowerCase().startsWith('content-'));
    }
  }
  throw ToolError.unavailable(`too many redirects (more than ${maxRedirects}), last to ${target}`);
}

/** Headers that carry credentials, dropped when a redirect leaves the origin. */
const CREDENTIALS = ['authorization', 'cookie', 'proxy-authorization'];

function withoutHeaders(headers: [string, string][], names: string[]): [string, string][] {
  return headers.filter(([name]) => !names.includes(name.toLowerCase()));
}

function headerList(options: RequestOptions): [string, string][] {
  const given = options.headers ?? [];
  const headers: [string, string][] = Array.isArray(given) ? [...given] : Object.entries(given);
  if (options.json !== undefined && !headers.some(([name]) => name.toLowerCase() === 'content-type')) {
    headers.push(['content-type', 'application/json']);
  }
  return headers;
}

function requestBody(options: RequestOptions): Uint8Array {
  if (options.json !== undefined) {
    return new TextEncoder().encode(JSON.stringify(options.json));
  }
  if (typeof options.body === 'string') {
    return new TextEncoder().encode(options.body);
  }
  return options.body ?? new Uint8Array();
}

/** The parts of an absolute http(s) URL that a request names, without its fragment. */
function parseUrl(url: string): { scheme: 'http' | 'https'; authority: string; path: string } {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (parsed === undefined || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || parsed.host === '') {
    throw ToolError.invalidInput(`invalid URL ${JSON.stringify(url)}: only absolute http:// and https:// URLs with a host are supported`);
  }
  return {
    scheme: parsed.protocol === 'https:' ? 'https' : 'http',
    authority: parsed.host,
    path: `${parsed.pathname}${parsed.search}`,
  };
}

const METHODS: Record<string, Method['tag']> = {
  GET: 'get',
  HEAD: 'head',
  POST: 'post',
  PUT: 'put',
  DELETE: 'delete',
  CONNECT: 'connect',
  OPTIONS: 'options',
  TRACE: 'trace',
  PATCH: 'patch',
};

function sendOnce(
  method: string,
  url: string,
  headers: [string, string][],
  body: Uint8Array,
  options: RequestOptions,
): Response {
  const { scheme, authority, path } = parseUrl(url);
  const origin = `${scheme}://${authority}`;
  const invalid = (what: string) => ToolError.invalidInput(`invalid request to ${url}: the host refused the ${what}`);

  const encoder = new TextEncoder();
  // A length, rather than chunked encoding, is what every server takes.
  const length: [string, string][] =
    body.length > 0 && !headers.some(([name]) => name.toLowerCase() === 'content-length')
      ? [['content-length', String(body.length)]]
      : [];
  let fields: Fields;
  try {
    fields = Fields.fromList([...headers, ...length].map(([name, value]) => [name, encoder.encode(value)]));
  } catch (e) {
    rethrowUnlessWit(e);
    throw invalid('headers (a name or value HTTP does not allow, or one the host sets itself)');
  }
  const request = new OutgoingRequest(fields);
  const tag = METHODS[method];
  const wasiMethod: Method = tag === undefined ? { tag: 'other', val: method } : ({ tag } as Method);
  setOrRefuse(() => request.setMethod(wasiMethod), () => invalid('method'));
  setOrRefuse(() => request.setScheme({ tag: scheme === 'https' ? 'HTTPS' : 'HTTP' }), () => invalid('scheme'));
  setOrRefuse(() => request.setAuthority(authority), () => invalid('host'));
  setOrRefuse(() => request.setPathWithQuery(path), () => invalid('path'));

  let requestOptions: WasiRequestOptions | undefined;
  if (options.timeoutMs !== undefined) {
    const nanos = BigInt(Math.max(0, Math.round(options.timeoutMs))) * 1_000_000n;
    const timeouts = new WasiRequestOptions();
    // The host may refuse to honour these; its deadline still applies.
    ignoreRefusal(() => timeouts.setConnectTimeout(nanos));
    ignoreRefusal(() => timeouts.setFirstByteTimeout(nanos));
    requestOptions = timeouts;
  }

  // The request goes out before its body is written: the host reads the
  // body as it sends it, and a body larger than the stream's buffer would
  // block forever if written first.
  const outgoing = request.body();
  let pending;
  try {
    pending = handle(request, requestOptions);
  } catch (e) {
    throw fromErrorCode(origin, errorCode(e));
  }
  const stream = outgoing.write();
  // A failed write is reported only when the request itself has nothing
  // to say: a refused address or a closed connection fails the write too,
  // and its own error says best why.
  let writeFailure: ToolError | undefined;
  try {
    for (let i = 0; i < body.length; i += WRITE_CHUNK) {
      stream.blockingWriteAndFlush(body.subarray(i, i + WRITE_CHUNK));
    }
  } catch (e) {
    writeFailure = ToolError.unavailable(`request to ${origin} failed writing the body: ${streamError(e)}`);
  } finally {
    // The body cannot be finished while its stream is alive.
    stream[dispose]();
  }
  try {
    OutgoingBody.finish(outgoing, undefined);
  } catch (e) {
    writeFailure ??= fromErrorCode(origin, errorCode(e));
  }

  const ready = pending.subscribe();
  ready.block();
  ready[dispose]();
  const outcome = pending.get();
  pending[dispose]();
  if (outcome === undefined || outcome.tag === 'err') {
    throw writeFailure ?? ToolError.internal(`request to ${origin}: the host gave no response after it was ready`);
  }
  if (outcome.val.tag === 'err') {
    throw fromErrorCode(origin, outcome.val.val);
  }
  const response = outcome.val.val;
  const status = response.status();
  const decoder = new TextDecoder();
  const responseFields = response.headers();
  const responseHeaders = responseFields.entries().map(([name, value]): [string, string] => [name, decoder.decode(value)]);
  responseFields[dispose]();
  const incoming = response.consume();
  const received = readBody(incoming, origin, options.maxBody ?? DEFAULT_MAX_BODY);
  IncomingBody.finish(incoming)[dispose]();
  response[dispose]();
  return new Response(status, responseHeaders, received, url);
}

/** Reads the whole body; the stream is closed before the body can be finished. */
function readBody(incoming: IncomingBody, origin: string, limit: number): Uint8Array {
  const stream = incoming.stream();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      let chunk: Uint8Array;
      try {
        chunk = stream.blockingRead(READ_CHUNK);
      } catch (e) {
        if (witError<StreamError>(e)?.payload.tag === 'closed') {
          break;
        }
        throw ToolError.unavailable(`request to ${origin} failed reading the body: ${streamError(e)}`);
      }
      size += chunk.length;
      if (size > limit) {
        throw ToolError.unavailable(`the response from ${origin} is larger than the ${limit}-byte limit (maxBody)`);
      }
      chunks.push(chunk);
    }
  } finally {
    stream[dispose]();
  }
  const body = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    body.set(chunk, offset);
    offset += chunk.length;
  }
  return body;
}

/** Runs a setter that fails with an empty `err`; a refusal becomes `refused()`. */
function setOrRefuse(set: () => void, refused: () => ToolError): void {
  try {
    set();
  } catch (e) {
    rethrowUnlessWit(e);
    throw refused();
  }
}

function ignoreRefusal(set: () => void): void {
  try {
    set();
  } catch (e) {
    rethrowUnlessWit(e);
  }
}

function rethrowUnlessWit(thrown: unknown): void {
  if (witError(thrown) === undefined) {
    throw thrown;
  }
}

function streamError(thrown: unknown): string {
  const error = witError<StreamError>(thrown);
  if (error === undefined) {
    throw thrown;
  }
  return error.payload.tag === 'closed' ? 'the stream closed' : error.payload.val.toDebugString();
}

/** The `wasi:http` error code a WIT import threw; anything else is rethrown. */
function errorCode(thrown: unknown): ErrorCode {
  const error = witError<ErrorCode>(thrown);
  if (error === undefined) {
    throw thrown;
  }
  return error.payload;
}

/** The ToolError for a `wasi:http` error code. */
function fromErrorCode(origin: string, code: ErrorCode): ToolError {
  if (code.tag === 'HTTP-request-denied') {
    return ToolError.permissionDenied(
      `request to ${origin} denied: this tool is not granted that origin; ` +
        `to allow it, add allow_hosts = ["${origin}"] to its [[tool]] in toolhost.toml`,
    );
  }
  const detail = 'val' in code && code.val !== undefined ? ` ${JSON.stringify(code.val, (_, v) => (typeof v === 'bigint' ? Number(v) : v))}` : '';
  return ToolError.unavailable(`request to ${origin} failed: ${code.tag}${detail}`);
}
