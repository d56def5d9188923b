declare module 'toolhost:tool/types@0.2.1' {
  /**
   * Behaviour hints, as in MCP's tool annotations. The host uses `destructive`
   * for `approval = "destructive"`; the rest are passed on to clients.
   */
  export interface Hints {
    /**
     * The tool does not change anything outside its own instance.
     */
    readOnly?: boolean,
    /**
     * The tool may delete or overwrite data.
     */
    destructive?: boolean,
    /**
     * Calling it twice with the same arguments has the effect of calling it once.
     */
    idempotent?: boolean,
    /**
     * The tool talks to things outside the host (the web, other services).
     */
    openWorld?: boolean,
  }
  /**
   * What the model sees of a tool.
   */
  export interface ToolSpec {
    /**
     * `^[A-Za-z0-9_-]{1,64}$`, unique across all loaded components.
     */
    name: string,
    /**
     * A name for people (MCP's `title`); the host derives one from
     * `name` when there is none.
     */
    title?: string,
    description: string,
    /**
     * JSON Schema of the arguments object. The host validates every call
     * against it before the tool is instantiated.
     */
    inputSchema: string,
    /**
     * JSON Schema of `tool-output.structured`, if the tool returns one.
     */
    outputSchema?: string,
    hints: Hints,
  }
  /**
   * Facts about the call in progress.
   */
  export interface CallContext {
    /**
     * The model's `tool_call_id` (or one the host made up).
     */
    callId: string,
    /**
     * Milliseconds left before the host stops the call: a tool making
     * requests can give up in time to say why. Time spent waiting for
     * a person's answer to `ask` is not counted.
     */
    deadlineMs: bigint,
    /**
     * JSON the application supplied with the call (a user, a tenant, a
     * session): never written by the model, never shown to it. `none`
     * when the application supplied nothing.
     */
    context?: string,
  }
  /**
   * Binary content with its media type.
   */
  export interface Media {
    /**
     * e.g. `image/png`, `audio/wav`.
     */
    mimeType: string,
    data: Uint8Array,
  }
  /**
   * A pointer to something the client can fetch or open; its contents
   * are not part of the result.
   */
  export interface ResourceLink {
    uri: string,
    name: string,
    mimeType?: string,
    description?: string,
  }
  /**
   * What an embedded resource holds.
   */
  export type ResourceContents = ResourceContentsText | ResourceContentsBlob;
  export interface ResourceContentsText {
    tag: 'text',
    val: string,
  }
  export interface ResourceContentsBlob {
    tag: 'blob',
    val: Uint8Array,
  }
  /**
   * A resource sent whole with the result.
   */
  export interface EmbeddedResource {
    uri: string,
    mimeType?: string,
    contents: ResourceContents,
  }
  /**
   * One part of a result.
   */
  export type ContentBlock = ContentBlockText | ContentBlockImage | ContentBlockAudio | ContentBlockResourceLink | ContentBlockEmbedded;
  /**
   * Text for the model.
   */
  export interface ContentBlockText {
    tag: 'text',
    val: string,
  }
  /**
   * An image, e.g. a chart rendered to PNG.
   */
  export interface ContentBlockImage {
    tag: 'image',
    val: Media,
  }
  /**
   * A sound.
   */
  export interface ContentBlockAudio {
    tag: 'audio',
    val: Media,
  }
  /**
   * A link to a resource.
   */
  export interface ContentBlockResourceLink {
    tag: 'resource-link',
    val: ResourceLink,
  }
  /**
   * A resource, inline (MCP's embedded `resource`).
   */
  export interface ContentBlockEmbedded {
    tag: 'embedded',
    val: EmbeddedResource,
  }
  /**
   * A successful result.
   */
  export interface ToolOutput {
    /**
     * What the model reads and sees, in order.
     */
    content: Array<ContentBlock>,
    /**
     * JSON matching `output-schema`, for clients that use structured output.
     */
    structured?: string,
    /**
     * Kept for the application and never sent to the model.
     */
    artifact?: string,
  }
  /**
   * A failure the tool itself reports.
   */
  export interface ToolError {
    /**
     * Short machine-readable class chosen by the tool, e.g. `not_found`.
     */
    kind: string,
    /**
     * What went wrong, written for the model.
     */
    message: string,
    /**
     * Whether calling again (perhaps with other arguments) can succeed.
     */
    retryable: boolean,
  }
}
