//! Durable tasks: tool calls that outlive the request that started them
//! (`POST /v1/tool_calls?async=1`, read with `GET /v1/tasks/ID`).
//!
//! A task is a [`Record`] in the store `[serve.tasks]` names: this
//! process's memory (`memory.rs`), a redb file (`embedded.rs`), or
//! Redis (`redis.rs`), shared by replicas. It belongs to the principal that started it: no one else can
//! read or cancel it, and to anyone else it does not exist.
//!
//! **Leases.** The replica running a task renews the leases of all its
//! tasks in one tick every third of `lease` (`renew.rs`); a replica never
//! takes over a task it still runs itself (`view.rs` renews it instead). A replica that reads a task still working whose
//! lease ran out knows its replica stopped: it runs it again itself if
//! the tool is idempotent (`idempotent` on its `[[tool]]` entry, else
//! its own hint) and the task has run fewer than [`MAX_RUNS`] times,
//! taking the task over by a compare-and-swap, so two replicas never both
//! do; otherwise it marks it failed, saying the call may or may not have
//! taken effect. Clocks of
//! replicas must agree to well within a lease (NTP does).
//!
//! **Fencing.** A replica stops a task's call itself once its last
//! successful renewal is older than [`FENCE`] of the lease, before any
//! other replica may find the lease run out, and keeps no answer for it:
//! so a replica cut off from the store (a Redis outage longer than a
//! lease, a stalled process) never runs a call that another replica has
//! meanwhile failed or run again. Such a task fails, or runs again,
//! wherever it is next read once the store is back.
//!
//! **Bounds.** Each bucket (a principal; on a server that tells no
//! callers apart, a caller's address, see [`bucket_of`]) may have
//! `max_per_principal` tasks not yet finished (a dead replica's tasks
//! stop counting when their leases run out) and `max_kept_per_principal`
//! kept, finished included: past that, its oldest finished tasks are
//! forgotten to make room. A finished task keeps only its answer (its
//! arguments and context are dropped), at most `max_result` bytes of it;
//! it is kept `ttl`, and a task whose lease ran out unread is forgotten
//! `ttl` after it did.

mod embedded;
pub(crate) mod input;
mod memory;
mod redis;
mod renew;
mod run;
#[cfg(test)]
mod tests;
mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::durable_tasks::{TaskPolicy, TaskStore};
pub(crate) use run::{Front, Started, start_from};
pub(crate) use view::{Cancelled, cancel, view};

/// The most times a task runs, its first run included: a call that kills
/// every replica it runs on (say, by exhausting its memory) must not take
/// down the whole fleet one after the other.
pub const MAX_RUNS: u32 = 3;

/// What a failed task whose replica stopped says, for a tool that is not
/// idempotent: its call was cut short at some point, so what it did (a
/// payment, a message sent) may or may not have happened.
pub const REPLICA_STOPPED: &str = "the server running this task stopped before it finished; the call \
     may or may not have taken effect: check before running it again";

/// The part of a lease after the last successful renewal at which a
/// replica stops the call itself (see the module's "Fencing"), as a
/// fraction: the rest is the margin for the stop to take effect and for
/// replicas' clocks to differ.
pub const FENCE: (u32, u32) = (4, 5);

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum State {
    /// Running, or about to.
    Working,
    /// Waiting for its caller to answer a question (MCP clients only).
    InputRequired,
    /// The call answered; the answer may be a tool's error.
    Completed,
    /// The call could not answer: its replica stopped, or it could not be
    /// admitted when run again. The reason says what to do.
    Failed,
    /// Its caller cancelled it.
    Cancelled,
}

impl State {
    /// Whether the task will change no more.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// A call's arguments as kept with its task, to run it again.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StoredArguments {
    Text(String),
    Json(serde_json::Value),
    Malformed(String),
    /// The task finished: it never runs again, so what it ran with is
    /// not kept.
    Dropped,
}

