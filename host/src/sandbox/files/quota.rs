//! The disk quota of read-write grants: writes charged before they happen,
//! and the directory measured again (at most once per
//! [`RECOUNT_INTERVAL`]) when the count would pass the quota, so that
//! overwrites and deletions are credited.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a new file, directory or link is charged against the quota: about
/// one block, so a tool cannot exhaust the disk's inodes with empty files.
pub(super) const ENTRY_COST: u64 = 4096;

/// How often a full directory may be measured again to credit deletions and
/// overwrites: measuring walks the whole tree.
const RECOUNT_INTERVAL: Duration = Duration::from_secs(1);

/// Entries walked when measuring a directory; beyond it the tree counts as
/// full (a quota that large is better enforced by the file system).
const MAX_WALK: usize = 100_000;

/// A read-write grant's disk quota, counted across calls.
#[derive(Debug)]
pub(super) struct DiskQuota {
    limit: u64,
    /// An upper bound on what the directory holds.
    used: AtomicU64,
    last_recount: Mutex<Option<Instant>>,
}

impl DiskQuota {
    /// A quota of `limit` bytes for a directory that holds `used` now.
    pub(super) fn new(limit: u64, used: u64) -> Self {
        Self {
            limit,
            used: AtomicU64::new(used),
            last_recount: Mutex::new(Some(Instant::now())),
        }
    }

    /// The most the directory may hold.
    pub(super) fn limit(&self) -> u64 {
        self.limit
    }

    /// Count `bytes` more, if the quota allows; when the count would pass
    /// it, the directory (under `root`, which names it) is measured again
    /// first, at most once per [`RECOUNT_INTERVAL`].
    pub(super) fn try_charge(&self, bytes: u64, root: impl FnOnce() -> PathBuf) -> bool {
        let add = |used: u64| used.checked_add(bytes).filter(|&total| total <= self.limit);
        if self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, add)
            .is_ok()
        {
            return true;
        }
        // Over by the count: measure what is really there, at most once per
        // interval, so deletions and overwrites are credited.
        {
            // One measurement at a time: a second writer over the count is
            // refused rather than made to wait on a walk.
            let Ok(mut last) = self.last_recount.try_lock() else {
                return false;
            };
            if last.is_some_and(|at| at.elapsed() < RECOUNT_INTERVAL) {
                return false;
            }
            *last = Some(Instant::now());
            self.used.store(measure(&root()), Ordering::Release);
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, add)
            .is_ok()
    }
}

/// Bytes held under `root`: the disk blocks files use (a sparse file counts
/// what it really holds) plus [`ENTRY_COST`] per entry, without following
/// symbolic links.
pub(super) fn measure(root: &Path) -> u64 {
    let mut total = 0u64;
    let mut walked = 0usize;
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            walked += 1;
            if walked > MAX_WALK {
                return u64::MAX;
            }
            let Ok(meta) = entry.metadata() else { continue };
            total = total.saturating_add(ENTRY_COST);
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.blocks().saturating_mul(512));
            }
        }
    }
    total
}
