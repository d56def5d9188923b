//! toolhost: run LLM tool calls in fresh, capability-scoped WebAssembly
//! sandboxes.
//!
//! Every call gets its own component instance with only the capabilities its
//! manifest grants, under fuel, wall-clock and memory limits, and ends in one
//! typed [`Outcome`] that becomes a ToolMessage.
//!
//! - [`Manifest`] reads `toolhost.toml`; [`grants`] and [`limits`] are what it
//!   grants and bounds, and can be built in code instead.
//! - [`ToolHost`] loads components and runs calls, one or a batch at a time.
//! - [`ToolCall`] parses OpenAI, LangChain, Anthropic and MCP tool calls; [`Outcome`] maps to
//!   the ToolMessage JSON; [`formats`] renders tool definitions.
//! - [`logging`] is the stderr logger the binary installs, which escapes the
//!   hostile text tools and models put in log lines.
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! use toolhost::{Manifest, ToolCall, ToolHost};
//!
//! let host = ToolHost::load(&Manifest::load("toolhost.toml".as_ref())?).await?;
//! let outcome = host.call(ToolCall::new("1", "calc", serde_json::json!({"expression": "6*7"}))).await;
//! println!("{}", serde_json::to_string(&outcome.to_message())?);
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod agent;
mod arguments;
pub mod dispatcher;
pub mod formats;
pub mod grants;
pub mod limits;
pub mod logging;
pub mod manifest;
pub mod model;
pub mod outcome;
pub mod sandbox;
pub mod tool_call;

pub use dispatcher::{ApproveAll, Approver, Hints, LoadError, RefuseAll, ToolHost, ToolSpec};
pub use grants::Grants;
pub use limits::Limits;
pub use manifest::{ComponentConfig, Manifest};
pub use outcome::{CallError, ErrorType, Outcome, ToolMessage};
pub use sandbox::{CacheStatus, SandboxOptions};
pub use tool_call::ToolCall;
