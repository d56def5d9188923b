//! Durable tasks as the manifest writes them (`[serve.tasks]`,
//! [`TasksConfig`]), and the checked [`TaskPolicy`] the task store in
//! `serve::tasks` is built from. Domain-level, like
//! [`crate::fair_shares`], so the manifest (which always compiles)
//! validates it at load.
//!
//! ```toml
//! [serve.tasks]
//! redis = { env = "REDIS_URL" }   # or a literal URL; absent: in memory
//! # path = "tasks.redb"           # or a file: one replica's tasks kept across restarts
//! prefix = "toolhost:tasks"       # the keys' prefix in Redis
//! ttl = "1h"                      # how long a finished task's result is kept
//! lease = "15s"                   # how long a dead replica's task waits to be taken over
//! max_per_principal = 100         # tasks not yet finished, per principal
//! max_kept_per_principal = 1000   # tasks kept, finished included, per principal
//! max_result = "1MiB"             # the largest answer a task keeps
//! ```

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use serde::Deserialize;

use crate::grants::store::redacted;

/// The key prefix in Redis when the manifest names none.
pub const DEFAULT_PREFIX: &str = "toolhost:tasks";

/// How long a finished task's result is kept by default: long enough for
/// a client that polls now and then, short enough that results do not
/// pile up.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// How long a task's lease lasts by default: a replica renews it every
/// third of that, so one late renewal loses nothing, and a dead replica's
/// task is taken over (or marked failed) this long after it died.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// Tasks not yet finished one principal may have by default: the bound on
/// what a flood of task requests can make the server hold.
pub const DEFAULT_MAX_PER_PRINCIPAL: u32 = 100;

/// Tasks one principal may have kept by default, finished ones included:
/// a client that starts tasks faster than their results expire makes the
/// server forget its own oldest finished tasks past this, never grow.
pub const DEFAULT_MAX_KEPT_PER_PRINCIPAL: u32 = 1000;

/// The largest answer a task keeps by default: with the default bound on
/// kept tasks, at most 1 GiB of results per principal in the worst case,
/// and far less in practice (answers are mostly text of a few KiB).
pub const DEFAULT_MAX_RESULT: usize = 1 << 20;

/// The largest `max_result`: a task's answer is read whole from the store
/// on every poll, and Redis values past a few tens of MiB stall it.
const MAX_MAX_RESULT: u64 = 32 << 20;

/// The shortest lease: renewals every third of it must stay well apart
/// from the store's round trips.
const MIN_LEASE: Duration = Duration::from_millis(300);

/// The longest kept result: a week. Tasks are not an archive.
const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// `[serve.tasks]` as written. Check it with [`TasksConfig::validate`].
/// Its `Debug` hides the Redis URL's password.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksConfig {
    /// `redis://…` or `redis+unix://…`: tasks shared by every replica
    /// naming it. Absent: in this process's memory.
    pub redis: Option<String>,
    /// A redb file (relative to the manifest's directory): one replica's
    /// tasks, kept across its restarts.
    pub path: Option<std::path::PathBuf>,
    /// The prefix of every key in Redis; default [`DEFAULT_PREFIX`].
    pub prefix: Option<String>,
    /// How long a finished task's result is kept, e.g. `"1h"`.
    pub ttl: Option<String>,
    /// How long a running task's lease lasts, e.g. `"15s"`.
    pub lease: Option<String>,
    /// Tasks not yet finished one principal may have.
    pub max_per_principal: Option<u32>,
    /// Tasks one principal may have kept, finished included; past it, its
    /// oldest finished tasks are forgotten.
    pub max_kept_per_principal: Option<u32>,
    /// The largest answer a task keeps, e.g. `"1MiB"`; a larger one is
    /// kept as an error saying so.
    pub max_result: Option<crate::limits::ByteSize>,
}

impl fmt::Debug for TasksConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TasksConfig")
            .field("redis", &self.redis.as_deref().map(redacted))
            .field("path", &self.path)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("lease", &self.lease)
            .field("max_per_principal", &self.max_per_principal)
            .field("max_kept_per_principal", &self.max_kept_per_principal)
            .field("max_result", &self.max_result)
            .finish()
    }
}

/// A `[serve.tasks]` key whose value cannot be used, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`serve.tasks.{key}`: {problem}")]
pub struct InvalidTasks {
    key: &'static str,
    problem: String,
}

impl InvalidTasks {
    fn new(key: &'static str, problem: impl Into<String>) -> Self {
        Self {
            key,
            problem: problem.into(),
        }
    }
}

/// Where tasks are kept.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum TaskStore {
    /// This process's memory: tasks live as long as the process.
    Memory,
    /// Redis, shared by replicas.
    Redis { url: String, prefix: String },
    /// A redb file: one replica's tasks, across its restarts.
    Embedded { path: std::path::PathBuf },
}

