/**
 * Tools and the component's exported `tool` interface.
 */

import type { CallContext, Hints, ToolOutput, ToolSpec } from 'toolhost:tool/types@0.2.1';
import { log } from './host';
import { ToolError, describeThrown, toToolError } from './errors';
import { toToolOutput, type Result } from './output';
import { objectType, type ArgsOf, type Shape, type Type } from './schema';

/** Facts about the call in progress. */
export class Context {
  /** The model's `tool_call_id` for this call (or one the host made up). */
  readonly callId: string;
  /**
   * Milliseconds the host gave this call when it started: a tool that waits
   * on the network can give up in time to say why.
   */
  readonly deadlineMs: number;
  /**
   * The context the application supplied with the call, as JSON text (a
   * user, a tenant, a session): never written by the model, never shown to
   * it. `undefined` when the application supplied none.
   */
  readonly context: string | undefined;

  /** The context of a call, as the host passes it. */
  constructor(call: CallContext) {
    this.callId = call.callId;
    this.deadlineMs = Number(call.deadlineMs);
    this.context = call.context;
  }

  /** {@link Context.context} parsed as JSON; `undefined` when there is none or it is not JSON. */
  contextJson<T = unknown>(): T | undefined {
    if (this.context === undefined) {
      return undefined;
    }
    try {
      return JSON.parse(this.context) as T;
    } catch {
      return undefined;
    }
  }
}

/** An object schema: a shape (`{ name: s.string() }`) or `s.object({...})`. */
type ObjectSchema = Shape | Type<object, false>;

/** What {@link defineTool} takes. */
export interface ToolDefinition<I extends ObjectSchema, O extends ObjectSchema | undefined> {
  /** `^[A-Za-z0-9_-]{1,64}$`, unique across all the tools a host loads. */
  name: string;
  /** A name for people (MCP clients show it); without one, the host derives it from `name`. */
  title?: string;
  /** What the tool does and when to use it, for the model. */
  description: string;
  /** The arguments: their schema, their TypeScript type, and the check before `run`. */
  input: I;
  /**
   * The schema of the structured result (MCP `outputSchema`). With one, an
   * object `run` returns is sent both as JSON text and as `structured`.
   */
  output?: O;
  /** Hint: the tool changes nothing outside its own instance. */
  readOnly?: boolean;
  /** Hint: the tool may delete or overwrite data; with `approval = "destructive"` the host asks first. */
  destructive?: boolean;
  /** Hint: calling twice with the same arguments does what calling once does. */
  idempotent?: boolean;
  /** Hint: the tool talks to the world outside the host (the web, other services). */
  openWorld?: boolean;
  /**
   * Run the tool on arguments that fit `input`. Return a string (one text
   * block), an object (sent as JSON), or an {@link Output}; throw a
   * {@link ToolError} to fail. May be `async`.
   */
  run(
    args: ArgsOf<I>,
    ctx: Context,
  ): ToolResult<O> | Promise<ToolResult<O>>;
}

/** What `run` returns: with an `output` schema, objects must fit it. */
export type ToolResult<O> = O extends ObjectSchema ? Result<ArgsOf<O>> : Result;

/** A tool, ready to list in {@link toolbox}. */
export interface Tool {
  /** Its name. */
  readonly name: string;
  /** What the host and the model see of it. */
  readonly spec: ToolSpec;
  /** Check `argumentsJson` and run the tool; any failure is thrown as a {@link ToolError}. */
  invoke(argumentsJson: string, ctx: Context): Promise<ToolOutput>;
}

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * A tool: its name, description, argument schema, hints and `run`.
 *
 * Its schemas are computed once, when the module loads (at build time:
 * componentize-js snapshots the loaded module), and a mistake in the
 * definition fails the build.
 *
 * @example
 * const greet = defineTool({
 *   name: 'greet',
 *   description: 'Greet someone by name.',
 *   input: { name: s.string().describe('Who to greet.') },
 *   readOnly: true,
 *   run: ({ name }) => `Hello, ${name}!`,
 * });
 */
