//! toolhost: run LLM tool calls in fresh, capability-scoped WebAssembly
//! sandboxes.
//!
//! Every call gets its own component instance with only the capabilities its
//! manifest grants, under fuel, wall-clock and memory limits, and ends in one
//! typed [`Outcome`] that becomes a ToolMessage.
//!
//! - [`Manifest`] reads `toolhost.toml`; [`Grants`] and [`Limits`] are what it
//!   grants and bounds, and can be built in code instead.
//! - [`ToolHost`] loads components and runs calls: [`ToolHost::call`],
//!   [`ToolHost::call_batch`], [`ToolHost::call_stream`], each with its
//!   [`CallOptions`] set by builder.
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

// The embedder's vocabulary is re-exported at the crate root below, and the
// modules that hold it are private: every public type has one path. The
// public modules are the front ends' toolkits, each used by name.
pub mod agent;
mod arguments;
pub mod authoring;
mod component;
pub mod describe;
mod durable_tasks;
pub mod duration;
mod fair_shares;
mod fixes;
mod grants;
pub mod identity;
mod limits;
mod manifest;
pub mod model;
mod observe;
mod outcome;
pub mod printable;
pub mod registry;
mod result_cache;
mod sandbox;
mod schema;
#[cfg(feature = "serve")]
pub mod serve;
mod spec;
pub mod stores;
mod tool_call;
mod tool_host;
pub mod wire;

pub use component::{
    Approval, ClientCapability, ComponentConfig, ComponentSource, PinnedComponent, TaskSupport,
};
pub use fixes::Fixes;
pub use grants::{
    AllowedHosts, DEFAULT_QUOTA, FileGrant, FileMode, GrantError, Grants, HostPattern, ToolCalls,
};
pub use limits::{Limits, LimitsError, MAX_TIMEOUT, ReadyInstances};
pub use manifest::{
    DEFAULT_MANIFEST, Manifest, ManifestError, RegistryConfig, ServeSettings, SessionSettings,
};
pub use observe::{Answer, Asker, CallObserver, LogLevel, NobodyToAsk, Progress, Question};
pub use outcome::{
    CallError, CallStats, ContentBlock, EmbeddedResource, ErrorType, INVALID_OUTPUT, Media,
    Outcome, ResourceContents, ResourceLink, ToolOutput,
};
/// The baselines the benchmarks compare the host with: not API, and built
/// only with the `bench` feature, which the benches turn on.
#[cfg(feature = "bench")]
#[doc(hidden)]
pub use sandbox::baseline;
pub use sandbox::{
    ASK_WAIT, BESIDE_MANIFEST, CacheStatus, CompileHook, Compiling, MAX_BLOCKS, MAX_MEDIA,
    SandboxOptions, default_cache_dir, dir_for_manifest, estimate_compile, raise_descriptor_limit,
};
pub use spec::{
    Hints, MAX_DESCRIPTION, MAX_SCHEMA, MAX_TITLE, MAX_TOOLS_PER_COMPONENT, ToolSpec, valid_name,
};
pub use tool_call::{Arguments, ArgumentsError, ToolCall};
pub use tool_host::{
    ApproveAll, Approver, BatchRequest, CallOptions, CallRequest, CallResult, LoadError, Loading,
    LockMode, PinReport, Pinned, RefuseAll, RefuseWithFix, StreamRequest, ToolHost,
};
