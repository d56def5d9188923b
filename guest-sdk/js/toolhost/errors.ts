/**
 * Typed tool errors, and the one place any other thrown value becomes one.
 */

/**
 * A failure the tool reports: the host sends it to the model as a
 * `tool_error` with this kind, message and retry hint.
 *
 * Throw it from `run` (or from anything `run` calls); the SDK's helpers
 * (http, stores, ask) throw it for you, with the fix in the message.
 *
 * @example
 * throw ToolError.notFound(`no city named ${JSON.stringify(city)}; check the spelling`);
 * throw new ToolError('quota', 'the daily quota is used up', false);
 */
export class ToolError extends Error {
  /** Short machine-readable class, e.g. `not_found`. */
  readonly kind: string;
  /** Whether calling again (perhaps with other arguments) can succeed. */
  readonly retryable: boolean;

  /**
   * A failure of class `kind`, described by `message` (written for the
   * model: say what to change); not retryable unless `retryable` says so.
   */
  constructor(kind: string, message: string, retryable = false) {
    super(message);
    this.name = 'ToolError';
    this.kind = kind;
    this.retryable = retryable;
  }

  /** The arguments are well-formed but make no sense: the model should fix them (retryable). */
  static invalidInput(message: string): ToolError {
    return new ToolError('invalid_input', message, true);
  }

  /** What the arguments name does not exist (retryable). */
  static notFound(message: string): ToolError {
    return new ToolError('not_found', message, true);
  }

  /** Something the tool depends on failed; trying later may work (retryable). */
  static unavailable(message: string): ToolError {
    return new ToolError('unavailable', message, true);
  }

  /** The tool was refused something (a host, a store) by its grants (not retryable). */
  static permissionDenied(message: string): ToolError {
    return new ToolError('permission_denied', message, false);
  }

  /** A bug in the tool (not retryable). */
  static internal(message: string): ToolError {
    return new ToolError('internal', message, false);
  }
}

/**
 * `thrown` as a ToolError: itself when it is one, otherwise kind
 * `internal` with its text, so that nothing a tool throws traps the
 * instance (a trap tells the model only that the tool crashed).
 */
export function toToolError(thrown: unknown): ToolError {
  if (thrown instanceof ToolError) {
    return thrown;
  }
  return ToolError.internal(describeThrown(thrown));
}

/** The text of a thrown value: `TypeError: x is not a function`, a string as is, anything else as JSON. */
export function describeThrown(thrown: unknown): string {
  if (thrown instanceof Error) {
    return `${thrown.name}: ${thrown.message}`;
  }
  if (typeof thrown === 'string') {
    return thrown;
  }
  try {
    return JSON.stringify(thrown) ?? String(thrown);
  } catch {
    return String(thrown);
  }
}

/**
 * The error a WIT import threw for its `result`'s `err`, typed `{ payload }`,
 * or `undefined` when `thrown` is anything else (then rethrow it).
 * componentize-js throws it as a `ComponentError` from the bindings' own
 * realm, so `instanceof` cannot tell it apart: its own `payload` property does.
 */
export function witError<E>(thrown: unknown): { payload: E } | undefined {
  if (thrown !== null && typeof thrown === 'object' && Object.hasOwn(thrown, 'payload')) {
    return thrown as { payload: E };
  }
  return undefined;
}
