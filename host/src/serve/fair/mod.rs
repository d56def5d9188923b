//! Fair shares: rate limits and concurrency caps per principal and per
//! tool (`[serve.limits]`), so no caller and no tool takes the whole
//! server.
//!
//! [`Limiter::admit`] checks a call before it runs: the principal's budget
//! (all its calls, whatever the tool) and the tool's budget (all callers'
//! calls to it). Each budget may have a rate, a token bucket (`rate`,
//! `burst`), and a concurrency cap. Every check is made first and only
//! then is anything taken, all at once: a call refused by one budget costs
//! no other budget anything, and nothing is refunded. An admitted call
//! holds a [`Permit`] whose drop frees its concurrency slots.
//!
//! **Where budgets live.** In this process's memory (`memory.rs`), or in
//! Redis (`redis.rs`), shared by every replica naming the same server and
//! prefix: there one Lua script checks and takes both budgets atomically,
//! with Redis's clock (`TIME`), so replicas whose clocks disagree still
//! agree on every bucket. A limiter that cannot reach Redis admits or
//! refuses calls as `on_redis_error` says, and logs once when Redis goes
//! and once when it is back.
//!
//! **Token buckets** are kept as one number each, the time at which the
//! bucket will be full again (GCRA, the "theoretical arrival time"): a
//! call takes one interval; it is refused when that would put the bucket
//! more than `burst` intervals ahead of now. A bucket that is full again
//! holds nothing worth keeping, so both backends forget it: state lives at
//! most `burst × interval` (a day at most, [`crate::fair_shares::LimitsConfig::validate`]
//! checks) after a principal's or tool's last call.
//!
//! **Refusals** say which budget was hit, when trying again can succeed,
//! and the key an operator raises; they are counted by principal class
//! and reason for `/metrics` ([`Limiter::refusals`]).

mod memory;
mod redis;
#[cfg(test)]
mod tests;

/// The escaping of names in Redis keys, which the task store shares.
pub(crate) use redis::key as redis_key;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::fair_shares::{Budget, OnRedisError, Policy, Store};

/// How long a caller refused for concurrency is told to wait: a slot frees
/// when some call ends, which nobody can foresee; a second keeps clients
/// from spinning.
pub const CONCURRENCY_RETRY: Duration = Duration::from_secs(1);

/// The most principal classes counted apart; further ones are counted as
/// [`OTHER_CLASS`], so a caller that invents classes cannot grow the
/// counts (or `/metrics`) without limit.
pub const MAX_CLASSES: usize = 64;

/// The class refusals are counted under beyond [`MAX_CLASSES`].
pub const OTHER_CLASS: &str = "other";

/// Who is calling: `id` keys the principal's budget (e.g. `sub:alice`,
/// any text, `:` included); `class` is a small, bounded label it is
/// counted under (`oauth`, `token:ci`, `anonymous`).
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The principal's identity: its budget's key.
    pub id: &'a str,
    /// What kind of principal it is, for the counts.
    pub class: &'a str,
}

/// Which budget refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Reason {
    /// The principal's rate (`per_principal.rate`).
    RatePrincipal,
    /// The tool's rate (`per_tool.rate` or `tool.NAME.rate`).
    RateTool,
    /// The principal's concurrency cap.
    ConcurrencyPrincipal,
    /// The tool's concurrency cap.
    ConcurrencyTool,
    /// Redis could not be reached and `on_redis_error` is `closed`.
    Unavailable,
}

impl Reason {
    /// The label `/metrics` uses: `rate_principal`, `rate_tool`,
    /// `concurrency_principal`, `concurrency_tool` or `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RatePrincipal => "rate_principal",
            Self::RateTool => "rate_tool",
            Self::ConcurrencyPrincipal => "concurrency_principal",
            Self::ConcurrencyTool => "concurrency_tool",
            Self::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call the limiter refused: the budget hit, when to try again, and a
/// message for the caller naming both and the key an operator raises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct Refusal {
    /// How long until the call can be admitted (for concurrency, a guess:
    /// [`CONCURRENCY_RETRY`]).
    pub retry_after: Duration,
    /// Which budget refused it.
    pub reason: Reason,
    /// What was hit and the fix, for the caller.
    pub message: String,
}

impl Refusal {
    /// `retry_after` in whole seconds, rounded up and at least 1: the
    /// value of an HTTP `Retry-After` header and of `retryAfter`.
    pub fn retry_after_secs(&self) -> u64 {
        let secs = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
        secs.max(1)
    }
}

