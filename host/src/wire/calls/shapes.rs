//! The call shapes: one typed serde struct per shape a model or framework
//! writes a call in, each refusing unknown fields, and the one function that
//! picks the shape of an object.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use super::ReadCall;
use super::json::{map_only, parse_object, present, reason};
use crate::tool_call::Arguments;

/// Read one call object in whichever accepted shape it is.
pub(super) fn read_call(raw: &str) -> Result<ReadCall, String> {
    let keys: ShapeKeys = parse_object(raw).map_err(reason)?;
    let call = match keys.kind.as_deref() {
        Some("function") => parse_object::<OpenAiCall>(raw).map_err(reason)?.into(),
        Some("tool_call") => parse_object::<LangChainCall>(raw).map_err(reason)?.into(),
        Some("tool_use") => parse_object::<AnthropicToolUse>(raw)
            .map_err(reason)?
            .into(),
        Some(other) => {
            return Err(format!(
                "its type is {:?}; a call's type is \"function\", \"tool_call\" or \"tool_use\"",
                crate::outcome::clip(other, 64)
            ));
        }
        None if keys.function => parse_object::<OpenAiCall>(raw).map_err(reason)?.into(),
        None if keys.arguments && !keys.args => {
            parse_object::<McpCall>(raw).map_err(reason)?.into()
        }
        // `{"id","name"}` or `{"name"}` alone is a LangChain call without
        // arguments (MCP's reading of it would be the same call).
        None => parse_object::<LangChainCall>(raw).map_err(reason)?.into(),
    };
    Ok(call)
}

/// The keys that tell the shapes apart. Values other than `type` are
/// skipped unread; a key counts even when its value is `null`.
#[derive(Deserialize)]
struct ShapeKeys {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default, deserialize_with = "present")]
    function: bool,
    #[serde(default, deserialize_with = "present")]
    args: bool,
    #[serde(default, deserialize_with = "present")]
    arguments: bool,
}

/// OpenAI's chat-completions tool call.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenAiCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(rename = "type", default)]
    _kind: Option<FunctionTag>,
    #[serde(deserialize_with = "map_only")]
    function: OpenAiFunction,
    /// Position in a streamed response; not needed once the call is whole.
    #[serde(rename = "index", default)]
    _index: Option<u32>,
}

#[derive(Deserialize)]
enum FunctionTag {
    #[serde(rename = "function")]
    Function,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenAiFunction {
    name: String,
    #[serde(default)]
    arguments: Option<OpenAiArguments>,
}

/// OpenAI sends JSON text; some compatible servers send the object itself.
#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "`function.arguments` must be JSON text or an object"
)]
enum OpenAiArguments {
    Text(String),
    Object(Map<String, Value>),
}

impl From<OpenAiCall> for ReadCall {
    fn from(call: OpenAiCall) -> Self {
        Self {
            id: call.id,
            name: call.function.name,
            arguments: match call.function.arguments {
                Some(OpenAiArguments::Text(text)) => Arguments::Text(text),
                Some(OpenAiArguments::Object(map)) => Arguments::Json(Value::Object(map)),
                None => Arguments::Json(Value::Object(Map::new())),
            },
        }
    }
}

/// LangChain's `ToolCall`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LangChainCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    args: Option<Map<String, Value>>,
    #[serde(rename = "type", default)]
    _kind: Option<ToolCallTag>,
}

#[derive(Deserialize)]
enum ToolCallTag {
    #[serde(rename = "tool_call")]
    ToolCall,
}

impl From<LangChainCall> for ReadCall {
    fn from(call: LangChainCall) -> Self {
        Self {
            id: call.id,
            name: call.name,
            arguments: Arguments::Json(Value::Object(call.args.unwrap_or_default())),
        }
    }
}

/// Anthropic's `tool_use` content block. The API always sends `id` and
/// `input`, so both are required.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnthropicToolUse {
    #[serde(rename = "type")]
    _kind: ToolUseTag,
    id: String,
    name: String,
    input: Map<String, Value>,
    /// Allowed on blocks sent back to the API; says nothing about the call.
    #[serde(rename = "cache_control", default)]
    _cache_control: Option<IgnoredAny>,
}

#[derive(Deserialize)]
enum ToolUseTag {
    #[serde(rename = "tool_use")]
    ToolUse,
}

impl From<AnthropicToolUse> for ReadCall {
    fn from(call: AnthropicToolUse) -> Self {
        Self {
            id: Some(call.id),
            name: call.name,
            arguments: Arguments::Json(Value::Object(call.input)),
        }
    }
}

/// MCP's `tools/call` params. MCP calls have no id.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpCall {
    name: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(rename = "_meta", default)]
    _meta: Option<IgnoredAny>,
}

impl From<McpCall> for ReadCall {
    fn from(call: McpCall) -> Self {
        Self {
            id: None,
            name: call.name,
            arguments: Arguments::Json(Value::Object(call.arguments.unwrap_or_default())),
        }
    }
}
