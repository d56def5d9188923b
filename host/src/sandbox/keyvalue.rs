//! `wasi:keyvalue` for the stores a component is granted, and nothing else.
//!
//! `open(name)` succeeds only for a store in the component's grants, in the
//! namespace the call's injected context selects (see [`crate::stores`]);
//! anything else is `access-denied`, recorded as the call's refusal. Every
//! operation is checked here before it reaches a backend, and before the
//! host copies its keys and values out of the guest (`keyvalue/linker.rs`
//! reads them lazily): key and value sizes against the store's quota,
//! batches against [`MAX_BATCH_KEYS`] and [`MAX_BATCH_BYTES`], and the
//! call's count of operations against [`MAX_OPS`], so what one call can
//! make the host hold or do is bounded.
//!
//! `list-keys` cursors are numbers the call is given for the last key of a
//! page: the call keeps at most [`MAX_CURSORS`] of them (the oldest is
//! forgotten), and the next page starts after that key, so listing a whole
//! namespace reads each key once.
//!
//! Failures other than a denial are `other("KIND: message")`, KIND one of
//! `quota-exceeded`, `too-large`, `not-a-counter`, `limit`,
//! `invalid-cursor`, `in-use` or `unavailable`, so SDKs can give tools a
//! typed error. Writes past a quota or a size are also recorded as the
//! call's refusal (`capability_denied` if the call then fails); reads and
//! deletes that name a key too long for the store are not.

mod linker;

use std::collections::VecDeque;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use wasmtime::component::Resource;

use super::bindings::v0_2::wasi::keyvalue::store;
use super::refusal::Refusals;
use super::state::State;
use crate::stores::{
    Engine, Entry, GrantedStores, MAX_BATCH_BYTES, MAX_BATCH_KEYS, Store, StoreError, page_keys,
};

pub(crate) use linker::add_to_linker;

/// Store operations one call may make.
pub(crate) const MAX_OPS: u32 = 10_000;

/// `list-keys` cursors one call keeps; each holds one key (at most
/// [`crate::stores::MAX_KEY_BYTES`]).
pub(crate) const MAX_CURSORS: usize = 16;

/// An open bucket: a granted store, in one namespace.
pub struct Bucket {
    store: Arc<Store>,
    namespace: String,
}

/// Where a `list-keys` cursor resumes.
struct Cursor {
    id: u64,
    store: String,
    namespace: String,
    last: String,
}

/// One call's view of its granted stores.
pub(crate) struct CallStores {
    granted: Arc<GrantedStores>,
    context: Option<Arc<Value>>,
    refusals: Refusals,
    ops: u32,
    cursors: VecDeque<Cursor>,
    issued: u64,
}

/// Whether an operation reads or writes, for the size checks: a write past
/// a size is the call's refusal, a read is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// What a size check measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Key,
    Value,
}

impl CallStores {
    pub(crate) fn new(
        granted: Arc<GrantedStores>,
        context: Option<Arc<Value>>,
        refusals: Refusals,
    ) -> Self {
        Self {
            granted,
            context,
            refusals,
            ops: 0,
            cursors: VecDeque::new(),
            issued: 0,
        }
    }

    /// Count one operation against the call's budget.
    fn count(&mut self) -> Result<(), store::Error> {
        if self.ops >= MAX_OPS {
            return Err(other(
                "limit",
                format!("a call may make at most {MAX_OPS} store operations"),
            ));
        }
        self.ops += 1;
        Ok(())
    }

    /// A key or value of `len` bytes must fit `store`'s quota: past it,
    /// `too-large`, and for a write the call's refusal too.
    fn fits(
        &self,
        store: &Store,
        part: Part,
        len: usize,
        access: Access,
    ) -> Result<(), store::Error> {
        let quota = &store.config().quota;
        let (max, parts) = match part {
            Part::Key => (quota.max_key_bytes, "keys"),
            Part::Value => (quota.max_value_bytes, "values"),
        };
        if len <= max {
            return Ok(());
        }
        let message = format!(
            "store '{}' takes {parts} of at most {max} bytes; this one has {len}",
            store.config().name
        );
        if access == Access::Write {
            self.refusals.deny(message.clone());
        }
        Err(other("too-large", message))
    }

