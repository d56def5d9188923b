/**
 * Values as JSON, checked: what `JSON.stringify` would drop, mangle or
 * choke on is refused with the path to it, instead of becoming `null`,
 * `{}` or a missing key without a word.
 */

/** How deep a value may nest: the host's JSON parser (serde_json) stops at 128 levels. */
export const MAX_DEPTH = 100;

/** What {@link toJsonValue} does with an object property whose value is `undefined`. */
export interface JsonOptions {
  /**
   * Leave the property out, as `JSON.stringify` does (fit for arguments,
   * where an optional field may be `undefined`); by default it is refused.
   */
  omitUndefined?: boolean;
}

/** Classes whose instances `JSON.stringify` turns into `{}` or loses, with what to do instead. */
const LOSSY: [Function | undefined, string][] = [
  [globalThis.Promise, 'a Promise: did you forget `await`?'],
  [globalThis.Map, 'a Map: JSON has none; convert it with Object.fromEntries(map)'],
  [globalThis.Set, 'a Set: JSON has none; convert it with [...set]'],
  [globalThis.WeakMap, 'a WeakMap: JSON has none'],
  [globalThis.WeakSet, 'a WeakSet: JSON has none'],
  [globalThis.RegExp, 'a RegExp: JSON has none; use its .source'],
  [globalThis.Error, 'an Error: JSON has none; use its .message'],
  [globalThis.ArrayBuffer, 'an ArrayBuffer: JSON has none; convert it with Array.from(new Uint8Array(buffer))'],
];

/**
 * A plain JSON copy of `value` (objects, arrays, strings, finite numbers,
 * booleans, null), built by walking it once: `toJSON` methods are honoured
 * (a Date becomes its ISO string), shared objects are copied, and nothing
 * of `value` is read again afterwards.
 *
 * @throws TypeError naming the first bad value by its path from `root`
 * (`result.items[3] is a function`): a cycle, a BigInt, a function, a
 * symbol, `undefined` (see {@link JsonOptions}), NaN or an infinity, a
 * Promise, Map, Set or other object JSON would mangle, nesting deeper than
 * {@link MAX_DEPTH}, or a getter, `toJSON` or Proxy that throws.
 */
export function toJsonValue(value: unknown, root: string, options: JsonOptions = {}): unknown {
  try {
    return copy(value, { parent: undefined, key: root }, [], options);
  } catch (e) {
    if (e instanceof Refused) {
      throw new TypeError(`${render(e.path)} ${e.what}`);
    }
    throw e;
  }
}

/**
 * Where a value is: its key (or index) under its parent's path. Built as
 * the walk goes and written out only for an error, since formatting every
 * path would cost more than the copy (the engine in a component has no JIT).
 */
interface Path {
  parent: Path | undefined;
  key: string | number;
}

function render(path: Path): string {
  if (path.parent === undefined) {
    return String(path.key);
  }
  const { key } = path;
  const step =
    typeof key === 'number' ? `[${key}]` : /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
  return render(path.parent) + step;
}

/** A value refused, with where it is and what is wrong with it. */
class Refused extends Error {
  constructor(
    readonly path: Path,
    readonly what: string,
  ) {
    super(what);
  }
}

// Index loops and concat, not for-of, destructuring or spread, below: in
// an engine without a JIT (componentize-js's), the iterator protocol costs
// ten times the fuel.
function copy(value: unknown, path: Path, ancestors: object[], options: JsonOptions): unknown {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      if (!Number.isFinite(value)) {
        throw new Refused(path, `is ${value}: JSON has no NaN or Infinity`);
      }
      return value;
    case 'undefined':
      throw new Refused(path, 'is undefined: JSON has no undefined; use null, or leave the key out');
    case 'bigint':
      throw new Refused(path, `is a BigInt (${value}n): JSON has none; convert it with Number(x) or String(x)`);
    case 'function':
      throw new Refused(path, 'is a function: JSON has none; call it, or leave it out');
    case 'symbol':
      throw new Refused(path, 'is a symbol: JSON has none');
  }
  if (value === null) {
    return null;
  }
  const object = value as object;
  if (ancestors.includes(object)) {
    throw new Refused(path, 'is a cycle: it contains itself');
  }
  if (ancestors.length >= MAX_DEPTH) {
    throw new Refused(path, `is nested more than ${MAX_DEPTH} levels deep`);
  }
  try {
    const toJSON = (object as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') {
      return copy(toJSON.call(object, ''), path, ancestors.concat([object]), options);
    }
    const inner = ancestors.concat([object]);
    if (Array.isArray(object)) {
      const items: unknown[] = [];
      for (let i = 0; i < object.length; i++) {
        items.push(copy(object[i], { parent: path, key: i }, inner, options));
      }
      return items;
    }
    // A plain object is the common case: only other objects can be what
    // JSON would mangle.
    const proto = Object.getPrototypeOf(object);
    if (proto !== Object.prototype && proto !== null) {
      lossy(object, path);
    }
    const fields: Record<string, unknown> = {};
    const keys = Object.keys(object);
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      let field: unknown;
      try {
        field = (object as Record<string, unknown>)[key];
      } catch (e) {
        throw new Refused({ parent: path, key }, `cannot be read: ${describe(e)}`);
      }
      if (field === undefined && options.omitUndefined) {
        continue;
      }
      const copied = copy(field, { parent: path, key }, inner, options);
      if (key === '__proto__') {
        // Defined, not assigned: assigning would set the prototype.
        Object.defineProperty(fields, key, { value: copied, enumerable: true, writable: true, configurable: true });
      } else {
        fields[key] = copied;
      }
    }
    return fields;
  } catch (e) {
    if (e instanceof Refused) {
      throw e;
    }
    // A throwing getter, toJSON or Proxy trap.
    throw new Refused(path, `cannot be read: ${describe(e)}`);
  }
}

/** Refuses an object that JSON.stringify would turn into `{}` or otherwise lose. */
function lossy(object: object, path: Path): void {
  for (let i = 0; i < LOSSY.length; i++) {
    const type = LOSSY[i][0];
    if (type !== undefined && object instanceof type) {
      throw new Refused(path, `is ${LOSSY[i][1]}`);
    }
  }
  if (ArrayBuffer.isView(object)) {
    throw new Refused(path, `is a ${object.constructor.name}: convert it with Array.from(x)`);
  }
}

/** A thrown value's text, without running anything of it that could throw again. */
function describe(thrown: unknown): string {
  try {
    if (thrown instanceof Error) {
      return `${thrown.name}: ${thrown.message}`;
    }
    return typeof thrown === 'string' ? thrown : `a thrown ${thrown === null ? 'null' : typeof thrown}`;
  } catch {
    return 'a value that cannot be described';
  }
}
