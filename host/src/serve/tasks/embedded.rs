//! Tasks in a redb file (`[serve.tasks] path`): one replica's tasks, kept
//! across its restarts, so a task it was running when it died is failed
//! (or run again) by the restarted server rather than lost. redb locks
//! the file: one process serves it at a time.
//!
//! One table, id → the record's version (8 bytes, little-endian) and its
//! JSON. Every change is one write transaction, so the compare-and-swap
//! of [`Embedded::swap`] and the count-and-insert of [`Embedded::insert`]
//! are atomic. Expired tasks are swept by inserts, at most once per
//! [`SWEEP_EVERY_MS`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::{Full, Record, StoreDown};

const TASKS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("tasks");

/// How often expired tasks are swept: as in memory.
const SWEEP_EVERY_MS: u64 = 1000;

pub(super) struct Embedded {
    db: Arc<Database>,
    path: PathBuf,
    swept_ms: AtomicU64,
}

fn encode(record: &Record, version: u64) -> Result<Vec<u8>, serde_json::Error> {
    let mut bytes = version.to_le_bytes().to_vec();
    serde_json::to_writer(&mut bytes, record)?;
    Ok(bytes)
}

/// The record in `bytes`, or `None` when they are not one (a file
/// written by something else: treated as no task).
fn decode(bytes: &[u8]) -> Option<Record> {
    let (version, json) = bytes.split_at_checked(8)?;
    let mut record: Record = serde_json::from_slice(json).ok()?;
    record.version = u64::from_le_bytes(version.try_into().ok()?);
    Some(record)
}

impl Embedded {
    /// Open (or create) the file at `path`.
    ///
    /// # Errors
    ///
    /// What is wrong, naming the file: another process holds it, or it
    /// cannot be opened or created.
    pub(super) fn open(path: &Path) -> Result<Self, String> {
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => format!(
                "{}: another process holds this task file; give each server its own \
                 [serve.tasks] path, or share tasks between servers with redis",
                path.display()
            ),
            other => format!(
                "{}: the task file cannot be opened: {other}",
                path.display()
            ),
        })?;
        let prepare = || -> Result<(), redb::Error> {
            let txn = db.begin_write()?;
            txn.open_table(TASKS)?;
            txn.commit()?;
            Ok(())
        };
        prepare()
            .map_err(|e| format!("{}: the task file cannot be written: {e}", path.display()))?;
        Ok(Self {
            db: Arc::new(db),
            path: path.to_owned(),
            swept_ms: AtomicU64::new(0),
        })
    }

    /// Run `op` on a blocking thread: redb touches the disk.
    async fn blocking<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Database) -> Result<T, redb::Error> + Send + 'static,
    ) -> Result<T, StoreDown> {
        let db = self.db.clone();
        match tokio::task::spawn_blocking(move || op(&db)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.down(&e)),
            Err(e) => Err(self.down(&e)),
        }
    }

    fn down(&self, error: &dyn std::fmt::Display) -> StoreDown {
        tracing::warn!(path = %self.path.display(), %error, "the task file failed");
        StoreDown
    }

    pub(super) async fn insert(
        &self,
        records: &[Record],
        max: u32,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Result<(), Full>, StoreDown> {
        let Some(owner) = records.first().map(|r| r.owner.clone()) else {
            return Ok(Ok(()));
        };
        let mut encoded = Vec::with_capacity(records.len());
        for record in records {
            encoded.push((
                record.id.clone(),
                encode(record, 1).map_err(|e| self.down(&e))?,
            ));
        }
        let sweep = self.swept_ms.load(Ordering::Relaxed) + SWEEP_EVERY_MS <= now_ms;
        if sweep {
            self.swept_ms.store(now_ms, Ordering::Relaxed);
        }
        self.blocking(move |db| {
            let txn = db.begin_write()?;
            let full = {
                let mut table = txn.open_table(TASKS)?;
                let mut expired = Vec::new();
                let mut unfinished = 0u32;
                for entry in table.iter()? {
                    let (id, bytes) = entry?;
                    let Some(record) = decode(bytes.value()) else {
                        continue;
                    };
                    if sweep && record.expires_ms(ttl_ms) <= now_ms {
                        expired.push(id.value().to_owned());
                    } else if record.owner == owner
                        && !record.state.is_finished()
                        && record.lease_until_ms > now_ms
                    {
                        unfinished = unfinished.saturating_add(1);
                    }
                }
                for id in &expired {
                    table.remove(id.as_str())?;
                }
                let wanted = u32::try_from(encoded.len()).unwrap_or(u32::MAX);
                if unfinished.saturating_add(wanted) > max {
                    Some(Full { unfinished })
                } else {
                    for (id, bytes) in &encoded {
                        table.insert(id.as_str(), bytes.as_slice())?;
                    }
                    None
                }
            };
            txn.commit()?;
            Ok(full.map_or(Ok(()), Err))
        })
        .await
    }

    pub(super) async fn get(
        &self,
        id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Option<Record>, StoreDown> {
        let id = id.to_owned();
        self.blocking(move |db| {
            let table = db.begin_read()?.open_table(TASKS)?;
            Ok(table
                .get(id.as_str())?
                .and_then(|bytes| decode(bytes.value()))
                .filter(|r| r.expires_ms(ttl_ms) > now_ms))
        })
        .await
    }

    pub(super) async fn swap(&self, new: &Record) -> Result<bool, StoreDown> {
        let bytes = encode(new, new.version + 1).map_err(|e| self.down(&e))?;
        let (id, version) = (new.id.clone(), new.version);
        self.blocking(move |db| {
            let txn = db.begin_write()?;
            let swapped = {
                let mut table = txn.open_table(TASKS)?;
                let current = table
                    .get(id.as_str())?
                    .and_then(|b| decode(b.value()))
                    .map(|r| r.version);
                if current == Some(version) {
                    table.insert(id.as_str(), bytes.as_slice())?;
                    true
                } else {
                    false
                }
            };
            if swapped {
                txn.commit()?;
            }
            Ok(swapped)
        })
        .await
    }

    pub(super) async fn remove(&self, ids: &[String]) -> Result<(), StoreDown> {
        let ids = ids.to_vec();
        self.blocking(move |db| {
            let txn = db.begin_write()?;
            {
                let mut table = txn.open_table(TASKS)?;
                for id in &ids {
                    table.remove(id.as_str())?;
                }
            }
            txn.commit()?;
            Ok(())
        })
        .await
    }
}
