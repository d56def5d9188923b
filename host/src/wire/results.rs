//! Outcomes in each wire format: the ToolMessage (LangChain's shape, which
//! OpenAI's `role: "tool"` message is a subset of), Anthropic's
//! `tool_result` block, and MCP's `CallToolResult`.
//!
//! Every front end answers through these functions, so a call reads the
//! same, and carries the same typed error, wherever it came from.

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::dispatcher::ToolSpec;
use crate::outcome::{CallError, Outcome};
use crate::wire::definitions::mcp_structured;

/// A wire format for results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// The [`ToolMessage`]: LangChain's shape plus the typed error.
    #[default]
    ToolMessage,
    /// Anthropic's `tool_result` content block, exactly as the Messages API
    /// takes it (no other fields: the API refuses unknown ones).
    Anthropic,
    /// MCP's `CallToolResult`, the typed error in `_meta`.
    Mcp,
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "toolmessage" | "openai" | "langchain" => Ok(Self::ToolMessage),
            "anthropic" => Ok(Self::Anthropic),
            "mcp" => Ok(Self::Mcp),
            other => Err(format!(
                "unknown result format {:?}; use toolmessage, anthropic or mcp",
                crate::outcome::clip(other, 32)
            )),
        }
    }
}

/// The `_meta` key of MCP results that carries the typed error.
pub const MCP_ERROR_KEY: &str = "toolhost/error";
/// The `_meta` key of MCP results that carries the artifact, which is for
/// the application and never for the model.
pub const MCP_ARTIFACT_KEY: &str = "toolhost/artifact";

/// `outcome` in `format`. `spec` is the called tool's, when it exists: MCP
/// wraps structured output to match the tool's advertised output schema.
pub fn render(outcome: &Outcome, spec: Option<&ToolSpec>, format: Format) -> Value {
    match format {
        Format::ToolMessage => {
            serde_json::to_value(outcome.to_message()).expect("a ToolMessage is JSON")
        }
        Format::Anthropic => anthropic_tool_result(outcome),
        Format::Mcp => mcp_call_result(outcome, spec),
    }
}

/// Anthropic's `tool_result` block.
pub fn anthropic_tool_result(outcome: &Outcome) -> Value {
    json!({
        "type": "tool_result",
        "tool_use_id": outcome.call_id,
        "content": outcome.content(),
        "is_error": outcome.is_error(),
    })
}

/// MCP's `CallToolResult`: the text as one text block, `structuredContent`
/// when the tool gave structured output, `isError` for every failed
/// outcome (invalid arguments included, as the specification asks), and the
/// typed error under [`MCP_ERROR_KEY`] in `_meta`.
pub fn mcp_call_result(outcome: &Outcome, spec: Option<&ToolSpec>) -> Value {
    let mut result = json!({
        "content": [{"type": "text", "text": outcome.content()}],
        "isError": outcome.is_error(),
    });
    let mut meta = Map::new();
    // A tool that declares an output schema must send structured output
    // (MCP clients refuse the result otherwise, as the Python SDK does): when
    // it sent none, or it was dropped for being over `max_output`, the
    // result says so as an error instead of breaking the client.
    let missing = outcome.result.as_ref().is_ok_and(|output| {
        output.structured.is_none() && spec.is_some_and(|s| s.output_schema.is_some())
    });
    if missing {
        let error = CallError::new(
            crate::outcome::ErrorType::ToolError,
            "the tool declares an output schema but gave no structured output (or it was over \
             the max_output limit and was dropped); raise max_output, or make the tool return it",
        );
        result["isError"] = json!(true);
        meta.insert(
            MCP_ERROR_KEY.into(),
            serde_json::to_value(&error).expect("an error is JSON"),
        );
        result["_meta"] = Value::Object(meta);
        return result;
    }
    match &outcome.result {
        Ok(output) => {
            if let Some(structured) = &output.structured {
                result["structuredContent"] = mcp_structured(spec, structured.clone());
            }
            if let Some(artifact) = &output.artifact {
                meta.insert(MCP_ARTIFACT_KEY.into(), json!(artifact));
            }
        }
        Err(error) => {
            meta.insert(
                MCP_ERROR_KEY.into(),
                serde_json::to_value(error).expect("an error is JSON"),
            );
        }
    }
    if !meta.is_empty() {
        result["_meta"] = Value::Object(meta);
    }
    result
}

