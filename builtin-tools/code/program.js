// `run_code`: compiling the model's program, its `tools` and `console`,
// running it, and checking what it returns. Changes no global when loaded
// (seal.js does, in the component), so tests run it under plain node.

import { transform } from 'sucrase';
import { parse } from 'sucrase/dist/esm/parser';
import { TokenType } from 'sucrase/dist/esm/parser/tokenizer/types';
import {
  Output,
  ToolCallError,
  ToolError,
  argumentsJson,
  callToolJson,
  callToolsJson,
  defineTool,
  MAX_LIST,
  log,
  s,
  toJsonValue,
} from '../../guest-sdk/js/toolhost';

/** Console lines kept for the result: enough to debug, short enough for the model's context. */
export const MAX_LOG_LINES = 200;
/** Bytes of console output kept for the result (UTF-8). */
export const MAX_LOG_BYTES = 16 * 1024;
/** Characters of one value a console line shows. */
const MAX_VALUE_CHARS = 2000;
/**
 * Microtask turns a call waits for others before the batch is sent: calls
 * made in the same tick, or a few awaits apart (`Promise.all` over async
 * functions), go to the host together and run in parallel there.
 */
const FLUSH_TURNS = 16;

const AsyncFunction = (async () => {}).constructor;

// The built-ins the harness uses while and after the program runs, taken
// when the module loads, and loops where a built-in would consult what the
// program can change (Array[Symbol.species]): a program that replaces
// Array.prototype.filter or Promise.prototype.then changes its own code,
// not how its calls are counted and its failures reported.
const { apply } = Reflect;
const uncurry = (f) => (self, ...args) => apply(f, self, args);
const promiseThen = uncurry(Promise.prototype.then);
const arrayJoin = uncurry(Array.prototype.join);
const { max, min } = Math;

function arrayPush(list, item) {
  list[list.length] = item;
}

function arrayFilter(list, keep) {
  const out = [];
  for (let i = 0; i < list.length; i++) {
    if (keep(list[i])) {
      out[out.length] = list[i];
    }
  }
  return out;
}

function arrayMap(list, f) {
  const out = [];
  for (let i = 0; i < list.length; i++) {
    out[out.length] = f(list[i]);
  }
  return out;
}

function arraySlice(list, start, end = list.length) {
  const from = start < 0 ? max(list.length + start, 0) : start;
  const to = min(end, list.length);
  const out = [];
  for (let i = from; i < to; i++) {
    out[out.length] = list[i];
  }
  return out;
}

function arrayFind(list, test) {
  for (let i = 0; i < list.length; i++) {
    if (test(list[i])) {
      return list[i];
    }
  }
  return undefined;
}

function arrayIncludes(list, item) {
  for (let i = 0; i < list.length; i++) {
    if (list[i] === item) {
      return true;
    }
  }
  return false;
}

// What the model reads first; the host appends the granted tools'
// TypeScript declarations, with what their calls resolve and reject to.
const DESCRIPTION = `Run a JavaScript program that calls the tools below as async functions, and get back the value it returns. For work that needs many tool calls: loop, call in parallel (Promise.all), compute, and return only what matters.

The code is the body of an async function with \`tools\` and \`console\` in scope. Call a tool declared below as \`await tools.NAME({ ...its arguments })\`: it resolves to the tool's result. Call many at once with \`await Promise.all(list.map((item) => tools.NAME({ ... })))\`. Compute in plain JavaScript, and end with \`return VALUE\` (JSON): the value returned is the answer; console.log output is only for debugging.

A tool whose name is not an identifier is tools["its-name"](args). Catch a failed call with try/catch (e.kind, e.message). TypeScript annotations are accepted. There is no network, file system, clock, timer, import or require; each run starts fresh.`;

// ---------------------------------------------------------------------------
// Compiling the program

/** A program that does not compile, as JavaScript nor as TypeScript. */
class ProgramSyntaxError extends ToolError {
  constructor(message) {
    super('syntax_error', message, true);
  }
}

