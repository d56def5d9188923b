declare module 'toolhost:tool/host@0.2.1' {
  /**
   * Write to the host's structured log, tagged with the call's ids.
   */
  export function log(level: Level, message: string): void;
  /**
   * A configuration value or secret granted to this component in the
   * manifest; `none` when nothing is granted under `key`.
   */
  export function config(key: string): string | undefined;
  /**
   * Report progress on the call: `done` out of `total` (when known), with
   * an optional short message. Reports reach MCP clients as
   * `notifications/progress` and `toolhost run`'s display. `done` must
   * grow from one report to the next; a report that does not is dropped,
   * as are reports past the call's budget.
   */
  export function progress(done: number, total: number | undefined, message: string | undefined): void;
  /**
   * Ask the person a question in the middle of the call, and wait for the
   * answer (MCP's elicitation).
   * 
   * `answer-schema` is a JSON Schema for the answer: an object whose
   * properties are strings (optionally an `enum`), numbers, integers or
   * booleans, as MCP clients render forms. The answer is a JSON object
   * that fits it. Waiting for a person does not count against the
   * call's timeout.
   * 
   * An answer is only data for the tool: it never grants a capability.
   */
  export function ask(question: string, answerSchema: string): string;
  /**
   * `ask`, under a key the tool names: the name clients see the question
   * by (an MCP input-required result's `inputRequests` key), so a client
   * that knows the tool can answer it up front, in the call's own
   * `inputResponses`. `ask` names a call's n-th question `q<n>`.
   * 
   * `key` is 1 to 64 of `A-Z a-z 0-9 _ -`, not `q` and digits (the
   * names `ask` gives), and names one question of a call: asking under a
   * key the call used already is refused `invalid-question`, as is a
   * malformed key.
   */
  export function askWithKey(key: string, question: string, answerSchema: string): string;
  /**
   * # Variants
   * 
   * ## `"trace"`
   * 
   * ## `"debug"`
   * 
   * ## `"info"`
   * 
   * ## `"warn"`
   * 
   * ## `"error"`
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
  /**
   * Why a question got no answer.
   * # Variants
   * 
   * ## `"declined"`
   * 
   * The person said no.
   * ## `"cancelled"`
   * 
   * The person dismissed the question without deciding.
   * ## `"unavailable"`
   * 
   * Nobody can be asked: no terminal, a client without elicitation,
   * an embedder without an asker, or the wait ran out.
   * ## `"invalid-question"`
   * 
   * The question or its schema is not one the host can ask (see
   * `ask`); the message says what to change.
   */
  export type AskRefusal = 'declined' | 'cancelled' | 'unavailable' | 'invalid-question';
  export interface Refused {
    reason: AskRefusal,
    /**
     * For the tool and its log; written by the host.
     */
    message: string,
  }
}
