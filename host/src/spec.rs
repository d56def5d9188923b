//! What a tool is, as the host and the model see it: its [`ToolSpec`]
//! and [`Hints`], the rules a name follows and the sizes a spec may reach.
//!
//! A leaf of the crate: it imports nothing of ours, so every layer above
//! (the sandbox, the host, the wire formats, the model providers, the
//! front ends) can use it.

use serde_json::Value;

/// What the model sees of a tool, validated at load.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// `^[A-Za-z0-9_-]{1,64}$`, unique across the host.
    pub name: String,
    /// For people: the tool's own title (contract 0.2), or one derived
    /// from the name.
    pub title: String,
    /// For the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// JSON Schema of the structured output, if declared.
    pub output_schema: Option<Value>,
    /// Behaviour hints.
    pub hints: Hints,
}

/// A tool's behaviour hints (MCP's tool annotations).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// Changes nothing outside its instance.
    pub read_only: bool,
    /// May delete or overwrite data.
    pub destructive: bool,
    /// Repeating a call has no further effect.
    pub idempotent: bool,
    /// Talks to the world outside the host.
    pub open_world: bool,
}

/// The longest title a tool may have.
pub const MAX_TITLE: usize = 128;

/// The longest description a tool may have: models read every description
/// on every turn, and a host must not pass megabytes of one on.
pub const MAX_DESCRIPTION: usize = 8 * 1024;

/// The largest input or output schema, as JSON text.
pub const MAX_SCHEMA: usize = 64 * 1024;

/// The most tools one component may provide.
pub const MAX_TOOLS_PER_COMPONENT: usize = 256;

/// Whether `name` is a tool name: `^[A-Za-z0-9_-]{1,64}$`, what OpenAI and
/// Anthropic both accept.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A title for people, from the tool's name: `word_count` → `Word count`.
/// The 0.1 contract has no title of its own.
pub fn title(name: &str) -> String {
    let spaced = name.replace(['_', '-'], " ");
    let mut chars = spaced.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
