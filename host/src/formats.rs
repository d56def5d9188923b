//! Tool definitions in each wire format: what `toolhost tools --format`
//! prints and what a model endpoint is sent.

use serde_json::{Value, json};

use crate::dispatcher::ToolSpec;

/// A wire format for tool definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// OpenAI chat completions: `{"type":"function","function":{…}}`.
    #[default]
    OpenAI,
    /// Anthropic Messages: `{"name","description","input_schema"}`.
    Anthropic,
    /// MCP `tools/list`: `{"name","description","inputSchema","outputSchema","annotations"}`.
    Mcp,
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
                "description": spec.description,
                "inputSchema": spec.input_schema,
                "annotations": {
                    "readOnlyHint": spec.hints.read_only,
                    "destructiveHint": spec.hints.destructive,
                    "idempotentHint": spec.hints.idempotent,
                    "openWorldHint": spec.hints.open_world,
                }
            });
            if let Some(output) = &spec.output_schema {
                tool["outputSchema"] = output.clone();
            }
            tool
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatcher::Hints;

    fn spec() -> ToolSpec {
        ToolSpec {
            name: "calc".into(),
            description: "Evaluate".into(),
            input_schema: json!({"type": "object"}),
            output_schema: Some(json!({"type": "object"})),
            hints: Hints {
                read_only: true,
                ..Hints::default()
            },
        }
    }

    #[test]
    fn each_format_has_its_own_shape() {
        assert_eq!(
            tool_definition(&spec(), Format::OpenAI)["function"]["parameters"]["type"],
            "object"
        );
        assert_eq!(
            tool_definition(&spec(), Format::Anthropic)["input_schema"]["type"],
            "object"
        );
        let mcp = tool_definition(&spec(), Format::Mcp);
        assert_eq!(mcp["annotations"]["readOnlyHint"], true);
        assert_eq!(mcp["outputSchema"]["type"], "object");
    }
}