/// A ToolMessage: LangChain's shape plus the typed error.
///
/// ```json
/// {"role":"tool","tool_call_id":"call_7","name":"fetch","content":"Error: tool 'fetch' timed out after 2s",
///  "is_error":true,"status":"error","error":{"type":"timeout","message":"timed out after 2s","retryable":true},
///  "artifact":null}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolMessage {
    /// Always `tool`.
    pub role: &'static str,
    /// The call this answers.
    pub tool_call_id: String,
    /// The tool's name.
    pub name: String,
    /// What the model reads.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// `success` or `error`, as LangChain spells it.
    pub status: &'static str,
    /// The typed error, when the call failed.
    pub error: Option<CallError>,
    /// Structured output, when the tool gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// For the application, never for the model.
    pub artifact: Option<String>,
}

impl Outcome {
    /// The LangChain-compatible ToolMessage, with the typed error.
    pub fn to_message(&self) -> ToolMessage {
        let (error, artifact, structured) = match &self.result {
            Ok(output) => (None, output.artifact.clone(), output.structured.clone()),
            Err(error) => (Some(error.clone()), None, None),
        };
        ToolMessage {
            role: "tool",
            tool_call_id: self.call_id.clone(),
            name: self.tool.clone(),
            content: self.content(),
            is_error: self.is_error(),
            status: if self.is_error() { "error" } else { "success" },
            error,
            structured,
            artifact,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{CallStats, ErrorType, ToolOutput};

    fn timeout() -> Outcome {
        Outcome::error(
            "call_7",
            "fetch",
            CallError::new(ErrorType::Timeout, "timed out after 2s"),
        )
    }

    fn success() -> Outcome {
        Outcome {
            call_id: "c".into(),
            tool: "calc".into(),
            result: Ok(ToolOutput {
                content: "42".into(),
                structured: Some(json!({"value": 42.0})),
                artifact: Some("raw".into()),
            }),
            stats: CallStats::default(),
        }
    }

    #[test]
    fn timeout_message_matches_the_documented_shape() {
        assert_eq!(
            render(&timeout(), None, Format::ToolMessage),
            json!({"role":"tool","tool_call_id":"call_7","name":"fetch",
                "content":"Error: tool 'fetch' timed out after 2s","is_error":true,"status":"error",
                "error":{"type":"timeout","message":"timed out after 2s","retryable":true},"artifact":null})
        );
    }

    #[test]
    fn success_carries_structured_output_and_artifact() {
        let json = render(&success(), None, Format::ToolMessage);
        assert_eq!(json["status"], "success");
        assert_eq!(json["error"], Value::Null);
        assert_eq!(json["structured"]["value"], 42.0);
        assert_eq!(json["artifact"], "raw");
    }

    #[test]
    fn anthropic_blocks_have_exactly_the_api_fields() {
        assert_eq!(
            render(&timeout(), None, Format::Anthropic),
            json!({"type":"tool_result","tool_use_id":"call_7",
                   "content":"Error: tool 'fetch' timed out after 2s","is_error":true})
        );
    }

    #[test]
    fn mcp_results_keep_the_typed_error_in_meta() {
        assert_eq!(
            render(&timeout(), None, Format::Mcp),
            json!({"content":[{"type":"text","text":"Error: tool 'fetch' timed out after 2s"}],
                   "isError":true,
                   "_meta":{"toolhost/error":{"type":"timeout","message":"timed out after 2s","retryable":true}}})
        );
        assert_eq!(
            render(&success(), None, Format::Mcp),
            json!({"content":[{"type":"text","text":"42"}],"isError":false,
                   "structuredContent":{"value":42.0},"_meta":{"toolhost/artifact":"raw"}})
        );
    }

    #[test]
    fn mcp_results_of_tools_with_output_schemas_always_carry_structured_content() {
        let spec = ToolSpec {
            name: "calc".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: Some(json!({"type": "object"})),
            hints: Default::default(),
        };
        let mut dropped = success();
        if let Ok(output) = &mut dropped.result {
            output.structured = None;
        }
        let result = render(&dropped, Some(&spec), Format::Mcp);
        assert_eq!(result["isError"], true, "{result}");
        assert!(result.get("structuredContent").is_none());
        assert_eq!(result["_meta"]["toolhost/error"]["type"], "tool_error");
        // With structured output, the same tool's result is a success.
        assert_eq!(
            render(&success(), Some(&spec), Format::Mcp)["isError"],
            false
        );
    }

    #[test]
    fn result_formats_parse_from_their_names() {
        assert_eq!("anthropic".parse::<Format>(), Ok(Format::Anthropic));
        assert!(
            "csv"
                .parse::<Format>()
                .unwrap_err()
                .contains("toolmessage, anthropic or mcp")
        );
    }
}