    /// The resume point of cursor `id`, if this call was given it for this
    /// store and namespace and still keeps it.
    fn resume(&self, id: u64, store: &str, namespace: &str) -> Option<String> {
        self.cursors
            .iter()
            .find(|c| c.id == id && c.store == store && c.namespace == namespace)
            .map(|c| c.last.clone())
    }

    /// A new cursor that resumes after `last`; the oldest is forgotten past
    /// [`MAX_CURSORS`].
    fn issue(&mut self, store: &str, namespace: &str, last: String) -> u64 {
        self.issued += 1;
        if self.cursors.len() == MAX_CURSORS {
            self.cursors.pop_front();
        }
        self.cursors.push_back(Cursor {
            id: self.issued,
            store: store.to_owned(),
            namespace: namespace.to_owned(),
            last,
        });
        self.issued
    }
}

/// A batch of `keys` keys must be within [`MAX_BATCH_KEYS`].
fn batch_fits(store: &Store, keys: usize) -> Result<(), store::Error> {
    if keys > MAX_BATCH_KEYS {
        return Err(other(
            "limit",
            format!(
                "a batch may name at most {MAX_BATCH_KEYS} keys of store '{}'; this one names {keys}",
                store.config().name
            ),
        ));
    }
    Ok(())
}

/// A batch of `bytes` bytes of keys and values must be within
/// [`MAX_BATCH_BYTES`].
fn batch_bytes_fit(bytes: usize) -> Result<(), store::Error> {
    if bytes > MAX_BATCH_BYTES {
        return Err(other(
            "limit",
            format!(
                "a batch may move at most {MAX_BATCH_BYTES} bytes of keys and values; this one names {bytes} \
                 (split it)"
            ),
        ));
    }
    Ok(())
}

fn other(kind: &str, message: impl std::fmt::Display) -> store::Error {
    store::Error::Other(format!("{kind}: {message}"))
}

/// Run `op` on `store`'s backend, opening it first: its answer, or its
/// failure as the guest sees it (see [`backend_error`]).
async fn on_backend<'a, T>(
    store: &'a Store,
    refusals: &Refusals,
    op: impl FnOnce(&'a dyn Engine) -> BoxFuture<'a, Result<T, StoreError>>,
) -> Result<T, store::Error> {
    match store.engine().await {
        Ok(engine) => op(&**engine).await,
        Err(e) => Err(e),
    }
    .map_err(|e| backend_error(store, refusals, e))
}

fn backend_error(store: &Store, refusals: &Refusals, error: StoreError) -> store::Error {
    let name = &store.config().name;
    match error {
        StoreError::QuotaExceeded(message) => {
            let message = format!("store '{name}' refused a write over its quota: {message}");
            refusals.deny(message.clone());
            other("quota-exceeded", message)
        }
        StoreError::NotACounter(message) => other("not-a-counter", message),
        StoreError::InUse(message) => {
            // The path is the operator's; the tool and the model get the
            // cause and the fix.
            tracing::warn!(store = %name, error = %message, "an embedded store is held by another process");
            other(
                "in-use",
                format!(
                    "store '{name}' is open in another toolhost process; an embedded store serves one \
                     toolhost process at a time, so this call cannot use it (to share a store between \
                     processes, the operator must make it a redis:// store)"
                ),
            )
        }
        StoreError::Unavailable(message) => {
            // The details (a path, a server) are the operator's.
            tracing::warn!(store = %name, error = %message, "a store operation failed");
            other(
                "unavailable",
                format!("store '{name}' is unavailable; try again later"),
            )
        }
    }
}