/// One task, as kept in the store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// 128 random bits, hex: unguessable.
    pub(crate) id: String,
    /// The principal that started it ([`crate::identity::Principal::id`]).
    pub(crate) owner: String,
    /// Whose bounds it counts against, see [`bucket_of`]; empty in records
    /// kept before buckets existed, which count against their owner.
    #[serde(default)]
    pub(crate) bucket: String,
    /// Its class, for the limiter when the task runs again.
    pub(crate) owner_class: String,
    pub(crate) tool: String,
    pub(crate) state: State,
    /// The call's `tool_call_id`.
    pub(crate) call_id: String,
    pub(crate) arguments: StoredArguments,
    /// The call's injected context, as the principal's bindings made it.
    pub(crate) context: Option<serde_json::Value>,
    /// The answer's wire format, as `?format=` named it.
    pub(crate) format: String,
    /// The answer, once completed, in `format`.
    pub(crate) result: Option<serde_json::Value>,
    /// What follows the answer in `format` (OpenAI's user message with the
    /// images), if anything.
    pub(crate) follow_up: Option<serde_json::Value>,
    /// Why it failed.
    pub(crate) reason: Option<String>,
    pub(crate) created_ms: u64,
    pub(crate) updated_ms: u64,
    /// The replica running it (or that last did).
    pub(crate) replica: String,
    pub(crate) lease_until_ms: u64,
    /// How many times it was started.
    pub(crate) runs: u32,
    /// The question its call waits on (MCP tasks only), and the answer
    /// once given. Missing from records an older server kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<input::Pending>,
    /// Whether its caller can be asked the tool's questions (an MCP client
    /// that declared elicitation); `false` in records an older server kept.
    #[serde(default)]
    pub(crate) asks: bool,
    /// The store's version of the record, for compare-and-swap.
    #[serde(skip)]
    pub(crate) version: u64,
}

impl Record {
    /// Whose bounds it counts against: its bucket, or its owner.
    pub(crate) fn bucket(&self) -> &str {
        if self.bucket.is_empty() {
            &self.owner
        } else {
            &self.bucket
        }
    }

    /// Drop what only running it again needs, once it has finished.
    pub(crate) fn forget_call(&mut self) {
        if self.state.is_finished() {
            self.arguments = StoredArguments::Dropped;
            self.context = None;
            // A person's answer, which may be sensitive, is not kept
            // beyond the call that asked for it.
            self.input = None;
        }
    }

    /// When the store may forget it: `ttl` after it finished, or after its
    /// lease ran out.
    pub(crate) fn expires_ms(&self, ttl_ms: u64) -> u64 {
        self.ttl_counts_from_ms().saturating_add(ttl_ms)
    }

    /// When its `ttl` starts: when it finished, or when its lease runs out.
    /// A stored index keys tasks by this rather than by their expiry, so
    /// that it stays true when the operator changes the `ttl`.
    pub(crate) fn ttl_counts_from_ms(&self) -> u64 {
        if self.state.is_finished() {
            self.updated_ms
        } else {
            self.lease_until_ms
        }
    }
}

/// An owner would have more unfinished tasks than it may.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Full {
    /// How many it has.
    pub(crate) unfinished: u32,
}

/// What one bucket may have: tasks not yet finished, and tasks kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) unfinished: u32,
    /// At least `unfinished`.
    pub(crate) kept: u32,
}

/// The bucket whose bounds a task of `principal`, asked from `peer`,
/// counts against: the principal's id when the server tells callers
/// apart; else the caller's address (its /64 for IPv6, which one host
/// gets whole), so that one client of a server without `[serve.auth]`
/// cannot take every task slot of all the others. Behind a proxy every
/// caller is the proxy's address: tell callers apart there.
pub(crate) fn bucket_of(
    principal: &crate::identity::Principal,
    authenticated: bool,
    peer: Option<std::net::IpAddr>,
) -> String {
    match (
        authenticated,
        peer.map(crate::serve::connections::limit_key),
    ) {
        (false, Some(std::net::IpAddr::V4(v4))) => format!("{}@{v4}", principal.id()),
        (false, Some(std::net::IpAddr::V6(net))) => format!("{}@{net}/64", principal.id()),
        _ => principal.id().to_owned(),
    }
}

/// What to forget of a bucket's tasks `mine` for `wanted` more to fit
/// `bounds` at `now_ms`: none while it has room, else its oldest tasks
/// that are finished or whose leases ran out, oldest first; or [`Full`]
/// when it has too many unfinished. Forgetting always suffices, since
/// `bounds.kept` is at least `bounds.unfinished`.
pub(crate) fn make_room(
    mine: &[&Record],
    wanted: usize,
    bounds: Bounds,
    now_ms: u64,
) -> Result<Vec<String>, Full> {
    let live = |r: &Record| !r.state.is_finished() && r.lease_until_ms > now_ms;
    let unfinished = mine.iter().filter(|r| live(r)).count();
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    if count(unfinished).saturating_add(count(wanted)) > bounds.unfinished {
        return Err(Full {
            unfinished: count(unfinished),
        });
    }
    let excess = mine
        .len()
        .saturating_add(wanted)
        .saturating_sub(bounds.kept as usize);
    let mut others: Vec<&Record> = mine.iter().copied().filter(|r| !live(r)).collect();
    others.sort_by(|a, b| (a.expires_ms(0), &a.id).cmp(&(b.expires_ms(0), &b.id)));
    Ok(others
        .into_iter()
        .take(excess)
        .map(|r| r.id.clone())
        .collect())
}