impl fmt::Debug for TaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Embedded { path } => f.debug_struct("Embedded").field("path", path).finish(),
            Self::Redis { url, prefix } => f
                .debug_struct("Redis")
                .field("url", &redacted(url))
                .field("prefix", prefix)
                .finish(),
        }
    }
}

/// A checked `[serve.tasks]` (the defaults when the table is absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPolicy {
    pub(crate) store: TaskStore,
    pub(crate) ttl: Duration,
    pub(crate) lease: Duration,
    pub(crate) max_per_principal: NonZeroU32,
    /// At least `max_per_principal`, so that forgetting finished tasks
    /// always makes room.
    pub(crate) max_kept_per_principal: NonZeroU32,
    pub(crate) max_result: usize,
}

impl Default for TaskPolicy {
    fn default() -> Self {
        Self {
            store: TaskStore::Memory,
            ttl: DEFAULT_TTL,
            lease: DEFAULT_LEASE,
            max_per_principal: NonZeroU32::new(DEFAULT_MAX_PER_PRINCIPAL)
                .unwrap_or(NonZeroU32::MIN),
            max_kept_per_principal: NonZeroU32::new(DEFAULT_MAX_KEPT_PER_PRINCIPAL)
                .unwrap_or(NonZeroU32::MIN),
            max_result: DEFAULT_MAX_RESULT,
        }
    }
}

impl TasksConfig {
    /// Check every key, and make the [`TaskPolicy`] the task store is
    /// built from.
    ///
    /// # Errors
    ///
    /// The first key whose value cannot be used, with the fix: a URL that
    /// is no Redis URL, a prefix without `redis` or with spaces, a `ttl` or
    /// `lease` that is no duration or out of range, a `max_per_principal`
    /// of 0, a `max_kept_per_principal` below it, a `max_result` that is no
    /// size or out of range.
    pub fn validate(&self, base: &std::path::Path) -> Result<TaskPolicy, InvalidTasks> {
        let defaults = TaskPolicy::default();
        let ttl = duration("ttl", self.ttl.as_deref())?.unwrap_or(defaults.ttl);
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(InvalidTasks::new(
                "ttl",
                "keep results between 1s and a week; write e.g. \"1h\"",
            ));
        }
        let lease = duration("lease", self.lease.as_deref())?.unwrap_or(defaults.lease);
        if lease < MIN_LEASE || lease > Duration::from_secs(3600) {
            return Err(InvalidTasks::new(
                "lease",
                "a lease lasts between 300ms and 1h; write e.g. \"15s\"",
            ));
        }
        let max_per_principal = match self.max_per_principal {
            None => defaults.max_per_principal,
            Some(n) => NonZeroU32::new(n).ok_or_else(|| {
                InvalidTasks::new(
                    "max_per_principal",
                    "0 would refuse every task; write at least 1 (default 100)",
                )
            })?,
        };
        Ok(TaskPolicy {
            store: self.store(base)?,
            ttl,
            lease,
            max_per_principal,
            max_kept_per_principal: self.max_kept(max_per_principal)?,
            max_result: self.max_result()?,
        })
    }

    /// `max_kept_per_principal`, at least `max_per_principal`.
    fn max_kept(&self, max_per_principal: NonZeroU32) -> Result<NonZeroU32, InvalidTasks> {
        let Some(kept) = self.max_kept_per_principal else {
            let default =
                NonZeroU32::new(DEFAULT_MAX_KEPT_PER_PRINCIPAL).unwrap_or(NonZeroU32::MIN);
            return Ok(default.max(max_per_principal));
        };
        NonZeroU32::new(kept)
            .filter(|kept| *kept >= max_per_principal)
            .ok_or_else(|| {
                InvalidTasks::new(
                    "max_kept_per_principal",
                    format!(
                        "{kept} is below max_per_principal ({max_per_principal}): unfinished tasks \
                         are kept too; write at least {max_per_principal} (default \
                         {DEFAULT_MAX_KEPT_PER_PRINCIPAL})"
                    ),
                )
            })
    }

    /// `max_result` in bytes, between 1 KiB and [`MAX_MAX_RESULT`].
    fn max_result(&self) -> Result<usize, InvalidTasks> {
        let Some(size) = &self.max_result else {
            return Ok(DEFAULT_MAX_RESULT);
        };
        let bytes = size
            .bytes()
            .map_err(|e| InvalidTasks::new("max_result", e))?;
        if !(1024..=MAX_MAX_RESULT).contains(&bytes) {
            return Err(InvalidTasks::new(
                "max_result",
                "a task keeps answers of between 1KiB and 32MiB; write e.g. \"1MiB\"",
            ));
        }
        Ok(usize::try_from(bytes).unwrap_or(usize::MAX))
    }

    fn store(&self, base: &std::path::Path) -> Result<TaskStore, InvalidTasks> {
        if let Some(path) = &self.path {
            if self.redis.is_some() {
                return Err(InvalidTasks::new(
                    "path",
                    "tasks are kept in Redis (shared by replicas) or in a file (one replica's), \
                     not both; remove `path` or `redis`",
                ));
            }
            if self.prefix.is_some() {
                return Err(InvalidTasks::new(
                    "prefix",
                    "only tasks kept in Redis have a key prefix; remove `prefix`",
                ));
            }
            if path.as_os_str().is_empty() {
                return Err(InvalidTasks::new(
                    "path",
                    "write the file tasks are kept in, e.g. \"tasks.redb\"",
                ));
            }
            return Ok(TaskStore::Embedded {
                path: base.join(path),
            });
        }
        let Some(url) = &self.redis else {
            if self.prefix.is_some() {
                return Err(InvalidTasks::new(
                    "prefix",
                    "only tasks kept in Redis have a key prefix; set `redis` or remove `prefix`",
                ));
            }
            return Ok(TaskStore::Memory);
        };
        if !crate::grants::store::is_redis_url(url) {
            return Err(InvalidTasks::new(
                "redis",
                format!(
                    "{:?} is not a Redis URL; write e.g. \"redis://127.0.0.1:6379\", or remove \
                     `redis` to keep tasks in memory",
                    crate::outcome::clip(&redacted(url), 60)
                ),
            ));
        }
        let prefix = self.prefix.as_deref().unwrap_or(DEFAULT_PREFIX);
        if prefix.is_empty() || prefix.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(InvalidTasks::new(
                "prefix",
                format!(
                    "{prefix:?} must be non-empty, without spaces; write e.g. \"{DEFAULT_PREFIX}\""
                ),
            ));
        }
        Ok(TaskStore::Redis {
            url: url.clone(),
            prefix: prefix.to_owned(),
        })
    }
}