/// The operations, once `linker.rs` has read and checked their arguments.
/// They take `&mut self` though they only read it: a future holding a
/// shared `&State` would not be `Send`.
impl State {
    /// Open the granted store `identifier` in the call's namespace.
    fn kv_open(
        &mut self,
        identifier: &str,
    ) -> wasmtime::Result<Result<Resource<Bucket>, store::Error>> {
        if self.used("it opened a store while being instantiated") {
            // A store written before the call would be written for no call.
            return Ok(Err(store::Error::AccessDenied));
        }
        if let Err(e) = self.stores.count() {
            return Ok(Err(e));
        }
        let Some(store) = self.stores.granted.get(identifier).cloned() else {
            // Whether the store exists is not the tool's to learn.
            let name = crate::outcome::clip(identifier, 64);
            self.stores.refusals.deny(format!(
                "store {name:?} is not granted to this tool; to allow it, add stores = [{name:?}] to its [[tool]] in \
                 toolhost.toml (and declare [store.{name}] if there is none)",
            ));
            return Ok(Err(store::Error::AccessDenied));
        };
        let namespace = match store.config().namespace(self.stores.context.as_deref()) {
            Ok(namespace) => namespace,
            Err(no_namespace) => {
                self.stores.refusals.deny(no_namespace.to_string());
                return Ok(Err(store::Error::AccessDenied));
            }
        };
        Ok(Ok(self.table().push(Bucket { store, namespace })?))
    }

    /// Count an operation on `bucket`; its store and namespace.
    fn kv_begin(
        &mut self,
        bucket: &Resource<Bucket>,
    ) -> wasmtime::Result<Result<(Arc<Store>, String), store::Error>> {
        let bucket = self.table_ref().get(bucket)?;
        let opened = (bucket.store.clone(), bucket.namespace.clone());
        Ok(self.stores.count().map(|()| opened))
    }

    fn failed(&self, store: &Store, error: StoreError) -> store::Error {
        backend_error(store, &self.stores.refusals, error)
    }

