//! Result caching for tools that opted in (`cache = "5m"` on their
//! `[[tool]]` entry): a call with the same arguments and the same injected
//! context, within the time to live, is answered with the earlier result
//! and never instantiates the tool.
//!
//! Only tools whose hints say both `read-only` and `idempotent` are cached,
//! only successful results are kept, and a component that may write (a
//! read-write directory, a store) or holds secrets cannot opt in: the
//! dispatcher refuses that at load. The context is part of the key, so one
//! user's result is never another's.

use std::sync::Arc;
use std::time::Duration;

use crate::outcome::{ContentBlock, ToolOutput};

/// The most one component's cached results may hold: enough for thousands
/// of typical results, and a bound on what a chatty tool can make the host
/// keep.
pub const MAX_CACHED_BYTES: u64 = 16 * 1024 * 1024;

/// The longest time to live a manifest may give.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// What identifies a call for the cache.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    tool: Arc<str>,
    /// The arguments as canonical JSON text (keys sorted).
    arguments: String,
    /// The injected context as JSON text, empty without one.
    context: String,
}

/// One component's cached results.
#[derive(Clone)]
pub(crate) struct ResultCache {
    entries: moka::sync::Cache<Key, Arc<ToolOutput>>,
}

impl std::fmt::Debug for ResultCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultCache")
            .field("entries", &self.entries.entry_count())
            .finish()
    }
}

impl ResultCache {
    /// A cache whose entries live `ttl`.
    pub(crate) fn new(ttl: Duration) -> Self {
        let entries = moka::sync::Cache::builder()
            .time_to_live(ttl)
            .max_capacity(MAX_CACHED_BYTES)
            .weigher(|key: &Key, output: &Arc<ToolOutput>| {
                let size = key.arguments.len() + key.context.len() + weight(output);
                u32::try_from(size).unwrap_or(u32::MAX)
            })
            .build();
        Self { entries }
    }

    /// The result of an earlier identical call, if one is still fresh.
    pub(crate) fn get(
        &self,
        tool: &str,
        arguments: &str,
        context: Option<&serde_json::Value>,
    ) -> Option<Arc<ToolOutput>> {
        self.entries.get(&key(tool, arguments, context))
    }

    /// Keep `output` for later identical calls.
    pub(crate) fn put(
        &self,
        tool: &str,
        arguments: &str,
        context: Option<&serde_json::Value>,
        output: ToolOutput,
    ) {
        self.entries
            .insert(key(tool, arguments, context), Arc::new(output));
    }
}

fn key(tool: &str, arguments: &str, context: Option<&serde_json::Value>) -> Key {
    Key {
        tool: Arc::from(tool),
        arguments: arguments.to_owned(),
        context: context.map(ToString::to_string).unwrap_or_default(),
    }
}

/// About how many bytes `output` holds.
fn weight(output: &ToolOutput) -> usize {
    let structured = output
        .structured
        .as_ref()
        .map_or(0, |value| value.to_string().len());
    let blocks: usize = output
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Image(media) | ContentBlock::Audio(media) => media.data.len(),
            other => other.as_text().len(),
        })
        .sum();
    structured + blocks + 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_is_part_of_the_key() {
        let cache = ResultCache::new(Duration::from_secs(60));
        let ada = serde_json::json!({"user": "ada"});
        let bob = serde_json::json!({"user": "bob"});
        cache.put("t", "{}", Some(&ada), ToolOutput::text("ada's"));
        assert_eq!(cache.get("t", "{}", Some(&ada)).unwrap().to_text(), "ada's");
        assert!(cache.get("t", "{}", Some(&bob)).is_none());
        assert!(cache.get("t", "{}", None).is_none());
        assert!(cache.get("u", "{}", Some(&ada)).is_none());
        assert!(cache.get("t", "{\"a\":1}", Some(&ada)).is_none());
    }

    #[test]
    fn entries_expire() {
        let cache = ResultCache::new(Duration::from_millis(50));
        cache.put("t", "{}", None, ToolOutput::text("x"));
        assert!(cache.get("t", "{}", None).is_some());
        std::thread::sleep(Duration::from_millis(120));
        assert!(cache.get("t", "{}", None).is_none());
    }
}
