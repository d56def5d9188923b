//! Calling the other tools the host has loaded (contract 0.2.1's
//! `toolhost:tool/tools`), for a tool whose manifest entry grants
//! `call_tools`.
//!
//! Each call goes through the host's dispatcher, as a model's call does:
//! the callee runs in its own fresh instance, under its own grants and
//! limits, its arguments checked, approved where its manifest says so.
//! The host refuses calls `call_tools` does not grant, calls past the
//! calling call's budget (50 by default) and calls of tools that call
//! tools themselves: each comes back as a [`CallFailed`].
//!
//! ```no_run
//! use toolhost_guest::tools;
//!
//! # fn run() -> Result<(), tools::CallFailed> {
//! let answer = tools::call("calc", &serde_json::json!({"expression": "6*7"}))?;
//! assert_eq!(answer.to_text(), "42");
//! // Several at once: they run in parallel on the host.
//! let sizes = tools::call_all(&[
//!     ("word_count", serde_json::json!({"text": "one two"})),
//!     ("word_count", serde_json::json!({"text": "three"})),
//! ]);
//! # Ok(()) }
//! ```

use std::fmt;

use crate::bindings::toolhost::tool::tools as wit_tools;
use crate::bindings::toolhost::tool::types as wit;
use crate::{Content, Output};

/// Why a call of another tool failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailed {
    /// The host's kind (`capability_denied`, `unknown_tool`,
    /// `invalid_arguments`, `timeout`, …, or `budget_exhausted`), or for an
    /// error the callee returned itself, the callee's own kind.
    pub kind: String,
    /// What went wrong.
    pub message: String,
    /// Whether calling again can help.
    pub retryable: bool,
}

impl fmt::Display for CallFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for CallFailed {}

impl From<CallFailed> for crate::ToolError {
    fn from(failed: CallFailed) -> Self {
        Self {
            kind: failed.kind,
            message: failed.message,
            retryable: failed.retryable,
        }
    }
}

/// Call tool `name` with `arguments` (a JSON object) and wait for its result.
///
/// # Errors
///
/// The host's refusal, or the callee's failure.
pub fn call(name: &str, arguments: &serde_json::Value) -> Result<Output, CallFailed> {
    convert(wit_tools::call_tool(name, &arguments.to_string()))
}

/// Call each `(name, arguments)` at once and wait for them all: one result
/// per call, in order. The host runs at most the grant's `concurrency` (8
/// by default) at a time; a list holds at most 1024 calls.
pub fn call_all(calls: &[(&str, serde_json::Value)]) -> Vec<Result<Output, CallFailed>> {
    let calls: Vec<wit_tools::ToolCall> = calls
        .iter()
        .map(|(name, arguments)| wit_tools::ToolCall {
            name: (*name).to_owned(),
            arguments: arguments.to_string(),
        })
        .collect();
    wit_tools::call_tools(&calls)
        .into_iter()
        .map(convert)
        .collect()
}

fn convert(result: Result<wit::ToolOutput, wit::ToolError>) -> Result<Output, CallFailed> {
    match result {
        Ok(output) => Ok(Output {
            content: output.content.into_iter().map(Content::from).collect(),
            structured: output.structured,
            artifact: output.artifact,
        }),
        Err(error) => Err(CallFailed {
            kind: error.kind,
            message: error.message,
            retryable: error.retryable,
        }),
    }
}
