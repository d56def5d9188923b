/// <reference path="./toolhost-tool-types.d.ts" />
declare module 'toolhost:tool/tool@0.2.1' {
  /**
   * The tools this component provides. Called once when the host loads it.
   */
  export function tools(): Array<ToolSpec>;
  /**
   * Run tool `name` with `arguments` (a JSON object that already passed the
   * tool's input schema).
   */
  export function call(name: string, arguments: string, context: CallContext): ToolOutput;
  export type ToolSpec = import('toolhost:tool/types@0.2.1').ToolSpec;
  export type CallContext = import('toolhost:tool/types@0.2.1').CallContext;
  export type ToolOutput = import('toolhost:tool/types@0.2.1').ToolOutput;
  export type ToolError = import('toolhost:tool/types@0.2.1').ToolError;
}
