//! The fixture tools of the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, pinned by `scripts/conformance.sh`),
//! as far as the tool contract (0.2.1) can express them: text, image, audio
//! and embedded-resource content, tool errors, logging and progress through
//! the host, questions to the person (elicitation), and input schemas
//! passed through as written. Names, descriptions, arguments and results
//! follow the suite's scenario texts and its reference server
//! (`everything-server.ts`).
//!
//! The `test_input_required_result_*` tools ask their questions as any
//! tool does; toolhost turns a question into a SEP-2322 input-required
//! result for a 2026-07-28 client that declared elicitation. The suite
//! expects the name question under the key `user_name`, which the tool
//! gives it (contract 0.2.1's `ask-with-key`), and answers it up front in
//! one scenario.
//! `test_missing_capability` is built alone, with the `needs-sampling`
//! feature, as `mcp-fixtures-sampling.wasm`, whose manifest entry requires
//! the client's `sampling` capability: a client that did not declare it is
//! refused the call (−32021).
//!
//! `test_trigger_tool_change` is built alone too, with the `trigger`
//! feature, as `mcp-fixtures-trigger.wasm`. A tool has no power over what
//! the server offers; only the operator's manifest changes the tool list,
//! and `serve --watch` tells subscribers when it does. So the hook does what
//! an operator could grant any tool: `scripts/conformance.sh` serves a copy
//! of the manifest from a directory this one tool may write, and the hook
//! rewrites that manifest, adding or removing a tool, for the reload to
//! pick up.
//!
//! Not here (`tests/mcp-fixtures/expected-failures-*.yml` lists the
//! scenarios): `test_sampling` (a tool cannot ask the client's model) and
//! `test_trigger_prompt_change` (there are no prompts).
//!
//! Never shipped to users; built by `scripts/build-tools.sh` as
//! `target/tools/mcp-fixtures.wasm` and served with
//! `tests/mcp-fixtures/toolhost.toml`.

// Built with `needs-sampling` or `trigger`, the component has one tool and
// the others are unused: those builds exist only to be the one tool.
#![cfg_attr(any(feature = "needs-sampling", feature = "trigger"), allow(dead_code))]

use std::borrow::Cow;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::{Map, Value};
use toolhost_guest::{
    AskRefusal, Content, Level, Output, Tool, ToolError, ask_json, ask_json_with_key, progress,
};

/// A 1x1 red PNG, as the suite suggests.
const RED_PIXEL_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x08, 0xd7, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0x18, 0xdd, 0x8d, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A silent WAV: 8 samples of 8-bit mono at 8 kHz.
fn silent_wav() -> Vec<u8> {
    let samples = 8u32;
    let mut wav = Vec::new();
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + samples).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&8000u32.to_le_bytes());
    wav.extend_from_slice(&8000u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes());
    wav.extend_from_slice(&8u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&samples.to_le_bytes());
    wav.extend(std::iter::repeat_n(128u8, samples as usize));
    wav
}

/// `tools-call-image`: one PNG image block.
fn image_content(_: NoArguments) -> Result<Output, ToolError> {
    Ok(Output::image("image/png", RED_PIXEL_PNG.to_vec()))
}

/// `tools-call-audio`: one `audio/wav` block.
fn audio_content(_: NoArguments) -> Result<Output, ToolError> {
    Ok(Output::default().with_audio("audio/wav", silent_wav()))
}

/// `tools-call-embedded-resource`: one text resource.
fn embedded_resource(_: NoArguments) -> Result<Output, ToolError> {
    Ok(Output::default().with(Content::TextResource {
        uri: "test://embedded-resource".into(),
        mime_type: Some("text/plain".into()),
        text: "This is an embedded resource content.".into(),
    }))
}

