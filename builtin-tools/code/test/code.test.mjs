// Tests of run_code under plain node, with the WIT imports pointed at the
// JavaScript SDK's fake host (guest-sdk/js/test/fake-host.ts): batching,
// error mapping, result checks, console caps, TypeScript, thrown values.
// The component's own engine (SpiderMonkey) is tested end to end by the
// host's tests (host/tests/all/code_mode.rs). Run with `npm test` here.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, beforeEach, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

const here = fileURLToPath(new URL('.', import.meta.url));
const fakeHost = join(here, '../../../guest-sdk/js/test/fake-host.ts');
const out = mkdtempSync(join(tmpdir(), 'toolhost-code-test-'));
after(() => rmSync(out, { recursive: true, force: true }));

/** Bundles `contents` (resolved from this folder) with the WIT imports pointed at the fake host. */
async function bundle(contents, file) {
  await build({
    stdin: { contents, resolveDir: here, loader: 'js' },
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    mainFields: ['module', 'main'],
    outfile: join(out, file),
    logLevel: 'warning',
    plugins: [
      {
        name: 'fake-host',
        setup(b) {
          b.onResolve({ filter: /^(toolhost|wasi):/ }, () => ({ path: fakeHost }));
        },
      },
    ],
  });
  return join(out, file);
}

// program.js changes no global: loaded here as it is.
const programs = await bundle(
  [
    "export * from '../program.js';",
    "export { toolbox } from '../../../guest-sdk/js/toolhost';",
    `export { fake, fakeTools } from ${JSON.stringify(fakeHost)};`,
  ].join('\n'),
  'program.mjs',
);
const { MAX_LOG_BYTES, MAX_LOG_LINES, fake, fakeTools, runCode, toolbox } = await import(pathToFileURL(programs).href);

// The whole component, globals sealed: run in a child process, so that this
// one keeps its timers and clock.
const component = await bundle(
  [
    "export { tool } from '../tool.js';",
    `export { fakeTools } from ${JSON.stringify(fakeHost)};`,
  ].join('\n'),
  'tool.mjs',
);

const CALL = { callId: 'call_1', deadlineMs: 5000n, context: undefined };
const exported = toolbox(runCode);

/** Runs `code` as the host calls run_code: `{ ok: { result, logs, content } }` or `{ err: { kind, message, retryable } }`. */
async function run(code) {
  try {
    const output = await exported.call('run_code', JSON.stringify({ code }), CALL);
    const structured = JSON.parse(output.structured);
    return { ok: { ...structured, content: output.content.map((block) => block.val) } };
  } catch (err) {
    return { err };
  }
}

/** Runs each program in a child process with the component's sealed globals: their outcomes, in order. */
function runSealed(codes) {
  const script = `
    process.on('unhandledRejection', () => {});
    const { fakeTools } = await import(${JSON.stringify(pathToFileURL(component).href)});
    fakeTools.tools.set('calc', ({ expression }) => {
      const value = Number(expression);
      return Number.isNaN(value)
        ? { err: { kind: 'bad_expression', message: 'cannot read ' + JSON.stringify(expression), retryable: true } }
        : { ok: { value } };
    });
    const { tool } = await import(${JSON.stringify(pathToFileURL(component).href)});
    const outcomes = [];
    for (const code of ${JSON.stringify(codes)}) {
      try {
        const output = await tool.call('run_code', JSON.stringify({ code }), { callId: 'c', deadlineMs: 1000n });
        outcomes[outcomes.length] = { ok: JSON.parse(output.structured).result };
      } catch (err) {
        // Not push: a program may have replaced it.
        outcomes[outcomes.length] = { err: { kind: err.kind, message: err.message } };
      }
    }
    process.stdout.write(JSON.stringify(outcomes));
  `;
  try {
    return JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }));
  } catch (e) {
    // Exit 13: a top-level await that never settled (a program that never ends).
    throw new Error(`the child process failed (exit ${e.status}) on ${JSON.stringify(codes).slice(0, 200)}: ${e.stderr}`);
  }
}

