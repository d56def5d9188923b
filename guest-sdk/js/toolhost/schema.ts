/**
 * Argument schemas: one definition gives the JSON Schema the model reads,
 * the TypeScript type `run` receives, and the check the arguments pass
 * before `run` is called.
 *
 * Schemas are compact and strict: every object has `additionalProperties:
 * false` and lists its non-optional fields in `required`; nothing writes
 * `default` or a `format`, which OpenAI's strict mode refuses. For strict
 * mode, make a field the model may leave empty `.nullable()` rather than
 * `.optional()`.
 *
 * @example
 * const input = {
 *   city: s.string().describe('City name, e.g. "Lyon".'),
 *   days: s.integer({ minimum: 1, maximum: 7 }).optional().describe('Days ahead, 1 to 7.'),
 *   units: s.enum(['metric', 'imperial']).optional(),
 * };
 * // run receives { city: string; days?: number; units?: 'metric' | 'imperial' }
 */

import { ToolError } from './errors';

/** A JSON Schema, as this module writes it. */
export type JsonSchema = { [keyword: string]: unknown };

/** Adds to `problems` what is wrong with `value`, found at `path`. */
type Check = (value: unknown, path: string, problems: string[]) => void;

/** Problems reported at most in one error: enough to fix, short enough to read. */
const MAX_PROBLEMS = 8;

/**
 * A schema for values of type `T`. `Optional` is `true` for an object field
 * that may be left out (see {@link Type.optional}).
 */
export class Type<T, Optional extends boolean = boolean> {
  /** Never set at run time: carries `T` for {@link Infer}. */
  declare readonly _type: T;
  /** The JSON Schema of this type. */
  readonly schema: JsonSchema;
  /** Whether an object may leave this field out. */
  readonly isOptional: Optional;
  readonly #check: Check;

  /** Use the builders in {@link s} rather than this constructor. */
  constructor(schema: JsonSchema, check: Check, isOptional: Optional) {
    this.schema = schema;
    this.#check = check;
    this.isOptional = isOptional;
  }