/// `tools-call-mixed-content`: text, an image and a resource.
fn multiple_content_types(_: NoArguments) -> Result<Output, ToolError> {
    Ok(Output::text("Multiple content types test:")
        .with_image("image/png", RED_PIXEL_PNG.to_vec())
        .with(Content::TextResource {
            uri: "test://mixed-content-resource".into(),
            mime_type: Some("application/json".into()),
            text: r#"{"test":"data","value":123}"#.into(),
        }))
}

/// `tools-call-with-progress`: 0, 50 and 100 of 100, about 50 ms apart.
fn tool_with_progress(_: NoArguments) -> Result<Output, ToolError> {
    for (i, done) in [0.0, 50.0, 100.0].into_iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
        progress(done, Some(100.0), None);
    }
    Ok(Output::text("Progress test completed"))
}

/// What became of a question, as the reference server words it.
fn asked(answer: Result<String, toolhost_guest::Refused>) -> (String, String) {
    match answer {
        Ok(content) => ("accept".into(), content),
        Err(refused) => {
            let action = match refused.reason {
                AskRefusal::Declined => "decline",
                AskRefusal::Cancelled => "cancel",
                AskRefusal::Unavailable | AskRefusal::InvalidQuestion => "unavailable",
            };
            (
                action.into(),
                format!("{{\"reason\":{:?}}}", refused.message),
            )
        }
    }
}

/// Arguments of `test_elicitation`.
#[derive(Deserialize, JsonSchema)]
struct ElicitationArguments {
    /// The message to show the user.
    message: String,
}

/// `tools-call-elicitation`: ask for a username and an email.
fn elicitation(args: ElicitationArguments) -> Result<Output, ToolError> {
    let schema = r#"{"type":"object","properties":{
        "username":{"type":"string","description":"User's response"},
        "email":{"type":"string","description":"User's email address"}},
        "required":["username","email"]}"#;
    let (action, content) = asked(ask_json(&args.message, schema));
    Ok(Output::text(format!(
        "User response: <action: {action}, content: {content}>"
    )))
}

/// `elicitation-sep1034-defaults`: a default for every primitive type.
fn elicitation_defaults(_: NoArguments) -> Result<Output, ToolError> {
    let schema = r#"{"type":"object","properties":{
        "name":{"type":"string","description":"User name","default":"John Doe"},
        "age":{"type":"integer","description":"User age","default":30},
        "score":{"type":"number","description":"User score","default":95.5},
        "status":{"type":"string","description":"User status","enum":["active","inactive","pending"],"default":"active"},
        "verified":{"type":"boolean","description":"Verification status","default":true}}}"#;
    let (action, content) = asked(ask_json(
        "Please review and update the form fields with defaults",
        schema,
    ));
    Ok(Output::text(format!(
        "Elicitation completed: action={action}, content={content}"
    )))
}

