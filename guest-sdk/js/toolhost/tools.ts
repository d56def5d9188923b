/**
 * Calling the other tools the manifest grants (`toolhost:tool/tools@0.2.1`,
 * code mode): `call_tools = ["calc", "convert_*"]` in the tool's manifest
 * entry.
 *
 * Every call goes through the host's dispatcher, as a model's call does:
 * the callee runs in its own fresh instance under its own grants, limits
 * and approval policy, and the host counts the calls against the calling
 * call's budget (50 by default).
 */

import * as host from 'toolhost:tool/tools@0.2.1';
import type { ToolOutput } from 'toolhost:tool/types@0.2.1';
import { ToolError, witError } from './errors';
import { toJsonValue } from './json';

/**
 * A call of another tool that failed: its {@link ToolError.kind} is the
 * host's (`capability_denied` for a tool not granted, `unknown_tool`,
 * `invalid_arguments`, `budget_exhausted`, `timeout`, `fuel_exhausted`, …)
 * or, for an error the callee returned itself, the callee's own.
 *
 * It is a ToolError: left uncaught in `run`, the calling tool fails with
 * the callee's kind and message.
 */
export class ToolCallError extends ToolError {
  /** The tool that was called. */
  readonly tool: string;

  /** The failure of a call of `tool`. */
  constructor(tool: string, kind: string, message: string, retryable: boolean) {
    super(kind, message, retryable);
    this.name = 'ToolCallError';
    this.tool = tool;
  }
}

/** The most calls the host takes in one `call-tools` list. */
export const MAX_LIST = 1024;

/** A call for {@link callTools}: a tool's name and its arguments (a plain object; `{}` when left out). */
export interface Call {
  name: string;
  arguments?: object;
}

/** How one call of {@link callTools} ended, as `Promise.allSettled` says it. */
export type Settled = { status: 'fulfilled'; value: unknown } | { status: 'rejected'; reason: ToolCallError };

/**
 * Call tool `name` with `args` and wait for its result: its structured
 * result (parsed JSON) when it has one, otherwise the text of its text
 * blocks, joined by newlines.
 *
 * @throws TypeError, without calling, when `args` is not a plain object
 * that JSON can hold (see {@link argumentsJson}).
 * @throws ToolCallError when the host refuses the call or the callee fails.
 *
 * @example
 * const { value } = callTool('convert_units', { value: 10, from: 'km', to: 'mi' }) as { value: number };
 */
export function callTool(name: string, args: object = {}): unknown {
  return callToolJson(name, argumentsJson(name, args));
}

/**
 * Call several tools at once and wait for all of them; the host runs them
 * in parallel, up to the manifest's `call_tools.concurrency`. One
 * {@link Settled} per call, in the order of `calls`. More than
 * {@link MAX_LIST} calls go to the host in lists of that many, one after
 * the other.
 *
 * @throws TypeError, without calling any, when a call's arguments are not
 * a plain object that JSON can hold.
 */
export function callTools(calls: Call[]): Settled[] {
  return callToolsJson(calls.map(({ name, arguments: args = {} }) => ({ name, arguments: argumentsJson(name, args) })));
}

/**
 * {@link callTool} with the arguments as JSON text already (from
 * {@link argumentsJson}), for a caller that checked them itself.
 */
export function callToolJson(name: string, argumentsText: string): unknown {
  try {
    return resultOf(host.callTool(name, argumentsText));
  } catch (e) {
    const failed = witError<host.ToolError>(e);
    if (failed === undefined) {
      throw e;
    }
    throw callError(name, failed.payload);
  }
}

/**
 * {@link callTools} with each call's arguments as JSON text already (from
 * {@link argumentsJson}). A call the host answers no result for (which a
 * host keeping the contract never does) is rejected, so none is left
 * without an outcome.
 */
export function callToolsJson(calls: { name: string; arguments: string }[]): Settled[] {
  // The host takes at most MAX_LIST calls in one list (and traps on more):
  // longer lists go in turns, each waiting for the one before.
  const results: ReturnType<typeof host.callTools> = [];
  for (let start = 0; start < calls.length; start += MAX_LIST) {
    const part = host.callTools(calls.slice(start, start + MAX_LIST));
    for (let i = 0; i < part.length; i++) {
      results.push(part[i]);
    }
  }
  return calls.map((call, i): Settled => {
    const result = results[i];
    if (result === undefined) {
      return { status: 'rejected', reason: new ToolCallError(call.name, 'internal', 'the host returned no result for this call', true) };
    }
    return result.tag === 'ok'
      ? { status: 'fulfilled', value: resultOf(result.val) }
      : { status: 'rejected', reason: callError(call.name, result.val) };
  });
}

/**
 * `args` as the JSON text of a call of `name`.
 *
 * @throws TypeError when `args` is not a plain object (an array, a class
 * instance, a string…) or holds what JSON cannot (a BigInt, a function, a
 * cycle, NaN…); `undefined` fields are left out, as JSON.stringify does.
 */
export function argumentsJson(name: string, args: unknown): string {
  if (typeof name !== 'string') {
    throw new TypeError(`a tool's name is a string, got ${typeof name}`);
  }
  const proto = args !== null && typeof args === 'object' ? Object.getPrototypeOf(args) : undefined;
  if (proto !== Object.prototype && proto !== null) {
    const what = args === null ? 'null' : Array.isArray(args) ? 'an array' : typeof args === 'object' ? 'an object of a class' : typeof args;
    throw new TypeError(`the arguments of ${name} must be a plain object like { key: value }, got ${what}`);
  }
  return JSON.stringify(toJsonValue(args, `the arguments of ${name}`, { omitUndefined: true }));
}

/** What a call returned, for the caller: structured JSON when there is some, else the text. */
export function resultOf(output: ToolOutput): unknown {
  if (output.structured !== undefined) {
    try {
      return JSON.parse(output.structured);
    } catch {
      // The host checks structured output, so this is unexpected: fall back to the text.
    }
  }
  return output.content.flatMap((block) => (block.tag === 'text' ? [block.val] : [])).join('\n');
}

function callError(name: string, error: host.ToolError): ToolCallError {
  return new ToolCallError(name, error.kind, error.message, error.retryable);
}
