//! Durable tasks: tool calls that outlive the request that started them
//! (`POST /v1/tool_calls?async=1`, read with `GET /v1/tasks/ID`).
//!
//! A task is a [`Record`] in the store `[serve.tasks]` names: this
//! process's memory (`memory.rs`) or Redis (`redis.rs`), shared by
//! replicas. It belongs to the principal that started it: no one else can
//! read or cancel it, and to anyone else it does not exist.
//!
//! **Leases.** The replica running a task renews its lease every third of
//! `lease` (`run.rs`). A replica that reads a task still working whose
//! lease ran out knows its replica stopped: it runs it again itself if
//! the tool is idempotent (its hints, or `idempotent = true` on its
//! `[[tool]]` entry) and the task has run fewer than [`MAX_RUNS`] times,
//! taking the task over by a compare-and-swap, so two replicas never both
//! do; otherwise it marks it failed, saying to run it again. Clocks of
//! replicas must agree to well within a lease (NTP does).
//!
//! **Bounds.** A principal may have `max_per_principal` tasks not yet
//! finished (a dead replica's tasks stop counting when their leases run
//! out); a finished task is kept `ttl`, and a task whose lease ran out
//! unread is forgotten `ttl` after it did.

mod embedded;
pub(crate) mod input;
mod memory;
mod redis;
mod run;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::durable_tasks::{TaskPolicy, TaskStore};
pub(crate) use run::{Cancelled, Started, cancel, start, view};

/// The most times a task runs, its first run included: a call that kills
/// every replica it runs on (say, by exhausting its memory) must not take
/// down the whole fleet one after the other.
pub const MAX_RUNS: u32 = 3;

/// What a failed task whose replica stopped says.
pub const REPLICA_STOPPED: &str =
    "the server running this task stopped before it finished; run it again";

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
}

/// One task, as kept in the store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// 128 random bits, hex: unguessable.
    pub(crate) id: String,
    /// The principal that started it ([`crate::identity::Principal::id`]).
    pub(crate) owner: String,
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
    /// The store's version of the record, for compare-and-swap.
    #[serde(skip)]
    pub(crate) version: u64,
}

impl Record {
    /// When the store may forget it: `ttl` after it finished, or after its
    /// lease ran out.
    pub(crate) fn expires_ms(&self, ttl_ms: u64) -> u64 {
        let from = if self.state.is_finished() {
            self.updated_ms
        } else {
            self.lease_until_ms
        };
        from.saturating_add(ttl_ms)
    }
}

/// An owner would have more unfinished tasks than it may.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Full {
    /// How many it has.
    pub(crate) unfinished: u32,
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
    /// The tasks this replica runs, and what stops each.
    running: Mutex<HashMap<String, CancellationToken>>,
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

    fn ttl_ms(&self) -> u64 {
        millis(self.inner.policy.ttl)
    }

    /// The end of a lease taken now.
    pub(crate) fn lease_from_now(&self) -> u64 {
        now_ms().saturating_add(millis(self.inner.policy.lease))
    }

    /// Keep `records` (all of one owner), unless it would then have more
    /// unfinished tasks than `max_per_principal`.
    pub(crate) async fn insert(&self, records: &[Record]) -> Result<Result<(), Full>, StoreDown> {
        let max = self.inner.policy.max_per_principal.get();
        let (now, ttl) = (now_ms(), self.ttl_ms());
        match &self.inner.store {
            Store::Memory(memory) => Ok(memory.insert(records, max, now, ttl)),
            Store::Embedded(file) => file.insert(records, max, now, ttl).await,
            Store::Redis(remote) => remote.insert(records, max, now, ttl).await,
        }
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
    /// `new.version`; whether it did.
    pub(crate) async fn swap(&self, new: &Record) -> Result<bool, StoreDown> {
        match &self.inner.store {
            Store::Memory(memory) => Ok(memory.swap(new)),
            Store::Embedded(file) => file.swap(new).await,
            Store::Redis(remote) => remote.swap(new, now_ms(), self.ttl_ms()).await,
        }
    }

    /// Forget tasks just inserted that will not run after all.
    pub(crate) async fn remove(&self, owner: &str, ids: &[String]) -> Result<(), StoreDown> {
        match &self.inner.store {
            Store::Memory(memory) => {
                memory.remove(ids);
                Ok(())
            }
            Store::Embedded(file) => file.remove(ids).await,
            Store::Redis(remote) => remote.remove(owner, ids).await,
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
            if self.swap(&record).await? {
                record.version += 1;
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Stop the task `id` if this replica runs it.
    pub(crate) fn stop_local(&self, id: &str) {
        if let Some(token) = self.running().remove(id) {
            token.cancel();
        }
    }
}