/// `elicitation-sep1330-enums`: the five enum forms.
fn elicitation_enums(_: NoArguments) -> Result<Output, ToolError> {
    let schema = r#"{"type":"object","properties":{
        "untitledSingle":{"type":"string","description":"Select an option","enum":["option1","option2","option3"]},
        "titledSingle":{"type":"string","description":"Select a titled option","oneOf":[
            {"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},
        "legacyEnum":{"type":"string","description":"Select a legacy option","enum":["opt1","opt2","opt3"],
            "enumNames":["Option One","Option Two","Option Three"]},
        "untitledMulti":{"type":"array","description":"Select multiple options","minItems":1,"maxItems":3,
            "items":{"type":"string","enum":["option1","option2","option3"]}},
        "titledMulti":{"type":"array","description":"Select multiple titled options","minItems":1,"maxItems":3,
            "items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}}}"#;
    let (action, content) = asked(ask_json(
        "Please select options from the enum fields",
        schema,
    ));
    Ok(Output::text(format!(
        "Elicitation completed: action={action}, content={content}"
    )))
}

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

/// `server-stateless` (no independent requests on a request's stream):
/// asks one question, and answers at once whatever became of it.
fn streaming_elicitation(_: NoArguments) -> Result<Output, ToolError> {
    let schema = r#"{"type":"object","properties":{"confirmed":{"type":"boolean","title":"Confirm"}},"required":["confirmed"]}"#;
    let (action, content) = asked(ask_json("Please confirm to continue", schema));
    Ok(Output::text(format!(
        "Elicitation result: action={action}, content={content}"
    )))
}

/// `input-required-result-*`: asks for a name, under the key the suite
/// answers it by (`user_name`, so an answer given up front is taken), and
/// greets it.
fn input_required_elicitation(_: NoArguments) -> Result<Output, ToolError> {
    let schema = r#"{"type":"object","properties":{"name":{"type":"string","title":"Your name"}},"required":["name"]}"#;
    match ask_json_with_key("user_name", "What is your name?", schema) {
        Ok(answer) => {
            let answer: Value = serde_json::from_str(&answer).unwrap_or_default();
            let name = answer["name"].as_str().unwrap_or("stranger");
            Ok(Output::text(format!("Hello, {name}!")))
        }
        Err(refused) => Ok(Output::text(format!(
            "No name was given ({})",
            asked(Err(refused)).0
        ))),
    }
}

/// `input-required-result-request-state` and `-tampered-state`: asks for
/// a confirmation.
fn input_required_confirm(_: NoArguments) -> Result<Output, ToolError> {
    let schema = r#"{"type":"object","properties":{"ok":{"type":"boolean","title":"Confirm"}},"required":["ok"]}"#;
    let (action, content) = asked(ask_json("Please confirm", schema));
    Ok(Output::text(format!(
        "state-ok: action={action}, content={content}"
    )))
}

/// `input-required-result-multi-round`: two questions, one after the other.
fn input_required_multi_round(_: NoArguments) -> Result<Output, ToolError> {
    let name = r#"{"type":"object","properties":{"name":{"type":"string","title":"Name"}},"required":["name"]}"#;
    let color = r#"{"type":"object","properties":{"color":{"type":"string","title":"Color"}},"required":["color"]}"#;
    let (first, name) = asked(ask_json("Step 1: What is your name?", name));
    let (second, color) = asked(ask_json("Step 2: What is your favorite color?", color));
    Ok(Output::text(format!(
        "Multi-round complete: name=<{first}: {name}>, color=<{second}: {color}>"
    )))
}

/// `server-sse-polling` (2025-11-25, not scored): a call that takes a
/// moment, so a client can drop and resume its stream.
fn reconnection(_: NoArguments) -> Result<Output, ToolError> {
    std::thread::sleep(Duration::from_millis(300));
    Ok(Output::text("Reconnection test completed"))
}

/// `server-stateless` (undeclared capability): runs only for a client that
/// declared `sampling`, which its manifest entry requires; the host refuses
/// the call to any other before it gets here.
#[cfg(feature = "needs-sampling")]
fn missing_capability(_: NoArguments) -> Result<Output, ToolError> {
    Ok(Output::text(
        "The client declared the sampling capability this tool requires",
    ))
}

#[cfg(feature = "needs-sampling")]
toolhost_guest::export_tools! {
    Tool::new(
        "test_missing_capability",
        "Requires the client's sampling capability (its manifest entry says so)",
        missing_capability,
    )
    .read_only()
    .idempotent(),
}

/// The manifest `scripts/conformance.sh` serves, as the trigger's grant
/// names it.
#[cfg(feature = "trigger")]
const SERVED_MANIFEST: &str = "/served/toolhost.toml";

/// The lines between these markers are switched on and off (`# ` in front
/// or not) by each call: a `[[tool]]` entry, so the list changes.
#[cfg(feature = "trigger")]
const TOGGLED: (&str, &str) = ("# >>> toggled by test_trigger_tool_change", "# <<<");

/// Add the served manifest's toggled tool, or remove it when it is there;
/// written to a new file and renamed over the old one, so the reload never
/// reads half a manifest.
#[cfg(feature = "trigger")]
fn trigger_tool_change(_: NoArguments) -> Result<Output, ToolError> {
    let cannot = |what: &str, e: std::io::Error| {
        ToolError::unavailable(format!(
            "cannot {what} {SERVED_MANIFEST} (scripts/conformance.sh grants it): {e}"
        ))
    };
    let manifest = std::fs::read_to_string(SERVED_MANIFEST).map_err(|e| cannot("read", e))?;
    let mut inside = false;
    let mut toggled = 0;
    let mut now_on = false;
    let mut out = String::with_capacity(manifest.len() + 16);
    for line in manifest.lines() {
        if line == TOGGLED.0 || line == TOGGLED.1 {
            inside = line == TOGGLED.0;
            out.push_str(line);
        } else if inside {
            toggled += 1;
            match line.strip_prefix("# ") {
                Some(on) => {
                    now_on = true;
                    out.push_str(on);
                }
                None => {
                    out.push_str("# ");
                    out.push_str(line);
                }
            }
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    if toggled == 0 {
        return Err(ToolError::invalid_input(format!(
            "{SERVED_MANIFEST} has no lines between {:?} and {:?} to switch",
            TOGGLED.0, TOGGLED.1
        )));
    }
    let next = format!("{SERVED_MANIFEST}.next");
    std::fs::write(&next, out).map_err(|e| cannot("write beside", e))?;
    std::fs::rename(&next, SERVED_MANIFEST).map_err(|e| cannot("replace", e))?;
    Ok(Output::text(if now_on {
        "added a tool to the served manifest; serve --watch reloads it"
    } else {
        "removed a tool from the served manifest; serve --watch reloads it"
    }))
}

#[cfg(feature = "trigger")]
toolhost_guest::export_tools! {
    Tool::new(
        "test_trigger_tool_change",
        "Adds a tool to the served manifest, or removes it (serve --watch then tells subscribers the list changed)",
        trigger_tool_change,
    ),
}

#[cfg(not(any(feature = "needs-sampling", feature = "trigger")))]
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
    Tool::new("test_image_content", "Tests image content response", image_content)
        .read_only()
        .idempotent(),
    Tool::new("test_audio_content", "Tests audio content response", audio_content)
        .read_only()
        .idempotent(),
    Tool::new("test_embedded_resource", "Tests embedded resource content response", embedded_resource)
        .read_only()
        .idempotent(),
    Tool::new("test_multiple_content_types", "Tests response with multiple content types (text, image, resource)", multiple_content_types)
        .read_only()
        .idempotent(),
    Tool::new("test_tool_with_progress", "Tests tool that reports progress notifications", tool_with_progress)
        .read_only()
        .idempotent(),
    Tool::new("test_elicitation", "Tests elicitation: asks the user for input", elicitation),
    Tool::new("test_elicitation_sep1034_defaults", "Tests elicitation with default values for every primitive type (SEP-1034)", elicitation_defaults),
    Tool::new("test_elicitation_sep1330_enums", "Tests elicitation with every enum form (SEP-1330)", elicitation_enums),
    Tool::new(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        json_schema_2020_12,
    )
    .read_only()
    .idempotent(),
    Tool::new("test_streaming_elicitation", "Asks one question and answers at once", streaming_elicitation),
    Tool::new("test_input_required_result_elicitation", "Asks for a name and greets it", input_required_elicitation),
    Tool::new("test_input_required_result_request_state", "Asks for a confirmation", input_required_confirm),
    Tool::new("test_input_required_result_tampered_state", "Asks for a confirmation", input_required_confirm),
    Tool::new("test_input_required_result_multi_round", "Asks two questions in turn", input_required_multi_round),
    Tool::new("test_reconnection", "Takes a moment, then answers", reconnection)
        .read_only()
        .idempotent(),
}
