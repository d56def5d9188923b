//! The `calc` tool as a native program, one process per call: the usual
//! "sandbox by process" baseline. Same evaluator as the wasm tool.
//!
//! Run with `native-calc '{"expression":"6*7"}'`; prints `{"content":"42"}`.

use std::process::ExitCode;

#[path = "../../../../example-tools/calc/src/eval.rs"]
#[allow(dead_code, unused_imports)]
mod calc;

fn main() -> ExitCode {
    let arguments = std::env::args().nth(1).unwrap_or_default();
    let result = serde_json::from_str::<serde_json::Value>(&arguments)
        .map_err(|e| e.to_string())
        .and_then(|args| {
            let expression = args["expression"]
                .as_str()
                .ok_or("`expression` is missing")?;
            calc::eval(expression)
        });
    match result {
        Ok(value) => {
            println!(
                "{}",
                serde_json::json!({"content": calc::format_number(value)})
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            println!("{}", serde_json::json!({"error": error}));
            ExitCode::FAILURE
        }
    }
}
