//! Budgets in Redis, shared by every replica that names the same server
//! and prefix.
//!
//! **Keys** are `PREFIX:KIND:NAME`, read from the right: `NAME` is the
//! principal id or tool name with `%` and `:` escaped as `%25` and `%3A`,
//! `KIND` one of `rp`, `rt` (the principal's and the tool's bucket), `cp`,
//! `ct` (their leases), and `PREFIX` the rest. So ids with `:` never meet
//! another principal's, a tool's, or another kind's key.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `PREFIX:rp:ID`, `PREFIX:rt:TOOL` | string, expires when full again | the bucket's full-again time, µs of Redis's clock |
//! | `PREFIX:cp:ID`, `PREFIX:ct:TOOL` | sorted set, expires with its last lease | lease ids, scored by when each expires |
//!
//! **One script per call** ([`ADMIT`]) reads Redis's clock (`TIME`), checks
//! both buckets and both caps, and takes from all or none, atomically
//! against every replica: replicas whose clocks disagree still agree on
//! every bucket, and a refused call costs no budget anything.
//!
//! **Leases, not counters,** hold concurrency slots: a counter a replica
//! raised and then died with would stay raised for as long as other
//! replicas keep its key alive, while each lease carries its own expiry.
//! A lease lives [`LEASE_TTL`]; a task of this replica renews every lease
//! it holds each [`RENEW_EVERY`], so a long call keeps its slot and a dead
//! replica's slots free themselves within [`LEASE_TTL`]. A dropped
//! [`super::Permit`] removes its lease at once: the renewal task is woken
//! to remove it, and this replica's next check removes it first if the
//! task has not yet, so a replica's own releases are never late for it.
//!
//! **Outages.** A call that cannot reach Redis gets what `on_redis_error`
//! says; after the first failure the limiter does not wait on Redis again
//! for [`PROBE_EVERY`], then lets one call try. The first failure of an
//! outage is logged (`warn`), and so is the first success after it, with
//! how long it lasted and how many calls it decided.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use tokio::sync::{Notify, OnceCell};

use super::{Blocked, Plan};
use crate::fair_shares::{Bucket, Cap, OnRedisError};
use crate::grants::store::redacted;

/// How long a lease lives unless renewed: how long a dead replica's calls
/// keep their slots.
pub(super) const LEASE_TTL: Duration = Duration::from_secs(30);

/// How often a replica renews the leases it holds: a third of their life,
/// so one late or failed renewal loses none.
pub(super) const RENEW_EVERY: Duration = Duration::from_secs(10);

/// How long calls are decided without Redis after it failed, before one
/// call tries it again: an outage costs each call nothing, not a timeout.
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The most released leases one check removes: enough for the calls
/// that end between two checks, few enough to keep the script short; the
/// renewal task removes any others at once.
const MAX_RELEASES_PER_CHECK: usize = 64;

/// The longest one check may wait on Redis, connecting included; a call
/// waits no longer than this for its admission.
const TIMEOUT: Duration = Duration::from_secs(1);

/// Check both buckets (`KEYS[1..2]`) and caps (`KEYS[3..4]`) and take
/// from all or none. ARGV: the principal's interval and burst, the tool's
/// (interval 0: no rate), the principal's and tool's caps (0: none), the
/// lease id and its life in µs. `KEYS[5..]` and `ARGV[9..]`: leases this
/// replica released since, removed first (so a release costs no round
/// trip of its own, and this replica's next check always sees it). Returns {principal wait µs, tool wait µs,
/// principal cap full, tool cap full}, all 0 when admitted. `take` is
/// `memory::take`. Numbers are µs of Redis's clock (about 2^51 today,
/// exact in Lua's doubles) and written with `%.0f`, as Lua's `tostring`
/// would round them.
const ADMIT: &str = r"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 5, #KEYS do redis.call('ZREM', KEYS[i], ARGV[i + 4]) end
local function take(key, interval, burst)
  if interval == 0 then return 0, nil end
  local tat = tonumber(redis.call('GET', key) or '0') or 0
  local next = math.max(tat, now) + interval
  local limit = now + burst * interval
  if next > limit then return next - limit, nil end
  return 0, next
end
local function full(key, cap)
  if cap == 0 then return 0 end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
  if redis.call('ZCARD', key) >= cap then return 1 end
  return 0
