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

use crate::outcome::{ContentBlock, ResourceContents, ToolOutput};

/// The most one component's cached results may hold: enough for thousands
/// of typical results, and a bound on what a chatty tool can make the host
/// keep.
pub const MAX_CACHED_BYTES: u64 = 16 * 1024 * 1024;

/// The largest result kept: a bigger one is answered and not cached, so no
/// one result can push out all the others.
pub const MAX_CACHED_RESULT: usize = 1024 * 1024;

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
                u32::try_from(size(key, output)).unwrap_or(u32::MAX)
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

    /// Keep `output` for later identical calls, unless it and its key (the
    /// arguments, the context) are larger than [`MAX_CACHED_RESULT`].
    pub(crate) fn put(
        &self,
        tool: &str,
        arguments: &str,
        context: Option<&serde_json::Value>,
        output: ToolOutput,
    ) {
        let key = key(tool, arguments, context);
        if size(&key, &output) > MAX_CACHED_RESULT {
            return;
        }
        self.entries.insert(key, Arc::new(output));
    }
}

fn key(tool: &str, arguments: &str, context: Option<&serde_json::Value>) -> Key {
    Key {
        tool: Arc::from(tool),
        arguments: arguments.to_owned(),
        context: context.map(ToString::to_string).unwrap_or_default(),
    }
}

/// About how many bytes an entry holds: its key's text and its result.
fn size(key: &Key, output: &ToolOutput) -> usize {
    key.tool.len() + key.arguments.len() + key.context.len() + weight(output)
}

/// About how many bytes `output` holds: every block's strings and bytes,
/// the structured result and the artifact.
fn weight(output: &ToolOutput) -> usize {
    let structured = output
        .structured
        .as_ref()
        .map_or(0, |value| value.to_string().len());
    let artifact = output.artifact.as_ref().map_or(0, String::len);
    let opt = |text: &Option<String>| text.as_ref().map_or(0, String::len);
    let blocks: usize = output
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.len(),
            ContentBlock::Image(media) | ContentBlock::Audio(media) => {
                media.mime_type.len() + media.data.len()
            }
            ContentBlock::ResourceLink(link) => {
                link.uri.len() + link.name.len() + opt(&link.mime_type) + opt(&link.description)
            }
            ContentBlock::Resource(resource) => {
                resource.uri.len()
                    + opt(&resource.mime_type)
                    + match &resource.contents {
                        ResourceContents::Text(text) => text.len(),
                        ResourceContents::Blob(data) => data.len(),
                    }
            }
        })
        .sum();
    // The blocks' own bookkeeping.
    let overhead = 64 * (output.content.len() + 1);
    structured + artifact + blocks + overhead
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

    #[test]
    fn a_result_weighs_what_it_holds_and_a_large_one_is_not_kept() {
        use crate::outcome::{EmbeddedResource, Media};
        let blob = |n: usize| bytes::Bytes::from(vec![0u8; n]);
        let resource = ToolOutput {
            content: vec![ContentBlock::Resource(EmbeddedResource {
                uri: "file:///a".into(),
                mime_type: None,
                contents: ResourceContents::Blob(blob(300_000)),
            })],
            ..ToolOutput::default()
        };
        assert!(weight(&resource) > 300_000);
        let artifact = ToolOutput {
            artifact: Some("x".repeat(200_000)),
            ..ToolOutput::text("small")
        };
        assert!(weight(&artifact) > 200_000);
        let image = ToolOutput {
            content: vec![ContentBlock::Image(Media {
                mime_type: "image/png".into(),
                data: blob(MAX_CACHED_RESULT),
            })],
            ..ToolOutput::default()
        };
        let cache = ResultCache::new(Duration::from_secs(60));
        cache.put("t", "{}", None, image);
        cache.put("t", "{\"a\":1}", None, artifact);
        assert!(cache.get("t", "{}", None).is_none(), "too large to keep");
        assert!(cache.get("t", "{\"a\":1}", None).is_some());
        // A small result of a call with huge arguments is as large.
        let arguments = format!("{{\"a\":\"{}\"}}", "x".repeat(MAX_CACHED_RESULT));
        cache.put("t", &arguments, None, ToolOutput::text("small"));
        assert!(
            cache.get("t", &arguments, None).is_none(),
            "too large to keep"
        );
    }
}