/// How many calls one class of principals had refused for one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefusalCount {
    /// The principals' class ([`Caller::class`], or [`OTHER_CLASS`]).
    pub class: String,
    /// Why.
    pub reason: Reason,
    /// How many.
    pub count: u64,
}

/// An admitted call's hold on its concurrency slots, released when
/// dropped. In Redis the slots are leases that expire by themselves if
/// this process dies (see `redis.rs`).
#[must_use = "the call's concurrency slots are released when the permit is dropped"]
pub struct Permit {
    lease: Option<Lease>,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("holds_slots", &self.lease.is_some())
            .finish()
    }
}

enum Lease {
    Memory(memory::Slots),
    Redis(redis::Lease),
}

impl Drop for Permit {
    fn drop(&mut self) {
        match self.lease.take() {
            Some(Lease::Memory(slots)) => slots.release(),
            Some(Lease::Redis(lease)) => lease.release(),
            None => {}
        }
    }
}

/// What a backend found when it could not admit a call: the wait each
/// rate needs (0: it has a token) and whether each cap is full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Blocked {
    principal_wait_us: u64,
    tool_wait_us: u64,
    principal_busy: bool,
    tool_busy: bool,
}

/// The two budgets one call is checked against.
struct Plan<'a> {
    principal: &'a Budget,
    tool: &'a Budget,
}

/// Checks calls against their principal's and their tool's budgets. Cheap
/// to clone: clones share the budgets and the counts.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    policy: Policy,
    backend: Backend,
    refused: Mutex<Refused>,
    unchecked: AtomicU64,
}

/// Refusals by class and reason, and the classes counted apart.
#[derive(Default)]
struct Refused {
    by: HashMap<(String, Reason), u64>,
    classes: HashSet<String>,
}

