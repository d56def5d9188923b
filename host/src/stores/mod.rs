//! Key-value stores that tools reach through `wasi:keyvalue`: named in the
//! manifest (`[store.NAME]`), granted per tool (`stores = ["NAME"]`), split
//! into namespaces by scope, bounded by quotas, and kept either in an
//! embedded file (`embedded.rs`, redb) or in Redis (`redis.rs`). The rules
//! both backends keep alike (quotas and counters) are in `rules.rs`, so the
//! two cannot drift apart.
//!
//! A store is opened on its first use, not at load, so `toolhost tools` and
//! `toolhost check` never touch it, and one process's hot reloads share the
//! open store (redb allows one process per file, and a reload must not lock
//! itself out).
//!
//! **Namespaces.** A `global` store has one namespace. A store scoped by a
//! context key (`scope = "user"`) has one per value of that key in the
//! call's injected context: a call whose context has `{"user": "ada"}`
//! sees only Ada's keys, and a call without `user` in its context is
//! refused the store. A string and an integer are different namespaces
//! (`"7"` is not `7`); other numbers are refused, so that `7` and `7.0`
//! cannot be two spellings of one namespace. The value comes from the
//! application, never from the model.
//!
//! **Quotas** hold per namespace (keys, bytes of keys and values together,
//! the size of one key and of one value) and for the store as a whole
//! (namespaces, bytes), so callers that invent namespaces cannot grow it
//! without limit. A write that would pass one is refused whole before
//! anything is written, in both backends.
//!
//! **Counters** (`atomics.increment`) are canonical decimal text from 0 to
//! 2^63 - 1 (the range of Redis's `HINCRBY`), in both backends alike.

pub(crate) mod embedded;
#[cfg(test)]
mod parity;
pub(crate) mod redis;
pub(crate) mod rules;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;

/// A store as the manifest declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Its name: what tools open and what `stores = [...]` grants.
    pub name: String,
    /// Where its data lives.
    pub backend: Backend,
    /// How calls are kept apart.
    pub scope: Scope,
    /// What it may hold.
    pub quota: Quota,
}

/// Where a store's data lives.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// A redb file on local disk: no setup, ACID writes, one process at a
    /// time.
    Embedded {
        /// The file.
        path: PathBuf,
    },
    /// A Redis server, shared by every toolhost process that names it.
    Redis {
        /// `redis://[user:password@]host[:port][/db]` or `redis+unix:///path`.
        url: String,
        /// Prefix of every key toolhost writes.
        prefix: String,
    },
}

impl fmt::Debug for Backend {
    /// A Redis URL's password never reaches a log or a message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded { path } => f.debug_struct("Embedded").field("path", path).finish(),
            Self::Redis { url, prefix } => f
                .debug_struct("Redis")
                .field("url", &redacted(url))
                .field("prefix", prefix)
                .finish(),
        }
    }
}

/// `url` as it may be shown: the password of its userinfo, the values of
/// query parameters whose names suggest a secret (`password`, `pass`,
/// `token`, `auth`, …) and any fragment are replaced by `***`. Parsed as
/// Redis parses it (the `url` crate: the userinfo ends at the last `@`); a
/// URL that does not parse shows only its scheme.
pub fn redacted(url: &str) -> String {
    const HIDDEN: &str = "***";
    let scheme_only = || match url.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            format!("{scheme}://{HIDDEN}")
        }
        _ => HIDDEN.to_owned(),
    };
    let Ok(mut parsed) = ::url::Url::parse(url) else {
        return scheme_only();
    };
    if parsed.password().is_some() && parsed.set_password(Some(HIDDEN)).is_err() {
        return scheme_only();
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(name, value)| {
                let lower = name.to_lowercase();
                let secret = ["pass", "pwd", "secret", "token", "auth", "key", "cred"]
                    .iter()
                    .any(|word| lower.contains(word));
                let value = if secret {
                    HIDDEN.to_owned()
                } else {
                    value.into_owned()
                };
                (name.into_owned(), value)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    if parsed.fragment().is_some_and(|f| f != "insecure") {
        parsed.set_fragment(Some(HIDDEN));
    }
    parsed.to_string()
}

/// How a store keeps calls apart.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// Every call sees the same keys.
    Global,
    /// Each value of this key of the call's injected context has its own
    /// keys.
    ContextKey(String),
}