end
local pw, pn = take(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
local tw, tn = take(KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
local pb = full(KEYS[3], tonumber(ARGV[5]))
local tb = full(KEYS[4], tonumber(ARGV[6]))
if pw > 0 or tw > 0 or pb > 0 or tb > 0 then return {pw, tw, pb, tb} end
local function keep(key, next)
  if next then
    redis.call('SET', key, string.format('%.0f', next), 'PX', math.max(1, math.ceil((next - now) / 1000)))
  end
end
keep(KEYS[1], pn)
keep(KEYS[2], tn)
local ttl = tonumber(ARGV[8])
local function hold(key, cap)
  if cap > 0 then
    redis.call('ZADD', key, string.format('%.0f', now + ttl), ARGV[7])
    redis.call('PEXPIRE', key, math.max(1, math.ceil(ttl / 1000)))
  end
end
hold(KEYS[3], tonumber(ARGV[5]))
hold(KEYS[4], tonumber(ARGV[6]))
return {0, 0, 0, 0}
";

/// Push back the expiry of leases this replica still holds. KEYS: sorted
/// sets; ARGV[1]: the life in µs; ARGV[i + 1]: the lease in KEYS[i]. A
/// lease already released (or expired) is not brought back (`XX`).
const RENEW: &str = r"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', string.format('%.0f', now + ttl), ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], math.max(1, math.ceil(ttl / 1000)))
end
return #KEYS
";

/// Redis could not be reached, or failed.
#[derive(Debug)]
pub(super) struct Down;

/// The timings of outages and leases; tests shorten them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub(super) probe_every: Duration,
    pub(super) lease_ttl: Duration,
    pub(super) renew_every: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            probe_every: PROBE_EVERY,
            lease_ttl: LEASE_TTL,
            renew_every: RENEW_EVERY,
        }
    }
}

/// The key of `kind` for `name` under `prefix`: see the module's layout.
pub(crate) fn key(prefix: &str, kind: &str, name: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + kind.len() + name.len() + 8);
    key.push_str(prefix);
    key.push(':');
    key.push_str(kind);
    key.push(':');
    for c in name.chars() {
        match c {
            '%' => key.push_str("%25"),
            ':' => key.push_str("%3A"),
            c => key.push(c),
        }
    }
    key
}

/// The lease sets one admitted call is in (the principal's, the tool's).
type LeaseKeys = [Option<String>; 2];

/// One replica's view of the shared budgets.
pub(super) struct Remote {
    client: Result<::redis::Client, String>,
    /// The URL as logs may show it.
    shown: String,
    prefix: String,
    on_error: OnRedisError,
    timing: Timing,
    connection: OnceCell<ConnectionManager>,
    admit: Script,
    renew: Script,
    health: Mutex<Option<Outage>>,
    /// A call is trying Redis during an outage; the others do not wait.
    probing: AtomicBool,
    outages: AtomicU64,
    /// Leases held now (to renew), and leases released but not yet
    /// removed from Redis.
    held: Mutex<HashMap<String, LeaseKeys>>,
    released: Mutex<Vec<(String, LeaseKeys)>>,
    wake: Arc<Notify>,
    worker: OnceLock<()>,
    /// This replica's random id, and its next lease's number.
    replica: u64,
    next_lease: AtomicU64,
}

/// An outage: since when, when to try again, and the calls decided
/// without Redis.
struct Outage {
    since: Instant,
    retry_at: Instant,
    calls: u64,
}

/// One admitted call's leases, removed when it ends.
pub(super) struct Lease {
    remote: Arc<Remote>,
    id: String,
}

impl Lease {
    pub(super) fn release(self) {
        let keys = lock(&self.remote.held).remove(&self.id);
        if let Some(keys) = keys {
            lock(&self.remote.released).push((self.id, keys));
            self.remote.wake.notify_one();
        }
    }
}

/// Ends this call's probe of Redis however the call ends.
struct Probing<'a>(&'a AtomicBool);

impl Drop for Probing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for Remote {
    fn drop(&mut self) {
        // Lets the renewal task see that the limiter is gone, and end.
        self.wake.notify_one();
    }
}

impl Remote {
    pub(super) fn new(url: &str, prefix: &str, on_error: OnRedisError, timing: Timing) -> Self {
        Self {
            client: crate::grants::store::redis_client(url).map_err(|e| e.to_string()),
            shown: redacted(url),
            prefix: prefix.to_owned(),
            on_error,
            timing,
            connection: OnceCell::new(),
            admit: Script::new(ADMIT),
            renew: Script::new(RENEW),
            health: Mutex::new(None),
            probing: AtomicBool::new(false),
            outages: AtomicU64::new(0),
            held: Mutex::default(),
            released: Mutex::default(),
            wake: Arc::new(Notify::new()),
            worker: OnceLock::new(),
            replica: fastrand::u64(..),
            next_lease: AtomicU64::new(0),
        }
    }

