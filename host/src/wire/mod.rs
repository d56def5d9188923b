//! The edge: every wire shape toolhost reads or writes, in one place.
//!
//! - [`parse_batch`]: tool calls as OpenAI, LangChain, Anthropic and MCP write
//!   them, read into [`ToolCall`](crate::ToolCall)s; shapes it does not
//!   know are refused with a message that names the accepted ones.
//! - [`BatchFile`]: a batch from a file or a stream, copied, checked whole
//!   and then read a call at a time, so that a batch of any length holds
//!   only its calls in flight and a hash per id.
//! - [`definitions`]: tool definitions for OpenAI, Anthropic and MCP.
//! - [`results`]: outcomes as ToolMessages, OpenAI chat completions'
//!   messages, Anthropic `tool_result` blocks and MCP `CallToolResult`s.
//! - [`providers`]: what each model provider takes in a tool result (image
//!   types, sizes and counts, no empty text), for those answers and for the
//!   agent loop's requests alike; [`image`] reads an image's type and size
//!   from its bytes for it.
//!
//! Everything behind the edge (the dispatcher, the sandbox) sees only
//! [`ToolCall`](crate::ToolCall), [`ToolSpec`](crate::ToolSpec) and
//! [`Outcome`](crate::Outcome). The model providers' request and response
//! formats live with the providers, in [`crate::model`].

mod batch_file;
mod calls;
pub mod definitions;
pub mod image;
pub mod providers;
pub mod results;

pub use batch_file::{BatchFile, Reading};
pub use calls::{BatchError, parse_batch, parse_batch_at_most};