/// What a store may hold: per namespace, and in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Keys per namespace.
    pub max_keys: u64,
    /// Bytes of keys and values together, per namespace.
    pub max_bytes: u64,
    /// The longest key, in bytes.
    pub max_key_bytes: usize,
    /// The largest value, in bytes.
    pub max_value_bytes: usize,
    /// Namespaces holding at least one key, in the whole store.
    pub max_namespaces: u64,
    /// Bytes of keys and values together, in the whole store.
    pub max_store_bytes: u64,
}

impl Default for Quota {
    /// 10,000 keys and 64 MiB per namespace; keys up to 1 KiB, values up to
    /// 1 MiB (the most one call can have the host hold for one value); and
    /// 10,000 namespaces and 1 GiB in all, so that a store nobody sized
    /// stays smaller than the memory of a modest Redis server however many
    /// namespaces callers invent.
    fn default() -> Self {
        Self {
            max_keys: 10_000,
            max_bytes: 64 << 20,
            max_key_bytes: 1024,
            max_value_bytes: 1 << 20,
            max_namespaces: 10_000,
            max_store_bytes: 1 << 30,
        }
    }
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The write would pass a quota; nothing was written.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// `increment` found a value that is not a counter, or would take it
    /// past the largest counter.
    #[error("not a counter: {0}")]
    NotACounter(String),
    /// An embedded store's file is held by another process (the operator's
    /// details: the path). Trying again does not help while that process
    /// runs.
    #[error("store in use by another process: {0}")]
    InUse(String),
    /// The backend cannot be reached or failed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

/// A key and its value.
pub(crate) type Entry = (String, Vec<u8>);

/// The largest `max_value_size` a manifest may set: a call's host memory
/// holds a value (a batch holds several, up to [`MAX_BATCH_BYTES`]).
pub const MAX_VALUE_BYTES: usize = 16 << 20;

/// The largest `max_key_size` a manifest may set: keys are names, and the
/// host holds several at once (a page of a listing, a call's cursors).
pub const MAX_KEY_BYTES: usize = 64 << 10;

/// The most bytes of keys and values one batch read or write moves,
/// checked before the host copies a write's entries out of the guest.
pub const MAX_BATCH_BYTES: usize = 32 << 20;

/// The most keys one batch names.
pub const MAX_BATCH_KEYS: usize = 1000;

/// The most keys one `list-keys` page holds.
pub(crate) const PAGE_KEYS: usize = 1000;

/// The most bytes of keys one `list-keys` page holds, whatever the key size.
pub(crate) const PAGE_BYTES: usize = 1 << 20;

/// The longest namespace value a context may give: the value is written
/// beside every key of the namespace, and comes from whoever supplies the
/// context.
pub const MAX_NAMESPACE_BYTES: usize = 256;

/// Keys in one `list-keys` page of a store with `quota`: up to
/// [`PAGE_KEYS`], and no more than [`PAGE_BYTES`] of the longest keys.
pub(crate) fn page_keys(quota: &Quota) -> usize {
    (PAGE_BYTES / quota.max_key_bytes.max(1)).clamp(1, PAGE_KEYS)
}

/// What a backend does, for one namespace at a time. Every write checks
/// `quota` before it writes, and is all or nothing.
pub(crate) trait Engine: Send + Sync + fmt::Debug {
    fn get<'a>(
        &'a self,
        ns: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;
    fn exists<'a>(&'a self, ns: &'a str, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// Up to `limit` keys of `ns` in byte order, from the first after
    /// `after` (from the first when `None`), and whether more follow. Never
    /// reads a value.
    fn list<'a>(
        &'a self,
        ns: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<String>, bool), StoreError>>;
    fn get_many<'a>(
        &'a self,
        ns: &'a str,
        keys: Vec<String>,
    ) -> BoxFuture<'a, Result<Vec<Option<Entry>>, StoreError>>;
    /// Set every entry (the last value of a key named twice wins).
    fn set_many<'a>(
        &'a self,
        ns: &'a str,
        entries: Vec<Entry>,
        quota: Quota,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn delete_many<'a>(
        &'a self,
        ns: &'a str,
        keys: Vec<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn increment<'a>(
        &'a self,
        ns: &'a str,
        key: &'a str,
        delta: u64,
        quota: Quota,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
}