beforeEach(() => {
  fake.reset();
  fakeTools.reset();
  fakeTools.tools.set('calc', ({ expression }) => {
    const value = Number(expression);
    return Number.isNaN(value)
      ? { err: { kind: 'bad_expression', message: `cannot read ${JSON.stringify(expression)}`, retryable: true } }
      : { ok: { value } };
  });
  fakeTools.tools.set('word_count', ({ text }) => ({ ok: `${text.split(' ').length} words` }));
});

describe('programs', () => {
  test('the spec: run_code, "Run code", a description that leaves room for the declarations, and the output schema', () => {
    const { spec } = runCode;
    assert.equal(spec.name, 'run_code');
    assert.equal(spec.title, 'Run code');
    // Room for the host's note on where the declarations are, within the
    // 1,024 characters OpenAI takes.
    assert.ok(spec.description.length <= 900, `${spec.description.length} characters`);
    assert.match(spec.description, /`return VALUE`/);
    assert.deepEqual(JSON.parse(spec.inputSchema).required, ['code']);
    assert.deepEqual(JSON.parse(spec.outputSchema).required, ['result', 'logs']);
  });

  test('the body of an async function: its return value is the result, as JSON text and structured', async () => {
    const { ok } = await run('const { value } = await tools.calc({ expression: "42" });\nreturn { answer: value };');
    assert.deepEqual(ok, { result: { answer: 42 }, logs: [], content: ['{"answer":42}'] });
    assert.deepEqual(fakeTools.calls, [['calc', '{"expression":"42"}']]);
  });

  test('an async function expression is called; a single expression is its own value', async () => {
    assert.deepEqual((await run('async () => {\n  return (await tools.calc({ expression: "7" })).value * 6;\n}')).ok.result, 42);
    assert.deepEqual((await run('async function main() { return "named"; }')).ok.result, 'named');
    assert.deepEqual((await run('tools.word_count({ text: "a b c" })')).ok.result, '3 words');
    assert.deepEqual((await run('[1, 2, 3].map((n) => n * 2)')).ok.result, [2, 4, 6]);
  });

  test('TypeScript that only needs its types erased runs', async () => {
    const code = [
      'interface Row { city: string; value: number }',
      'const rows: Row[] = [];',
      'for (const city of ["a", "b"] as const) {',
      '  const { value } = (await tools.calc({ expression: "1" })) as { value: number };',
      '  rows.push({ city, value } satisfies Row);',
      '}',
      'return rows.map((r: Row): string => `${r.city}=${r.value}`);',
    ].join('\n');
    assert.deepEqual((await run(code)).ok.result, ['a=1', 'b=1']);
    assert.deepEqual((await run('async (): Promise<number> => 6 * 7')).ok.result, 42);
  });

  test('a syntax error is syntax_error with its line; TypeScript gets its own message', async () => {
    const { err } = await run('const a = 1;\nreturn a +* 2;');
    assert.equal(err.kind, 'syntax_error');
    assert.equal(err.retryable, true);
    assert.match(err.message, /^SyntaxError: /);
    const ts = (await run('const a: number = ;\nreturn a;')).err;
    assert.equal(ts.kind, 'syntax_error');
    assert.match(ts.message, /as TypeScript: Unexpected token \(1:19\)/);
  });

  test('the program sees tools and console, and runs in strict mode', async () => {
    assert.deepEqual((await run('return [typeof tools, typeof console.log, typeof this]')).ok.result, ['object', 'function', 'undefined']);
    const { err } = await run('const total = 1;\ntotl = 2;\nreturn total;');
    assert.equal(err.kind, 'program_error');
    assert.match(err.message, /^the program threw ReferenceError: totl is not defined \(line 2\)$/);
  });
});

