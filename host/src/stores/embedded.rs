//! The embedded backend: one redb file per store.
//!
//! Why redb: it is pure Rust (no C library to build or patch), shaped as a
//! key-value store rather than SQL, and its commits are ACID and crash-safe
//! (copy-on-write B-trees with checksummed commits, `fsync`ed before a
//! write returns). Readers never wait on the writer. Its one limit is that
//! one process opens a file at a time: a second toolhost process on the
//! same store gets [`StoreError::InUse`], whose message names that and the
//! fix — a Redis store, made for sharing. Within a process, every hot
//! reload shares the open file.
//!
//! Layout: table `entries` maps `(namespace, key)` to the value (the
//! namespace as [`super::Store::namespace`] spells it: `""`, `s:VALUE` or
//! `n:INTEGER`); table `usage` maps a namespace to its `(keys, bytes)`, and
//! table `totals` holds the store's `(namespaces, bytes)` under `""`. A
//! write reads what it replaces, checks every quota, and only then writes
//! entries, usage and totals, in one transaction; a write that would change
//! nothing commits nothing.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use futures::future::BoxFuture;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::rules::{self, Usage, entry_bytes};
use super::{Engine, Entry, Quota, StoreError};

const ENTRIES: TableDefinition<'_, (&str, &str), &[u8]> = TableDefinition::new("entries");
const USAGE: TableDefinition<'_, &str, (u64, u64)> = TableDefinition::new("usage");
const TOTALS: TableDefinition<'_, &str, (u64, u64)> = TableDefinition::new("totals");

/// The one row of `totals`.
const STORE: &str = "";

/// redb's page cache for one file. Its default (1 GiB) would let a store
/// that tools fill grow the host by as much; pages not cached are read
/// from the operating system's cache.
const CACHE_BYTES: usize = 32 << 20;

/// Files open in this process, so a reload reuses the open database.
static OPEN: Mutex<Option<HashMap<PathBuf, Weak<Embedded>>>> = Mutex::new(None);

/// An open store file.
pub(crate) struct Embedded {
    db: Arc<Database>,
    path: PathBuf,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("path", &self.path)
            .finish()
    }
}

fn unavailable(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("{}: {e}", path.display()))
}

/// The file `path` names, however it is spelled: the canonical form of its
/// nearest existing ancestor, with the rest of the path appended (`.` and
/// `..` resolved as creating the directories would). Two store paths name
/// one file when these are equal.
pub(crate) fn file_identity(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    let base = loop {
        if let Ok(canonical) = at.canonicalize() {
            break canonical;
        }
        match at.parent() {
            Some(parent) if !at.as_os_str().is_empty() => {
                rest.extend(at.components().next_back());
                at = parent;
            }
            _ => break std::env::current_dir().unwrap_or_default(),
        }
    };
    let mut identity = base;
    for component in rest.into_iter().rev() {
        match component {
            Component::ParentDir => {
                identity.pop();
            }
            Component::CurDir => {}
            other => identity.push(other),
        }
    }
    identity
}