  /** The same type, as an object field the model may leave out (absent, not `null`). */
  optional(): Type<T, true> {
    return new Type<T, true>(this.schema, this.#check, true);
  }

  /**
   * The same type, or `null`. OpenAI's strict mode wants every field in
   * `required`, so a field the model may leave empty is better nullable
   * than optional there (`toolhost check` warns about optional ones).
   */
  nullable(): Type<T | null, Optional> {
    if (Array.isArray(this.schema.type)) {
      return this;
    }
    const schema: JsonSchema = { ...this.schema, type: [this.schema.type, 'null'] };
    if (Array.isArray(this.schema.enum)) {
      schema.enum = [...this.schema.enum, null];
    }
    const check = this.#check;
    return new Type<T | null, Optional>(
      schema,
      (value, path, problems) => {
        if (value !== null) {
          check(value, path, problems);
        }
      },
      this.isOptional,
    );
  }

  /** The same type with a `description`, which the model reads: say what the value means and its units. */
  describe(description: string): Type<T, Optional> {
    return new Type<T, Optional>({ ...this.schema, description }, this.#check, this.isOptional);
  }

  /**
   * `value` typed as `T`, or a ToolError `invalid_input` (retryable) that
   * lists what does not fit, each problem with where it is.
   */
  parse(value: unknown): T {
    const problems = this.problems(value);
    if (problems.length > 0) {
      throw ToolError.invalidInput(`the arguments do not fit the schema: ${problems}`);
    }
    return value as T;
  }

  /** What does not fit in `value`, for the model to read; empty when it fits. */
  problems(value: unknown): string {
    const problems: string[] = [];
    this.#check(value, '', problems);
    const shown = problems.slice(0, MAX_PROBLEMS);
    if (problems.length > MAX_PROBLEMS) {
      shown.push(`and ${problems.length - MAX_PROBLEMS} more`);
    }
    return shown.join('; ');
  }

  /** Checks `value` found at `path` (for {@link s.object} and {@link s.array}). */
  checkAt(value: unknown, path: string, problems: string[]): void {
    this.#check(value, path, problems);
  }
}

/** The TypeScript type a schema describes: `Infer<typeof s.string()>` is `string`. */
export type Infer<S> = S extends Type<infer T, boolean> ? T : never;

/** The fields of an object schema: a name for each field's type. */
export type Shape = { [field: string]: Type<unknown, boolean> };

type OptionalKeys<S extends Shape> = {
  [K in keyof S]: S[K] extends Type<unknown, true> ? K : never;
}[keyof S];

/** Flattens an intersection so editors show `{ a: string; b?: number }`. */
type Flatten<T> = { [K in keyof T]: T[K] } & {};

/** The TypeScript type of an object with fields `S`: optional fields become `?:`. */
export type ObjectOf<S extends Shape> = Flatten<
  { [K in Exclude<keyof S, OptionalKeys<S>>]: Infer<S[K]> } & {
    [K in OptionalKeys<S>]?: Infer<S[K]>;
  }
>;

/** Bounds of a number or integer, inclusive. */
export interface NumberBounds {
  minimum?: number;
  maximum?: number;
}

/** Bounds on a string's length, and a regular expression it must match (JavaScript syntax, `u` flag). */
export interface StringBounds {
  minLength?: number;
  maxLength?: number;
  pattern?: string;
}

/** Bounds on an array's length. */
export interface ArrayBounds {
  minItems?: number;
  maxItems?: number;
}

/** Where a problem is, for the model: `` `days` `` or `` `stops[2].name` ``; the arguments themselves when empty. */
function at(path: string): string {
  return path === '' ? 'the value' : `\`${path}\``;
}

/** A value as the model wrote it, for a problem's message. */
function shown(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/** The JSON type of `value`, named as JSON Schema names types. */
function jsonType(value: unknown): string {
  if (value === null) {
    return 'null';
  }
  if (Array.isArray(value)) {
    return 'array';
  }
  return typeof value;
}

/** Defined keywords only, so that the schema stays compact. */
function compact(schema: JsonSchema): JsonSchema {
  return Object.fromEntries(Object.entries(schema).filter(([, v]) => v !== undefined));
}

function checkBounds(value: number, path: string, bounds: NumberBounds, problems: string[]): void {
  if (bounds.minimum !== undefined && value < bounds.minimum) {
    problems.push(`${at(path)} must be at least ${bounds.minimum}, got ${value}`);
  }
  if (bounds.maximum !== undefined && value > bounds.maximum) {
    problems.push(`${at(path)} must be at most ${bounds.maximum}, got ${value}`);
  }
}

function number(type: 'number' | 'integer', bounds: NumberBounds = {}): Type<number, false> {
  const schema = compact({ type, minimum: bounds.minimum, maximum: bounds.maximum });
  return new Type<number, false>(
    schema,
    (value, path, problems) => {
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        problems.push(`${at(path)} must be a number, got ${jsonType(value)}`);
      } else if (type === 'integer' && !Number.isInteger(value)) {
        problems.push(`${at(path)} must be an integer, got ${value}`);
      } else if (type === 'integer' && !Number.isSafeInteger(value)) {
        // JSON.parse has already rounded it: refused rather than changed.
        problems.push(
          `${at(path)} is ${value}, beyond the integers JavaScript holds exactly (±${Number.MAX_SAFE_INTEGER}); pass it as a string`,
        );
      } else {
        checkBounds(value, path, bounds, problems);
      }
    },
    false,
  );
}

/** Lengths count code points, as JSON Schema's `minLength` and `maxLength` do. */
function codePoints(text: string): number {
  let count = 0;
  for (const _ of text) {
    count += 1;
  }
  return count;
}

/** The schema builders. Every builder returns a required {@link Type}; chain `.optional()` and `.describe()`. */
export const s = {
  /** A string, optionally bounded in length and matched against `pattern`. */
  string(bounds: StringBounds = {}): Type<string, false> {
    const pattern = bounds.pattern === undefined ? undefined : new RegExp(bounds.pattern, 'u');
    const schema = compact({
      type: 'string',
      minLength: bounds.minLength,
      maxLength: bounds.maxLength,
      pattern: bounds.pattern,
    });
    return new Type<string, false>(
      schema,
      (value, path, problems) => {
        if (typeof value !== 'string') {
          problems.push(`${at(path)} must be a string, got ${jsonType(value)}`);
          return;
        }
        const length = codePoints(value);
        if (bounds.minLength !== undefined && length < bounds.minLength) {
          problems.push(`${at(path)} must be at least ${bounds.minLength} characters long`);
        }
        if (bounds.maxLength !== undefined && length > bounds.maxLength) {
          problems.push(`${at(path)} must be at most ${bounds.maxLength} characters long`);
        }
        if (pattern !== undefined && !pattern.test(value)) {
          problems.push(`${at(path)} must match ${bounds.pattern}, got ${shown(value)}`);
        }
      },
      false,
    );
  },

  /** A number (JSON has no NaN or infinity), optionally bounded. */
  number(bounds?: NumberBounds): Type<number, false> {
    return number('number', bounds);
  },

  /** A whole number, optionally bounded. */
  integer(bounds?: NumberBounds): Type<number, false> {
    return number('integer', bounds);
  },

  /** `true` or `false`. */
  boolean(): Type<boolean, false> {
    return new Type<boolean, false>(
      { type: 'boolean' },
      (value, path, problems) => {
        if (typeof value !== 'boolean') {
          problems.push(`${at(path)} must be true or false, got ${jsonType(value)}`);
        }
      },
      false,
    );
  },

  /** One of the strings `values`: `s.enum(['C', 'F'])` is `'C' | 'F'`. */
  enum<const V extends readonly [string, ...string[]]>(values: V): Type<V[number], false> {
    const allowed = new Set<string>(values);
    return new Type<V[number], false>(
      { type: 'string', enum: [...values] },
      (value, path, problems) => {
        if (typeof value !== 'string' || !allowed.has(value)) {
          problems.push(`${at(path)} must be one of ${values.join(', ')}, got ${shown(value)}`);
        }
      },
      false,
    );
  },

  /** A list of `items` (which cannot be optional: an array has no holes), optionally bounded in length. */
  array<T>(items: Type<T, false>, bounds: ArrayBounds = {}): Type<T[], false> {
    const schema = compact({
      type: 'array',
      items: items.schema,
      minItems: bounds.minItems,
      maxItems: bounds.maxItems,
    });
    return new Type<T[], false>(
      schema,
      (value, path, problems) => {
        if (!Array.isArray(value)) {
          problems.push(`${at(path)} must be an array, got ${jsonType(value)}`);
          return;
        }
        if (bounds.minItems !== undefined && value.length < bounds.minItems) {
          problems.push(`${at(path)} must have at least ${bounds.minItems} items, got ${value.length}`);
        }
        if (bounds.maxItems !== undefined && value.length > bounds.maxItems) {
          problems.push(`${at(path)} must have at most ${bounds.maxItems} items, got ${value.length}`);
        }
        value.forEach((item, i) => items.checkAt(item, `${path}[${i}]`, problems));
      },
      false,
    );
  },

  /**
   * An object with exactly the fields of `shape`: those not marked
   * `.optional()` are required, and any other field is refused.
   */
  object<S extends Shape>(shape: S): Type<ObjectOf<S>, false> {
    const fields = Object.entries(shape);
    const properties = Object.fromEntries(fields.map(([name, type]) => [name, type.schema]));
    const required = fields.filter(([, type]) => !type.isOptional).map(([name]) => name);
    const schema = { type: 'object', properties, required, additionalProperties: false };
    return new Type<ObjectOf<S>, false>(
      schema,
      (value, path, problems) => {
        if (value === null || typeof value !== 'object' || Array.isArray(value)) {
          problems.push(`${at(path)} must be an object, got ${jsonType(value)}`);
          return;
        }
        const record = value as Record<string, unknown>;
        const prefix = path === '' ? '' : `${path}.`;
        for (const [name, type] of fields) {
          if (Object.hasOwn(record, name)) {
            type.checkAt(record[name], prefix + name, problems);
          } else if (!type.isOptional) {
            problems.push(`${at(prefix + name)} is required`);
          }
        }
        for (const name of Object.keys(record)) {
          if (!Object.hasOwn(shape, name)) {
            const known = fields.length === 0 ? 'none' : fields.map(([n]) => n).join(', ');
            problems.push(`${at(prefix + name)} is not a known field (the fields are: ${known})`);
          }
        }
      },
      false,
    );
  },
};

/** `input` as an object type: a {@link Shape} becomes {@link s.object}; an object type is kept. */
export function objectType<I extends Shape | Type<object, false>>(input: I): Type<ArgsOf<I>, false> {
  if (input instanceof Type) {
    if (input.schema.type !== 'object') {
      throw new TypeError('a tool\'s input and output schemas must be objects: use s.object({...}) or a plain { field: s.string() } shape');
    }
    return input as Type<ArgsOf<I>, false>;
  }
  return s.object(input as Shape) as Type<ArgsOf<I>, false>;
}

/** The TypeScript type of `input`: a shape's object type, or an object type's own. */
export type ArgsOf<I> = I extends Type<infer T, boolean> ? T : I extends Shape ? ObjectOf<I> : never;