/// A named store from the manifest, opened on first use.
pub struct Store {
    config: StoreConfig,
    engine: tokio::sync::OnceCell<Arc<dyn Engine>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Store {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
    }
}

impl Store {
    /// A store for `config`; nothing is opened yet.
    pub fn new(config: StoreConfig) -> Self {
        Self {
            config,
            engine: tokio::sync::OnceCell::new(),
        }
    }

    /// How the manifest declares it.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The open backend, opening it the first time. A failed open is
    /// tried again by the next call.
    pub(crate) async fn engine(&self) -> Result<&Arc<dyn Engine>, StoreError> {
        self.engine
            .get_or_try_init(|| async {
                match &self.config.backend {
                    Backend::Embedded { path } => {
                        let path = path.clone();
                        tokio::task::spawn_blocking(move || embedded::Embedded::open(&path))
                            .await
                            .map_err(|e| StoreError::Unavailable(e.to_string()))?
                            .map(|engine| engine as Arc<dyn Engine>)
                    }
                    Backend::Redis { url, prefix } => {
                        redis::Redis::connect(url, prefix, &self.config.name)
                            .await
                            .map(|engine| Arc::new(engine) as Arc<dyn Engine>)
                    }
                }
            })
            .await
    }

    /// The namespace a call with `context` uses, or why it has none: `""`
    /// for a global store, `s:VALUE` for a string and `n:INTEGER` for an
    /// integer (in its canonical decimal spelling).
    ///
    /// # Errors
    ///
    /// For a scoped store, when the context lacks the scope key, or its
    /// value is not a non-empty string of at most [`MAX_NAMESPACE_BYTES`]
    /// or an integer.
    pub(crate) fn namespace(&self, context: Option<&serde_json::Value>) -> Result<String, String> {
        let key = match &self.config.scope {
            Scope::Global => return Ok(String::new()),
            Scope::ContextKey(key) => key,
        };
        let name = &self.config.name;
        match context.and_then(|c| c.get(key)) {
            Some(serde_json::Value::String(value)) if value.len() > MAX_NAMESPACE_BYTES => {
                Err(format!(
                    "store '{name}' is kept per `{key}` of the call's context, and this call's `{key}` has {} bytes; \
                     the application must supply at most {MAX_NAMESPACE_BYTES}",
                    value.len()
                ))
            }
            Some(serde_json::Value::String(value)) if !value.is_empty() => Ok(format!("s:{value}")),
            Some(serde_json::Value::Number(value)) if value.is_i64() || value.is_u64() => {
                Ok(format!("n:{value}"))
            }
            Some(serde_json::Value::Number(value)) => Err(format!(
                "store '{name}' is kept per `{key}` of the call's context, and this call's `{key}` is {value}, \
                 a number that is not an integer; the application must supply a string or an integer"
            )),
            _ => Err(format!(
                "store '{name}' is kept per `{key}` of the call's context, and this call's context has no `{key}` \
                 (a non-empty string or an integer); the application must supply it"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scoped() -> Store {
        Store::new(StoreConfig {
            name: "notes".into(),
            backend: Backend::Embedded {
                path: "/nonexistent".into(),
            },
            scope: Scope::ContextKey("user".into()),
            quota: Quota::default(),
        })
    }

    fn namespace(context: serde_json::Value) -> Result<String, String> {
        scoped().namespace(Some(&context))
    }

    #[test]
    fn scoped_namespaces_come_from_the_context_only() {
        assert_eq!(namespace(json!({"user": "ada"})).unwrap(), "s:ada");
        assert_ne!(
            namespace(json!({"user": "ada"})),
            namespace(json!({"user": "bob"}))
        );
        assert!(
            scoped()
                .namespace(None)
                .unwrap_err()
                .contains("has no `user`")
        );
        assert!(namespace(json!({"user": ""})).is_err());
        assert!(namespace(json!({"user": {"id": 1}})).is_err());
        assert!(namespace(json!({"user": null})).is_err());
    }

    #[test]
    fn a_number_and_a_string_with_the_same_text_are_different_namespaces() {
        assert_eq!(namespace(json!({"user": 7})).unwrap(), "n:7");
        assert_eq!(namespace(json!({"user": "7"})).unwrap(), "s:7");
        assert_eq!(namespace(json!({"user": -7})).unwrap(), "n:-7");
        assert_eq!(
            namespace(json!({"user": u64::MAX})).unwrap(),
            format!("n:{}", u64::MAX)
        );
        // A text that looks like another namespace's encoding stays text.
        assert_eq!(namespace(json!({"user": "n:7"})).unwrap(), "s:n:7");
        // Only integers: 7.0 and 7 must not be two namespaces.
        for spelling in ["7.0", "7e0", "0.5", "1e300", "18446744073709551616"] {
            let context: serde_json::Value =
                serde_json::from_str(&format!("{{\"user\": {spelling}}}")).unwrap();
            let refused = namespace(context).unwrap_err();
            assert!(refused.contains("not an integer"), "{spelling}: {refused}");
        }
    }

    #[test]
    fn namespace_values_are_bounded() {
        let longest = "a".repeat(MAX_NAMESPACE_BYTES);
        assert!(namespace(json!({ "user": longest })).is_ok());
        let refused = namespace(json!({ "user": format!("{longest}a") })).unwrap_err();
        assert!(refused.contains("at most 256"), "{refused}");
    }

    #[test]
    fn redis_passwords_and_secret_parameters_never_show() {
        let secret = "s3cret";
        for (url, shown) in [
            ("redis://:s3cret@h:1/2", "redis://:***@h:1/2"),
            ("redis://u:s3cret@h", "redis://u:***@h"),
            // The userinfo ends at the last `@`, as Redis reads it.
            ("redis://u:p@s3cret@h", "redis://u:***@h"),
            ("redis://u:s3cret@x@y@h:6379/0", "redis://u:***@h:6379/0"),
            ("redis://u:s3c%40ret@h", "redis://u:***@h"),
            ("redis://h:6379", "redis://h:6379"),
            ("redis://h/?password=s3cret", "redis://h/?password=***"),
            (
                "redis://h/?protocol=resp3&Pass=s3cret",
                "redis://h/?protocol=resp3&Pass=***",
            ),
            (
                "redis+unix:///run/r.sock?db=1&pass=s3cret",
                "redis+unix:///run/r.sock?db=1&pass=***",
            ),
            (
                "redis://h/?auth_token=s3cret&apikey=s3cret",
                "redis://h/?auth_token=***&apikey=***",
            ),
            ("redis://h/#s3cret", "redis://h/#***"),
            ("redis://:s3cret@[::1", "redis://***"),
            ("s3cret", "***"),
            ("redis://u:s3cret@h:notaport", "redis://***"),
        ] {
            let got = redacted(url);
            assert_eq!(got, shown, "{url}");
            assert!(!got.contains(secret), "{url} showed {got}");
            let backend = Backend::Redis {
                url: url.into(),
                prefix: "p".into(),
            };
            let debug = format!("{backend:?}");
            assert!(!debug.contains(secret), "{debug}");
            let store = Store::new(StoreConfig {
                name: "s".into(),
                backend,
                scope: Scope::Global,
                quota: Quota::default(),
            });
            assert!(!format!("{store:?}").contains(secret));
        }
    }
}
