//! `wasi:keyvalue` for the stores a component is granted, and nothing else.
//!
//! `open(name)` succeeds only for a store in the component's grants, in the
//! namespace the call's injected context selects (see [`crate::stores`]);
//! anything else is `access-denied`, recorded as the call's refusal. Every
//! operation is checked here before it reaches a backend: key and value
//! sizes against the store's quota, batches against [`MAX_BATCH_KEYS`] and
//! [`MAX_BATCH_BYTES`], and the call's count of operations against
//! [`MAX_OPS`], so what one call can make the host hold or do is bounded.
//!
//! Failures other than a denial are `other("KIND: message")`, KIND one of
//! `quota-exceeded`, `too-large`, `not-a-counter`, `limit` or `unavailable`,
//! so SDKs can give tools a typed error.

use std::sync::Arc;

use serde_json::Value;
use wasmtime::component::Resource;

use super::bindings::v0_2::wasi::keyvalue::{atomics, batch, store};
use super::refusal::Refusals;
use super::state::State;
use crate::grants::Grants;
use crate::stores::{Entry, MAX_BATCH_BYTES, MAX_BATCH_KEYS, Store, StoreError};

/// Store operations one call may make.
pub(crate) const MAX_OPS: u32 = 10_000;

/// An open bucket: a granted store, in one namespace.
pub struct Bucket {
    store: Arc<Store>,
    namespace: String,
}

/// One call's view of its granted stores.
pub(crate) struct CallStores {
    grants: Arc<Grants>,
    context: Option<Arc<Value>>,
    refusals: Refusals,
    ops: u32,
}

