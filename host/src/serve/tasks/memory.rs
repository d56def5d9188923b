//! Tasks in this process's memory: the default, for one replica. They
//! live as long as the process; what is kept is bounded as in Redis, by
//! each task's expiry (see [`super::Record::expires_ms`]), swept at most
//! once per [`SWEEP_EVERY`].

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::{Full, Record};

/// How often expired tasks are swept: often enough that expired tasks
/// never pile up, rarely enough that a flood of requests does not make
/// every one of them walk the whole map.
const SWEEP_EVERY_MS: u64 = 1000;

#[derive(Default)]
pub(super) struct Memory {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, Record>,
    swept_ms: u64,
}

impl Memory {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Insert `records` (all of one owner) unless that owner would then
    /// have more than `max` tasks not yet finished whose leases hold.
    pub(super) fn insert(
        &self,
        records: &[Record],
        max: u32,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<(), Full> {
        let mut inner = self.lock();
        if now_ms >= inner.swept_ms + SWEEP_EVERY_MS {
            inner.tasks.retain(|_, r| r.expires_ms(ttl_ms) > now_ms);
            inner.swept_ms = now_ms;
        }
        let Some(owner) = records.first().map(|r| r.owner.as_str()) else {
            return Ok(());
        };
        let unfinished = inner
            .tasks
            .values()
            .filter(|r| r.owner == owner && !r.state.is_finished() && r.lease_until_ms > now_ms)
            .count();
        let unfinished = u32::try_from(unfinished).unwrap_or(u32::MAX);
        let wanted = u32::try_from(records.len()).unwrap_or(u32::MAX);
        if unfinished.saturating_add(wanted) > max {
            return Err(Full { unfinished });
        }
        for record in records {
            let mut record = record.clone();
            record.version = 1;
            inner.tasks.insert(record.id.clone(), record);
        }
        Ok(())
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
    pub(super) fn swap(&self, new: &Record) -> bool {
        let mut inner = self.lock();
        match inner.tasks.get_mut(&new.id) {
            Some(current) if current.version == new.version => {
                *current = new.clone();
                current.version += 1;
                true
            }
            _ => false,
        }
    }

    pub(super) fn remove(&self, ids: &[String]) {
        let mut inner = self.lock();
        for id in ids {
            inner.tasks.remove(id);
        }
    }
}
