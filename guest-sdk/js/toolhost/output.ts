/**
 * What a tool returns: text, structured JSON, images and other content blocks.
 */

import type { ContentBlock, ToolOutput } from 'toolhost:tool/types@0.2.1';
import { ToolError } from './errors';

export type { ContentBlock };

/**
 * A result of several parts, for when a string or an object is not enough.
 *
 * @example
 * return Output.text(`Plotted ${points.length} points.`).withImage('image/png', png);
 * return Output.text('10 km = 6.214 mi').withStructured({ value: 6.214, unit: 'mi' });
 */
export class Output {
  /** What the model reads and sees, in order. */
  readonly content: ContentBlock[] = [];
  /** JSON for clients that use structured output (MCP `structuredContent`); declare its schema with `output`. */
  structured: unknown = undefined;
  /** Kept for the application, never sent to the model. */
  artifact: string | undefined = undefined;

  /** A result of one text block. */
  static text(text: string): Output {
    return new Output().withText(text);
  }

  /** `value` as JSON, both as the model's text and as the structured result. */
  static json(value: unknown): Output {
    return new Output().withText(toJson(value)).withStructured(value);
  }

  /** A result of one image. */
  static image(mimeType: string, data: Uint8Array): Output {
    return new Output().withImage(mimeType, data);
  }

  /** Add a text block. */
  withText(text: string): this {
    this.content.push({ tag: 'text', val: text });
    return this;
  }

  /**
   * Add an image: `image/png`, `image/jpeg`, `image/gif` or `image/webp`
   * reach every client.
   */
  withImage(mimeType: string, data: Uint8Array): this {
    this.content.push({ tag: 'image', val: { mimeType, data } });
    return this;
  }

  /** Add a sound, e.g. `audio/wav` bytes. */
  withAudio(mimeType: string, data: Uint8Array): this {
    this.content.push({ tag: 'audio', val: { mimeType, data } });
    return this;
  }

  /** Add a link to a resource the client can open; its contents are not sent. */
  withLink(uri: string, name: string, details: { mimeType?: string; description?: string } = {}): this {
    this.content.push({
      tag: 'resource-link',
      val: { uri, name, mimeType: details.mimeType, description: details.description },
    });
    return this;
  }

  /** Add a resource sent whole: text, or bytes. */
  withResource(uri: string, contents: string | Uint8Array, mimeType?: string): this {
    this.content.push({
      tag: 'embedded',
      val: {
        uri,
        mimeType,
        contents: typeof contents === 'string' ? { tag: 'text', val: contents } : { tag: 'blob', val: contents },
      },
    });
    return this;
  }

  /** Set the structured result: a JSON object fitting the tool's `output` schema. */
  withStructured(value: unknown): this {
    this.structured = value;
    return this;
  }

  /** Attach data for the application that the model never sees: a string as is, anything else as JSON. */
  withArtifact(value: unknown): this {
    this.artifact = typeof value === 'string' ? value : toJson(value);
    return this;
  }
}

/** What `run` may return: text, an {@link Output}, or a value sent as JSON. */
export type Result<Structured = unknown> = string | Output | Structured;

/** `value` as JSON text; a value JSON cannot hold (a BigInt, a cycle, `undefined`) is the tool's bug. */
function toJson(value: unknown): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (e) {
    throw ToolError.internal(`the result cannot be written as JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (json === undefined) {
    throw ToolError.internal(`the result cannot be written as JSON: it is ${typeof value}`);
  }
  return json;
}

/**
 * The WIT result for what `run` returned. A string is one text block; an
 * object is its JSON, which is also the structured result when the tool
 * declares an `output` schema.
 */
export function toToolOutput(result: unknown, structured: boolean): ToolOutput {
  if (typeof result === 'string') {
    return { content: [{ tag: 'text', val: result }] };
  }
  if (result instanceof Output) {
    result.content.forEach(checkBlock);
    return {
      content: result.content,
      structured: result.structured === undefined ? undefined : toJson(result.structured),
      artifact: result.artifact,
    };
  }
  if (result === undefined) {
    throw ToolError.internal('the tool returned nothing: return a string, an object, or an Output');
  }
  const json = toJson(result);
  const isObject = result !== null && typeof result === 'object' && !Array.isArray(result);
  return { content: [{ tag: 'text', val: json }], structured: structured && isObject ? json : undefined };
}

/**
 * Throws a ToolError for a content block the contract cannot carry. Blocks
 * are lowered after `call` returns, where a wrong type (a number for text,
 * an array for bytes: easy in JavaScript without types) would trap the
 * instance instead of failing the call.
 */
function checkBlock(block: ContentBlock, index: number): void {
  const bad = (what: string): never => {
    throw ToolError.internal(`content block ${index} (${String(block?.tag)}): ${what}`);
  };
  const text = (value: unknown, what: string) => typeof value === 'string' || bad(`${what} must be a string`);
  const optionalText = (value: unknown, what: string) => value === undefined || text(value, what);
  switch (block?.tag) {
    case 'text':
      text(block.val, 'the text');
      break;
    case 'image':
    case 'audio':
      text(block.val?.mimeType, 'the mime type');
      if (!(block.val.data instanceof Uint8Array)) bad('the data must be a Uint8Array');
      break;
    case 'resource-link':
      text(block.val?.uri, 'the uri');
      text(block.val.name, 'the name');
      optionalText(block.val.mimeType, 'the mime type');
      optionalText(block.val.description, 'the description');
      break;
    case 'embedded':
      text(block.val?.uri, 'the uri');
      optionalText(block.val.mimeType, 'the mime type');
      if (block.val.contents?.tag === 'text') text(block.val.contents.val, 'the text');
      else if (!(block.val.contents?.val instanceof Uint8Array)) bad('the blob must be a Uint8Array');
      break;
    default:
      bad('not a content block');
  }
}
