//! Tool definitions in each wire format: what `toolhost tools --format`
//! prints, what `GET /v1/tools` and MCP `tools/list` answer, and what a
//! model endpoint is sent.

use serde_json::{Map, Value, json};

use crate::spec::ToolSpec;

/// A wire format for tool definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Format {
    /// OpenAI chat completions: `{"type":"function","function":{…}}`.
    #[default]
    OpenAI,
    /// Anthropic Messages: `{"name","description","input_schema"}`.
    Anthropic,
    /// MCP `tools/list`: `{"name","title","description","inputSchema","outputSchema","annotations"}`.
    Mcp,
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openai" => Ok(Self::OpenAI),
            "anthropic" => Ok(Self::Anthropic),
            "mcp" => Ok(Self::Mcp),
            other => Err(format!(
                "unknown tool format {:?}; use openai, anthropic or mcp",
                crate::outcome::clip(other, 32)
            )),
        }
    }
}

/// The definition of `spec` in `format`.
pub fn tool_definition(spec: &ToolSpec, format: Format) -> Value {
    match format {
        Format::OpenAI => json!({
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.input_schema,
            }
        }),
        Format::Anthropic => json!({
            "name": spec.name,
            "description": spec.description,
            "input_schema": spec.input_schema,
        }),
        Format::Mcp => {
            let mut tool = json!({
                "name": spec.name,
                "title": spec.title,
                "description": spec.description,
                "inputSchema": spec.input_schema,
                "annotations": {
                    "title": spec.title,
                    "readOnlyHint": spec.hints.read_only,
                    "destructiveHint": spec.hints.destructive,
                    "idempotentHint": spec.hints.idempotent,
                    "openWorldHint": spec.hints.open_world,
                }
            });
            if let Some(output) = &spec.output_schema {
                tool["outputSchema"] = mcp_output_schema(output);
            }
            tool
        }
    }
}

/// The key a tool's non-object structured output is wrapped under for MCP.
pub const WRAPPED_RESULT: &str = "result";

/// Whether an output schema describes a JSON object, as MCP requires of
/// `outputSchema` (and of `structuredContent`).
pub fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// MCP's `outputSchema` for a tool's output schema: the schema itself when
/// it is an object schema, otherwise an object with one required
/// [`WRAPPED_RESULT`] property holding it. Clients such as the MCP Python
/// SDK refuse a whole `tools/list` in which one output schema is not an
/// object; [`mcp_structured`] wraps the tool's output to match.
pub fn mcp_output_schema(schema: &Value) -> Value {
    if is_object_schema(schema) {
        return schema.clone();
    }
    let mut inner = schema.clone();
    // Definitions referenced as `#/$defs/...` must stay at the root.
    let mut wrapper = Map::new();
    if let Some(object) = inner.as_object_mut() {
        for key in ["$defs", "definitions", "$schema"] {
            if let Some(moved) = object.remove(key) {
                wrapper.insert(key.to_owned(), moved);
            }
        }
    }
    wrapper.insert("type".into(), json!("object"));
    wrapper.insert("properties".into(), json!({ WRAPPED_RESULT: inner }));
    wrapper.insert("required".into(), json!([WRAPPED_RESULT]));
    Value::Object(wrapper)
}

/// MCP's `structuredContent` for a tool's structured output: the value
/// itself when the tool's schema (or, without one, the value) is an object,
/// otherwise `{"result": value}`, matching [`mcp_output_schema`].
pub fn mcp_structured(spec: Option<&ToolSpec>, structured: Value) -> Value {
    let wrap = match spec.and_then(|s| s.output_schema.as_ref()) {
        Some(schema) => !is_object_schema(schema),
        None => !structured.is_object(),
    };
    if wrap {
        json!({ WRAPPED_RESULT: structured })
    } else {
        structured
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Hints;

    fn spec(output: Value) -> ToolSpec {
        ToolSpec {
            name: "word_count".into(),
            title: "Word count".into(),
            description: "Count".into(),
            input_schema: json!({"type": "object"}),
            output_schema: Some(output),
            hints: Hints {
                read_only: true,
                ..Hints::default()
            },
        }
    }

    #[test]
    fn each_format_has_its_own_shape() {
        let spec = spec(json!({"type": "object"}));
        assert_eq!(
            tool_definition(&spec, Format::OpenAI)["function"]["parameters"]["type"],
            "object"
        );
        assert_eq!(
            tool_definition(&spec, Format::Anthropic)["input_schema"]["type"],
            "object"
        );
        let mcp = tool_definition(&spec, Format::Mcp);
        assert_eq!(mcp["annotations"]["readOnlyHint"], true);
        assert_eq!(mcp["title"], "Word count");
        assert_eq!(mcp["outputSchema"], json!({"type": "object"}));
    }

    #[test]
    fn mcp_wraps_output_schemas_that_are_not_objects() {
        let array = spec(
            json!({"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "number"}}}),
        );
        let mcp = tool_definition(&array, Format::Mcp);
        assert_eq!(
            mcp["outputSchema"],
            json!({"type": "object", "$defs": {"n": {"type": "number"}},
                   "properties": {"result": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                   "required": ["result"]})
        );
        assert_eq!(
            mcp_structured(Some(&array), json!([1, 2])),
            json!({"result": [1, 2]})
        );
        let object = spec(json!({"type": "object"}));
        assert_eq!(
            mcp_structured(Some(&object), json!({"a": 1})),
            json!({"a": 1})
        );
        // Without a declared schema, only what is not an object is wrapped.
        assert_eq!(mcp_structured(None, json!(3)), json!({"result": 3}));
        assert_eq!(mcp_structured(None, json!({"a": 1})), json!({"a": 1}));
    }

    #[test]
    fn formats_parse_from_their_names() {
        assert_eq!("mcp".parse::<Format>(), Ok(Format::Mcp));
        assert!(
            "xml"
                .parse::<Format>()
                .unwrap_err()
                .contains("openai, anthropic or mcp")
        );
    }
}