describe('tool calls', () => {
  test('calls in the same tick go to the host in one call-tools; single ones in call-tool', async () => {
    const { ok } = await run(
      'const a = await tools.calc({ expression: "1" });\n' +
        'const all = await Promise.all([2, 3, 4].map((n) => tools.calc({ expression: String(n) })));\n' +
        'return [a, ...all].map((r) => r.value);',
    );
    assert.deepEqual(ok.result, [1, 2, 3, 4]);
    assert.deepEqual(fakeTools.batches, [1, 3]);
  });

  test('an unbounded Promise.all goes to the host in lists it takes', async () => {
    const { ok } = await run('const all = await Promise.all(Array.from({ length: 3000 }, (_, i) => tools.calc({ expression: String(i) })));\nreturn all.length;');
    assert.equal(ok.result, 3000);
    assert.deepEqual(fakeTools.batches, [1024, 1024, 952]);
  });

  test('once the host says the budget is spent, later calls are refused without being sent', async () => {
    fakeTools.budget = 5;
    const { ok } = await run(
      'const settled = await Promise.allSettled(Array.from({ length: 3000 }, (_, i) => tools.calc({ expression: String(i) })));\n' +
        'const late = await tools.calc({ expression: "1" }).catch((e) => e);\n' +
        'return [settled.filter((s) => s.status === "fulfilled").length, settled[2999].reason.kind, late.name, late.tool, late.kind, late.message];',
    );
    assert.deepEqual(ok.result, [5, 'budget_exhausted', 'ToolCallError', 'calc', 'budget_exhausted', 'all calls of the budget are made']);
    // The first list went to the host; the rest, and the late call, did not.
    assert.deepEqual(fakeTools.batches, [1024]);
  });

  test('calls a few awaits apart still share a batch', async () => {
    const { ok } = await run(
      'async function twice(n) { const r = await tools.calc({ expression: String(n) }); return tools.calc({ expression: String(r.value * 2) }); }\n' +
        'return (await Promise.all([1, 2, 3].map(twice))).map((r) => r.value);',
    );
    assert.deepEqual(ok.result, [2, 4, 6]);
    assert.deepEqual(fakeTools.batches, [3, 3]);
  });

  test('a failed call rejects with a ToolCallError the program can catch', async () => {
    const { ok } = await run(
      'try { await tools.calc({ expression: "x" }); } catch (e) {\n' +
        '  return [e instanceof Error, e.name, e.tool, e.kind, e.message, e.retryable];\n}',
    );
    assert.deepEqual(ok.result, [true, 'ToolCallError', 'calc', 'bad_expression', 'cannot read "x"', true]);
    const settled = await run(
      'const r = await Promise.allSettled([tools.calc({ expression: "1" }), tools.nope({})]);\nreturn r.map((x) => x.status + " " + (x.reason?.kind ?? x.value.value));',
    );
    assert.deepEqual(settled.ok.result, ['fulfilled 1', 'rejected unknown_tool']);
  });

  test('an uncaught failed call fails the program with the callee\'s kind, naming the tool and saying it can be caught', async () => {
    const { err } = await run('await tools.calc({ expression: "x" });\nreturn 1;');
    assert.equal(err.kind, 'bad_expression');
    assert.equal(err.retryable, true);
    assert.match(err.message, /^tools\.calc failed \(bad_expression\): cannot read "x"\. The program did not catch it; it can, with try/);
    assert.equal((await run('return await tools.missing()')).err.kind, 'unknown_tool');
  });

  test('arguments that are not a plain JSON object reject with a TypeError, and nothing is called', async () => {
    const { ok } = await run(
      'const bad = [[1], "x", null, { n: 1n }, { f() {} }, { x: NaN }];\n' +
        'const out = [];\n' +
        'for (const args of bad) { try { await tools.calc(args); } catch (e) { out.push(e.name + ": " + e.message); } }\n' +
        'return out;',
    );
    assert.deepEqual(ok.result, [
      'TypeError: the arguments of calc must be a plain object like { key: value }, got an array',
      'TypeError: the arguments of calc must be a plain object like { key: value }, got string',
      'TypeError: the arguments of calc must be a plain object like { key: value }, got null',
      'TypeError: the arguments of calc.n is a BigInt (1n): JSON has none; convert it with Number(x) or String(x)',
      'TypeError: the arguments of calc.f is a function: JSON has none; call it, or leave it out',
      'TypeError: the arguments of calc.x is NaN: JSON has no NaN or Infinity',
    ]);
    assert.deepEqual(fakeTools.calls, []);
  });

  test('arguments default to {}, and are copied when the call is made', async () => {
    fakeTools.tools.set('ping', () => ({ ok: 'pong' }));
    const { ok } = await run('const args = { text: "a b" };\nconst p = tools.word_count(args);\nargs.text = "changed";\nreturn [await p, await tools.ping()];');
    assert.deepEqual(ok.result, ['2 words', 'pong']);
    assert.deepEqual(fakeTools.calls.map(([, args]) => args), ['{"text":"a b"}', '{}']);
  });

  test('a call the host returns no result for fails, instead of waiting for ever', async () => {
    fakeTools.dropLast = true;
    const { ok } = await run('const r = await Promise.allSettled([tools.calc({ expression: "1" }), tools.calc({ expression: "2" })]);\nreturn r.map((x) => x.status + " " + (x.reason?.message ?? x.value.value));');
    assert.deepEqual(ok.result, ['fulfilled 1', 'rejected the host returned no result for this call']);
  });

  test('calls not awaited still run before the result returns', async () => {
    const { ok } = await run('tools.word_count({ text: "x" });\nreturn "done";');
    assert.equal(ok.result, 'done');
    assert.deepEqual(fakeTools.calls, [['word_count', '{"text":"x"}']]);
  });

  test('a call not awaited is named when the program then fails or returns nothing', async () => {
    const nothing = await run('const r = tools.calc({ expression: "6" });\nconsole.log(`value: ${r.value}`);\nreturn r.value;');
    assert.equal(nothing.err.kind, 'invalid_result');
    assert.match(
      nothing.err.message,
      /^the program returned nothing \(console output is not the result\): end it with `return VALUE` .*\. The program called tools\.calc without await \(once\): a call returns a Promise, not its result; write `const r = await tools\.calc\(\{…\}\)`\.\nconsole output:\nvalue: undefined$/,
    );
    const thrown = await run('const rs = [1, 2].map((n) => tools.word_count({ text: "a" }));\nreturn rs[0].toUpperCase();');
    assert.equal(thrown.err.kind, 'program_error');
    assert.match(
      thrown.err.message,
      /^the program threw TypeError: .*\. The program called tools\.word_count without await \(2 calls\): .*, or for a list, `const rs = await Promise\.all\(items\.map\(\(x\) => tools\.word_count\(\{…\}\)\)\)`\.$/,
    );
    // Awaited, or handed to then/catch/Promise.all, a call is not named.
    const fine = await run('const a = tools.calc({ expression: "1" });\nconst b = tools.calc({ expression: "2" }).then((r) => r.value);\nconst [c] = await Promise.all([tools.calc({ expression: "3" })]);\nreturn [(await a).value, await b, c.value, undefined.x];');
    assert.equal(fine.err.kind, 'program_error');
    assert.doesNotMatch(fine.err.message, /without await/);
  });

  test('a call that fails with nothing awaiting it fails the program, as an unhandled rejection does', async () => {
    const { err } = await run('tools.calc({ expression: "x" });\nreturn 1;');
    assert.equal(err.kind, 'bad_expression');
    assert.match(err.message, /^tools\.calc failed \(bad_expression\): cannot read "x"\..*Nothing awaited this call: await it, or add \.catch\(…\) to ignore its failure$/);
    assert.equal((await run('tools.nope({});\nreturn 1;')).err.kind, 'unknown_tool');
    const bad = await run('tools.calc([1]);\nreturn 1;');
    assert.equal(bad.err.kind, 'program_error');
    assert.match(bad.err.message, /TypeError: the arguments of calc must be a plain object/);
    // Ignored on purpose, it is fine.
    assert.equal((await run('tools.calc({ expression: "x" }).catch(() => {});\nreturn 1;')).ok.result, 1);
    // Handed to then, forEach(async …) or an unawaited Promise.all, but not
    // waited for before the program returned: the failure is not dropped.
    // Run in a child process: the promises the program derived still
    // reject with nobody to hear, which node reports (the component's
    // engine does not).
    const codes = [
      'let total = 0;\n["1", "x"].forEach(async (e) => { total += (await tools.calc({ expression: e })).value; });\nreturn total;',
      'tools.calc({ expression: "x" }).then((r) => r.value);\nreturn "ok";',
      'Promise.all([tools.calc({ expression: "x" })]);\nreturn "ok";',
    ];
    const outcomes = runSealed(codes);
    codes.forEach((code, i) => {
      const late = outcomes[i].err;
      assert.equal(late?.kind, 'bad_expression', code);
      assert.match(late.message, /The program returned before this call ended/, code);
    });
  });

  test('a program that replaces built-ins the harness uses still has its calls counted and its failures reported', () => {
    const sabotage = [
      'Promise.prototype.then = function () { return this; };',
      'Array.prototype.filter = () => [];',
      'Array.prototype.find = () => undefined;',
      'Array.prototype.push = () => 0;',
      'Array.prototype.map = () => [];',
      'Array.prototype.join = () => "";',
      'Array.prototype.slice = () => [];',
    ].join('\n');
    const species = 'Object.defineProperty(Array, Symbol.species, { get() { return function () { return { length: 0 }; }; } });';
    const codes = [
      `${sabotage}\ntools.calc({ expression: "x" });\nreturn 1;`,
      `${sabotage}\nconsole.log("kept");\nconst r = tools.calc({ expression: "1" });\nreturn undefined;`,
      `${species}\ntools.calc({ expression: "x" });\nreturn 1;`,
      'Array.prototype.map = () => [];\nawait Promise.all([tools.calc({ expression: "1" }), tools.calc({ expression: "2" })]);\nreturn 1;',
    ];
    // One process each: what a program changes stays changed in its realm.
    const [unawaited, nothing, speciesChanged, sdkBroken] = codes.map((code) => runSealed([code])[0]);
    assert.equal(speciesChanged.err?.kind, 'bad_expression', JSON.stringify(speciesChanged));
    // What the SDK fails at is the program's error, never a host kind.
    assert.equal(sdkBroken.err?.kind, 'program_error', JSON.stringify(sdkBroken));
    assert.equal(unawaited.err?.kind, 'bad_expression', JSON.stringify(unawaited));
    assert.match(unawaited.err.message, /Nothing awaited this call/);
    assert.equal(nothing.err?.kind, 'invalid_result', JSON.stringify(nothing));
    assert.match(nothing.err.message, /The program called tools\.calc without await \(once\)/);
    assert.match(nothing.err.message, /console output:\nkept$/);
  });

  test('`await tools` and logging `tools` call nothing', async () => {
    const { ok } = await run('const t = await tools;\nconsole.log(tools);\nreturn [t === tools, typeof tools.then];');
    assert.deepEqual(ok.result, [true, 'undefined']);
    assert.deepEqual(fakeTools.calls, []);
  });
});