    pub(super) fn on_error(&self) -> OnRedisError {
        self.on_error
    }

    pub(super) fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    /// How long until Redis is tried again.
    pub(super) fn retry_in(&self) -> Duration {
        match &*lock(&self.health) {
            Some(outage) => outage.retry_at.saturating_duration_since(Instant::now()),
            None => self.timing.probe_every,
        }
    }

    /// Check and take both budgets in Redis.
    ///
    /// # Errors
    ///
    /// [`Down`] when Redis cannot be reached or failed, or is being
    /// waited out after a failure.
    pub(super) async fn admit(
        self: &Arc<Self>,
        plan: &Plan<'_>,
        principal: &str,
        tool: &str,
    ) -> Result<Result<Option<Lease>, Blocked>, Down> {
        if !self.may_try() {
            return Err(Down);
        }
        // A probe whose call is dropped half-way must not stop all later ones.
        let _probing = Probing(&self.probing);
        self.start_worker();
        let answer = tokio::time::timeout(TIMEOUT, self.check(plan, principal, tool)).await;
        match answer {
            Ok(Ok(verdict)) => {
                self.reached();
                Ok(verdict)
            }
            Ok(Err(error)) => Err(self.failed(&error)),
            Err(_) => Err(self.failed(&format!("no answer within {TIMEOUT:?}"))),
        }
    }

    async fn check(
        self: &Arc<Self>,
        plan: &Plan<'_>,
        principal: &str,
        tool: &str,
    ) -> Result<Result<Option<Lease>, Blocked>, String> {
        let mut connection = self.connection().await?;
        let rate = |b: &Option<Bucket>| b.as_ref().map_or((0, 0), |b| (b.interval_us, b.burst));
        let cap = |c: &Option<Cap>| c.as_ref().map_or(0, |c| c.most.get());
        let (p_interval, p_burst) = rate(&plan.principal.rate);
        let (t_interval, t_burst) = rate(&plan.tool.rate);
        let (p_cap, t_cap) = (
            cap(&plan.principal.concurrency),
            cap(&plan.tool.concurrency),
        );
        let id = format!(
            "{:016x}-{:x}",
            self.replica,
            self.next_lease.fetch_add(1, Ordering::Relaxed)
        );
        let mut invocation = self.admit.prepare_invoke();
        invocation
            .key(key(&self.prefix, "rp", principal))
            .key(key(&self.prefix, "rt", tool))
            .key(key(&self.prefix, "cp", principal))
            .key(key(&self.prefix, "ct", tool))
            .arg(p_interval)
            .arg(p_burst)
            .arg(t_interval)
            .arg(t_burst)
            .arg(p_cap)
            .arg(t_cap)
            .arg(&id)
            .arg(u64::try_from(self.timing.lease_ttl.as_micros()).unwrap_or(u64::MAX));
        let released = self.take_released(MAX_RELEASES_PER_CHECK);
        for (lease, keys) in &released {
            for key in keys.iter().flatten() {
                invocation.key(key).arg(lease);
            }
        }
        let answer: Vec<i64> = match invocation.invoke_async(&mut connection).await {
            Ok(answer) => answer,
            Err(error) => {
                // Left for the renewal task, or to expire.
                lock(&self.released).extend(released);
                return Err(error.to_string());
            }
        };
        let [pw, tw, pb, tb] = answer[..] else {
            return Err(format!("the admit script answered {answer:?}"));
        };
        let wait = |w: i64| u64::try_from(w).unwrap_or(0);
        let blocked = Blocked {
            principal_wait_us: wait(pw),
            tool_wait_us: wait(tw),
            principal_busy: pb != 0,
            tool_busy: tb != 0,
        };
        if blocked != Blocked::default() {
            return Ok(Err(blocked));
        }
        if p_cap == 0 && t_cap == 0 {
            return Ok(Ok(None));
        }
        let keys = [
            (p_cap > 0).then(|| key(&self.prefix, "cp", principal)),
            (t_cap > 0).then(|| key(&self.prefix, "ct", tool)),
        ];
        lock(&self.held).insert(id.clone(), keys);
        Ok(Ok(Some(Lease {
            remote: self.clone(),
            id,
        })))
    }

    async fn connection(&self) -> Result<ConnectionManager, String> {
        let client = self.client.as_ref().map_err(Clone::clone)?;
        crate::serve::redis_connection::connection(&self.connection, client, TIMEOUT)
            .await
            .map_err(|e| e.to_string())
    }