export function defineTool<I extends ObjectSchema, O extends ObjectSchema | undefined = undefined>(
  definition: ToolDefinition<I, O>,
): Tool {
  const { name, run } = definition;
  if (!NAME.test(name)) {
    throw new TypeError(`tool name ${JSON.stringify(name)} must match ^[A-Za-z0-9_-]{1,64}$`);
  }
  if (typeof definition.description !== 'string' || definition.description.trim() === '') {
    throw new TypeError(`tool ${JSON.stringify(name)} needs a description: the model reads it to choose the tool`);
  }
  const input = objectType(definition.input);
  const output = definition.output === undefined ? undefined : objectType(definition.output);
  const hints: Hints = {
    readOnly: definition.readOnly ?? false,
    destructive: definition.destructive ?? false,
    idempotent: definition.idempotent ?? false,
    openWorld: definition.openWorld ?? false,
  };
  const spec: ToolSpec = {
    name,
    title: definition.title,
    description: definition.description,
    inputSchema: JSON.stringify(input.schema),
    outputSchema: output === undefined ? undefined : JSON.stringify(output.schema),
    hints,
  };
  return {
    name,
    spec,
    async invoke(argumentsJson, ctx) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(argumentsJson);
      } catch (e) {
        throw ToolError.invalidInput(`the arguments are not valid JSON: ${describeThrown(e)}`);
      }
      const args = input.parse(parsed) as ArgsOf<I>;
      return toToolOutput(await run(args, ctx), output !== undefined);
    },
  };
}

/** The component's exported `tool` interface (`toolhost:tool/tool@0.2.1`). */
export interface ToolExport {
  /** The specs of the tools, in order. */
  tools(): ToolSpec[];
  /** Run tool `name`; a failure is thrown as the WIT `tool-error` record. */
  call(name: string, argumentsJson: string, context: CallContext): Promise<ToolOutput>;
}

/**
 * The component's `tool` interface, serving `tools`. Export it as `tool`:
 * `export const tool = toolbox(greet, convert);`
 *
 * Every failure of a call reaches the host as a typed tool error, never a
 * trap: a thrown {@link ToolError} as it is, anything else thrown as
 * `internal` with its text (and its stack in the host's log), and a name
 * no tool has as `unknown_tool`.
 */
export function toolbox(...tools: Tool[]): ToolExport {
  const byName = new Map<string, Tool>();
  for (const tool of tools) {
    if (byName.has(tool.name)) {
      throw new TypeError(`two tools are named ${JSON.stringify(tool.name)}: names must be unique`);
    }
    byName.set(tool.name, tool);
  }
  const specs = tools.map((tool) => tool.spec);
  return {
    tools() {
      return specs;
    },
    async call(name, argumentsJson, context) {
      try {
        const tool = byName.get(name);
        if (tool === undefined) {
          const names = [...byName.keys()].join(', ');
          throw new ToolError('unknown_tool', `this component has no tool named ${JSON.stringify(name)}; it has: ${names}`);
        }
        return await tool.invoke(argumentsJson, new Context(context));
      } catch (thrown) {
        if (!(thrown instanceof ToolError)) {
          const stack = thrown instanceof Error && thrown.stack ? `\n${thrown.stack}` : '';
          log('error', `${name}: uncaught ${describeThrown(thrown)}${stack}`);
        }
        const error = toToolError(thrown);
        // componentize-js sends a thrown plain object as the `err` of the
        // call's result; a thrown Error (a ToolError too) would trap.
        // Made the types the record needs: a plain JavaScript tool may have
        // thrown `new ToolError(404, ...)`, which would trap when lowered.
        throw { kind: String(error.kind), message: String(error.message), retryable: Boolean(error.retryable) };
      }
    },
  };
}