impl Embedded {
    /// Open (creating if need be) the file at `path`, or share the one
    /// this process already has open. Blocking.
    pub(crate) fn open(path: &Path) -> Result<Arc<Self>, StoreError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| unavailable(path, format!("cannot create its directory: {e}")))?;
        }
        let key = file_identity(path);
        let mut open = OPEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let open = open.get_or_insert_with(HashMap::new);
        if let Some(existing) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => StoreError::InUse(format!(
                    "{}: another process holds this file (an embedded store serves one process at a time)",
                    path.display()
                )),
                other => unavailable(path, other),
            })?;
        prepare(&db).map_err(|e| unavailable(path, e))?;
        let engine = Arc::new(Self {
            db: Arc::new(db),
            path: path.to_owned(),
        });
        open.retain(|_, weak| weak.strong_count() > 0);
        open.insert(key, Arc::downgrade(&engine));
        Ok(engine)
    }

    /// Run `op` on a blocking thread: redb reads and writes touch the disk.
    fn blocking<'a, T: Send + 'static>(
        &'a self,
        op: impl FnOnce(&Database) -> Result<T, redb::Error> + Send + 'static,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let db = self.db.clone();
        Box::pin(async move {
            match tokio::task::spawn_blocking(move || op(&db)).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(e)) => Err(unavailable(&self.path, e)),
                Err(e) => Err(unavailable(&self.path, e)),
            }
        })
    }

    /// A write that may be refused: `op` returns `Ok(Err(_))` to abort, and
    /// `Ok(Ok((_, false)))` when it changed nothing (nothing is committed).
    fn write<'a, T: Send + 'static>(
        &'a self,
        op: impl FnOnce(&redb::WriteTransaction) -> Result<Result<(T, bool), StoreError>, redb::Error>
        + Send
        + 'static,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let result = self.blocking(move |db| {
            let txn = db.begin_write()?;
            match op(&txn)? {
                Ok((value, true)) => {
                    txn.commit()?;
                    Ok(Ok(value))
                }
                // Dropping the transaction aborts it: nothing is written.
                Ok((value, false)) => Ok(Ok(value)),
                Err(refused) => Ok(Err(refused)),
            }
        });
        Box::pin(async move { result.await? })
    }
}

/// Create the tables of a new file, and count the totals of a file written
/// before they were kept.
fn prepare(db: &Database) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    txn.open_table(ENTRIES)?;
    let usage = txn.open_table(USAGE)?;
    let mut totals = txn.open_table(TOTALS)?;
    if totals.get(STORE)?.is_none() {
        let (mut namespaces, mut bytes) = (0, 0);
        for row in usage.iter()? {
            let (_, counts) = row?;
            namespaces += 1;
            bytes += counts.value().1;
        }
        if namespaces > 0 {
            totals.insert(STORE, (namespaces, bytes))?;
        }
    }
    drop((usage, totals));
    txn.commit()?;
    Ok(())
}

/// Apply `changes` (a value of `None` deletes) to namespace `ns` within
/// `txn`, if the result fits `quota`: what each change replaces is read
/// first, the quotas are checked, and only then is anything written.
/// Returns whether anything changed.
fn apply(
    txn: &redb::WriteTransaction,
    ns: &str,
    changes: &BTreeMap<String, Option<Vec<u8>>>,
    quota: Option<&Quota>,
) -> Result<Result<bool, StoreError>, redb::Error> {
    let mut table = txn.open_table(ENTRIES)?;
    let mut usage = txn.open_table(USAGE)?;
    let mut totals = txn.open_table(TOTALS)?;
    let (keys, bytes) = usage.get(ns)?.map_or((0, 0), |v| v.value());
    let (namespaces, store_bytes) = totals.get(STORE)?.map_or((0, 0), |v| v.value());
    let before = Usage {
        keys,
        bytes,
        namespaces,
        store_bytes,
    };
    let (mut keys, mut bytes, mut changed) = (keys, bytes, false);
    for (key, value) in changes {
        let old = table
            .get((ns, key.as_str()))?
            .map(|v| entry_bytes(key, v.value()));
        match (old, value) {
            (Some(old), Some(value)) => bytes = bytes.saturating_sub(old) + entry_bytes(key, value),
            (None, Some(value)) => (keys, bytes) = (keys + 1, bytes + entry_bytes(key, value)),
            (Some(old), None) => {
                (keys, bytes) = (keys.saturating_sub(1), bytes.saturating_sub(old))
            }
            (None, None) => continue,
        }
        changed = true;
    }
    if !changed {
        return Ok(Ok(false));
    }
    let after = before.after(keys, bytes);
    if let Some(quota) = quota
        && let Err(refused) = rules::check(before, after, quota)
    {
        return Ok(Err(refused));
    }
    for (key, value) in changes {
        match value {
            Some(value) => drop(table.insert((ns, key.as_str()), value.as_slice())?),
            None => drop(table.remove((ns, key.as_str()))?),
        }
    }
    if after.keys == 0 {
        usage.remove(ns)?;
    } else {
        usage.insert(ns, (after.keys, after.bytes))?;
    }
    totals.insert(STORE, (after.namespaces, after.store_bytes))?;
    Ok(Ok(true))
}