describe('results', () => {
  test('what is not JSON is invalid_result, with the path to it', async () => {
    const cases = [
      ['return;', 'the program returned nothing: end it with `return VALUE`'],
      ['const x = 1;', 'the program returned nothing'],
      ['return { items: [1, 2, 3, () => 1] };', "the program's result is not JSON: result.items[3] is a function"],
      ['const a = { n: 1 }; a.self = a; return a;', 'result.self is a cycle'],
      ['return 10n ** 20n;', 'result is a BigInt (100000000000000000000n)'],
      ['return { s: Symbol("x") };', 'result.s is a symbol'],
      ['return { ratio: 1 / 0 };', 'result.ratio is Infinity'],
      ['return [undefined];', 'result[0] is undefined'],
      ['return { p: tools.calc({ expression: "1" }) };', 'result.p is a Promise: did you forget `await`?'],
      ['return new Map([[1, 2]]);', 'result is a Map'],
      ['return new Proxy({}, { ownKeys() { throw new Error("trap"); } });', 'result cannot be read: Error: trap'],
      ['return { get x() { throw 1; } };', 'result.x cannot be read'],
    ];
    for (const [code, message] of cases) {
      const { err } = await run(code);
      assert.equal(err?.kind, 'invalid_result', code);
      assert.ok(err.message.includes(message), `${code}: ${err.message}`);
      assert.equal(err.retryable, true);
    }
  });

  test('JSON values of every kind come back, Dates as their ISO text', async () => {
    const { ok } = await run('return { n: null, b: false, s: "é", x: 1.5, d: new Date(0), list: [[]] };');
    assert.deepEqual(ok.result, { n: null, b: false, s: 'é', x: 1.5, d: '1970-01-01T00:00:00.000Z', list: [[]] });
    assert.equal((await run('return null')).ok.result, null);
  });
});

