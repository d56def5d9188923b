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
//! - [`wire`] is the edge: it reads OpenAI, LangChain, Anthropic and MCP tool
//!   calls into [`ToolCall`]s and writes tool definitions and [`Outcome`]s
//!   back in each format.
//! - [`agent`] is the agent loop over the [`model`] providers.
//! - `serve` (feature `serve`) serves the tools over MCP (stdio and
//!   Streamable HTTP) and a plain HTTP API.
//!
//! # Features
//!
//! - `cli` (default): what the `toolhost` binary needs beyond the library:
//!   its argument parser and stderr logger.
//! - `serve` (default): the MCP server and the HTTP API (rmcp, axum).
//!
//! An embedder who only runs tools depends on `toolhost` with
//! `default-features = false` and compiles neither.
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
pub mod authoring;
mod component;
pub mod describe;
pub mod grants;
pub mod limits;
pub mod manifest;
pub mod model;
pub mod observe;
pub mod outcome;
pub mod printable;
mod result_cache;
pub mod sandbox;
mod schema;
#[cfg(feature = "serve")]
pub mod serve;
mod spec;
pub mod stores;
pub mod tool_call;
mod tool_host;
pub mod wire;

pub use component::{Approval, ClientCapability, ComponentConfig};
pub use grants::Grants;
pub use limits::Limits;
pub use manifest::Manifest;
pub use outcome::{CallError, ErrorType, Outcome};
pub use sandbox::{CacheStatus, SandboxOptions};
pub use spec::{Hints, MAX_DESCRIPTION, MAX_SCHEMA, MAX_TITLE, MAX_TOOLS_PER_COMPONENT, ToolSpec};
pub use tool_call::ToolCall;
pub use tool_host::{ApproveAll, Approver, CallEnv, CallResult, LoadError, RefuseAll, ToolHost};
pub use wire::results::ToolMessage;