    /// Whether this call may use Redis: yes unless an outage is being
    /// waited out, or another call is already trying it.
    fn may_try(&self) -> bool {
        let mut health = lock(&self.health);
        let Some(outage) = health.as_mut() else {
            return true;
        };
        if Instant::now() >= outage.retry_at
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return true;
        }
        outage.calls += 1;
        false
    }

    /// Redis answered: end an outage, and say so.
    fn reached(&self) {
        let ended = lock(&self.health).take();
        self.probing.store(false, Ordering::Release);
        if let Some(outage) = ended {
            tracing::warn!(
                redis = %self.shown,
                outage = ?outage.since.elapsed(),
                calls = outage.calls,
                "rate limiter: Redis is reachable again; calls are checked again"
            );
        }
    }

    /// Redis failed: start an outage and say so, or extend the one going on.
    fn failed(&self, error: &str) -> Down {
        let now = Instant::now();
        let mut health = lock(&self.health);
        match health.as_mut() {
            Some(outage) => {
                outage.retry_at = now + self.timing.probe_every;
                outage.calls += 1;
            }
            None => {
                *health = Some(Outage {
                    since: now,
                    retry_at: now + self.timing.probe_every,
                    calls: 1,
                });
                self.outages.fetch_add(1, Ordering::Relaxed);
                let decided = match self.on_error {
                    OnRedisError::Open => "admitted unchecked",
                    OnRedisError::Closed => "refused",
                };
                tracing::warn!(
                    redis = %self.shown,
                    error,
                    "rate limiter: cannot reach Redis; calls are {decided} until it is back \
                     (serve.limits.on_redis_error)"
                );
            }
        }
        self.probing.store(false, Ordering::Release);
        Down
    }

    fn start_worker(self: &Arc<Self>) {
        self.worker.get_or_init(|| {
            // On the workers, never on the front thread of the request
            // that first needed it.
            crate::sandbox::spread::spawn(work(
                Arc::downgrade(self),
                self.wake.clone(),
                self.timing.renew_every,
            ));
        });
    }

    /// Up to `most` released leases, taken off the list.
    fn take_released(&self, most: usize) -> Vec<(String, LeaseKeys)> {
        let mut released = lock(&self.released);
        let keep = released.len().saturating_sub(most);
        released.split_off(keep)
    }

    /// Remove the leases of calls that ended. A failure leaves them to
    /// expire.
    async fn flush_released(&self, connection: &mut ConnectionManager) {
        let released = self.take_released(usize::MAX);
        if released.is_empty() {
            return;
        }
        let mut pipe = ::redis::pipe();
        for (id, keys) in &released {
            for key in keys.iter().flatten() {
                pipe.zrem(key, id).ignore();
            }
        }
        if let Err(error) = pipe.query_async::<()>(connection).await {
            tracing::debug!(%error, "rate limiter: released leases are left to expire");
        }
    }

    /// Push back the expiry of every lease held now.
    async fn renew_held(&self, connection: &mut ConnectionManager) {
        let held: Vec<(String, LeaseKeys)> = lock(&self.held)
            .iter()
            .map(|(id, keys)| (id.clone(), keys.clone()))
            .collect();
        if held.is_empty() {
            return;
        }
        let mut invocation = self.renew.prepare_invoke();
        invocation.arg(u64::try_from(self.timing.lease_ttl.as_micros()).unwrap_or(u64::MAX));
        for (id, keys) in &held {
            for key in keys.iter().flatten() {
                invocation.key(key).arg(id);
            }
        }
        if let Err(error) = invocation.invoke_async::<i64>(connection).await {
            tracing::debug!(%error, "rate limiter: leases not renewed this time");
        }
    }

    /// Renew and release now, as the renewal task does.
    #[cfg(test)]
    pub(super) async fn maintain(&self) {
        if let Ok(mut connection) = self.connection().await {
            self.flush_released(&mut connection).await;
            self.renew_held(&mut connection).await;
        }
    }
}

/// The renewal task: removes released leases as they come, renews held
/// ones every `renew_every`, and ends when the limiter is gone.
async fn work(remote: Weak<Remote>, wake: Arc<Notify>, renew_every: Duration) {
    let mut renew_at = tokio::time::Instant::now() + renew_every;
    loop {
        let _ = tokio::time::timeout_at(renew_at, wake.notified()).await;
        let Some(remote) = remote.upgrade() else {
            return;
        };
        let now = tokio::time::Instant::now();
        let renew = now >= renew_at;
        if renew {
            renew_at = now + renew_every;
        }
        let Ok(mut connection) = remote.connection().await else {
            continue;
        };
        let _ = tokio::time::timeout(TIMEOUT, remote.flush_released(&mut connection)).await;
        if renew {
            let _ = tokio::time::timeout(TIMEOUT, remote.renew_held(&mut connection)).await;
        }
    }
}
