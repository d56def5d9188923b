// Unit conversion for toolhost: the `convert_units` tool, written with the
// JavaScript SDK (guest-sdk/js). Build with ./build.sh OUT.wasm.
//
// Pure computation: it reads one config value and logs, both through the
// `host` import, and needs nothing else from the host.

import { Output, ToolError, config, defineTool, log, s, toolbox } from '../../guest-sdk/js/toolhost';

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

// Every symbol's dimension and unit; the schema's enum already limits
// `from` and `to` to these.
const UNITS = new Map(
  Object.entries(DIMENSIONS).flatMap(([dimension, units]) =>
    Object.entries(units).map(([symbol, unit]) => [symbol, { dimension, unit }]),
  ),
);

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

const convertUnits = defineTool({
  name: 'convert_units',
  description:
    'Convert a quantity between units of length (m, km, cm, mm, mi, ft, in), ' +
    'mass (kg, g, lb, oz) or temperature (C, F, K).',
  input: {
    value: s.number().describe('The quantity to convert.'),
    from: s.enum(ALL_UNITS).describe('Unit of `value`.'),
    to: s.enum(ALL_UNITS).describe('Unit to convert to; same dimension as `from`.'),
  },
  output: {
    value: s.number(),
    unit: s.enum(ALL_UNITS),
  },
  readOnly: true,
  idempotent: true,
  run({ value, from, to }) {
    const source = UNITS.get(from);
    const target = UNITS.get(to);
    if (source.dimension !== target.dimension) {
      throw ToolError.invalidInput(
        `Cannot convert ${source.dimension} (${from}) to ${target.dimension} (${to}); ` +
          `pick two units of the same dimension. Supported units are ${SUPPORTED}.`,
      );
    }

    const { digits, warning } = precision();
    // Round for display, then drop trailing zeros ("6.2137", not "6.213700").
    const result = Number(fromBase(target.unit, toBase(source.unit, value)).toFixed(digits));
    const content = `${value} ${from} = ${result} ${to}`;
    log(warning ? 'warn' : 'debug', warning ? `convert_units: ${warning}` : `convert_units: ${content}`);
    // Text of our own for the model, with the number and unit as structured output.
    return Output.text(content).withStructured({ value: result, unit: to });
  },
});

export const tool = toolbox(convertUnits);
