//! Host resources that belong to the whole process, shared out per call.
//!
//! File descriptors are the one resource a tool can take from every other
//! tool and from the host itself: a process has a fixed number (`ulimit -n`,
//! often 1024), and a tool that holds them all makes every other call's file
//! opens and HTTP connections fail, and the agent loop lose its model.
//! So descriptors held for tools come from one process-wide [`FdPool`] that
//! always leaves a reserve for the host, and each call also has its own
//! smaller budget (see `files` and `http`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Descriptors always left to the host itself (model connections, MCP and
/// HTTP clients, compiled-code files, logs), at the least.
const MIN_RESERVE: usize = 128;

/// The pool never shrinks below this, so tools still work under a tiny
/// `ulimit -n` (the reserve then shrinks instead).
const MIN_POOL: usize = 16;

/// The most of the pool one component may hold, as a share of it: with
/// several components, one that holds all it may still leaves the others
/// half.
const COMPONENT_SHARE: usize = 2;

/// The process-wide pool of descriptors tools may hold at once.
#[derive(Debug)]
pub(crate) struct FdPool {
    capacity: usize,
    in_use: AtomicUsize,
}

impl FdPool {
    /// The pool for this process: three quarters of the descriptor limit
    /// (`RLIMIT_NOFILE`'s soft value, read once), keeping at least
    /// [`MIN_RESERVE`] for the host.
    pub(crate) fn global() -> &'static FdPool {
        static POOL: OnceLock<FdPool> = OnceLock::new();
        POOL.get_or_init(|| FdPool::with_limit(descriptor_limit()))
    }

    /// A pool sized for a process that may open `limit` descriptors.
    pub(crate) fn with_limit(limit: usize) -> Self {
        let reserve = (limit / 4).max(MIN_RESERVE);
        Self {
            capacity: limit.saturating_sub(reserve).max(MIN_POOL),
            in_use: AtomicUsize::new(0),
        }
    }

    fn take(&self) -> bool {
        take(&self.in_use, self.capacity)
    }

    /// How many descriptors tools may hold at once.
    #[cfg(test)]
    fn capacity_of(&self) -> usize {
        self.capacity
    }

    /// How many are held now.
    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Acquire)
    }
}

fn take(counter: &AtomicUsize, capacity: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            (used < capacity).then_some(used + 1)
        })
        .is_ok()
}

/// One component's share of a pool: at most 1/[`COMPONENT_SHARE`] of it.
#[derive(Debug)]
pub(crate) struct FdShare {
    pool: &'static FdPool,
    capacity: usize,
    in_use: AtomicUsize,
}

impl FdShare {
    /// A share of the process-wide pool.
    pub(crate) fn new() -> Arc<Self> {
        Self::of(FdPool::global())
    }

    pub(crate) fn of(pool: &'static FdPool) -> Arc<Self> {
        Arc::new(Self {
            pool,
            capacity: (pool.capacity / COMPONENT_SHARE).max(MIN_POOL / 2),
            in_use: AtomicUsize::new(0),
        })
    }

    /// One descriptor from this share and the pool, or `None` when either
    /// is used up.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<FdPermit> {
        if !take(&self.in_use, self.capacity) {
            return None;
        }
        if !self.pool.take() {
            self.in_use.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(FdPermit {
            share: self.clone(),
        })
    }
}

/// One descriptor taken from an [`FdShare`] (and its pool); given back when
/// dropped.
#[derive(Debug)]
pub(crate) struct FdPermit {
    share: Arc<FdShare>,
}

impl Drop for FdPermit {
    fn drop(&mut self) {
        self.share.in_use.fetch_sub(1, Ordering::AcqRel);
        self.share.pool.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The soft `RLIMIT_NOFILE` of this process (1024 when it cannot be read).
fn descriptor_limit() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit
        .current
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1024)
}

/// Raise this process's soft descriptor limit to its hard limit, as servers
/// commonly do, and return the new soft limit. For the `toolhost` binary:
/// a library should not change its host process's limits on its own.
pub fn raise_descriptor_limit() -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        // Best effort: a refused raise leaves the old limit in force.
        let _ = setrlimit(Resource::Nofile, limit);
    }
    descriptor_limit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_common_limit_keeps_a_quarter_for_the_host() {
        let pool = FdPool::with_limit(1024);
        assert_eq!(pool.capacity_of(), 768);
        let tiny = FdPool::with_limit(100);
        assert_eq!(tiny.capacity_of(), MIN_POOL);
    }

    #[test]
    fn permits_are_bounded_by_share_and_pool_and_given_back() {
        let pool: &'static FdPool = Box::leak(Box::new(FdPool::with_limit(1024)));
        let (a, b, c) = (FdShare::of(pool), FdShare::of(pool), FdShare::of(pool));
        let held_a: Vec<_> = std::iter::from_fn(|| a.try_acquire()).collect();
        assert_eq!(held_a.len(), 384, "one component holds at most half");
        let held_b: Vec<_> = std::iter::from_fn(|| b.try_acquire()).collect();
        assert_eq!(held_b.len(), 384);
        assert!(c.try_acquire().is_none(), "the pool is used up");
        assert_eq!(pool.in_use(), 768);
        drop(held_a);
        assert_eq!(pool.in_use(), 384);
        assert!(c.try_acquire().is_some());
    }
}
