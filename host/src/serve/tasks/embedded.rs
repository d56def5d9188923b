//! Tasks in a redb file (`[serve.tasks] path`): one replica's tasks, kept
//! across its restarts, so a task it was running when it died is failed
//! (or run again) by the restarted server rather than lost. redb locks
//! the file: one process serves it at a time.
//!
//! Three tables: `tasks`, id → the record's version (8 bytes,
//! little-endian) and its JSON; `buckets`, (bucket, id) → (), each
//! bucket's tasks; `ttl-from`, (ms, id) → (), every task by when its
//! `ttl` starts counting ([`Record::ttl_counts_from_ms`]), so that the
//! index holds whatever `ttl` the server runs with now (a file outlives
//! its server's settings). Every change is one write transaction, so the
//! compare-and-swap of [`Embedded::swap`] and the count-and-insert of
//! [`Embedded::insert`] are atomic; an insert reads only its own bucket's
//! tasks and sweeps only the expired ones. A file written before the
//! indexes existed, or with the older index by expiry (`expiries`, which
//! went stale when the `ttl` changed), is indexed once, when opened.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, Table, TableDefinition,
    WriteTransaction,
};

use super::{Bounds, Full, Record, StoreDown};

const TASKS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("tasks");
const BUCKETS: TableDefinition<'_, (&str, &str), ()> = TableDefinition::new("buckets");
const TTL_FROM: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("ttl-from");
/// The index by expiry of files written before `ttl-from`: dropped on open.
const EXPIRIES_BEFORE: TableDefinition<'_, (u64, &str), ()> = TableDefinition::new("expiries");

