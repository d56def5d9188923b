//! The fixture tools of the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, pinned by `scripts/conformance.sh`),
//! as far as the 0.1 tool contract can express them: text content, tool
//! errors, logging through the host, and input schemas passed through as
//! written. Names, descriptions, arguments and results follow the suite's
//! scenario texts and its reference server (`everything-server.ts`).
//!
//! Not here, because the 0.1 contract cannot express them (they wait on
//! contract 0.2; `tests/mcp-fixtures/expected-failures-*.yml` lists the
//! scenarios): `test_image_content`, `test_audio_content`,
//! `test_embedded_resource`, `test_multiple_content_types` (content blocks
//! other than one text block), `test_tool_with_progress` (progress),
//! `test_sampling`, `test_elicitation`, `test_elicitation_sep1034_defaults`,
//! `test_elicitation_sep1330_enums`, `test_streaming_elicitation` and the
//! `test_input_required_result_*` tools (requests to the client, or SEP-2322
//! input-required results), and `test_missing_capability` (declaring a
//! required client capability). Not a tool's to do at all:
//! `test_reconnection` (the server closing an SSE stream mid-call) and
//! `test_trigger_tool_change` / `test_trigger_prompt_change` (changing the
//! server's own lists).
//!
//! Never shipped to users; built by `scripts/build-tools.sh` as
//! `target/tools/mcp-fixtures.wasm` and served with
//! `tests/mcp-fixtures/toolhost.toml`.

use std::borrow::Cow;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::{Map, Value};
use toolhost_guest::{Level, Output, Tool, ToolError};

/// No arguments. Declared as `{"type":"object","properties":{}}`, as the
/// reference server declares its argument-less tools; the suite calls them
/// with `{}` or with no `arguments` at all, and extra keys are ignored.
#[derive(Deserialize)]
struct NoArguments {}

impl JsonSchema for NoArguments {
    fn schema_name() -> Cow<'static, str> {
        "NoArguments".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "object", "properties": {} })
    }
}

/// `tools-call-simple-text`: one text block with exactly this text.
fn simple_text(_: NoArguments) -> Result<Output, ToolError> {
    Ok(Output::text("This is a simple text response for testing."))
}

/// `tools-call-error`: always fails, so the result has `isError: true` and
/// a non-empty text block.
fn error_handling(_: NoArguments) -> Result<Output, ToolError> {
    Err(ToolError::new(
        "intentional",
        "This tool intentionally returns an error for testing",
    ))
}

/// `tools-call-with-logging` (2025-11-25 wire): three info lines about 50 ms
/// apart, then a text result. The lines go to the host's log; the scenario
/// passes only if the server forwards tool logs to the client as
/// `notifications/message`.
fn tool_with_logging(_: NoArguments) -> Result<Output, ToolError> {
    toolhost_guest::log(Level::Info, "Tool execution started");
    std::thread::sleep(Duration::from_millis(50));
    toolhost_guest::log(Level::Info, "Tool processing data");
    std::thread::sleep(Duration::from_millis(50));
    toolhost_guest::log(Level::Info, "Tool execution completed");
    Ok(Output::text("Tool with logging executed successfully"))
}

/// `server-stateless` check `sep-2575-server-no-log-without-loglevel`
/// (2026-07-28 wire): logs one info line and answers. A request whose
/// `_meta` sets no `io.modelcontextprotocol/logLevel` must get no
/// `notifications/message` from the server.
fn logging_tool(_: NoArguments) -> Result<Output, ToolError> {
    toolhost_guest::log(Level::Info, "Diagnostic trace logging activated");
    Ok(Output::text("Logging evaluated"))
}

/// The arguments of `json_schema_2020_12_tool`, checked by the host against
/// [`JsonSchema2020Arguments::json_schema`]: any object that fits it.
#[derive(Deserialize)]
#[serde(transparent)]
struct JsonSchema2020Arguments(Map<String, Value>);

impl JsonSchema for JsonSchema2020Arguments {
    fn schema_name() -> Cow<'static, str> {
        "JsonSchema2020Arguments".into()
    }

    /// The suite's `JSON_SCHEMA_2020_12_FIXTURE`, key for key: `tools/list`
    /// must keep `$schema`, `$defs` (with the `$anchor`), `allOf`/`anyOf`,
    /// `if`/`then`/`else` and `additionalProperties: false`.
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {
                        "street": { "type": "string" },
                        "city": { "type": "string" }
                    }
                }
            },
            "properties": {
                "name": { "type": "string" },
                "address": { "$ref": "#/$defs/address" },
                "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                "phone": { "type": "string" },
                "email": { "type": "string" }
            },
            "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
            "if": {
                "properties": { "contactMethod": { "const": "phone" } },
                "required": ["contactMethod"]
            },
            "then": { "required": ["phone"] },
            "else": { "required": ["email"] },
            "additionalProperties": false
        })
    }
}

/// `json-schema-2020-12`: only `tools/list` is checked; a call echoes its
/// arguments as the reference server does.
fn json_schema_2020_12(args: JsonSchema2020Arguments) -> Result<Output, ToolError> {
    let echoed = serde_json::to_string(&args.0)
        .map_err(|e| ToolError::invalid_input(format!("arguments are not JSON: {e}")))?;
    Ok(Output::text(format!(
        "JSON Schema 2020-12 tool called with: {echoed}"
    )))
}

toolhost_guest::export_tools! {
    Tool::new("test_simple_text", "Tests simple text content response", simple_text)
        .read_only()
        .idempotent(),
    Tool::new("test_error_handling", "Tests error response handling", error_handling)
        .read_only()
        .idempotent(),
    Tool::new(
        "test_tool_with_logging",
        "Tests tool that emits log messages during execution",
        tool_with_logging,
    )
    .read_only()
    .idempotent(),
    Tool::new("test_logging_tool", "Diagnostic logging validator tool", logging_tool)
        .read_only()
        .idempotent(),
    Tool::new(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        json_schema_2020_12,
    )
    .read_only()
    .idempotent(),
}
