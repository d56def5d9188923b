//! One request to run a tool, as every front end hands it to the dispatcher.
//!
//! [`crate::wire::calls`] reads the shapes models and frameworks write.

use serde_json::{Map, Value};

/// One request to run a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The `tool_call_id` the answer must carry.
    pub id: String,
    /// The tool's name as the model wrote it (empty when a malformed call
    /// had no readable name).
    pub name: String,
    /// The arguments as received.
    pub arguments: Arguments,
}

impl ToolCall {
    /// A call with arguments already parsed.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: Arguments::Json(arguments),
        }
    }

    /// A call with arguments as JSON text, as OpenAI sends them; the text is
    /// checked when the call runs, so bad JSON becomes `invalid_arguments`.
    pub fn with_raw_arguments(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: Arguments::Text(arguments.into()),
        }
    }
}

/// Arguments as received: text the model wrote, a parsed value, or the
/// reason a call could not be read at all.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Arguments {
    /// JSON text, not yet parsed (OpenAI's `function.arguments`).
    Text(String),
    /// A parsed value (LangChain's `args`, Anthropic's `input`, MCP's
    /// `arguments`).
    Json(Value),
    /// An element of a batch fit no accepted call shape; the message says
    /// which element, why, and what to send instead. Such a call is answered
    /// `invalid_arguments` and never runs: it is a call at all only so that
    /// it gets its answer in order with the others.
    Malformed(String),
}

impl Arguments {
    /// The arguments as a JSON value. Empty text means no arguments (`{}`),
    /// which some endpoints send for tools without parameters.
    ///
    /// # Errors
    ///
    /// [`ArgumentsError`], whose message is for the model: the text is not
    /// JSON (or nests deeper than serde_json's recursion limit of 128), or
    /// the call was malformed.
    pub fn parse(&self) -> Result<Value, ArgumentsError> {
        match self {
            Self::Json(value) => Ok(value.clone()),
            Self::Text(text) if text.trim().is_empty() => Ok(Value::Object(Map::new())),
            Self::Text(text) => serde_json::from_str(text).map_err(ArgumentsError::NotJson),
            Self::Malformed(message) => Err(ArgumentsError::Malformed(message.clone())),
        }
    }
}

/// Why a call's arguments could not be read; its message is written for the
/// model that sent them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArgumentsError {
    /// The arguments' text is not JSON.
    #[error("arguments are not valid JSON ({0})")]
    NotJson(serde_json::Error),
    /// The call fit no accepted shape (see [`Arguments::Malformed`]).
    #[error("{0}")]
    Malformed(String),
}

/// A set of tool call ids that holds a 128-bit hash per id (16 bytes; 20 to
/// 60 with the hash table's slack and growth), whatever the ids' lengths: a batch of
/// any length can be checked for repeated ids, and given fresh ones,
/// without keeping its ids. The two halves of the hash are SipHash under
/// one random key of the set's own, of the id tagged 0 and tagged 1: no
/// batch can be written to make two ids collide, and by chance two of a
/// billion ids collide with odds of about 1 in 10^20.
pub(crate) struct IdSet {
    key: std::hash::RandomState,
    hashes: std::collections::HashSet<u128>,
}

impl IdSet {
    pub(crate) fn new() -> Self {
        Self {
            key: std::hash::RandomState::new(),
            hashes: std::collections::HashSet::new(),
        }
    }

    fn hash(&self, id: &str) -> u128 {
        use std::hash::BuildHasher as _;
        u128::from(self.key.hash_one((0u8, id))) | (u128::from(self.key.hash_one((1u8, id))) << 64)
    }

    /// Add `id`; false when it was there already.
    pub(crate) fn insert(&mut self, id: &str) -> bool {
        self.hashes.insert(self.hash(id))
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.hashes.contains(&self.hash(id))
    }
}

impl std::fmt::Debug for IdSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IdSet({} ids)", self.hashes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::IdSet;

    #[test]
    fn an_id_set_tells_ids_apart_and_knows_repeats() {
        let mut ids = IdSet::new();
        assert!(ids.insert("call_1"));
        assert!(ids.insert("call_2"));
        assert!(ids.insert(""));
        assert!(!ids.insert("call_1"));
        assert!(ids.contains("call_2"));
        assert!(!ids.contains("call_3"));
        // Two sets hash with keys of their own.
        let other = IdSet::new();
        assert_ne!(ids.hash("call_1"), other.hash("call_1"));
        assert_ne!(ids.hash("call_1"), ids.hash("call_2"));
        // The halves are hashes of their own.
        let hash = ids.hash("call_1");
        assert_ne!(hash as u64, (hash >> 64) as u64);
    }
}
