//! A tool component built against `toolhost:tool@0.2.0` with wit-bindgen
//! directly (`wit/v0.2.0` keeps that contract as it was published): the
//! host speaks 0.2.1 and must keep loading and running it unchanged. Built
//! by `scripts/build-tools.sh`.

#![allow(unsafe_code)]

wit_bindgen::generate!({
    world: "toolhost:tool/toolbox@0.2.0",
    path: ["../../wit", "../../wit/v0.2.0"],
    generate_all,
});

use exports::toolhost::tool0_2_0::tool::Guest;
use toolhost::tool0_2_0::host;
use toolhost::tool0_2_0::types::{
    CallContext, ContentBlock, Hints, ToolError, ToolOutput, ToolSpec,
};

struct Probe;

impl Guest for Probe {
    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "echo_0_2_0".into(),
            title: Some("Echo (contract 0.2.0)".into()),
            description: "Echo the arguments, and ask nothing unless `ask` is true".into(),
            input_schema: r#"{"type":"object","properties":{"ask":{"type":"boolean"}}}"#.into(),
            output_schema: None,
            hints: Hints::READ_ONLY,
        }]
    }

    fn call(
        _name: String,
        arguments: String,
        _context: CallContext,
    ) -> Result<ToolOutput, ToolError> {
        let mut text = arguments.clone();
        if arguments.contains("\"ask\":true") {
            let schema = r#"{"type":"object","properties":{"ok":{"type":"boolean"}}}"#;
            match host::ask("OK?", schema) {
                Ok(answer) => text = format!("answer: {answer}"),
                Err(refused) => text = format!("refused: {}", refused.message),
            }
        }
        Ok(ToolOutput {
            content: vec![ContentBlock::Text(text)],
            structured: None,
            artifact: None,
        })
    }
}

export!(Probe);
