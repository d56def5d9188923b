//! Tool calls as models and frameworks write them.
//!
//! Accepted shapes, mixed freely in one batch:
//! - OpenAI: `{"id":"call_1","type":"function","function":{"name":"calc","arguments":"{\"x\":1}"}}`
//! - LangChain: `{"id":"call_1","name":"calc","args":{"x":1}}`
//!
//! A call without an id gets `call_N` from its position, so that every call
//! can still be answered.

use serde::Deserialize;
use serde_json::Value;

/// One request to run a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The `tool_call_id` the answer must carry.
    pub id: String,
    /// The tool's name as the model wrote it.
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

/// Arguments as received: text the model wrote, or a parsed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// JSON text, not yet parsed (OpenAI's `function.arguments`).
    Text(String),
    /// A parsed value (LangChain's `args`).
    Json(Value),
}

impl Arguments {
    /// The arguments as a JSON value. Empty text means no arguments (`{}`),
    /// which some endpoints send for tools without parameters.
    ///
    /// # Errors
    ///
    /// A message for the model when the text is not JSON.
    pub fn parse(&self) -> Result<Value, String> {
        match self {
            Self::Json(value) => Ok(value.clone()),
            Self::Text(text) if text.trim().is_empty() => Ok(Value::Object(Default::default())),
            Self::Text(text) => serde_json::from_str(text)
                .map_err(|e| format!("arguments are not valid JSON ({e})")),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum WireCall {
    OpenAI {
        id: Option<String>,
        #[serde(rename = "type")]
        _type: Option<String>,
        function: WireFunction,
    },
    LangChain {
        id: Option<String>,
        name: String,
        #[serde(default)]
        args: Value,
    },
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// Parse a JSON array of tool calls (or one call object).
///
/// # Errors
///
/// When the input is not JSON, or an element is neither shape; the message
/// names the element.
pub fn parse_batch(json: &str) -> Result<Vec<ToolCall>, String> {
    let value: Value =
        serde_json::from_str(json).map_err(|e| format!("the batch is not JSON: {e}"))?;
    // An assistant message: take its tool_calls.
    let value = match value {
        Value::Object(mut map) if map.contains_key("tool_calls") => {
            map.remove("tool_calls").unwrap_or_default()
        }
        other => other,
    };
    let items = match value {
        Value::Array(items) => items,
        object @ Value::Object(_) => vec![object],
        _ => return Err("the batch must be a JSON array of tool calls".into()),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let call: WireCall = serde_json::from_value(item).map_err(|_| {
                format!(
                    "tool call #{} is neither {{id, type:\"function\", function:{{name, arguments}}}} nor {{id, name, args}}",
                    i + 1
                )
            })?;
            let fallback_id = || format!("call_{}", i + 1);
            Ok(match call {
                WireCall::OpenAI { id, function, .. } => ToolCall {
                    id: id.unwrap_or_else(fallback_id),
                    name: function.name,
                    arguments: match function.arguments {
                        Value::String(text) => Arguments::Text(text),
                        Value::Null => Arguments::Text(String::new()),
                        other => Arguments::Json(other),
                    },
                },
                WireCall::LangChain { id, name, args } => ToolCall {
                    id: id.unwrap_or_else(fallback_id),
                    name,
                    arguments: Arguments::Json(if args.is_null() { Value::Object(Default::default()) } else { args }),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_shapes_parse_in_one_batch() {
        let calls = parse_batch(
            r#"[{"id":"a","type":"function","function":{"name":"calc","arguments":"{\"expression\":\"1+1\"}"}},
                {"id":"b","name":"calc","args":{"expression":"2"}},
                {"name":"calc"}]"#,
        )
        .unwrap();
        assert_eq!(
            calls[0].arguments.parse().unwrap(),
            json!({"expression":"1+1"})
        );
        assert_eq!(
            calls[1].arguments,
            Arguments::Json(json!({"expression":"2"}))
        );
        assert_eq!(calls[2].id, "call_3");
        assert_eq!(calls[2].arguments.parse().unwrap(), json!({}));
    }

    #[test]
    fn an_assistant_message_yields_its_tool_calls() {
        let calls =
            parse_batch(r#"{"role":"assistant","tool_calls":[{"id":"x","name":"t","args":{}}]}"#)
                .unwrap();
        assert_eq!(calls.len(), 1);
    }

    #[test]
    fn bad_json_arguments_are_reported_when_parsed() {
        let call = ToolCall::with_raw_arguments("a", "calc", "{not json");
        assert!(
            call.arguments
                .parse()
                .unwrap_err()
                .contains("not valid JSON")
        );
        assert!(parse_batch("[1]").unwrap_err().contains("#1"));
        assert!(parse_batch("nope").is_err());
    }
}