impl CallStores {
    pub(crate) fn new(
        grants: Arc<Grants>,
        context: Option<Arc<Value>>,
        refusals: Refusals,
    ) -> Self {
        Self {
            grants,
            context,
            refusals,
            ops: 0,
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

    fn refuse(&self, kind: &str, message: String) -> store::Error {
        self.refusals.deny(message.clone());
        other(kind, message)
    }
}

fn other(kind: &str, message: impl std::fmt::Display) -> store::Error {
    store::Error::Other(format!("{kind}: {message}"))
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

impl State {
    fn bucket(&self, bucket: &Resource<Bucket>) -> wasmtime::Result<(Arc<Store>, String)> {
        let bucket = self.table_ref().get(bucket)?;
        Ok((bucket.store.clone(), bucket.namespace.clone()))
    }

    fn check_key(&self, store: &Store, key: &str) -> Result<(), store::Error> {
        let max = store.config().quota.max_key_bytes;
        if key.len() > max {
            return Err(self.stores.refuse(
                "too-large",
                format!(
                    "store '{}' takes keys of at most {max} bytes; this one has {}",
                    store.config().name,
                    key.len()
                ),
            ));
        }
        Ok(())
    }

    fn check_entry(&self, store: &Store, key: &str, value: &[u8]) -> Result<(), store::Error> {
        self.check_key(store, key)?;
        let max = store.config().quota.max_value_bytes;
        if value.len() > max {
            return Err(self.stores.refuse(
                "too-large",
                format!(
                    "store '{}' takes values of at most {max} bytes; this one has {}",
                    store.config().name,
                    value.len()
                ),
            ));
        }
        Ok(())
    }

    fn check_batch(&mut self, store: &Store, keys: usize) -> Result<(), store::Error> {
        self.stores.count()?;
        if keys > MAX_BATCH_KEYS {
            return Err(other(
                "limit",
                format!(
                    "a batch may name at most {MAX_BATCH_KEYS} keys of store '{}'",
                    store.config().name
                ),
            ));
        }
        Ok(())
    }
}

impl store::Host for State {
    async fn open(
        &mut self,
        identifier: String,
    ) -> wasmtime::Result<Result<Resource<Bucket>, store::Error>> {
        if self.used("it opened a store while being instantiated") {
            // A store written before the call would be written for no call.
            return Ok(Err(store::Error::AccessDenied));
        }
        if let Err(e) = self.stores.count() {
            return Ok(Err(e));
        }
        let Some(store) = self.stores.grants.granted_store(&identifier).cloned() else {
            // Whether the store exists is not the tool's to learn.
            self.stores.refusals.deny(format!(
                "store {:?} is not granted to this tool; to allow it, add stores = [{:?}] to its [[tool]] in toolhost.toml \
                 (and declare [store.{}] if there is none)",
                crate::outcome::clip(&identifier, 64),
                crate::outcome::clip(&identifier, 64),
                crate::outcome::clip(&identifier, 64),
            ));
            return Ok(Err(store::Error::AccessDenied));
        };
        let namespace = match store.namespace(self.stores.context.as_deref()) {
            Ok(namespace) => namespace,
            Err(message) => {
                self.stores.refusals.deny(message);
                return Ok(Err(store::Error::AccessDenied));
            }
        };
        Ok(Ok(self.table().push(Bucket { store, namespace })?))
    }
}

impl store::HostBucket for State {
    async fn get(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, store::Error>> {
        let (store, ns) = self.bucket(&bucket)?;
        if let Err(e) = self
            .stores
            .count()
            .and_then(|()| self.check_key(&store, &key))
        {
            return Ok(Err(e));
        }
        let result = match store.engine().await {
            Ok(engine) => engine.get(&ns, &key).await,
            Err(e) => Err(e),
        };
        Ok(result.map_err(|e| backend_error(&store, &self.stores.refusals, e)))
    }

    async fn set(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), store::Error>> {
        let (store, ns) = self.bucket(&bucket)?;
        if let Err(e) = self
            .stores
            .count()
            .and_then(|()| self.check_entry(&store, &key, &value))
        {
            return Ok(Err(e));
        }
        let quota = store.config().quota;
        let result = match store.engine().await {
            Ok(engine) => engine.set_many(&ns, vec![(key, value)], quota).await,
            Err(e) => Err(e),
        };
        Ok(result.map_err(|e| backend_error(&store, &self.stores.refusals, e)))
    }

    async fn delete(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<(), store::Error>> {
        let (store, ns) = self.bucket(&bucket)?;
        if let Err(e) = self
            .stores
            .count()
            .and_then(|()| self.check_key(&store, &key))
        {
            return Ok(Err(e));
        }
        let result = match store.engine().await {
            Ok(engine) => engine.delete_many(&ns, vec![key]).await,
            Err(e) => Err(e),
        };
        Ok(result.map_err(|e| backend_error(&store, &self.stores.refusals, e)))
    }

    async fn exists(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<bool, store::Error>> {
        let (store, ns) = self.bucket(&bucket)?;
        if let Err(e) = self
            .stores
            .count()
            .and_then(|()| self.check_key(&store, &key))
        {
            return Ok(Err(e));
        }
        let result = match store.engine().await {
            Ok(engine) => engine.exists(&ns, &key).await,
            Err(e) => Err(e),
        };
        Ok(result.map_err(|e| backend_error(&store, &self.stores.refusals, e)))
    }

    async fn list_keys(
        &mut self,
        bucket: Resource<Bucket>,
        cursor: Option<u64>,
    ) -> wasmtime::Result<Result<store::KeyResponse, store::Error>> {
        let (store, ns) = self.bucket(&bucket)?;
        if let Err(e) = self.stores.count() {
            return Ok(Err(e));
        }
        let result = match store.engine().await {
            Ok(engine) => engine.list(&ns, cursor.unwrap_or(0)).await,
            Err(e) => Err(e),
        };
        Ok(result
            .map(|(keys, cursor)| store::KeyResponse { keys, cursor })
            .map_err(|e| backend_error(&store, &self.stores.refusals, e)))
    }

    async fn drop(&mut self, bucket: Resource<Bucket>) -> wasmtime::Result<()> {
        self.table().delete(bucket)?;
        Ok(())
    }
}

impl atomics::Host for State {
    async fn increment(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        delta: u64,
    ) -> wasmtime::Result<Result<u64, store::Error>> {
        let (store, ns) = self.bucket(&bucket)?;
        if let Err(e) = self
            .stores
            .count()
            .and_then(|()| self.check_key(&store, &key))
        {
            return Ok(Err(e));
        }
        let quota = store.config().quota;
        let result = match store.engine().await {
            Ok(engine) => engine.increment(&ns, &key, delta, quota).await,
            Err(e) => Err(e),
        };
        Ok(result.map_err(|e| backend_error(&store, &self.stores.refusals, e)))
    }
}

impl batch::Host for State {
    async fn get_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<Option<Entry>>, store::Error>> {
        let (store, ns) = self.bucket(&bucket)?;
        if let Err(e) = self.check_batch(&store, keys.len()) {
            return Ok(Err(e));
        }
        for key in &keys {
            if let Err(e) = self.check_key(&store, key) {
                return Ok(Err(e));
            }
        }
        let engine = match store.engine().await {
            Ok(engine) => engine.clone(),
            Err(e) => return Ok(Err(backend_error(&store, &self.stores.refusals, e))),
        };
        // Read in chunks that each fit the batch's byte bound, so the host
        // never holds much more than it before refusing.
        let per_chunk = (MAX_BATCH_BYTES / store.config().quota.max_value_bytes.max(1))
            .clamp(1, MAX_BATCH_KEYS);
        let mut values = Vec::with_capacity(keys.len());
        let mut bytes = 0;
        for chunk in keys.chunks(per_chunk) {
            match engine.get_many(&ns, chunk.to_vec()).await {
                Ok(found) => {
                    bytes += found.iter().flatten().map(|(_, v)| v.len()).sum::<usize>();
                    if bytes > MAX_BATCH_BYTES {
                        return Ok(Err(other(
                            "limit",
                            format!(
                                "the values asked for pass {MAX_BATCH_BYTES} bytes; ask for fewer keys at once"
                            ),
                        )));
                    }
                    values.extend(found);
                }
                Err(e) => return Ok(Err(backend_error(&store, &self.stores.refusals, e))),
            }
        }
        Ok(Ok(values))
    }

    async fn set_many(
        &mut self,
        bucket: Resource<Bucket>,
        key_values: Vec<Entry>,
    ) -> wasmtime::Result<Result<(), store::Error>> {
        let (store, ns) = self.bucket(&bucket)?;
        if let Err(e) = self.check_batch(&store, key_values.len()) {
            return Ok(Err(e));
        }
        for (key, value) in &key_values {
            if let Err(e) = self.check_entry(&store, key, value) {
                return Ok(Err(e));
            }
        }
        let quota = store.config().quota;
        let result = match store.engine().await {
            Ok(engine) => engine.set_many(&ns, key_values, quota).await,
            Err(e) => Err(e),
        };
        Ok(result.map_err(|e| backend_error(&store, &self.stores.refusals, e)))
    }

    async fn delete_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> wasmtime::Result<Result<(), store::Error>> {
        let (store, ns) = self.bucket(&bucket)?;
        if let Err(e) = self.check_batch(&store, keys.len()) {
            return Ok(Err(e));
        }
        for key in &keys {
            if let Err(e) = self.check_key(&store, key) {
                return Ok(Err(e));
            }
        }
        let result = match store.engine().await {
            Ok(engine) => engine.delete_many(&ns, keys).await,
            Err(e) => Err(e),
        };
        Ok(result.map_err(|e| backend_error(&store, &self.stores.refusals, e)))
    }
}
