//! Tasks in this process's memory: the default, for one replica. They
//! live as long as the process; what is kept is bounded as in Redis: by
//! each task's expiry (see [`super::Record::expires_ms`]), and per bucket
//! (see [`super::Record::bucket`]) by the bounds of [`super::Bounds`].
//!
//! Three maps: the tasks by id, each bucket's ids, and the ids by expiry,
//! so that an insert touches only its own bucket's tasks and the expired
//! ones, never every task.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use super::{Bounds, Full, Record};

#[derive(Default)]
pub(super) struct Memory {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, Record>,
    /// Each bucket's task ids.
    buckets: HashMap<String, HashSet<String>>,
    /// (expiry in ms, id) of every task, oldest first.
    expiries: BTreeSet<(u64, String)>,
}

impl Inner {
    fn put(&mut self, record: Record, ttl_ms: u64) {
        if let Some(old) = self.tasks.get(&record.id) {
            self.expiries
                .remove(&(old.expires_ms(ttl_ms), old.id.clone()));
        }
        self.expiries
            .insert((record.expires_ms(ttl_ms), record.id.clone()));
        self.buckets
            .entry(record.bucket().to_owned())
            .or_default()
            .insert(record.id.clone());
        self.tasks.insert(record.id.clone(), record);
    }

    fn forget(&mut self, id: &str, ttl_ms: u64) {
        let Some(record) = self.tasks.remove(id) else {
            return;
        };
        self.expiries
            .remove(&(record.expires_ms(ttl_ms), record.id.clone()));
        if let Some(ids) = self.buckets.get_mut(record.bucket()) {
            ids.remove(id);
            if ids.is_empty() {
                self.buckets.remove(record.bucket());
            }
        }
    }

    /// Forget every task expired at `now_ms`: only those are visited.
    fn sweep(&mut self, now_ms: u64, ttl_ms: u64) {
        while let Some((expires, id)) = self.expiries.first().cloned() {
            if expires > now_ms {
                break;
            }
            // An entry is stale only if `put` missed it; the task it names
            // then lives on, and only the entry goes.
            let stale = self
                .tasks
                .get(&id)
                .is_some_and(|r| r.expires_ms(ttl_ms) != expires);
            if !stale {
                self.forget(&id, ttl_ms);
            }
            self.expiries.remove(&(expires, id));
        }
    }
}

impl Memory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Insert `records` (all of one bucket) unless that bucket would then
    /// have more than `bounds.unfinished` tasks not yet finished whose
    /// leases hold; forget its oldest other tasks past `bounds.kept`. How
    /// many were forgotten.
    pub(super) fn insert(
        &self,
        records: &[Record],
        bounds: Bounds,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<usize, Full> {
        let mut inner = self.lock();
        inner.sweep(now_ms, ttl_ms);
        let Some(bucket) = records.first().map(|r| r.bucket().to_owned()) else {
            return Ok(0);
        };
        let mine: Vec<&Record> = inner
            .buckets
            .get(&bucket)
            .into_iter()
            .flatten()
            .filter_map(|id| inner.tasks.get(id))
            .collect();
        let victims = super::make_room(&mine, records.len(), bounds, now_ms)?;
        for id in &victims {
            inner.forget(id, ttl_ms);
        }
        for record in records {
            let mut record = record.clone();
            record.version = 1;
            inner.put(record, ttl_ms);
        }
        Ok(victims.len())
    }

    pub(super) fn get(&self, id: &str, now_ms: u64, ttl_ms: u64) -> Option<Record> {
        self.lock()
            .tasks
            .get(id)
            .filter(|r| r.expires_ms(ttl_ms) > now_ms)
            .cloned()
    }

    /// Replace the task `new` names by `new` if it is still at
    /// `new.version`; whether it was.
    pub(super) fn swap(&self, new: &Record, ttl_ms: u64) -> bool {
        let mut inner = self.lock();
        match inner.tasks.get(&new.id) {
            Some(current) if current.version == new.version => {
                let mut new = new.clone();
                new.version += 1;
                inner.put(new, ttl_ms);
                true
            }
            _ => false,
        }
    }

    pub(super) fn remove(&self, ids: &[String], ttl_ms: u64) {
        let mut inner = self.lock();
        for id in ids {
            inner.forget(id, ttl_ms);
        }
    }

    /// How many tasks are kept, for tests of the bounds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().tasks.len()
    }
}
