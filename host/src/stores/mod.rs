//! Key-value stores that tools reach through `wasi:keyvalue`: named in the
//! manifest (`[store.NAME]`), granted per tool (`stores = ["NAME"]`), split
//! into namespaces by scope, bounded by quotas, and kept either in an
//! embedded file (`embedded.rs`, redb) or in Redis (`redis.rs`). The rules
//! both backends keep alike (quotas and counters) are in `rules.rs`, so the
//! two cannot drift apart.
//!
//! A store's configuration ([`StoreConfig`]) is domain data, granted like
//! any other capability (`Grants::store`); this module makes the live
//! handles from it: at load, the host's `Stores` gives each component one
//! handle per store it is granted, shared with every other component
//! granted the same configuration.
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
pub(crate) mod parity;
pub(crate) mod redis;
pub(crate) mod rules;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;

use crate::grants::Grants;
pub use crate::grants::store::{
    Backend, MAX_KEY_BYTES, MAX_NAMESPACE_BYTES, MAX_VALUE_BYTES, Quota, Scope, StoreConfig,
    redacted,
};

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

/// The most bytes of keys and values one batch read or write moves,
/// checked before the host copies a write's entries out of the guest.
pub const MAX_BATCH_BYTES: usize = 32 << 20;

/// The most keys one batch names.
pub const MAX_BATCH_KEYS: usize = 1000;

/// A key and its value.
pub(crate) type Entry = (String, Vec<u8>);

/// The most keys one `list-keys` page holds.
pub(crate) const PAGE_KEYS: usize = 1000;

/// The most bytes of keys one `list-keys` page holds, whatever the key size.
pub(crate) const PAGE_BYTES: usize = 1 << 20;

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

/// A granted store's live handle: its configuration and, once a call has
/// used it, its open backend.
pub(crate) struct Store {
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

impl Store {
    /// A store for `config`; nothing is opened yet.
    pub(crate) fn new(config: StoreConfig) -> Self {
        Self {
            config,
            engine: tokio::sync::OnceCell::new(),
        }
    }

    /// How the manifest declares it.
    pub(crate) fn config(&self) -> &StoreConfig {
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
}

/// The stores of one host, made at load from its components' grants: one
/// live handle per distinct store configuration, shared by every component
/// granted it (so tools granted one Redis store share its connection).
/// Handles open their backends on first use, not here.
#[derive(Debug, Default)]
pub(crate) struct Stores {
    made: Mutex<Vec<Arc<Store>>>,
}

impl Stores {
    /// The handles of the stores `grants` grants, by name.
    pub(crate) fn granted(&self, grants: &Grants) -> GrantedStores {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        let mut by_name = BTreeMap::new();
        for config in grants.stores() {
            let store = match made.iter().find(|store| store.config == *config) {
                Some(store) => store.clone(),
                None => {
                    let store = Arc::new(Store::new(config.clone()));
                    made.push(store.clone());
                    store
                }
            };
            by_name.insert(config.name.clone(), store);
        }
        GrantedStores(by_name)
    }
}

/// One component's granted stores, by name: what its calls may open.
#[derive(Debug, Default)]
pub(crate) struct GrantedStores(BTreeMap<String, Arc<Store>>);

impl GrantedStores {
    /// The granted store named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Store>> {
        self.0.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