/**
 * The program as a function of `(tools, console)`, and the number of lines
 * the engine's wrapper puts before the program's first line.
 *
 * A single expression is its own value (so `async () => {…}` is a function
 * the caller then calls); anything else is the body of an async function.
 * JavaScript is tried first; only source that is not JavaScript goes
 * through the TypeScript type stripper (sucrase), whose cost (milliseconds
 * to tens of milliseconds here: the engine has no JIT) only TypeScript pays.
 */
export function compile(source) {
  const problem = importProblem(source);
  if (problem !== undefined) {
    throw new ProgramSyntaxError(problem);
  }
  let jsError;
  try {
    return compileJs(source);
  } catch (e) {
    jsError = e;
  }
  let stripped;
  try {
    stripped = transform(source, { transforms: ['typescript'], disableESTransforms: true }).code;
  } catch (tsError) {
    throw new ProgramSyntaxError(`${syntaxMessage(jsError, source)}${hasTypes(source) ? ` (and as TypeScript: ${tsError.message})` : ''}`);
  }
  try {
    return compileJs(stripped);
  } catch (e) {
    throw new ProgramSyntaxError(syntaxMessage(e, stripped));
  }
}

/**
 * The program in strict mode (a typo'd variable is an error, not a new
 * global; `this` is undefined), as the value of a single expression or as
 * a function body. `offset` counts the lines the engine and we put before
 * the program's first line, to give its errors the program's line numbers.
 */
function compileJs(source) {
  try {
    return { program: new AsyncFunction('tools', 'console', `'use strict';\nreturn (\n${source}\n);`), offset: 4, expression: true };
  } catch {
    // Not a single expression: a function body, below.
  }
  try {
    return { program: new AsyncFunction('tools', 'console', `'use strict';\n${source}`), offset: 3, expression: false };
  } catch (e) {
    e.offset = 3;
    throw e;
  }
}

/** Whether the source looks like it meant TypeScript, to mention the TypeScript error only then. */
function hasTypes(source) {
  return /:\s*[A-Za-z_$][\w$<>[\]|, ]*\s*[=,);]|\b(interface|type)\s+[A-Z]|\bas\s+[A-Za-z_$]|<[A-Za-z_$][\w$]*>\s*\(/.test(source);
}

/** The longest line of the program a syntax error quotes. */
const MAX_QUOTED_LINE = 200;

/**
 * `SyntaxError: missing ) after argument list at line 3, column 7: `…``,
 * lines counted in `source`, the line quoted: a model fixes the line it is
 * shown far more often than one it is only told the number of.
 */
function syntaxMessage(error, source) {
  const text = describeThrown(error);
  const line = Number(error?.lineNumber);
  if (Number.isInteger(line) && line > 0) {
    const programLine = line - (error.offset ?? 3);
    if (programLine >= 1) {
      const column = Number(error.columnNumber);
      const where = `${text} at line ${programLine}${Number.isInteger(column) && column > 0 ? `, column ${column}` : ''}`;
      // The engine's line ends, not only \n.
      const quoted = String(source).split(/\r\n|[\n\r\u2028\u2029]/)[programLine - 1];
      if (quoted === undefined || quoted.trim() === '') {
        return where;
      }
      // Cut by code points, never through a surrogate pair.
      const points = Array.from(quoted);
      const shown = points.length > MAX_QUOTED_LINE ? `${points.slice(0, MAX_QUOTED_LINE).join('')}…` : quoted;
      return `${where}: \`${shown.trim()}\``;
    }
  }
  return text;
}

/**
 * Why `source` cannot run, when it uses `import(...)`: the engine would look
 * for the module on a file system the program does not have, and trap.
 * Checked on tokens, so the word in a string or a comment is fine; only
 * source that has the word pays for tokenizing.
 */