/// The store cannot be reached or failed (logged where it happened).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the task store cannot be reached; try again shortly")]
pub(crate) struct StoreDown;

enum Store {
    Memory(memory::Memory),
    Embedded(embedded::Embedded),
    // Boxed: its scripts and connection are large beside the map.
    Redis(Box<redis::Remote>),
}

/// The tasks of one server: its store and policy, and the tasks this
/// replica runs. Cheap to clone: clones share all of it.
#[derive(Clone)]
pub(crate) struct Tasks {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    policy: TaskPolicy,
    /// This replica's random id.
    replica: String,
    /// The tasks this replica runs, by id and run (a task this replica
    /// runs again is a new entry, the first run's stop kept apart).
    running: Mutex<HashMap<(String, u32), Arc<Running>>>,
    /// Whether the lease renewal task was started.
    renewing: std::sync::OnceLock<()>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("policy", &self.inner.policy)
            .field("replica", &self.inner.replica)
            .finish_non_exhaustive()
    }
}

/// One run of a task on this replica.
#[derive(Debug)]
pub(crate) struct Running {
    /// Stops the call.
    pub(crate) stop: CancellationToken,
    /// When the last renewal that succeeded began (the lease it wrote
    /// ends a lease after): the fence counts from it.
    pub(crate) renewed: Mutex<tokio::time::Instant>,
}

impl Running {
    /// A run whose lease was written at `leased`.
    fn new(leased: tokio::time::Instant) -> Arc<Self> {
        Arc::new(Self {
            stop: CancellationToken::new(),
            renewed: Mutex::new(leased),
        })
    }

    pub(crate) fn renewed_at(&self, at: tokio::time::Instant) {
        let mut renewed = self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
        *renewed = (*renewed).max(at);
    }

