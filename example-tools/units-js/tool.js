// Unit conversion for toolhost: the `convert_units` tool.
//
// Pure computation: it reads one config value and logs, both through the
// `host` import, and needs nothing else from the host.

import { config, log } from 'toolhost:tool/host@0.2.0';

const DEFAULT_PRECISION = 4;

// Each unit's factor to its dimension's base unit (metre, kilogram).
// Temperatures are affine, so they convert through kelvin with functions.
const DIMENSIONS = {
  length: {
    m: 1,
    km: 1000,
    cm: 0.01,
    mm: 0.001,
    mi: 1609.344,
    ft: 0.3048,
    in: 0.0254,
  },
  mass: {
    kg: 1,
    g: 0.001,
    lb: 0.45359237,
    oz: 0.028349523125,
  },
  temperature: {
    C: { toBase: (c) => c + 273.15, fromBase: (k) => k - 273.15 },
    F: { toBase: (f) => ((f - 32) * 5) / 9 + 273.15, fromBase: (k) => ((k - 273.15) * 9) / 5 + 32 },
    K: { toBase: (k) => k, fromBase: (k) => k },
  },
};

const ALL_UNITS = Object.values(DIMENSIONS).flatMap((units) => Object.keys(units));

const SUPPORTED = Object.entries(DIMENSIONS)
  .map(([dimension, units]) => `${dimension}: ${Object.keys(units).join(', ')}`)
  .join('; ');

const INPUT_SCHEMA = {
  type: 'object',
  properties: {
    value: { type: 'number', description: 'The quantity to convert.' },
    from: { type: 'string', enum: ALL_UNITS, description: 'Unit of `value`.' },
    to: { type: 'string', enum: ALL_UNITS, description: 'Unit to convert to; same dimension as `from`.' },
  },
  required: ['value', 'from', 'to'],
  additionalProperties: false,
};

const OUTPUT_SCHEMA = {
  type: 'object',
  properties: {
    value: { type: 'number' },
    unit: { type: 'string', enum: ALL_UNITS },
  },
  required: ['value', 'unit'],
  additionalProperties: false,
};

// A `result` error is returned by throwing its payload as a plain object: the
// bindings pass a thrown non-Error value through as `err`, whereas a thrown
// `Error` (without a `payload` property) traps the instance.
function toolError(kind, message, retryable) {
  return { kind, message, retryable };
}

function invalidInput(message) {
  return toolError('invalid_input', message, true);
}

function findUnit(symbol) {
  for (const [dimension, units] of Object.entries(DIMENSIONS)) {
    if (Object.hasOwn(units, symbol)) {
      return { dimension, unit: units[symbol] };
    }
  }
  return undefined;
}

function toBase(unit, value) {
  return typeof unit === 'number' ? value * unit : unit.toBase(value);
}

function fromBase(unit, value) {
  return typeof unit === 'number' ? value / unit : unit.fromBase(value);
}

// The number of decimals to show, from the optional `precision` config value.
// A bad value is the operator's mistake, not the model's: fall back and say so.
function precision() {
  const raw = config('precision');
  if (raw == null) {
    return { digits: DEFAULT_PRECISION };
  }
  const digits = Number(raw);
  if (Number.isInteger(digits) && digits >= 0 && digits <= 15) {
    return { digits };
  }
  return {
    digits: DEFAULT_PRECISION,
    warning: `config "precision" = ${JSON.stringify(raw)} is not an integer 0-15; using ${DEFAULT_PRECISION}`,
  };
}

function convertUnits(args) {
  const { value, from, to } = args;
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw invalidInput('`value` must be a finite number.');
  }
  const source = typeof from === 'string' ? findUnit(from) : undefined;
  const target = typeof to === 'string' ? findUnit(to) : undefined;
  if (!source || !target) {
    const unknown = !source ? from : to;
    throw invalidInput(`Unknown unit ${JSON.stringify(unknown)}. Supported units are ${SUPPORTED}.`);
  }
  if (source.dimension !== target.dimension) {
    throw invalidInput(
      `Cannot convert ${source.dimension} (${from}) to ${target.dimension} (${to}); ` +
        `pick two units of the same dimension. Supported units are ${SUPPORTED}.`,
    );
  }

  const { digits, warning } = precision();
  // Round for display, then drop trailing zeros ("6.2137", not "6.213700").
  const result = Number(fromBase(target.unit, toBase(source.unit, value)).toFixed(digits));
  const content = `${value} ${from} = ${result} ${to}`;
  log(warning ? 'warn' : 'debug', warning ? `convert_units: ${warning}` : `convert_units: ${content}`);
  return {
    // A result is a list of content blocks (a WIT variant: `{ tag, val }`);
    // this tool returns one text block.
    content: [{ tag: 'text', val: content }],
    structured: JSON.stringify({ value: result, unit: to }),
    artifact: undefined,
  };
}

const TOOLS = {
  convert_units: {
    spec: {
      name: 'convert_units',
      // An absent `option` is `undefined`: the host derives a title from the name.
      title: undefined,
      description:
        'Convert a quantity between units of length (m, km, cm, mm, mi, ft, in), ' +
        'mass (kg, g, lb, oz) or temperature (C, F, K).',
      inputSchema: JSON.stringify(INPUT_SCHEMA),
      outputSchema: JSON.stringify(OUTPUT_SCHEMA),
      hints: { readOnly: true, idempotent: true },
    },
    run: convertUnits,
  },
};

export const tool = {
  tools() {
    return Object.values(TOOLS).map(({ spec }) => spec);
  },

  call(name, argumentsJson, _context) {
    if (!Object.hasOwn(TOOLS, name)) {
      throw toolError(
        'unknown_tool',
        `No tool named ${JSON.stringify(name)}; this component provides: ${Object.keys(TOOLS).join(', ')}.`,
        false,
      );
    }
    // The host validated the arguments against the schema already; stay
    // defensive anyway, since a bad argument must not trap the instance.
    let args;
    try {
      args = JSON.parse(argumentsJson);
    } catch (e) {
      throw invalidInput(`The arguments are not valid JSON: ${e.message}.`);
    }
    if (args === null || typeof args !== 'object' || Array.isArray(args)) {
      throw invalidInput('The arguments must be a JSON object.');
    }
    return TOOLS[name].run(args);
  },
};