describe('thrown values', () => {
  test('an uncaught Error is program_error with its line', async () => {
    const { err } = await run('const x = 1;\nthrow new RangeError("too big");');
    assert.deepEqual(err, { kind: 'program_error', message: 'the program threw RangeError: too big (line 2)', retryable: true });
    assert.match((await run('null.x')).err.message, /^the program threw TypeError: /);
  });

  test('values that are not Errors are described safely', async () => {
    const cases = [
      ['throw 42', 'the program threw the number 42, not an Error'],
      ['throw null', 'the program threw null, not an Error'],
      ['throw undefined', 'the program threw undefined, not an Error'],
      ['throw "oops"', 'the program threw the string "oops" (throw an Error to get a stack)'],
      ['throw { code: 7 }', 'the program threw the object {"code":7}, not an Error'],
      ['throw { toString() { throw 1; }, toJSON() { throw 2; } }', 'the program threw an object that cannot be shown, not an Error'],
      ['throw new Proxy({}, { get() { throw 1; }, getPrototypeOf() { throw 2; } })', 'the program threw a value that cannot be inspected (a Proxy that throws), not an Error'],
      ['throw Symbol("s")', 'the program threw the symbol Symbol(s), not an Error'],
      ['throw 5n', 'the program threw the bigint 5n, not an Error'],
      ['throw () => 1', 'the program threw a function, not an Error'],
      ['const e = new Error("x"); Object.defineProperty(e, "message", { get() { throw 1; } }); throw e;', 'the program threw an Error that cannot be read'],
    ];
    for (const [code, message] of cases) {
      const { err } = await run(code);
      assert.equal(err?.kind, 'program_error', code);
      assert.ok(err.message.startsWith(message), `${code}: ${err.message}`);
    }
  });

  test('the engine\'s out-of-memory exception is memory_exhausted', async () => {
    assert.deepEqual((await run('throw "out of memory"')).err, {
      kind: 'memory_exhausted',
      message: 'the program ran out of memory (the engine refused an allocation): hold less data at once',
      retryable: false,
    });
  });

  test('deep recursion is a program_error, not a crash', async () => {
    const { err } = await run('function f(n) { return f(n + 1) + 1; }\nreturn f(0);');
    assert.equal(err.kind, 'program_error');
    assert.match(err.message, /RangeError: Maximum call stack size exceeded|InternalError: too much recursion/);
  });
});

