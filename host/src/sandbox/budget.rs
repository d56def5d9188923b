//! Host resources that belong to the whole process, shared out per call.
//!
//! File descriptors are the one resource a tool can take from every other
//! tool and from the host itself: a process has a fixed number (`ulimit -n`,
//! often 1024), and a tool that holds them all makes every other call's file
//! opens and HTTP connections fail, and the agent loop lose its model.
//! So descriptors held for tools come from one process-wide [`FdPool`] that
//! always leaves a reserve for the host, and each call also has its own
//! smaller budget (see `files` and `http`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Descriptors always left to the host itself (model connections, MCP and
/// HTTP clients, compiled-code files, logs), at the least.
const MIN_RESERVE: usize = 128;

/// The pool never shrinks below this, so tools still work under a tiny
/// `ulimit -n` (the reserve then shrinks instead).
const MIN_POOL: usize = 16;

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

    /// One descriptor's worth of the pool, or `None` when tools already hold
    /// all of it.
    pub(crate) fn try_acquire(&'static self) -> Option<FdPermit> {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.capacity).then_some(used + 1)
            })
            .ok()
            .map(|_| FdPermit { pool: self })
    }

    /// How many descriptors tools may hold at once.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many are held now.
    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Acquire)
    }
}

/// One descriptor taken from an [`FdPool`]; given back when dropped.
#[derive(Debug)]
pub(crate) struct FdPermit {
    pool: &'static FdPool,
}

impl Drop for FdPermit {
    fn drop(&mut self) {
        self.pool.in_use.fetch_sub(1, Ordering::AcqRel);
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
        assert_eq!(pool.capacity(), 768);
        let tiny = FdPool::with_limit(100);
        assert_eq!(tiny.capacity(), MIN_POOL);
    }

    #[test]
    fn permits_are_bounded_and_given_back() {
        let pool: &'static FdPool = Box::leak(Box::new(FdPool::with_limit(0)));
        let held: Vec<_> = std::iter::from_fn(|| pool.try_acquire()).collect();
        assert_eq!(held.len(), MIN_POOL);
        assert!(pool.try_acquire().is_none());
        drop(held);
        assert_eq!(pool.in_use(), 0);
        assert!(pool.try_acquire().is_some());
    }
}