impl Engine for Embedded {
    fn get<'a>(
        &'a self,
        ns: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        let (ns, key) = (ns.to_owned(), key.to_owned());
        self.blocking(move |db| {
            let table = db.begin_read()?.open_table(ENTRIES)?;
            Ok(table
                .get((ns.as_str(), key.as_str()))?
                .map(|v| v.value().to_vec()))
        })
    }

    fn exists<'a>(&'a self, ns: &'a str, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let (ns, key) = (ns.to_owned(), key.to_owned());
        self.blocking(move |db| {
            let table = db.begin_read()?.open_table(ENTRIES)?;
            Ok(table.get((ns.as_str(), key.as_str()))?.is_some())
        })
    }

    fn list<'a>(
        &'a self,
        ns: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<String>, bool), StoreError>> {
        let (ns, after) = (ns.to_owned(), after.map(str::to_owned));
        self.blocking(move |db| {
            let table = db.begin_read()?.open_table(ENTRIES)?;
            // Every key of `ns` sorts before `(ns + "\0", "")`: no string
            // lies between `ns` and `ns + "\0"`.
            let end = format!("{ns}\0");
            let start = match &after {
                Some(key) => Bound::Excluded((ns.as_str(), key.as_str())),
                None => Bound::Included((ns.as_str(), "")),
            };
            let range =
                table.range::<(&str, &str)>((start, Bound::Excluded((end.as_str(), ""))))?;
            let mut keys = Vec::new();
            for entry in range.take(limit.saturating_add(1)) {
                let (key, _) = entry?;
                keys.push(key.value().1.to_owned());
            }
            let more = keys.len() > limit;
            keys.truncate(limit);
            Ok((keys, more))
        })
    }

    fn get_many<'a>(
        &'a self,
        ns: &'a str,
        keys: Vec<String>,
    ) -> BoxFuture<'a, Result<Vec<Option<Entry>>, StoreError>> {
        let ns = ns.to_owned();
        self.blocking(move |db| {
            let table = db.begin_read()?.open_table(ENTRIES)?;
            keys.into_iter()
                .map(|key| {
                    let value = table
                        .get((ns.as_str(), key.as_str()))?
                        .map(|v| v.value().to_vec());
                    Ok(value.map(|value| (key, value)))
                })
                .collect()
        })
    }

    fn set_many<'a>(
        &'a self,
        ns: &'a str,
        entries: Vec<Entry>,
        quota: Quota,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let ns = ns.to_owned();
        let changes: BTreeMap<_, _> = entries.into_iter().map(|(k, v)| (k, Some(v))).collect();
        self.write(move |txn| Ok(apply(txn, &ns, &changes, Some(&quota))?.map(|c| ((), c))))
    }

    fn delete_many<'a>(
        &'a self,
        ns: &'a str,
        keys: Vec<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let ns = ns.to_owned();
        let changes: BTreeMap<_, _> = keys.into_iter().map(|k| (k, None)).collect();
        self.write(move |txn| Ok(apply(txn, &ns, &changes, None)?.map(|c| ((), c))))
    }

    fn increment<'a>(
        &'a self,
        ns: &'a str,
        key: &'a str,
        delta: u64,
        quota: Quota,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        let (ns, key) = (ns.to_owned(), key.to_owned());
        self.write(move |txn| {
            let table = txn.open_table(ENTRIES)?;
            let current = table
                .get((ns.as_str(), key.as_str()))?
                .map(|v| v.value().to_vec());
            // `apply` opens the table again: this handle must be gone.
            drop(table);
            let next = match rules::incremented(current.as_deref(), delta) {
                Ok(next) => next,
                Err(e) => return Ok(Err(e)),
            };
            let changes = BTreeMap::from([(key, Some(next.to_string().into_bytes()))]);
            Ok(apply(txn, &ns, &changes, Some(&quota))?.map(|changed| (next, changed)))
        })
    }
}

#[cfg(test)]
mod tests;
