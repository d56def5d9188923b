// What the program's global scope must not offer as it stands: each of
// these would trap the instance (the engine's network and clock are
// compiled out, and its module loader looks for a file system there is
// none of) or silently mislead (a clock frozen at build time). seal() puts
// in their place functions that throw an error saying why. The component
// calls it when its module loads, that is at build time, so no call pays.
//
// None of this is the security boundary: the host gives the instance no
// network, files or clock, whatever the program reaches. It is for clear
// errors instead of traps.

import { importProblem } from './program.js';

const NO_NETWORK = 'the program has no network; it reaches the outside only through `tools`';
const NO_TIMERS = 'there are no timers and no clock; await tool calls directly';
const NO_CLOCK = 'there is no clock; pass dates to the program, or get them from a tool';

/** Replaces, on `globalThis`, what would trap or mislead the program. */
export function seal() {
  for (const name of ['fetch', 'Request', 'Response', 'Headers']) {
    define(globalThis, name, unavailable(name, NO_NETWORK));
  }
  for (const name of ['setTimeout', 'setInterval', 'clearTimeout', 'clearInterval']) {
    define(globalThis, name, unavailable(name, NO_TIMERS));
  }
  define(globalThis, 'performance', Object.freeze({ now: unavailable('performance.now', NO_CLOCK) }));
  define(globalThis, 'Date', clocklessDate(Date));
  checkCompiledCode();
}

function define(object, name, value) {
  Object.defineProperty(object, name, { value, writable: true, configurable: true });
}

function unavailable(name, why) {
  return function () {
    throw new Error(`${name} is not available in run_code: ${why}`);
  };
}

/** `Date` without the current time: `new Date(2024, 0, 1)` and `Date.parse` work, `new Date()` and `Date.now()` throw. */
function clocklessDate(RealDate) {
  const now = unavailable('Date.now', NO_CLOCK);
  const clockless = new Proxy(RealDate, {
    construct(target, args, newTarget) {
      if (args.length === 0) {
        unavailable('new Date()', NO_CLOCK)();
      }
      return Reflect.construct(target, args, newTarget === clockless ? target : newTarget);
    },
    apply() {
      unavailable('Date()', NO_CLOCK)();
    },
    get(target, key, receiver) {
      return key === 'now' ? now : Reflect.get(target, key, receiver);
    },
  });
  define(RealDate.prototype, 'constructor', clockless);
  return clockless;
}

/**
 * `eval` and the function constructors (`Function`, and the async and
 * generator ones every function reaches through `.constructor`) refuse
 * source with `import(...)`, as `run_code` refuses the program itself.
 */
function checkCompiledCode() {
  const check = (source) => {
    const problem = importProblem(String(source));
    if (problem !== undefined) {
      throw new SyntaxError(problem);
    }
  };
  const realEval = globalThis.eval;
  define(globalThis, 'eval', function evaluate(source) {
    if (typeof source === 'string') {
      check(source);
    }
    return realEval(source);
  });
  for (const example of [function () {}, function* () {}, async function () {}, async function* () {}]) {
    const Real = example.constructor;
    const checked = new Proxy(Real, {
      construct(target, args, newTarget) {
        args.forEach(check);
        return Reflect.construct(target, args, newTarget === checked ? target : newTarget);
      },
      apply(target, self, args) {
        args.forEach(check);
        return Reflect.apply(target, self, args);
      },
    });
    define(Real.prototype, 'constructor', checked);
    if (Real === Function) {
      define(globalThis, 'Function', checked);
    }
  }
}