describe('console', () => {
  test('lines come back after the result and in structured logs, and go to the host log at their level', async () => {
    const { ok } = await run(
      'console.log("a", 1, { b: [2n] }, undefined);\nconsole.info("i");\nconsole.warn("w");\nconsole.error(new TypeError("e"));\nconsole.debug("two\\nlines");\nreturn 0;',
    );
    const lines = ['a 1 {"b":["2n"]} undefined', 'i', '[warn] w', '[error] TypeError: e', '[debug] two', '[debug] lines'];
    assert.deepEqual(ok.logs, lines);
    assert.deepEqual(ok.content, ['0', `console output:\n${lines.join('\n')}`]);
    assert.deepEqual(
      fake.logs.map(([level]) => level),
      ['info', 'info', 'warn', 'error', 'debug', 'debug'],
    );
  });

  test('values that cannot be shown do not throw', async () => {
    const { ok } = await run(
      'const a = {}; a.a = a;\nconsole.log(a, new Proxy({}, { get() { throw 1; }, ownKeys() { throw 2; } }), Symbol("s"), () => 1);\nreturn 0;',
    );
    assert.equal(ok.logs.length, 1);
    assert.match(ok.logs[0], /^\{"a":"\[repeated\]"\} /);
  });

  test('a flood keeps the first lines and says how many were dropped', async () => {
    const { ok } = await run('for (let i = 0; i < 100000; i++) console.log("line " + i);\nreturn "done";');
    assert.equal(ok.logs.length, MAX_LOG_LINES + 1);
    assert.equal(ok.logs[0], 'line 0');
    assert.equal(ok.logs.at(-1), `… ${100000 - MAX_LOG_LINES} more lines dropped`);
    assert.equal(fake.logs.length, MAX_LOG_LINES);
  });

  test('once full, dropped lines are counted without being formatted, newlines included', async () => {
    const { ok } = await run('for (let i = 0; i < 300; i++) console.log("a\\nb", { x: 1 });\nreturn 0;');
    assert.equal(ok.logs.length, MAX_LOG_LINES + 1);
    assert.equal(ok.logs.at(-1), `… ${600 - MAX_LOG_LINES} more lines dropped`);
  });

  test('long lines are bounded by bytes', async () => {
    const { ok } = await run('for (let i = 0; i < 50; i++) console.log("é".repeat(1500));\nreturn 0;');
    const bytes = ok.logs.slice(0, -1).reduce((n, line) => n + Buffer.byteLength(line) + 1, 0);
    assert.ok(bytes <= MAX_LOG_BYTES, `${bytes} bytes`);
    assert.match(ok.logs.at(-1), /^… \d+ more lines dropped$/);
  });

  test('a failure carries the last console lines', async () => {
    const { err } = await run('console.log("step 1");\nthrow new Error("boom");');
    assert.equal(err.message, 'the program threw Error: boom (line 2)\nconsole output:\nstep 1');
  });
});