pub(super) struct Embedded {
    db: Arc<Database>,
    path: PathBuf,
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

/// The three tables, open in one write transaction.
struct Tables<'t> {
    tasks: Table<'t, &'static str, &'static [u8]>,
    buckets: Table<'t, (&'static str, &'static str), ()>,
    ttl_from: Table<'t, (u64, &'static str), ()>,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Self {
            tasks: txn.open_table(TASKS)?,
            buckets: txn.open_table(BUCKETS)?,
            ttl_from: txn.open_table(TTL_FROM)?,
        })
    }

    fn read(&self, id: &str) -> Result<Option<Record>, redb::Error> {
        Ok(self.tasks.get(id)?.and_then(|b| decode(b.value())))
    }

    /// Keep `record` as `bytes`, replacing `old` (the record as kept, if
    /// any) in the indexes.
    fn put(
        &mut self,
        record: &Record,
        bytes: &[u8],
        old: Option<&Record>,
    ) -> Result<(), redb::Error> {
        if let Some(old) = old {
            self.ttl_from
                .remove((old.ttl_counts_from_ms(), old.id.as_str()))?;
        }
        self.tasks.insert(record.id.as_str(), bytes)?;
        self.buckets
            .insert((record.bucket(), record.id.as_str()), ())?;
        self.ttl_from
            .insert((record.ttl_counts_from_ms(), record.id.as_str()), ())?;
        Ok(())
    }

    fn forget(&mut self, id: &str) -> Result<(), redb::Error> {
        let Some(record) = self.read(id)? else {
            self.tasks.remove(id)?;
            return Ok(());
        };
        self.tasks.remove(id)?;
        self.buckets.remove((record.bucket(), id))?;
        self.ttl_from.remove((record.ttl_counts_from_ms(), id))?;
        Ok(())
    }

    /// Forget the tasks expired at `now_ms` (their `ttl` started `ttl_ms`
    /// ago or earlier): only those are read.
    fn sweep(&mut self, now_ms: u64, ttl_ms: u64) -> Result<(), redb::Error> {
        let Some(latest) = now_ms.checked_sub(ttl_ms) else {
            return Ok(());
        };
        let mut expired = Vec::new();
        for entry in self.ttl_from.range(..(latest.saturating_add(1), ""))? {
            let (key, _) = entry?;
            let (from, id) = key.value();
            expired.push((from, id.to_owned()));
        }
        for (from, id) in expired {
            // An entry that no longer matches its task is only dropped.
            let current = self.read(&id)?.map(|r| r.ttl_counts_from_ms());
            if current.is_none_or(|at| at == from) {
                self.forget(&id)?;
            }
            self.ttl_from.remove((from, id.as_str()))?;
        }
        Ok(())
    }

    /// The tasks of `bucket`.
    fn bucket(&self, bucket: &str) -> Result<Vec<Record>, redb::Error> {
        let mut ids = Vec::new();
        for entry in self.buckets.range((bucket, "")..)? {
            let (key, _) = entry?;
            let (of, id) = key.value();
            if of != bucket {
                break;
            }
            ids.push(id.to_owned());
        }
        let mut records = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(record) = self.read(&id)? {
                records.push(record);
            }
        }
        Ok(records)
    }

    /// Index every task of a file written before the indexes existed, or
    /// with the index by expiry: once, when the index is missing.
    fn index_all(&mut self) -> Result<(), redb::Error> {
        if !self.ttl_from.is_empty()? || self.tasks.is_empty()? {
            return Ok(());
        }
        let mut records = Vec::new();
        for entry in self.tasks.iter()? {
            let (_, bytes) = entry?;
            records.extend(decode(bytes.value()));
        }
        for record in records {
            self.buckets
                .insert((record.bucket(), record.id.as_str()), ())?;
            self.ttl_from
                .insert((record.ttl_counts_from_ms(), record.id.as_str()), ())?;
        }
        Ok(())
    }
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
            txn.delete_table(EXPIRIES_BEFORE)?;
            Tables::open(&txn)?.index_all()?;
            txn.commit()?;
            Ok(())
        };
        prepare()
            .map_err(|e| format!("{}: the task file cannot be written: {e}", path.display()))?;
        Ok(Self {
            db: Arc::new(db),
            path: path.to_owned(),
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

    /// Run `op` on the tables in one write transaction, committed unless
    /// `op` fails.
    async fn write<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Tables<'_>) -> Result<T, redb::Error> + Send + 'static,
    ) -> Result<T, StoreDown> {
        self.blocking(move |db| {
            let txn = db.begin_write()?;
            let value = op(&mut Tables::open(&txn)?)?;
            txn.commit()?;
            Ok(value)
        })
        .await
    }

    fn down(&self, error: &dyn std::fmt::Display) -> StoreDown {
        tracing::warn!(path = %self.path.display(), %error, "the task file failed");
        StoreDown
    }

    pub(super) async fn insert(
        &self,
        records: &[Record],
        bounds: Bounds,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Result<usize, Full>, StoreDown> {
        let Some(bucket) = records.first().map(|r| r.bucket().to_owned()) else {
            return Ok(Ok(0));
        };
        let mut encoded = Vec::with_capacity(records.len());
        for record in records {
            let mut record = record.clone();
            record.version = 1;
            let bytes = encode(&record, 1).map_err(|e| self.down(&e))?;
            encoded.push((record, bytes));
        }
        self.write(move |tables| {
            tables.sweep(now_ms, ttl_ms)?;
            let mine = tables.bucket(&bucket)?;
            let mine: Vec<&Record> = mine.iter().collect();
            let victims = match super::make_room(&mine, encoded.len(), bounds, now_ms) {
                Ok(victims) => victims,
                Err(full) => return Ok(Err(full)),
            };
            for id in &victims {
                tables.forget(id)?;
            }
            for (record, bytes) in &encoded {
                tables.put(record, bytes, None)?;
            }
            Ok(Ok(victims.len()))
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
        let new = new.clone();
        self.write(move |tables| {
            let Some(current) = tables.read(&new.id)? else {
                return Ok(false);
            };
            if current.version != new.version {
                return Ok(false);
            }
            tables.put(&new, &bytes, Some(&current))?;
            Ok(true)
        })
        .await
    }

    pub(super) async fn remove(&self, ids: &[String]) -> Result<(), StoreDown> {
        let ids = ids.to_vec();
        self.write(move |tables| {
            for id in &ids {
                tables.forget(id)?;
            }
            Ok(())
        })
        .await
    }

    /// How many tasks the file holds, expired ones not yet swept included.
    #[cfg(test)]
    pub(super) fn len(&self) -> u64 {
        let txn = self.db.begin_read().unwrap();
        txn.open_table(TASKS).unwrap().len().unwrap()
    }
}
