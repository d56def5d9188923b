//! One request to run a tool, as every front end hands it to the dispatcher.
//!
//! [`crate::wire::calls`] reads the shapes models and frameworks write.

use serde_json::{Map, Value};

/// One request to run a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The `tool_call_id` the answer must carry.
    pub id: String,
    /// The tool's name as the model wrote it (empty when a malformed call
    /// had no readable name).
    pub name: String,
    /// The arguments as received.
    pub arguments: Arguments,
}

impl ToolCall {
    /// A call with arguments already parsed.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: Arguments::Json(arguments),
        }
    }

    /// A call with arguments as JSON text, as OpenAI sends them; the text is
    /// checked when the call runs, so bad JSON becomes `invalid_arguments`.
    pub fn with_raw_arguments(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: Arguments::Text(arguments.into()),
        }
    }
}

/// Arguments as received: text the model wrote, a parsed value, or the
/// reason a call could not be read at all.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// JSON text, not yet parsed (OpenAI's `function.arguments`).
    Text(String),
    /// A parsed value (LangChain's `args`, Anthropic's `input`, MCP's
    /// `arguments`).
    Json(Value),
    /// An element of a batch fit no accepted call shape; the message says
    /// which element, why, and what to send instead. Such a call is answered
    /// `invalid_arguments` and never runs: it is a call at all only so that
    /// it gets its answer in order with the others.
    Malformed(String),
}

impl Arguments {
    /// The arguments as a JSON value. Empty text means no arguments (`{}`),
    /// which some endpoints send for tools without parameters.
    ///
    /// # Errors
    ///
    /// A message for the model when the text is not JSON (or nests deeper
    /// than serde_json's recursion limit of 128), or the call was malformed.
    pub fn parse(&self) -> Result<Value, String> {
        match self {
            Self::Json(value) => Ok(value.clone()),
            Self::Text(text) if text.trim().is_empty() => Ok(Value::Object(Map::new())),
            Self::Text(text) => serde_json::from_str(text)
                .map_err(|e| format!("arguments are not valid JSON ({e})")),
            Self::Malformed(message) => Err(message.clone()),
        }
    }
}
