/**
 * What the host offers beyond computing: its log, the manifest's config
 * values, progress reports and questions to the person
 * (`toolhost:tool/host@0.2.1`).
 *
 * Call these from `run`, never at a module's top level: componentize-js
 * runs the top level once at build time, where there is no host.
 */

import * as host from 'toolhost:tool/host@0.2.1';
import type { AskRefusal, Level, Refused } from 'toolhost:tool/host@0.2.1';
import { ToolError, describeThrown, witError } from './errors';
import { objectType, type ArgsOf, type Shape, type Type } from './schema';

export type { AskRefusal, Level };

/**
 * Write `message` to the host's structured log at `level`
 * (`trace`, `debug`, `info`, `warn`, `error`), tagged with the call's ids.
 *
 * It goes to the operator, never to the model. Prefer it over `console`:
 * the host keeps only the tail of a tool's output, for traps.
 */
export function log(level: Level, message: string): void {
  host.log(level, message);
}

/**
 * The value granted to this component under `key` in the manifest's
 * `config` table (`config = { units = "metric" }`), or `undefined` when
 * nothing is granted under that key.
 *
 * Secrets live here too (`config = { api_key = { env = "WEATHER_KEY" } }`):
 * the model never sees them, and the host never logs them.
 */
export function config(key: string): string | undefined {
  return host.config(key);
}

/**
 * Report progress on the call: `done` out of `total` when known, with an
 * optional short message. MCP clients show it as a progress bar, and
 * `toolhost run` on its display. Reports whose `done` does not grow are
 * dropped, as are reports past the host's budget.
 */
export function progress(done: number, total?: number, message?: string): void {
  host.progress(done, total, message);
}

/**
 * Why {@link ask} got no answer. It is a ToolError, so left uncaught it
 * tells the model what happened: `declined` and `cancelled` are the
 * person's choice, `unavailable` means nobody could be asked, and
 * `invalid_question` is a bug in the question.
 */
export class AskRefused extends ToolError {
  /** Declined, cancelled, nobody to ask, or an invalid question. */
  readonly reason: AskRefusal;

  /** A refusal for `reason`, with the host's words. */
  constructor(reason: AskRefusal, message: string) {
    const [kind, text] = {
      declined: ['declined', `the person declined: ${message}`],
      cancelled: ['cancelled', `the person dismissed the question: ${message}`],
      unavailable: ['unavailable', `nobody could be asked: ${message}`],
      'invalid-question': ['invalid_question', message],
    }[reason];
    super(kind, text, false);
    this.name = 'AskRefused';
    this.reason = reason;
  }
}

/**
 * Ask the person `question` mid-call and wait for the answer, a form whose
 * fields are `answer` (strings, enums, numbers, integers or booleans, as
 * MCP clients render forms). Field descriptions become the form's labels.
 * Waiting does not count against the call's timeout.
 *
 * `options.key` names the question (contract 0.2.1): the name clients see
 * it by (an MCP input-required result's `inputRequests` key), so one that
 * knows the tool can answer it in the call itself. It is 1 to 64 of
 * `A-Z a-z 0-9 _ -`, not `q` and digits (the names questions asked without
 * a key get), and names one question of a call.
 *
 * Throws {@link AskRefused} when the person declines or dismisses the
 * question, when nobody can be asked (no terminal, a client without
 * elicitation), or when the form (or the key) is not one the host can take.
 *
 * @example
 * const { confirm } = ask('Delete the 3 old reports?', { confirm: s.boolean().describe('Delete them?') });
 */
export function ask<A extends Shape | Type<object, false>>(
  question: string,
  answer: A,
  options: { key?: string } = {},
): ArgsOf<A> {
  const form = objectType(answer);
  const schema = JSON.stringify(form.schema);
  let reply: string;
  try {
    reply = options.key === undefined ? host.ask(question, schema) : host.askWithKey(options.key, question, schema);
  } catch (e) {
    const refused = witError<Refused>(e);
    if (refused === undefined) {
      throw e;
    }
    throw new AskRefused(refused.payload.reason, refused.payload.message);
  }
  let value: unknown;
  try {
    value = JSON.parse(reply);
  } catch (e) {
    throw new AskRefused('invalid-question', `the answer is not JSON: ${describeThrown(e)}`);
  }
  const problems = form.problems(value);
  if (problems !== '') {
    throw new AskRefused('invalid-question', `the answer does not fit the form asked for: ${problems}`);
  }
  return value as ArgsOf<A>;
}
