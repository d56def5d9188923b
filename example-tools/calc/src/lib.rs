//! `calc`: evaluate an arithmetic expression. Pure computation: needs no grants.
//!
//! Build with `scripts/build-tools.sh` (or `cargo build -p calc --target wasm32-wasip2 --profile guest`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Output, Tool, ToolError};

// The evaluator is plain Rust in its own file, so the benchmarks' native
// baselines compile the very same code without the wasm glue.
mod eval;
use eval::{eval, format_number};

/// Arguments of `calc`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CalcArgs {
    /// An arithmetic expression: numbers, + - * / % ^, parentheses, and the
    /// functions sqrt, abs, ln, log10, sin, cos, tan, floor, ceil, round.
    /// Example: "2 * (3 + 4) ^ 2".
    #[schemars(length(min = 1, max = 1000))]
    expression: String,
}

/// What `calc` returns as structured output.
#[derive(Serialize, JsonSchema)]
struct CalcResult {
    /// The value of the expression.
    value: f64,
}

fn calc(args: CalcArgs) -> Result<Output, ToolError> {
    let value = eval(&args.expression).map_err(ToolError::invalid_input)?;
    if !value.is_finite() {
        return Err(ToolError::invalid_input(format!(
            "{:?} has no finite value (division by zero or overflow)",
            args.expression
        )));
    }
    Ok(Output::json(&CalcResult { value }).with_content(format_number(value)))
}

toolhost_guest::export_tools! {
    Tool::new("calc", "Evaluate an arithmetic expression and return its value", calc)
        .output::<CalcResult>()
        .read_only()
        .idempotent(),
}