    async fn kv_get(
        &mut self,
        store: &Store,
        ns: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, store::Error> {
        on_backend(store, &self.stores.refusals, |engine| engine.get(ns, key)).await
    }

    async fn kv_exists(
        &mut self,
        store: &Store,
        ns: &str,
        key: &str,
    ) -> Result<bool, store::Error> {
        on_backend(store, &self.stores.refusals, |engine| {
            engine.exists(ns, key)
        })
        .await
    }

    async fn kv_set_many(
        &mut self,
        store: &Store,
        ns: &str,
        entries: Vec<Entry>,
    ) -> Result<(), store::Error> {
        let quota = store.config().quota;
        on_backend(store, &self.stores.refusals, |engine| {
            engine.set_many(ns, entries, quota)
        })
        .await
    }

    async fn kv_delete_many(
        &mut self,
        store: &Store,
        ns: &str,
        keys: Vec<String>,
    ) -> Result<(), store::Error> {
        on_backend(store, &self.stores.refusals, |engine| {
            engine.delete_many(ns, keys)
        })
        .await
    }

    async fn kv_increment(
        &mut self,
        store: &Store,
        ns: &str,
        key: &str,
        delta: u64,
    ) -> Result<u64, store::Error> {
        let quota = store.config().quota;
        on_backend(store, &self.stores.refusals, |engine| {
            engine.increment(ns, key, delta, quota)
        })
        .await
    }

    /// One page of keys, from the start or from the cursor the call was
    /// given for its last page.
    async fn kv_list(
        &mut self,
        store: &Store,
        ns: &str,
        cursor: Option<u64>,
    ) -> Result<store::KeyResponse, store::Error> {
        let name = &store.config().name;
        let after = match cursor {
            None => None,
            Some(id) => Some(self.stores.resume(id, name, ns).ok_or_else(|| {
                other(
                    "invalid-cursor",
                    format!(
                        "cursor {id} was not given by list-keys of store '{name}' in this call, or is one of \
                         more than {MAX_CURSORS} since; list again from the start (no cursor)"
                    ),
                )
            })?),
        };
        let limit = page_keys(&store.config().quota);
        let after = after.as_deref();
        let (keys, more) = on_backend(store, &self.stores.refusals, |engine| {
            engine.list(ns, after, limit)
        })
        .await?;
        let cursor = match keys.last() {
            Some(last) if more => Some(self.stores.issue(name, ns, last.clone())),
            _ => None,
        };
        Ok(store::KeyResponse { keys, cursor })
    }

    /// The values of `keys`, read in chunks that each fit the batch's byte
    /// bound, so the host never holds much more than it before refusing.
    async fn kv_get_many(
        &mut self,
        store: &Store,
        ns: &str,
        keys: Vec<String>,
    ) -> Result<Vec<Option<Entry>>, store::Error> {
        let engine = store.engine().await.map_err(|e| self.failed(store, e))?;
        let per_chunk = (MAX_BATCH_BYTES / store.config().quota.max_value_bytes.max(1))
            .clamp(1, MAX_BATCH_KEYS);
        let mut values = Vec::with_capacity(keys.len());
        let mut bytes = keys.iter().map(String::len).sum::<usize>();
        for chunk in keys.chunks(per_chunk) {
            let found = engine
                .get_many(ns, chunk.to_vec())
                .await
                .map_err(|e| self.failed(store, e))?;
            bytes += found.iter().flatten().map(|(_, v)| v.len()).sum::<usize>();
            if bytes > MAX_BATCH_BYTES {
                return Err(other(
                    "limit",
                    format!(
                        "the keys and values asked for pass {MAX_BATCH_BYTES} bytes; ask for fewer keys at once"
                    ),
                ));
            }
            values.extend(found);
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::secrets::Secrets;

    fn stores() -> CallStores {
        let refusals = Refusals::new(Arc::new(Secrets::new([])));
        CallStores::new(Arc::default(), None, refusals)
    }

    #[test]
    fn cursors_resume_only_where_they_were_given_and_the_oldest_are_forgotten() {
        let mut stores = stores();
        let first = stores.issue("s", "s:ada", "k1".into());
        assert_eq!(stores.resume(first, "s", "s:ada"), Some("k1".into()));
        // Another store or namespace never resumes it.
        assert_eq!(stores.resume(first, "t", "s:ada"), None);
        assert_eq!(stores.resume(first, "s", "s:bob"), None);
        assert_eq!(stores.resume(first + 1, "s", "s:ada"), None);
        let later: Vec<u64> = (0..MAX_CURSORS)
            .map(|i| stores.issue("s", "s:ada", format!("k{i}")))
            .collect();
        assert_eq!(stores.resume(first, "s", "s:ada"), None, "forgotten");
        assert_eq!(stores.cursors.len(), MAX_CURSORS);
        for (i, id) in later.into_iter().enumerate() {
            assert_eq!(stores.resume(id, "s", "s:ada"), Some(format!("k{i}")));
        }
    }

    #[test]
    fn reads_too_large_are_not_refusals_and_writes_are() {
        let stores = stores();
        let store = Store::new(crate::stores::StoreConfig {
            name: "s".into(),
            backend: crate::stores::Backend::Embedded {
                path: "/nonexistent".into(),
            },
            scope: crate::stores::Scope::Global,
            quota: crate::stores::Quota::default(),
        });
        assert!(stores.fits(&store, Part::Key, 1025, Access::Read).is_err());
        assert_eq!(stores.refusals.denial(), None);
        assert!(stores.fits(&store, Part::Key, 1024, Access::Write).is_ok());
        assert!(
            stores
                .fits(&store, Part::Value, (1 << 20) + 1, Access::Write)
                .is_err()
        );
        assert!(stores.refusals.denial().is_some());
    }
}
