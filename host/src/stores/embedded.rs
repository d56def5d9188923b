//! The embedded backend: one redb file per store.
//!
//! Why redb: it is pure Rust (no C library to build or patch), shaped as a
//! key-value store rather than SQL, and its commits are ACID and crash-safe
//! (copy-on-write B-trees with checksummed commits, `fsync`ed before a
//! write returns). Readers never wait on the writer. Its one limit is that
//! one process opens a file at a time: a second toolhost process on the
//! same store gets an error naming that, and the fix — a Redis store, made
//! for sharing. Within a process, every hot reload shares the open file.
//!
//! Layout: table `entries` maps `(namespace, key)` to the value; table
//! `usage` maps a namespace to its `(keys, bytes)`, updated in the same
//! transaction as the entries it counts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use futures::future::BoxFuture;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::{
    Engine, Entry, KeyPage, PAGE, Quota, StoreError, entry_bytes, incremented, too_many_bytes,
    too_many_keys,
};

const ENTRIES: TableDefinition<'_, (&str, &str), &[u8]> = TableDefinition::new("entries");
const USAGE: TableDefinition<'_, &str, (u64, u64)> = TableDefinition::new("usage");

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

impl Embedded {
    /// Open (creating if need be) the file at `path`, or share the one
    /// this process already has open. Blocking.
    pub(crate) fn open(path: &Path) -> Result<Arc<Self>, StoreError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| unavailable(path, format!("cannot create its directory: {e}")))?;
        }
        // The same file under any spelling of its path.
        let key = match (path.parent().map(Path::canonicalize), path.file_name()) {
            (Some(Ok(dir)), Some(name)) => dir.join(name),
            _ => path.to_owned(),
        };
        let mut open = OPEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let open = open.get_or_insert_with(HashMap::new);
        if let Some(existing) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => unavailable(
                path,
                "another process has this store open; an embedded store serves one toolhost process \
                 at a time (use a redis:// store to share state between processes)",
            ),
            other => unavailable(path, other),
        })?;
        let txn = db.begin_write().map_err(|e| unavailable(path, e))?;
        txn.open_table(ENTRIES).map_err(|e| unavailable(path, e))?;
        txn.open_table(USAGE).map_err(|e| unavailable(path, e))?;
        txn.commit().map_err(|e| unavailable(path, e))?;
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

    /// A write that may be refused: `op` returns `Ok(Err(_))` to abort.
    fn write<'a, T: Send + 'static>(
        &'a self,
        op: impl FnOnce(&redb::WriteTransaction) -> Result<Result<T, StoreError>, redb::Error>
        + Send
        + 'static,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let result = self.blocking(move |db| {
            let txn = db.begin_write()?;
            match op(&txn)? {
                Ok(value) => {
                    txn.commit()?;
                    Ok(Ok(value))
                }
                // Dropping the transaction aborts it: nothing is written.
                Err(refused) => Ok(Err(refused)),
            }
        });
        Box::pin(async move { result.await? })
    }
}

