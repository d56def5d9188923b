/**
 * Write toolhost tools in TypeScript or JavaScript.
 *
 * A tool is a schema and a function: {@link defineTool} derives the input
 * JSON Schema and the arguments' TypeScript type from one definition
 * (built with {@link s}), checks the model's arguments before `run`, and
 * turns whatever `run` throws into a typed {@link ToolError} for the model.
 * {@link toolbox} makes the component's exported `tool` interface:
 *
 * @example
 * import { defineTool, s, toolbox } from './sdk/js/toolhost';
 *
 * const greet = defineTool({
 *   name: 'greet',
 *   description: 'Greet someone by name.',
 *   input: { name: s.string().describe('Who to greet.') },
 *   readOnly: true,
 *   run: ({ name }) => `Hello, ${name}!`,
 * });
 *
 * export const tool = toolbox(greet);
 *
 * Built against contract `toolhost:tool@0.2.1`, it also offers the host's
 * {@link log}, {@link config}, {@link progress} and {@link ask}; outgoing
 * {@link http} to the origins the manifest grants; key-value stores
 * ({@link Store}); results of several content blocks ({@link Output}); and
 * calls of the other tools the manifest grants ({@link callTool},
 * {@link callTools}: code mode).
 *
 * The build bundles this folder into the tool's single module with esbuild,
 * then componentize-js turns that into a WebAssembly component.
 */

/// <reference path="./types/toolbox.d.ts" />

export { ToolError } from './errors';
export { s, Type, type Infer, type JsonSchema, type ObjectOf, type Shape } from './schema';
export { Output, type ContentBlock, type Result } from './output';
export { Context, defineTool, toolbox, type Tool, type ToolDefinition, type ToolExport, type ToolResult } from './tool';
export { AskRefused, ask, config, log, progress, type AskRefusal, type Level } from './host';
export { http, request, Response, type RequestOptions } from './http';
export { Store } from './store';
export {
  ToolCallError,
  argumentsJson,
  callTool,
  callToolJson,
  callTools,
  callToolsJson,
  MAX_LIST,
  resultOf,
  type Call,
  type Settled,
} from './tools';
export { toJsonValue, MAX_DEPTH, type JsonOptions } from './json';
