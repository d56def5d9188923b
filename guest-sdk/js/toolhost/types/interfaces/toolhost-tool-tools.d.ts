/// <reference path="./toolhost-tool-types.d.ts" />
declare module 'toolhost:tool/tools@0.2.1' {
  /**
   * Call one tool and wait for its result.
   */
  export function callTool(name: string, arguments: string): ToolOutput;
  /**
   * Call several tools at once and wait for all of them: one result per
   * call, in the order of `calls`. At most the manifest's
   * `call_tools.concurrency` (8 by default) run at a time; the rest wait
   * their turn.
   */
  export function callTools(calls: Array<ToolCall>): Array<Result<ToolOutput, ToolError>>;
  export type ToolOutput = import('toolhost:tool/types@0.2.1').ToolOutput;
  export type ToolError = import('toolhost:tool/types@0.2.1').ToolError;
  /**
   * A call to make: a loaded tool's name, and its arguments as a JSON
   * object.
   */
  export interface ToolCall {
    name: string,
    arguments: string,
  }
  export type Result<T, E> = { tag: 'ok', val: T } | { tag: 'err', val: E };
}