    pub(crate) fn last_renewed(&self) -> tokio::time::Instant {
        *self.renewed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Now, in ms since the epoch.
pub(crate) fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// 128 random bits from the system's secure generator, in hex.
pub(crate) fn random_id() -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // The system generator does not fail on any platform we run on;
        // were it to, fastrand's bits are better than refusing every task.
        bytes = fastrand::u128(..).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Tasks {
    /// The tasks `policy` asks for; the file of an embedded store is
    /// opened now.
    ///
    /// # Errors
    ///
    /// The file cannot be opened (another process holds it, or it cannot
    /// be created), naming it and the fix.
    pub(crate) fn new(policy: TaskPolicy) -> Result<Self, String> {
        let store = match &policy.store {
            TaskStore::Memory => Store::Memory(memory::Memory::default()),
            TaskStore::Embedded { path } => Store::Embedded(embedded::Embedded::open(path)?),
            TaskStore::Redis { url, prefix } => {
                Store::Redis(Box::new(redis::Remote::new(url, prefix)))
            }
        };
        Ok(Self::with_store(store, policy))
    }

    /// Tasks in this process's memory, under the default policy.
    pub(crate) fn in_memory() -> Self {
        Self::with_store(
            Store::Memory(memory::Memory::default()),
            TaskPolicy::default(),
        )
    }

    fn with_store(store: Store, policy: TaskPolicy) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                policy,
                replica: format!("{:016x}", fastrand::u64(..)),
                running: Mutex::default(),
                renewing: std::sync::OnceLock::new(),
            }),
        }
    }

    pub(crate) fn policy(&self) -> &TaskPolicy {
        &self.inner.policy
    }

    pub(crate) fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// The store's kind, for `/metrics`: `memory`, `redb` or `redis`.
    pub(crate) fn store_label(&self) -> &'static str {
        match &self.inner.store {
            Store::Memory(_) => "memory",
            Store::Embedded(_) => "redb",
            Store::Redis(_) => "redis",
        }
    }

    fn ttl_ms(&self) -> u64 {
        millis(self.inner.policy.ttl)
    }

    fn times(&self) -> redis::Times {
        redis::Times {
            ttl_ms: self.ttl_ms(),
            lease_ms: millis(self.inner.policy.lease),
        }
    }

    /// The end of a lease taken now.
    pub(crate) fn lease_from_now(&self) -> u64 {
        now_ms().saturating_add(millis(self.inner.policy.lease))
    }

    /// Keep `records` (all of one bucket), unless it would then have more
    /// unfinished tasks than `max_per_principal`; past
    /// `max_kept_per_principal`, forget its oldest finished tasks first.
    pub(crate) async fn insert(&self, records: &[Record]) -> Result<Result<(), Full>, StoreDown> {
        let bounds = Bounds {
            unfinished: self.inner.policy.max_per_principal.get(),
            kept: self.inner.policy.max_kept_per_principal.get(),
        };
        let (now, ttl) = (now_ms(), self.ttl_ms());
        let inserted = match &self.inner.store {
            Store::Memory(memory) => Ok(memory.insert(records, bounds, now, ttl)),
            Store::Embedded(file) => file.insert(records, bounds, now, ttl).await,
            Store::Redis(remote) => remote.insert(records, bounds, now, self.times()).await,
        }?;
        Ok(inserted.map(|forgotten| {
            if forgotten > 0 {
                tracing::debug!(forgotten, "finished tasks forgotten to make room");
            }
        }))
    }

    /// The task `id`, whoever owns it.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<Record>, StoreDown> {
        match &self.inner.store {
            Store::Memory(memory) => Ok(memory.get(id, now_ms(), self.ttl_ms())),
            Store::Embedded(file) => file.get(id, now_ms(), self.ttl_ms()).await,
            Store::Redis(remote) => remote.get(id).await,
        }
    }

    /// Replace the task by `new` if the store still has it at
    /// `new.version`; whether it did. ([`Self::update`], its one caller,
    /// has dropped a finished task's arguments and context already.)
    async fn swap(&self, new: &Record) -> Result<bool, StoreDown> {
        match &self.inner.store {
            Store::Memory(memory) => Ok(memory.swap(new, self.ttl_ms())),
            Store::Embedded(file) => file.swap(new).await,
            Store::Redis(remote) => remote.swap(new, now_ms(), self.times()).await,
        }
    }

    /// Forget tasks of `bucket` just inserted that will not run after
    /// all.
    pub(crate) async fn remove(&self, bucket: &str, ids: &[String]) -> Result<(), StoreDown> {
        match &self.inner.store {
            Store::Memory(memory) => {
                memory.remove(ids, self.ttl_ms());
                Ok(())
            }
            Store::Embedded(file) => file.remove(ids).await,
            Store::Redis(remote) => remote.remove(bucket, ids).await,
        }
    }

    /// Change the task `id` with `change` (given the record as read; it
    /// returns `false` to leave it), retrying when another replica changed
    /// it meanwhile. The record as changed, or `None` when there is no
    /// such task or `change` left it.
    pub(crate) async fn update(
        &self,
        id: &str,
        mut change: impl FnMut(&mut Record) -> bool,
    ) -> Result<Option<Record>, StoreDown> {
        // Each retry means another replica changed the task: a task changes
        // a handful of times in its life, so a few retries always suffice.
        for _ in 0..16 {
            let Some(mut record) = self.get(id).await? else {
                return Ok(None);
            };
            if !change(&mut record) {
                return Ok(None);
            }
            record.updated_ms = now_ms();
            record.forget_call();
            if self.swap(&record).await? {
                record.version += 1;
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u32), Arc<Running>>> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this replica runs run `run` of the task `id`.
    pub(crate) fn runs_here(&self, id: &str, run: u32) -> Option<Arc<Running>> {
        self.running().get(&(id.to_owned(), run)).cloned()
    }

    /// Stop every run of the task `id` this replica runs.
    pub(crate) fn stop_local(&self, id: &str) {
        self.running().retain(|(of, _), running| {
            if of == id {
                running.stop.cancel();
            }
            of != id
        });
    }

    /// Stop run `run` of the task `id` if this replica runs it.
    pub(crate) fn stop_run(&self, id: &str, run: u32) {
        if let Some(running) = self.running().remove(&(id.to_owned(), run)) {
            running.stop.cancel();
        }
    }
}