/// The duration `key` holds, if any (the error says how to write one).
fn duration(key: &'static str, text: Option<&str>) -> Result<Option<Duration>, InvalidTasks> {
    text.map(|text| crate::duration::parse(text).map_err(|e| InvalidTasks::new(key, e.to_string())))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(config: TasksConfig) -> String {
        config
            .validate(std::path::Path::new("/srv"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn absent_keys_are_the_defaults() {
        assert_eq!(
            TasksConfig::default()
                .validate(std::path::Path::new("/srv"))
                .unwrap(),
            TaskPolicy::default()
        );
    }

    /// A `max_per_principal` above the default kept bound raises the kept
    /// bound with it, so that a configuration valid before stays valid.
    #[test]
    fn the_kept_bound_is_never_below_the_unfinished_bound() {
        let policy = TasksConfig {
            max_per_principal: Some(5000),
            ..TasksConfig::default()
        }
        .validate(std::path::Path::new("/srv"))
        .unwrap();
        assert_eq!(policy.max_kept_per_principal.get(), 5000);
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        let ttl = invalid(TasksConfig {
            ttl: Some("soon".into()),
            ..TasksConfig::default()
        });
        assert!(
            ttl.starts_with("`serve.tasks.ttl`:") && ttl.contains("is not a duration"),
            "{ttl}"
        );
        let lease = invalid(TasksConfig {
            lease: Some("1ms".into()),
            ..TasksConfig::default()
        });
        assert!(lease.contains("between 300ms and 1h"), "{lease}");
        let max = invalid(TasksConfig {
            max_per_principal: Some(0),
            ..TasksConfig::default()
        });
        assert!(max.contains("write at least 1"), "{max}");
        let kept = invalid(TasksConfig {
            max_per_principal: Some(10),
            max_kept_per_principal: Some(5),
            ..TasksConfig::default()
        });
        assert!(
            kept.starts_with("`serve.tasks.max_kept_per_principal`:")
                && kept.contains("write at least 10"),
            "{kept}"
        );
        let result = invalid(TasksConfig {
            max_result: Some(crate::limits::ByteSize::Text("1GiB".into())),
            ..TasksConfig::default()
        });
        assert!(result.contains("between 1KiB and 32MiB"), "{result}");
        let result = invalid(TasksConfig {
            max_result: Some(crate::limits::ByteSize::Text("lots".into())),
            ..TasksConfig::default()
        });
        assert!(result.contains("is not a size"), "{result}");
        let prefix = invalid(TasksConfig {
            prefix: Some("p".into()),
            ..TasksConfig::default()
        });
        assert!(
            prefix.contains("set `redis` or remove `prefix`"),
            "{prefix}"
        );
        let url = invalid(TasksConfig {
            redis: Some("http://user:hunter2@host".into()),
            ..TasksConfig::default()
        });
        assert!(url.contains("is not a Redis URL"), "{url}");
        let both = invalid(TasksConfig {
            redis: Some("redis://127.0.0.1".into()),
            path: Some("tasks.redb".into()),
            ..TasksConfig::default()
        });
        assert!(both.contains("not both"), "{both}");
        assert!(!url.contains("hunter2"), "{url}");
    }
}
