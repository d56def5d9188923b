//! Key-value stores that tools reach through `wasi:keyvalue`: named in the
//! manifest (`[store.NAME]`), granted per tool (`stores = ["NAME"]`), split
//! into namespaces by scope, bounded by quotas, and kept either in an
//! embedded file (`embedded.rs`, redb) or in Redis (`redis.rs`).
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
//! refused the store. The value comes from the application, never from the
//! model.
//!
//! **Quotas** hold per namespace: keys, bytes (keys and values together),
//! and the size of one key and of one value. A write that would pass one is
//! refused whole and changes nothing, in both backends.
//!
//! **Counters** (`atomics.increment`) are stored as decimal ASCII, as
//! wasmtime's own `wasi:keyvalue` and Redis's `HINCRBY` keep them.

pub(crate) mod embedded;
pub(crate) mod redis;

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
    /// What one namespace may hold.
    pub quota: Quota,
}

/// Where a store's data lives.
#[derive(Clone, PartialEq, Eq)]
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

/// `url` with the password of its userinfo replaced by `***`.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_owned(),
    }
}

/// How a store keeps calls apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every call sees the same keys.
    Global,
    /// Each value of this key of the call's injected context has its own
    /// keys.
    ContextKey(String),
}

/// What one namespace of a store may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Keys.
    pub max_keys: u64,
    /// Bytes of keys and values together.
    pub max_bytes: u64,
    /// The longest key, in bytes.
    pub max_key_bytes: usize,
    /// The largest value, in bytes.
    pub max_value_bytes: usize,
}

impl Default for Quota {
    /// 10,000 keys and 64 MiB per namespace; keys up to 1 KiB, values up to
    /// 1 MiB (the most one call can have the host hold for one value).
    fn default() -> Self {
        Self {
            max_keys: 10_000,
            max_bytes: 64 << 20,
            max_key_bytes: 1024,
            max_value_bytes: 1 << 20,
        }
    }
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The write would pass a quota; nothing was written.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// `increment` found a value that is not a decimal counter, or would
    /// overflow it.
    #[error("not a counter: {0}")]
    NotACounter(String),
    /// The backend cannot be reached or failed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

/// A key and its value.
pub(crate) type Entry = (String, Vec<u8>);

/// One page of keys and where the next starts.
pub(crate) type KeyPage = (Vec<String>, Option<u64>);

/// The largest `max_value_size` a manifest may set: a call's host memory
/// holds a value (a batch holds several, up to [`MAX_BATCH_BYTES`]).
pub const MAX_VALUE_BYTES: usize = 16 << 20;

/// The most bytes one batch read or write moves.
pub const MAX_BATCH_BYTES: usize = 32 << 20;

/// The most keys one batch names.
pub const MAX_BATCH_KEYS: usize = 1000;

/// The most keys one `list-keys` page holds.
pub(crate) const PAGE: usize = 1000;

/// What a backend does, for one namespace at a time. Every write checks
/// `quota` and is all or nothing.
pub(crate) trait Engine: Send + Sync + fmt::Debug {
    fn get<'a>(
        &'a self,
        ns: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;
    fn exists<'a>(&'a self, ns: &'a str, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn list<'a>(&'a self, ns: &'a str, cursor: u64) -> BoxFuture<'a, Result<KeyPage, StoreError>>;
    fn get_many<'a>(
        &'a self,
        ns: &'a str,
        keys: Vec<String>,
    ) -> BoxFuture<'a, Result<Vec<Option<Entry>>, StoreError>>;
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

    /// The namespace a call with `context` uses, or why it has none.
    ///
    /// # Errors
    ///
    /// For a scoped store, when the context lacks the scope key or its
    /// value is not a string or a number.
    pub(crate) fn namespace(&self, context: Option<&serde_json::Value>) -> Result<String, String> {
        match &self.config.scope {
            Scope::Global => Ok(String::new()),
            Scope::ContextKey(key) => match context.and_then(|c| c.get(key)) {
                Some(serde_json::Value::String(value)) if !value.is_empty() => {
                    Ok(format!("s:{value}"))
                }
                Some(serde_json::Value::Number(value)) => Ok(format!("s:{value}")),
                _ => Err(format!(
                    "store '{}' is kept per `{key}` of the call's context, and this call's context has no `{key}` \
                     (a non-empty string or a number); the application must supply it",
                    self.config.name
                )),
            },
        }
    }
}

/// The bytes a key and value take against a quota.
pub(crate) fn entry_bytes(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

/// The quota message for a namespace that would hold `keys` keys.
pub(crate) fn too_many_keys(keys: u64, quota: &Quota) -> StoreError {
    StoreError::QuotaExceeded(format!(
        "the write would make {keys} keys; the store holds at most {} (delete keys, or raise max_keys)",
        quota.max_keys
    ))
}

/// The quota message for a namespace that would hold `bytes` bytes.
pub(crate) fn too_many_bytes(bytes: u64, quota: &Quota) -> StoreError {
    StoreError::QuotaExceeded(format!(
        "the write would make {bytes} bytes; the store holds at most {} (delete keys, or raise max_bytes)",
        quota.max_bytes
    ))
}

/// `current + delta` for a counter's stored text.
pub(crate) fn incremented(current: Option<&[u8]>, delta: u64) -> Result<u64, StoreError> {
    let current = match current {
        None => 0,
        Some(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
            .ok_or_else(|| StoreError::NotACounter("the value is not a decimal number".into()))?,
    };
    current
        .checked_add(delta)
        .ok_or_else(|| StoreError::NotACounter(format!("{current} + {delta} overflows a u64")))
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn scoped_namespaces_come_from_the_context_only() {
        let store = scoped();
        let ada = serde_json::json!({"user": "ada"});
        let bob = serde_json::json!({"user": "bob"});
        assert_eq!(store.namespace(Some(&ada)).unwrap(), "s:ada");
        assert_ne!(store.namespace(Some(&ada)), store.namespace(Some(&bob)));
        assert!(store.namespace(None).unwrap_err().contains("no `user`"));
        assert!(
            store
                .namespace(Some(&serde_json::json!({"user": ""})))
                .is_err()
        );
        assert!(
            store
                .namespace(Some(&serde_json::json!({"user": {"id": 1}})))
                .is_err()
        );
        assert_eq!(
            store
                .namespace(Some(&serde_json::json!({"user": 7})))
                .unwrap(),
            "s:7"
        );
    }

    #[test]
    fn redis_passwords_never_show() {
        assert_eq!(redacted("redis://:pw@h:1/2"), "redis://:***@h:1/2");
        assert_eq!(redacted("redis://u:pw@h"), "redis://u:***@h");
        assert_eq!(redacted("redis://h:6379"), "redis://h:6379");
        let backend = Backend::Redis {
            url: "redis://u:s3cret@h".into(),
            prefix: "p".into(),
        };
        assert!(!format!("{backend:?}").contains("s3cret"));
    }

    #[test]
    fn counters_are_decimal_text() {
        assert_eq!(incremented(None, 2), Ok(2));
        assert_eq!(incremented(Some(b"40"), 2), Ok(42));
        assert!(matches!(
            incremented(Some(b"x"), 1),
            Err(StoreError::NotACounter(_))
        ));
        assert!(matches!(
            incremented(Some(u64::MAX.to_string().as_bytes()), 1),
            Err(StoreError::NotACounter(_))
        ));
    }
}