/// Apply `entries` (a value of `None` deletes) to namespace `ns` within
/// `txn`, if the result fits `quota`.
fn apply(
    txn: &redb::WriteTransaction,
    ns: &str,
    entries: &[(String, Option<Vec<u8>>)],
    quota: Option<&Quota>,
) -> Result<Result<(), StoreError>, redb::Error> {
    let mut table = txn.open_table(ENTRIES)?;
    let mut usage = txn.open_table(USAGE)?;
    let (mut keys, mut bytes) = usage.get(ns)?.map_or((0, 0), |v| v.value());
    for (key, value) in entries {
        let old = table
            .get((ns, key.as_str()))?
            .map(|v| entry_bytes(key, v.value()));
        match (old, value) {
            (Some(old), Some(value)) => bytes = bytes - old + entry_bytes(key, value),
            (None, Some(value)) => {
                keys += 1;
                bytes += entry_bytes(key, value);
            }
            (Some(old), None) => {
                keys -= 1;
                bytes -= old;
            }
            (None, None) => {}
        }
        match value {
            Some(value) => {
                table.insert((ns, key.as_str()), value.as_slice())?;
            }
            None => {
                table.remove((ns, key.as_str()))?;
            }
        }
    }
    if let Some(quota) = quota {
        if keys > quota.max_keys {
            return Ok(Err(too_many_keys(keys, quota)));
        }
        if bytes > quota.max_bytes {
            return Ok(Err(too_many_bytes(bytes, quota)));
        }
    }
    if keys == 0 {
        usage.remove(ns)?;
    } else {
        usage.insert(ns, (keys, bytes))?;
    }
    Ok(Ok(()))
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

    fn list<'a>(&'a self, ns: &'a str, cursor: u64) -> BoxFuture<'a, Result<KeyPage, StoreError>> {
        let ns = ns.to_owned();
        self.blocking(move |db| {
            let table = db.begin_read()?.open_table(ENTRIES)?;
            let skip = usize::try_from(cursor).unwrap_or(usize::MAX);
            let mut keys = Vec::new();
            let mut more = false;
            for entry in table.range((ns.as_str(), "")..)?.skip(skip) {
                let (key, _) = entry?;
                let (entry_ns, key) = key.value();
                if entry_ns != ns {
                    break;
                }
                if keys.len() == PAGE {
                    more = true;
                    break;
                }
                keys.push(key.to_owned());
            }
            let next = more.then(|| cursor + keys.len() as u64);
            Ok((keys, next))
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
        let entries: Vec<_> = entries.into_iter().map(|(k, v)| (k, Some(v))).collect();
        self.write(move |txn| apply(txn, &ns, &entries, Some(&quota)))
    }

    fn delete_many<'a>(
        &'a self,
        ns: &'a str,
        keys: Vec<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let ns = ns.to_owned();
        let entries: Vec<_> = keys.into_iter().map(|k| (k, None)).collect();
        self.write(move |txn| apply(txn, &ns, &entries, None))
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
            let next = match incremented(current.as_deref(), delta) {
                Ok(next) => next,
                Err(e) => return Ok(Err(e)),
            };
            Ok(apply(
                txn,
                &ns,
                &[(key, Some(next.to_string().into_bytes()))],
                Some(&quota),
            )?
            .map(|()| next))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(max_keys: u64, max_bytes: u64) -> Quota {
        Quota {
            max_keys,
            max_bytes,
            ..Quota::default()
        }
    }

    #[tokio::test]
    async fn writes_past_a_quota_change_nothing_and_usage_follows_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Embedded::open(&dir.path().join("s.redb")).unwrap();
        store
            .set_many("", vec![("a".into(), b"1".to_vec())], quota(2, 100))
            .await
            .unwrap();
        let refused = store
            .set_many(
                "",
                vec![("b".into(), b"2".to_vec()), ("c".into(), b"3".to_vec())],
                quota(2, 100),
            )
            .await;
        assert!(
            matches!(refused, Err(StoreError::QuotaExceeded(_))),
            "{refused:?}"
        );
        assert_eq!(
            store.get("", "b").await.unwrap(),
            None,
            "a refused write is all or nothing"
        );
        let too_big = store
            .set_many("", vec![("a".into(), vec![0; 200])], quota(2, 100))
            .await;
        assert!(matches!(too_big, Err(StoreError::QuotaExceeded(_))));
        assert_eq!(
            store.get("", "a").await.unwrap(),
            Some(b"1".to_vec()),
            "the old value is kept"
        );
        store.delete_many("", vec!["a".into()]).await.unwrap();
        store
            .set_many(
                "",
                vec![("b".into(), b"2".to_vec()), ("c".into(), b"3".to_vec())],
                quota(2, 100),
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn namespaces_are_apart_and_lists_page() {
        let dir = tempfile::tempdir().unwrap();
        let store = Embedded::open(&dir.path().join("s.redb")).unwrap();
        let many: Vec<Entry> = (0..PAGE + 5)
            .map(|i| (format!("k{i:05}"), vec![1]))
            .collect();
        store
            .set_many("s:ada", many, quota(10_000, 1 << 20))
            .await
            .unwrap();
        store
            .set_many("s:bob", vec![("mine".into(), vec![2])], Quota::default())
            .await
            .unwrap();
        let (first, next) = store.list("s:ada", 0).await.unwrap();
        assert_eq!(first.len(), PAGE);
        let (rest, end) = store.list("s:ada", next.unwrap()).await.unwrap();
        assert_eq!((rest.len(), end), (5, None));
        assert_eq!(
            store.list("s:bob", 0).await.unwrap().0,
            vec!["mine".to_owned()]
        );
        assert_eq!(store.get("s:bob", "k00000").await.unwrap(), None);
        assert_eq!(
            store
                .increment("s:bob", "n", 5, Quota::default())
                .await
                .unwrap(),
            5
        );
        assert_eq!(
            store
                .increment("s:bob", "n", 1, Quota::default())
                .await
                .unwrap(),
            6
        );
    }

    #[tokio::test]
    async fn one_process_shares_an_open_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let a = Embedded::open(&path).unwrap();
        let b = Embedded::open(&path).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
