//! A tool component built against `toolhost:tool@0.1.0` with wit-bindgen
//! directly, as components built before contract 0.2 were: the host must
//! keep loading and running it unchanged. Built by `scripts/build-tools.sh`.

#![allow(unsafe_code)]

wit_bindgen::generate!({
    world: "toolhost:tool/toolbox@0.1.0",
    path: ["../../wit", "../../wit/v0.1"],
    generate_all,
});

use exports::toolhost::tool0_1_0::tool::Guest;
use toolhost::tool0_1_0::host::{self, Level};
use toolhost::tool0_1_0::types::{CallContext, Hints, ToolError, ToolOutput, ToolSpec};

struct Probe;

impl Guest for Probe {
    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "old_echo".into(),
            description: "Echo `text`, with the configured suffix (contract 0.1)".into(),
            input_schema:
                r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#
                    .into(),
            output_schema: None,
            hints: Hints::READ_ONLY,
        }]
    }

    fn call(
        name: String,
        arguments: String,
        context: CallContext,
    ) -> Result<ToolOutput, ToolError> {
        host::log(
            Level::Info,
            &format!("0.1 call {} to {name}", context.call_id),
        );
        if arguments.contains("\"fail\"") {
            return Err(ToolError {
                kind: "asked_to_fail".into(),
                message: "failing as asked".into(),
                retryable: false,
            });
        }
        let suffix = host::config("suffix").unwrap_or_default();
        Ok(ToolOutput {
            content: format!("{arguments}{suffix}"),
            structured: None,
            artifact: Some("from 0.1".into()),
        })
    }
}

export!(Probe);
