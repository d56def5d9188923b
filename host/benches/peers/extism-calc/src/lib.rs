//! toolhost's `calc` tool as an Extism plugin, served by hyper-mcp (its
//! plugin interface v2: the exports `list_tools` and `call_tool`, JSON in
//! and out), so the benchmark compares the two hosts on the same work.
//!
//! Build with `scripts/bench.sh`, or by hand:
//!
//! ```sh
//! cargo build --release --locked --target wasm32-wasip1 \
//!     --manifest-path host/benches/peers/extism-calc/Cargo.toml
//! ```
//!
//! It evaluates with the very same source as toolhost's calc component
//! (`example-tools/calc/src/eval.rs`) and answers as it does: content "42",
//! structuredContent `{"value": 42.0}`, the same input and output schemas,
//! and a tool error (isError) for an expression it cannot evaluate. What
//! differs is the host's side: toolhost checks the arguments against the
//! input schema before the guest sees them, while here the plugin checks
//! them itself (unknown fields and the length bounds); and hyper-mcp keeps
//! one plugin instance for all calls, where toolhost makes a fresh one per
//! call.

use extism_pdk::{FnResult, Json, plugin_fn};
use serde::Deserialize;
use serde_json::{Value, json};

#[path = "../../../../../example-tools/calc/src/eval.rs"]
#[allow(dead_code)]
mod eval;

/// What hyper-mcp passes to `call_tool`: the MCP request's params (the
/// request context beside it is not needed here).
#[derive(Deserialize)]
struct CallToolRequest {
    request: CallToolParams,
}

#[derive(Deserialize)]
struct CallToolParams {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Arguments of `calc`, as toolhost's calc declares them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CalcArgs {
    expression: String,
}

/// The longest expression the input schema allows, in characters.
const MAX_EXPRESSION: usize = 1000;

/// The tool list: calc, with toolhost's schemas and annotations.
#[plugin_fn]
pub fn list_tools(_input: Json<Value>) -> FnResult<Json<Value>> {
    Ok(Json(json!({"tools": [{
        "name": "calc",
        "title": "Calc",
        "description": "Evaluate an arithmetic expression and return its value",
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "CalcArgs",
            "description": "Arguments of `calc`.",
            "type": "object",
            "properties": {"expression": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_EXPRESSION,
                "description": "An arithmetic expression: numbers, + - * / % ^, parentheses, and the\nfunctions sqrt, abs, ln, log10, sin, cos, tan, floor, ceil, round.\nExample: \"2 * (3 + 4) ^ 2\"."
            }},
            "required": ["expression"],
            "additionalProperties": false
        },
        "outputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "CalcResult",
            "description": "What `calc` returns as structured output.",
            "type": "object",
            "properties": {"value": {
                "type": "number",
                "format": "double",
                "description": "The value of the expression."
            }},
            "required": ["value"]
        },
        "annotations": {
            "title": "Calc",
            "readOnlyHint": true,
            "destructiveHint": false,
            "idempotentHint": true,
            "openWorldHint": false
        }
    }]})))
}

/// One call of calc: its value, or a tool error the model can act on.
#[plugin_fn]
pub fn call_tool(Json(input): Json<CallToolRequest>) -> FnResult<Json<Value>> {
    if input.request.name != "calc" {
        return Ok(Json(tool_error(format!(
            "unknown tool {:?}: this plugin has calc",
            input.request.name
        ))));
    }
    let arguments = input.request.arguments.unwrap_or(Value::Null);
    let result = serde_json::from_value::<CalcArgs>(arguments)
        .map_err(|e| format!("invalid arguments: {e}"))
        .and_then(|args| calc(&args.expression));
    Ok(Json(match result {
        Ok(value) => json!({
            "content": [{"type": "text", "text": eval::format_number(value)}],
            "structuredContent": {"value": value},
            "isError": false
        }),
        Err(message) => tool_error(message),
    }))
}

/// calc's checks and evaluation, as toolhost's calc component does them.
fn calc(expression: &str) -> Result<f64, String> {
    let length = expression.chars().count();
    if length == 0 || length > MAX_EXPRESSION {
        return Err(format!(
            "`expression` must be 1 to {MAX_EXPRESSION} characters long, not {length}"
        ));
    }
    let value = eval::eval(expression)?;
    if !value.is_finite() {
        return Err(format!(
            "{expression:?} has no finite value (division by zero or overflow)"
        ));
    }
    Ok(value)
}

fn tool_error(message: String) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}