enum Backend {
    Memory(Arc<memory::Memory>),
    Redis(Arc<redis::Remote>),
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl Limiter {
    /// The policy it enforces.
    #[must_use]
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// A limiter for `policy`. Redis is connected to on the first call,
    /// not here, so a server starts while Redis is down (and its calls get
    /// what `on_redis_error` says).
    pub fn new(policy: Policy) -> Self {
        Self::build(policy, memory::Clock::monotonic(), redis::Timing::default())
    }

    fn build(policy: Policy, clock: memory::Clock, timing: redis::Timing) -> Self {
        let backend = match &policy.store {
            Store::Memory => Backend::Memory(Arc::new(memory::Memory::new(clock))),
            Store::Redis {
                url,
                prefix,
                on_error,
            } => Backend::Redis(Arc::new(redis::Remote::new(url, prefix, *on_error, timing))),
        };
        Self {
            inner: Arc::new(Inner {
                policy,
                backend,
                refused: Mutex::default(),
                unchecked: AtomicU64::new(0),
            }),
        }
    }

    /// Admit a call of `caller` to `tool`, or say why not and for how
    /// long. Takes a token from each rate and a slot from each cap, all or
    /// none.
    ///
    /// # Errors
    ///
    /// A [`Refusal`] when a budget is spent or full, or when Redis cannot
    /// be reached and `on_redis_error` is `closed`; it is counted.
    pub async fn admit(&self, caller: Caller<'_>, tool: &str) -> Result<Permit, Refusal> {
        let policy = &self.inner.policy;
        let plan = Plan {
            principal: &policy.per_principal,
            tool: policy.tools.get(tool).unwrap_or(&policy.per_tool),
        };
        if plan.principal.is_unlimited() && plan.tool.is_unlimited() {
            return Ok(Permit { lease: None });
        }
        let verdict = match &self.inner.backend {
            Backend::Memory(memory) => memory
                .admit(&plan, caller.id, tool)
                .map(|slots| slots.map(Lease::Memory)),
            Backend::Redis(remote) => match remote.admit(&plan, caller.id, tool).await {
                Ok(verdict) => verdict.map(|lease| lease.map(Lease::Redis)),
                Err(redis::Down) => return self.on_outage(remote, caller),
            },
        };
        match verdict {
            Ok(lease) => Ok(Permit { lease }),
            Err(blocked) => Err(self.refuse(caller, refusal(&plan, caller, tool, blocked))),
        }
    }

    /// What a call gets while Redis cannot be reached.
    fn on_outage(&self, remote: &redis::Remote, caller: Caller<'_>) -> Result<Permit, Refusal> {
        if remote.on_error() == OnRedisError::Open {
            self.inner.unchecked.fetch_add(1, Ordering::Relaxed);
            return Ok(Permit { lease: None });
        }
        let retry_after = remote.retry_in();
        let refusal = Refusal {
            retry_after,
            reason: Reason::Unavailable,
            message: format!(
                "the rate limiter cannot reach its store and refuses calls until it can \
                 (serve.limits.on_redis_error is \"closed\"); retry after {}s",
                retry_after.as_secs().max(1)
            ),
        };
        Err(self.refuse(caller, refusal))
    }

    fn refuse(&self, caller: Caller<'_>, refusal: Refusal) -> Refusal {
        let mut counts = self
            .inner
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let class = if counts.classes.contains(caller.class) || counts.classes.len() < MAX_CLASSES {
            caller.class
        } else {
            OTHER_CLASS
        };
        if !counts.classes.contains(class) {
            counts.classes.insert(class.to_owned());
        }
        *counts
            .by
            .entry((class.to_owned(), refusal.reason))
            .or_default() += 1;
        refusal
    }

    /// Refusals so far, by principal class and reason, sorted.
    pub fn refusals(&self) -> Vec<RefusalCount> {
        let refused = self
            .inner
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut counts: Vec<RefusalCount> = refused
            .by
            .iter()
            .map(|((class, reason), count)| RefusalCount {
                class: class.clone(),
                reason: *reason,
                count: *count,
            })
            .collect();
        counts.sort_by(|a, b| (&a.class, a.reason).cmp(&(&b.class, b.reason)));
        counts
    }

    /// Calls admitted without a check because Redis could not be reached
    /// and `on_redis_error` is `open`.
    pub fn admitted_unchecked(&self) -> u64 {
        self.inner.unchecked.load(Ordering::Relaxed)
    }

    /// How many times Redis was found unreachable after being reachable
    /// (or never reached); 0 for budgets kept in memory.
    pub fn outages(&self) -> u64 {
        match &self.inner.backend {
            Backend::Memory(_) => 0,
            Backend::Redis(remote) => remote.outages(),
        }
    }
}

/// The refusal for `blocked`: of the budgets that refused, the one that
/// takes longest to allow the call (ties: principal before tool, rate
/// before concurrency), since the call needs them all.
fn refusal(plan: &Plan<'_>, caller: Caller<'_>, tool: &str, blocked: Blocked) -> Refusal {
    let busy = |b: bool| if b { CONCURRENCY_RETRY } else { Duration::ZERO };
    let candidates = [
        (
            Reason::RatePrincipal,
            Duration::from_micros(blocked.principal_wait_us),
        ),
        (
            Reason::RateTool,
            Duration::from_micros(blocked.tool_wait_us),
        ),
        (Reason::ConcurrencyPrincipal, busy(blocked.principal_busy)),
        (Reason::ConcurrencyTool, busy(blocked.tool_busy)),
    ];
    let (reason, retry_after) = candidates
        .into_iter()
        .filter(|(_, wait)| !wait.is_zero())
        .fold(None, |best: Option<(Reason, Duration)>, c| match best {
            Some(b) if b.1 >= c.1 => Some(b),
            _ => Some(c),
        })
        .unwrap_or((Reason::RatePrincipal, Duration::from_micros(1)));
    let mut refusal = Refusal {
        retry_after,
        reason,
        message: String::new(),
    };
    let after = refusal.retry_after_secs();
    let principal = format!("principal {:?}", crate::outcome::clip(caller.id, 80));
    let tool = format!("tool {tool:?}");
    let (budget, whose) = match reason {
        Reason::RatePrincipal | Reason::ConcurrencyPrincipal => (plan.principal, principal),
        _ => (plan.tool, tool),
    };
    let rate = budget.rate.as_ref();
    let cap = budget.concurrency.as_ref();
    refusal.message = match reason {
        Reason::RatePrincipal | Reason::RateTool => format!(
            "rate limit: {whose} {} {} calls (bursts of {}); retry after {after}s, \
             or ask the operator to raise serve.limits.{}",
            if reason == Reason::RatePrincipal {
                "may make"
            } else {
                "takes, from all callers together,"
            },
            rate.map_or("", |b| &b.written),
            rate.map_or(0, |b| b.burst),
            rate.map_or("", |b| &b.key),
        ),
        _ => format!(
            "concurrency limit: {whose} has {} calls running, the most serve.limits.{} allows; \
             retry when one finishes (after {after}s)",
            cap.map_or(0, |c| c.most.get()),
            cap.map_or("", |c| &c.key),
        ),
    };
    refusal
}
