/**
 * Key-value stores through `wasi:keyvalue`: state that outlives a call.
 *
 * The manifest declares stores (`[store.NAME]`) and grants them per tool
 * (`stores = ["NAME"]`); a tool without the grant cannot open one. A store
 * may be kept per user or tenant (`scope = "user"`): the host then opens the
 * namespace of the call's injected context, and a tool never sees another
 * user's keys. Quotas (keys, bytes, key and value sizes) are the operator's;
 * a write past one is refused whole and changes nothing.
 *
 * Every failure is thrown as a ToolError: `permission_denied` for a store
 * not granted, `quota_exceeded`, `invalid_input` for a value too large or
 * not what was asked for (or a listing cursor the host forgot), `limit`,
 * `unavailable` (retryable, or not when another process holds the store's
 * file), or `store`.
 *
 * @example
 * const notes = Store.open('notes');
 * notes.set('greeting', 'hello');
 * const visits = notes.increment('visits');
 * notes.setJson('last', { visits });
 * for (const key of notes.keys()) notes.delete(key);
 */

import { increment } from 'wasi:keyvalue/atomics@0.2.0-draft';
import { deleteMany, getMany, setMany } from 'wasi:keyvalue/batch@0.2.0-draft';
import { open, type Bucket, type Error as StoreError } from 'wasi:keyvalue/store@0.2.0-draft';
import { ToolError, witError } from './errors';

/** An open store. Values are bytes; strings are stored as UTF-8. */
export class Store {
  /** The store's name in the manifest. */
  readonly name: string;
  readonly #bucket: Bucket;

  /** Use {@link Store.open}. */
  constructor(name: string, bucket: Bucket) {
    this.name = name;
    this.#bucket = bucket;
  }

  /** Open the store the manifest calls `name`; `permission_denied` when it is not granted to this tool. */
  static open(name: string): Store {
    return new Store(name, guard(name, () => open(name)));
  }

  /** The value under `key`, or `undefined`. */
  get(key: string): Uint8Array | undefined {
    return guard(this.name, () => this.#bucket.get(key));
  }

  /** The value under `key` as UTF-8 text, or `undefined`. */
  getText(key: string): string | undefined {
    const bytes = this.get(key);
    return bytes === undefined ? undefined : new TextDecoder().decode(bytes);
  }

  /** The value under `key` parsed as JSON, or `undefined`; a value that is not JSON is `invalid_input`. */
  getJson<T = unknown>(key: string): T | undefined {
    const text = this.getText(key);
    if (text === undefined) {
      return undefined;
    }
    try {
      return JSON.parse(text) as T;
    } catch {
      throw ToolError.invalidInput(`store ${JSON.stringify(this.name)}: the value under ${JSON.stringify(key)} is not JSON`);
    }
  }

  /** Set `key` to `value` (a string is stored as UTF-8). */
  set(key: string, value: string | Uint8Array): void {
    const bytes = typeof value === 'string' ? new TextEncoder().encode(value) : value;
    guard(this.name, () => this.#bucket.set(key, bytes));
  }

  /** Set `key` to `value` as JSON. */
  setJson(key: string, value: unknown): void {
    const json = JSON.stringify(value);
    if (json === undefined) {
      throw ToolError.internal(`store ${JSON.stringify(this.name)}: a ${typeof value} cannot be stored as JSON`);
    }
    this.set(key, json);
  }

  /** Delete `key` (nothing happens when there is none). */
  delete(key: string): void {
    guard(this.name, () => this.#bucket.delete(key));
  }

  /** Whether `key` has a value. */
  exists(key: string): boolean {
    return guard(this.name, () => this.#bucket.exists(key));
  }

  /** Every key, in no particular order. */
  keys(): string[] {
    const keys: string[] = [];
    let cursor: bigint | undefined;
    do {
      const page = guard(this.name, () => this.#bucket.listKeys(cursor));
      keys.push(...page.keys);
      cursor = page.cursor;
    } while (cursor !== undefined);
    return keys;
  }

  /**
   * Add `delta` (a whole number, default 1) to the counter under `key` (0
   * when there is none) and return the new value. Counters are stored as
   * decimal text; a value that is not one is `invalid_input`.
   */
  increment(key: string, delta = 1): number {
    if (!Number.isSafeInteger(delta) || delta < 0) {
      throw new RangeError(`increment takes a whole number delta of 0 or more, not ${delta}`);
    }
    return Number(guard(this.name, () => increment(this.#bucket, key, BigInt(delta))));
  }

  /** The values under `keys`, in order (`undefined` where there is none). */
  getMany(keys: string[]): (Uint8Array | undefined)[] {
    return guard(this.name, () => getMany(this.#bucket, keys)).map((entry) => entry?.[1]);
  }

  /** Set several keys; refused whole if the quota does not allow all. */
  setMany(entries: [string, string | Uint8Array][]): void {
    const encoder = new TextEncoder();
    const bytes = entries.map(([key, value]): [string, Uint8Array] => [
      key,
      typeof value === 'string' ? encoder.encode(value) : value,
    ]);
    guard(this.name, () => setMany(this.#bucket, bytes));
  }

  /** Delete several keys. */
  deleteMany(keys: string[]): void {
    guard(this.name, () => deleteMany(this.#bucket, keys));
  }
}

/** Runs a store operation, its WIT error thrown as the ToolError that says what to do. */
function guard<T>(name: string, operation: () => T): T {
  try {
    return operation();
  } catch (e) {
    const error = witError<StoreError>(e);
    if (error === undefined) {
      throw e;
    }
    throw toolErrorOf(name, error.payload);
  }
}

function toolErrorOf(name: string, error: StoreError): ToolError {
  const store = `store ${JSON.stringify(name)}`;
  if (error.tag !== 'other') {
    return ToolError.permissionDenied(
      `${store} is not available to this tool: grant it with stores = [${JSON.stringify(name)}] ` +
        `on its [[tool]] and a [store.${name}] table in toolhost.toml (a store scoped by user also needs that key in the call's context)`,
    );
  }
  // The host writes `kind: message` for the failures a tool can act on.
  const split = error.val.indexOf(': ');
  const kind = split < 0 ? '' : error.val.slice(0, split);
  const message = `${store}: ${split < 0 ? error.val : error.val.slice(split + 2)}`;
  switch (kind) {
    case 'quota-exceeded':
      return new ToolError('quota_exceeded', `${message} (nothing was written)`, false);
    case 'too-large':
    case 'not-a-counter':
    case 'invalid-cursor':
      return ToolError.invalidInput(message);
    case 'limit':
      return new ToolError('limit', message, false);
    case 'unavailable':
      return ToolError.unavailable(message);
    case 'in-use':
      return new ToolError('unavailable', `${message} (in use by another process)`, false);
    default:
      return new ToolError('store', `${store}: ${error.val}`, false);
  }
}
