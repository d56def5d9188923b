//! Budgets in this process's memory: one replica's limits, with no store.
//!
//! Every check and take is made under one lock, so two calls can never
//! both take a bucket's last token or a cap's last slot.
//!
//! **Memory bound.** A bucket is kept only while it is not full again,
//! at most `burst × interval` (a day at most) after its last call; a
//! concurrency count only while a call holds it. Full buckets are swept
//! out whenever the buckets kept reach twice as many as after the last
//! sweep (at least [`MIN_SWEEP`]), so the limiter holds at most
//! `2 × (principals and tools that called within one refill time) +`
//! [`MIN_SWEEP`] buckets, and one count per call in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::{Blocked, Plan};
use crate::fair_shares::Bucket;

/// Buckets kept before the first sweep: sweeping a handful would cost more
/// than it frees.
const MIN_SWEEP: usize = 1024;

/// Where time comes from, in microseconds: the process's monotonic clock,
/// or in tests a clock the test moves.
pub(super) struct Clock {
    start: Instant,
    #[cfg(test)]
    manual: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl Clock {
    pub(super) fn monotonic() -> Self {
        Self {
            start: Instant::now(),
            #[cfg(test)]
            manual: None,
        }
    }

    /// A clock at 0 that moves only when the test adds to the counter.
    #[cfg(test)]
    pub(super) fn manual() -> (Self, Arc<std::sync::atomic::AtomicU64>) {
        let now = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let clock = Self {
            start: Instant::now(),
            manual: Some(now.clone()),
        };
        (clock, now)
    }

    fn now_us(&self) -> u64 {
        #[cfg(test)]
        if let Some(now) = &self.manual {
            return now.load(std::sync::atomic::Ordering::SeqCst);
        }
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// The next state of a bucket whose full-again time is `tat` if a call
/// takes a token `now`, or how long until one can (GCRA). `redis.rs`'s
/// script computes the same.
pub(super) fn take(tat: u64, now: u64, bucket: &Bucket) -> Result<u64, u64> {
    let next = tat.max(now).saturating_add(bucket.interval_us);
    let limit = now.saturating_add(bucket.interval_us.saturating_mul(u64::from(bucket.burst)));
    if next > limit {
        Err(next - limit)
    } else {
        Ok(next)
    }
}

/// The budgets of one process.
pub(super) struct Memory {
    clock: Clock,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Full-again times of the principals' and the tools' buckets.
    principals: HashMap<String, u64>,
    tools: HashMap<String, u64>,
    /// Calls in flight, for principals and tools with a cap.
    busy_principals: HashMap<String, u32>,
    busy_tools: HashMap<String, u32>,
    /// Sweep full buckets when this many are kept.
    sweep_at: usize,
}

/// The concurrency slots one admitted call holds.
pub(super) struct Slots {
    memory: Arc<Memory>,
    principal: Option<String>,
    tool: Option<String>,
}

impl Slots {
    pub(super) fn release(self) {
        let mut state = self.memory.lock();
        let State {
            busy_principals,
            busy_tools,
            ..
        } = &mut *state;
        for (map, key) in [(busy_principals, self.principal), (busy_tools, self.tool)] {
            if let Some(key) = key
                && let Some(count) = map.get_mut(&key)
            {
                *count -= 1;
                if *count == 0 {
                    map.remove(&key);
                }
            }
        }
    }
}

impl Memory {
    pub(super) fn new(clock: Clock) -> Self {
        Self {
            clock,
            state: Mutex::new(State {
                sweep_at: MIN_SWEEP,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Check both budgets, then take from both, or from neither.
    pub(super) fn admit(
        self: &Arc<Self>,
        plan: &Plan<'_>,
        principal: &str,
        tool: &str,
    ) -> Result<Option<Slots>, Blocked> {
        let now = self.clock.now_us();
        let mut state = self.lock();
        let tat = |map: &HashMap<String, u64>, key: &str| map.get(key).copied().unwrap_or(0);
        let principal_next = plan
            .principal
            .rate
            .as_ref()
            .map(|b| take(tat(&state.principals, principal), now, b));
        let tool_next = plan
            .tool
            .rate
            .as_ref()
            .map(|b| take(tat(&state.tools, tool), now, b));
        let full =
            |map: &HashMap<String, u32>, key: &str, cap: &Option<crate::fair_shares::Cap>| {
                cap.as_ref()
                    .is_some_and(|c| map.get(key).copied().unwrap_or(0) >= c.most.get())
            };
        let blocked = Blocked {
            principal_wait_us: principal_next.map_or(0, |r| r.err().unwrap_or(0)),
            tool_wait_us: tool_next.map_or(0, |r| r.err().unwrap_or(0)),
            principal_busy: full(
                &state.busy_principals,
                principal,
                &plan.principal.concurrency,
            ),
            tool_busy: full(&state.busy_tools, tool, &plan.tool.concurrency),
        };
        if blocked != Blocked::default() {
            return Err(blocked);
        }
        if let Some(Ok(next)) = principal_next {
            set(&mut state.principals, principal, next);
        }
        if let Some(Ok(next)) = tool_next {
            set(&mut state.tools, tool, next);
        }
        let slots = Slots {
            memory: self.clone(),
            principal: plan
                .principal
                .concurrency
                .as_ref()
                .map(|_| principal.to_owned()),
            tool: plan.tool.concurrency.as_ref().map(|_| tool.to_owned()),
        };
        if let Some(key) = &slots.principal {
            *state.busy_principals.entry(key.clone()).or_default() += 1;
        }
        if let Some(key) = &slots.tool {
            *state.busy_tools.entry(key.clone()).or_default() += 1;
        }
        state.sweep(now);
        Ok((slots.principal.is_some() || slots.tool.is_some()).then_some(slots))
    }

    /// Buckets and counts held now, to test the memory bound.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        let state = self.lock();
        state.principals.len()
            + state.tools.len()
            + state.busy_principals.len()
            + state.busy_tools.len()
    }
}

fn set(map: &mut HashMap<String, u64>, key: &str, tat: u64) {
    match map.get_mut(key) {
        Some(kept) => *kept = tat,
        None => {
            map.insert(key.to_owned(), tat);
        }
    }
}

impl State {
    /// Forget the buckets that are full again, once enough are kept.
    fn sweep(&mut self, now: u64) {
        if self.principals.len() + self.tools.len() < self.sweep_at {
            return;
        }
        self.principals.retain(|_, tat| *tat > now);
        self.tools.retain(|_, tat| *tat > now);
        self.sweep_at = (2 * (self.principals.len() + self.tools.len())).max(MIN_SWEEP);
    }
}