export function importProblem(source) {
  if (!/\bimport\b/.test(source)) {
    return undefined;
  }
  let found;
  try {
    found = parse(source, false, true, false).tokens.some((token) => token.type === TokenType._import);
  } catch {
    // Source the tokenizer refuses: judged by words, comments left out.
    found = /\bimport\s*[(.]/.test(source.replace(/\/\/.*|\/\*[\s\S]*?\*\//g, ''));
  }
  return found
    ? 'import is not available in run_code: the program cannot load modules; the tools are the functions of `tools`, and the rest of JavaScript is built in'
    : undefined;
}

// ---------------------------------------------------------------------------
// The program's `tools`: calls batched into one host call per tick

/** The `tools` object of one run, and a way to send what is still queued. */
export function toolsFor() {
  let queue = [];
  // The host's refusal once the run's budget of calls is spent: every later
  // call would be refused the same way, so it is refused here, without
  // sending it (an unbounded Promise.all would otherwise pay, in fuel, to
  // send and receive thousands of refusals).
  let spent;

  function flush() {
    const batch = queue;
    queue = [];
    try {
      send(batch);
    } catch (e) {
      // Only a program that broke a built-in the SDK uses gets here: its
      // calls fail with what broke, instead of never settling (a call
      // settled already stays as it is).
      for (let i = 0; i < batch.length; i++) {
        batch[i].reject(e);
      }
    }
  }

  function send(batch) {
    if (batch.length === 1 && spent === undefined) {
      const { name, json, resolve, reject } = batch[0];
      try {
        resolve(callToolJson(name, json));
      } catch (e) {
        noteSpent(e);
        reject(e);
      }
      return;
    }
    for (let start = 0; start < batch.length; start += MAX_LIST) {
      const part = arraySlice(batch, start, start + MAX_LIST);
      if (spent !== undefined) {
        for (let i = 0; i < part.length; i++) {
          part[i].reject(new ToolCallError(part[i].name, spent.kind, spent.message, spent.retryable));
        }
        continue;
      }
      let settled;
      try {
        settled = callToolsJson(arrayMap(part, ({ name, json }) => ({ name, arguments: json })));
      } catch (e) {
        for (let i = 0; i < part.length; i++) {
          part[i].reject(e);
        }
        continue;
      }
      for (let i = 0; i < part.length; i++) {
        const outcome = settled[i];
        if (outcome.status === 'fulfilled') {
          part[i].resolve(outcome.value);
        } else {
          noteSpent(outcome.reason);
          part[i].reject(outcome.reason);
        }
      }
    }
  }

  function noteSpent(error) {
    if (error instanceof ToolCallError && error.kind === 'budget_exhausted') {
      spent = error;
    }
  }

  async function later() {
    for (let i = 0; i < FLUSH_TURNS; i++) {
      await undefined;
    }
    if (queue.length > 0) {
      flush();
    }
  }

  // Every call the program made, to tell it, when it ends, about the ones
  // it never awaited (a small model's common slip: `tools.calc({…}).value`).
  const made = [];

  function call(name, args = {}) {
    const record = { name, awaited: false, caught: false, settled: false, failure: undefined };
    arrayPush(made, record);
    const promise = new CallPromise((resolve, reject) => {
      // Checked and copied now: a bad argument fails this call alone,
      // before any host call, and a later change to `args` changes nothing.
      let json;
      try {
        json = argumentsJson(name, args);
      } catch (e) {
        record.settled = true;
        record.failure = e;
        throw e;
      }
      const succeeded = (value) => {
        record.settled = true;
        resolve(value);
      };
      const failed = (error) => {
        record.settled = true;
        record.failure = error;
        reject(error);
      };
      arrayPush(queue, { name, json, resolve: succeeded, reject: failed });
      if (queue.length === 1) {
        later();
      }
    });
    record.promise = promise;
    promise.record = record;
    return promise;
  }

  const functions = new Map();
  const tools = new Proxy(Object.create(null), {
    get(_, name) {
      // `then` would make `await tools` call a tool; `toJSON` would make
      // logging it call one.
      if (typeof name !== 'string' || name === 'then' || name === 'toJSON') {
        return undefined;
      }
      if (!functions.has(name)) {
        functions.set(name, (args) => call(name, args));
      }
      return functions.get(name);
    },
    set() {
      return false;
    },
    defineProperty() {
      return false;
    },
  });
  return {
    tools,
    /** Sends the calls the program made without awaiting them, so that they run before the result returns. */
    drain() {
      while (queue.length > 0) {
        flush();
      }
    },
    /** The calls not yet ended: when the program returns, those it did not wait for. */
    unsettled() {
      return arrayFilter(made, (record) => !record.settled);
    },
    /**
     * The calls nothing awaited (nor passed to `then`, `catch`, `Promise.all`…),
     * in the order made. Their failures are the caller's to report from now
     * on, so none is left to the engine as an unhandled rejection.
     */
    unawaited() {
      const forgotten = arrayFilter(made, (record) => !record.awaited);
      for (let i = 0; i < forgotten.length; i++) {
        promiseThen(forgotten[i].promise, undefined, () => {});
      }
      return forgotten;
    },
  };
}

/**
 * The promise of one tool call. It notes when something waits on it:
 * `await`, `then`, `catch` and `Promise.all` all call `then` on a promise
 * that is not a plain Promise. What it derives is a plain Promise.
 */
class CallPromise extends Promise {
  static get [Symbol.species]() {
    return Promise;
  }

  then(onFulfilled, onRejected) {
    if (this.record !== undefined) {
      this.record.awaited = true;
      // `.catch(f)`: the program handles this call's failure itself
      // (`await` and `Promise.all` pass two functions, `.then(f)` one).
      if (onFulfilled === undefined && typeof onRejected === 'function') {
        this.record.caught = true;
      }
    }
    return promiseThen(this, onFulfilled, onRejected);
  }
}

/**
 * What to add to a failure when calls were not awaited:
 * ` tools.calc was called without await (2 calls): …`.
 */
function unawaitedHint(unawaited) {
  if (unawaited.length === 0) {
    return '';
  }
  const names = [];
  for (let i = 0; i < unawaited.length; i++) {
    const name = `tools.${unawaited[i].name}`;
    if (!arrayIncludes(names, name)) {
      arrayPush(names, name);
    }
  }
  const shown = names.length > 3 ? `${arrayJoin(arraySlice(names, 0, 3), ', ')} and ${names.length - 3} more` : arrayJoin(names, ', ');
  const count = unawaited.length === 1 ? 'once' : `${unawaited.length} calls`;
  const name = unawaited[0].name;
  // Many calls not awaited are most often a list mapped to calls: a list
  // of promises, which only Promise.all turns into a list of results.
  const many = unawaited.length === 1 ? '' : `, or for a list, \`const rs = await Promise.all(items.map((x) => tools.${name}({…})))\``;
  return ` The program called ${shown} without await (${count}): a call returns a Promise, not its result; write \`const r = await tools.${name}({…})\`${many}.`;
}

// ---------------------------------------------------------------------------
// The program's `console`: lines kept for the result, bounded, and logged

/** A console whose lines are kept (at most MAX_LOG_LINES and MAX_LOG_BYTES) and sent to the host's log. */
export function consoleFor() {
  const lines = [];
  let bytes = 0;
  let full = false;
  let dropped = 0;

  function write(level, args) {
    if (full) {
      // Count what is dropped without the cost of formatting it: a flood
      // of a million lines must not spend the program's fuel here.
      dropped += lineCount(args);
      return;
    }
    let text;
    try {
      text = arrayJoin(arrayMap(args, show), ' ');
    } catch {
      text = '[a value that cannot be shown]';
    }
    const prefix = level === 'log' || level === 'info' ? '' : `[${level}] `;
    for (const part of text.split('\n')) {
      const line = prefix + part;
      const size = utf8Length(line) + 1;
      if (full || lines.length >= MAX_LOG_LINES) {
        full = true;
        dropped++;
      } else if (bytes + size <= MAX_LOG_BYTES) {
        keep(level, line);
        bytes += size;
      } else {
        // The line that fills the budget is kept, cut to fit, when there
        // is room for a useful part of it; every line after it is dropped.
        const room = MAX_LOG_BYTES - bytes - 4;
        if (room >= 64) {
          keep(level, `${cutToBytes(line, room)}…`);
        } else {
          dropped++;
        }
        full = true;
      }
    }
  }

  function keep(level, line) {
    arrayPush(lines, line);
    log(HOST_LEVEL[level], `run_code console: ${line}`);
  }

  const console = Object.freeze({
    log: (...args) => write('log', args),
    info: (...args) => write('info', args),
    warn: (...args) => write('warn', args),
    error: (...args) => write('error', args),
    debug: (...args) => write('debug', args),
    trace: (...args) => write('debug', args),
    dir: (value) => write('log', [value]),
  });
  return {
    console,
    /** The lines kept, and one saying how many were dropped when there were more. */
    lines() {
      const kept = arraySlice(lines, 0);
      if (dropped > 0) {
        arrayPush(kept, `… ${dropped} more line${dropped === 1 ? '' : 's'} dropped`);
      }
      return kept;
    },
  };
}

/**
 * Lines `args` would print: one, plus the newlines in its strings (other
 * values print as one line). Index loops, not for-of: without a JIT, the
 * iterator protocol costs ten times the fuel here.
 */
function lineCount(args) {
  let count = 1;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (typeof arg === 'string') {
      let at = arg.indexOf('\n');
      while (at !== -1) {
        count++;
        at = arg.indexOf('\n', at + 1);
      }
    }
  }
  return count;
}

const HOST_LEVEL = { log: 'info', info: 'info', warn: 'warn', error: 'error', debug: 'debug' };

/** One console argument as text: strings as they are, the rest as JSON where it can be, never throwing. */
function show(value) {
  if (typeof value === 'string') {
    return value.length > MAX_VALUE_CHARS ? `${value.slice(0, MAX_VALUE_CHARS)}…` : value;
  }
  let text;
  try {
    if (value instanceof Error) {
      text = `${value.name}: ${value.message}`;
    } else if (typeof value === 'function') {
      text = `[function ${value.name || 'anonymous'}]`;
    } else if (typeof value === 'bigint') {
      text = `${value}n`;
    } else if (typeof value === 'symbol' || value === undefined) {
      text = String(value);
    } else {
      const seen = new Set();
      text =
        JSON.stringify(value, (_, v) => {
          if (typeof v === 'bigint') return `${v}n`;
          if (typeof v === 'function') return `[function ${v.name || 'anonymous'}]`;
          if (v !== null && typeof v === 'object') {
            if (seen.has(v)) return '[repeated]';
            seen.add(v);
            if (v instanceof Map) return Object.fromEntries(v);
            if (v instanceof Set) return [...v];
          }
          return v;
        }) ?? String(value);
    }
  } catch {
    text = '[a value that cannot be shown]';
  }
  return text.length > MAX_VALUE_CHARS ? `${text.slice(0, MAX_VALUE_CHARS)}…` : text;
}

function utf8Length(text) {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    n += c < 0x80 ? 1 : c < 0x800 ? 2 : c >= 0xd800 && c < 0xdc00 ? (i++, 4) : 3;
  }
  return n;
}

function cutToBytes(text, limit) {
  let n = 0;
  let i = 0;
  while (i < text.length) {
    const size = utf8Length(text.slice(i, i + 2).codePointAt(0) > 0xffff ? text.slice(i, i + 2) : text[i]);
    if (n + size > limit) break;
    n += size;
    i += size === 4 ? 2 : 1;
  }
  return text.slice(0, i);
}

// ---------------------------------------------------------------------------
// Running it

/** What a thrown value says, read without letting it throw again or run for long. */
export function describeThrown(thrown) {
  let isError;
  try {
    isError = thrown instanceof Error;
  } catch {
    return 'a value that cannot be inspected (a Proxy that throws), not an Error';
  }
  if (isError) {
    try {
      const name = String(thrown.name);
      const message = String(thrown.message);
      return message === '' ? name : `${name}: ${message}`;
    } catch {
      return 'an Error that cannot be read';
    }
  }
  try {
    switch (typeof thrown) {
      case 'string':
        return `the string ${JSON.stringify(thrown.length > 500 ? `${thrown.slice(0, 500)}…` : thrown)} (throw an Error to get a stack)`;
      case 'number':
      case 'boolean':
      case 'bigint':
      case 'symbol':
        return `the ${typeof thrown} ${String(thrown)}${typeof thrown === 'bigint' ? 'n' : ''}, not an Error`;
      case 'undefined':
        return 'undefined, not an Error';
      case 'function':
        return 'a function, not an Error';
    }
    if (thrown === null) {
      return 'null, not an Error';
    }
    const json = JSON.stringify(thrown);
    return `the object ${json.length > 500 ? `${json.slice(0, 500)}…` : json}, not an Error`;
  } catch {
    return 'an object that cannot be shown, not an Error';
  }
}

/** ` (line 4)`: where in the program an error was thrown, from its stack, when the engine says. */
function whereThrown(error, offset) {
  try {
    const stack = String(error.stack);
    // SpiderMonkey: `anonymous@… > AsyncFunction:5:3`; V8: `<anonymous>:5:3`.
    const match = /> (?:Async)?Function:(\d+):(\d+)/.exec(stack) ?? /<anonymous>:(\d+):(\d+)/.exec(stack);
    const line = match ? Number(match[1]) - offset : 0;
    return line >= 1 ? ` (line ${line})` : '';
  } catch {
    return '';
  }
}

/** Runs `source` with `tools` and a fresh console; the checked result and the console lines, or a ToolError. */
export async function runProgram(source) {
  const { program, offset, expression } = compile(source);
  const { tools, drain, unawaited, unsettled } = toolsFor();
  const { console, lines } = consoleFor();
  // The global one too: the engine's own writes to stdout, which the host drops.
  const previousConsole = globalThis.console;
  Object.defineProperty(globalThis, 'console', { value: console, writable: true, configurable: true });
  let value;
  try {
    value = await program.call(undefined, tools, console);
    if (typeof value === 'function' && expression) {
      // The program is a function expression (`async () => {…}`): call it.
      value = await value(tools, console);
    }
  } catch (thrown) {
    drain();
    throw withLogs(withHint(programFailure(thrown, offset), unawaited()), lines());
  } finally {
    Object.defineProperty(globalThis, 'console', { value: previousConsole, writable: true, configurable: true });
  }
  // The calls still running when the program returned: it did not wait
  // for them (`list.forEach(async (x) => …)` does not wait).
  const late = unsettled();
  drain();
  const forgotten = unawaited();
  if (value === undefined) {
    const logged = lines().length > 0 ? ' (console output is not the result)' : '';
    throw withLogs(
      withHint(
        new ToolError('invalid_result', `the program returned nothing${logged}: end it with \`return VALUE\` (a JSON value; return null for none)`, true),
        forgotten,
      ),
      lines(),
    );
  }
  // A call that failed with nothing waiting on it is an uncaught error, as
  // an unhandled rejection is in Node and Deno: its failure is not dropped.
  const failed = arrayFind(forgotten, (record) => record.failure !== undefined);
  if (failed !== undefined) {
    const error = programFailure(failed.failure, offset);
    throw withLogs(new ToolError(error.kind, `${error.message}. Nothing awaited this call: await it, or add .catch(…) to ignore its failure`, error.retryable), lines());
  }
  const failedLate = arrayFind(late, (record) => record.failure !== undefined && !record.caught);
  if (failedLate !== undefined) {
    const error = programFailure(failedLate.failure, offset);
    throw withLogs(
      new ToolError(
        error.kind,
        `${error.message}. The program returned before this call ended, so nothing it did handled the failure: wait for every call before returning (list.forEach(async …) does not wait; use for (const x of list) { await … } or await Promise.all(…))`,
        error.retryable,
      ),
      lines(),
    );
  }
  let result;
  try {
    result = toJsonValue(value, 'result');
  } catch (e) {
    throw withLogs(withHint(new ToolError('invalid_result', `the program's result is not JSON: ${e.message}`, true), forgotten), lines());
  }
  return { result, logs: lines() };
}

/** `error` with what the calls not awaited say added, when there are some. */
function withHint(error, unawaited) {
  const hint = unawaitedHint(unawaited);
  return hint === '' ? error : new ToolError(error.kind, `${error.message}.${hint}`, error.retryable);
}

function programFailure(thrown, offset) {
  if (isToolCallError(thrown)) {
    return new ToolError(
      thrown.kind,
      `tools.${thrown.tool} failed (${thrown.kind}): ${thrown.message}. The program did not catch it; ` +
        'it can, with try { … } catch (e) { … } (e.kind, e.message, e.retryable)',
      thrown.retryable,
    );
  }
  if (thrown === ENGINE_OUT_OF_MEMORY) {
    return new ToolError(
      'memory_exhausted',
      'the program ran out of memory (the engine refused an allocation): hold less data at once',
      false,
    );
  }
  return new ToolError('program_error', `the program threw ${describeThrown(thrown)}${whereThrown(thrown, offset)}`, true);
}

/**
 * What SpiderMonkey throws when an allocation fails before the instance's
 * memory limit traps it (a large string, say): a string, not an Error.
 */
const ENGINE_OUT_OF_MEMORY = 'out of memory';

/** Whether `thrown` is a failed call's error; false for a Proxy that throws when asked. */
function isToolCallError(thrown) {
  try {
    return thrown instanceof ToolCallError;
  } catch {
    return false;
  }
}

/** Console lines kept with a failure, to debug it by: the last few. */
const LOGS_WITH_ERROR = 20;

/** `error` with the last console lines added to its message, when there are some. */
function withLogs(error, logs) {
  if (logs.length === 0) {
    return error;
  }
  const tail = arraySlice(logs, -LOGS_WITH_ERROR);
  const heading = logs.length > tail.length ? `last ${tail.length} console lines` : 'console output';
  return new ToolError(error.kind, `${error.message}\n${heading}:\n${arrayJoin(tail, '\n')}`, error.retryable);
}

// ---------------------------------------------------------------------------
// The tool

/** The structured result's schema: any JSON as `result`, and the console lines. */
const OUTPUT_SCHEMA = {
  type: 'object',
  properties: {
    result: { description: 'The value the program returned.' },
    logs: { type: 'array', items: { type: 'string' }, description: 'Its console output, one line each.' },
  },
  required: ['result', 'logs'],
  additionalProperties: false,
};

const defined = defineTool({
  name: 'run_code',
  title: 'Run code',
  description: DESCRIPTION,
  input: {
    code: s.string({ minLength: 1 }).describe('The program: the body of an async function, ending with `return VALUE`.'),
  },
  async run({ code }) {
    let ran;
    try {
      ran = await runProgram(code);
    } catch (e) {
      // The harness's own code failing means the program broke a built-in
      // it relies on: the program's error, never posing as the host's.
      if (e instanceof ToolError) {
        throw e;
      }
      throw new ToolError('program_error', `the program broke run_code itself (did it replace a built-in?): ${describeThrown(e)}`, true);
    }
    const { result, logs } = ran;
    const output = Output.text(JSON.stringify(result));
    if (logs.length > 0) {
      output.withText(`console output:\n${arrayJoin(logs, '\n')}`);
    }
    return output.withStructured({ result, logs });
  },
});

export const runCode = { ...defined, spec: { ...defined.spec, outputSchema: JSON.stringify(OUTPUT_SCHEMA) } };