describe('escapes, with the component\'s sealed globals', () => {
  test('import, timers, fetch and the clock fail with errors that say why', () => {
    const outcomes = runSealed([
      'await import("./tool.mjs"); return 1',
      'return "import(\\"x\\") in a string is fine" // import("y")',
      'try { await new Promise((r) => setTimeout(r, 10)); } catch (e) { return e.message }',
      'try { setInterval(() => 1, 1); } catch (e) { return e.message }',
      'try { await fetch("http://example.org"); } catch (e) { return e.message }',
      'try { new Date(); } catch (e) { return e.message }',
      'try { Date.now(); } catch (e) { return e.message }',
      'return new Date(0).toISOString()',
      'try { performance.now(); } catch (e) { return e.message }',
      'try { return eval("import(\\"x\\")"); } catch (e) { return e.name + ": " + e.message }',
      'try { return new Function("return import(\\"x\\")")(); } catch (e) { return e.name + ": " + e.message }',
      'try { return (async () => {}).constructor("return import(\\"x\\")"); } catch (e) { return e.name + ": " + e.message }',
      'return [eval("typeof tools"), eval("1 + 1"), typeof require, typeof WebAssembly, typeof process === "undefined" ? "none" : "node"]',
    ]);
    assert.deepEqual(outcomes[0].err.kind, 'syntax_error');
    assert.match(outcomes[0].err.message, /^import is not available in run_code: the program cannot load modules/);
    assert.equal(outcomes[1].ok, 'import("x") in a string is fine');
    assert.equal(outcomes[2].ok, 'setTimeout is not available in run_code: there are no timers and no clock; await tool calls directly');
    assert.match(outcomes[3].ok, /^setInterval is not available/);
    assert.equal(outcomes[4].ok, 'fetch is not available in run_code: the program has no network; it reaches the outside only through `tools`');
    assert.match(outcomes[5].ok, /^new Date\(\) is not available in run_code: there is no clock/);
    assert.match(outcomes[6].ok, /^Date.now is not available/);
    assert.equal(outcomes[7].ok, '1970-01-01T00:00:00.000Z');
    assert.match(outcomes[8].ok, /^performance.now is not available/);
    for (const i of [9, 10, 11]) {
      assert.match(outcomes[i].ok, /^SyntaxError: import is not available in run_code/, String(i));
    }
    // eval is the checked one, so it runs in the global scope, not the
    // program's: inside the same instance, with nothing more in reach.
    // (WebAssembly is node's here; the component has none, tested by the host.)
    assert.deepEqual(outcomes[12].ok.slice(0, 3), ['undefined', 2, 'undefined']);
  });
});
