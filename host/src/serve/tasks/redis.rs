//! Tasks in Redis, shared by every replica that names the same server and
//! prefix, so any replica answers for a task another started.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `PREFIX:t:ID` | hash `{v, rec}`, expires with the task | the record as JSON and its version |
//! | `PREFIX:o:BUCKET` | sorted set | the bucket's tasks not yet finished, scored by lease expiry (ms) |
//! | `PREFIX:f:BUCKET` | sorted set | the bucket's other kept tasks (finished, or whose lease ran out), scored by when their `ttl` began (ms) |
//!
//! A bucket is whose bounds a task counts against ([`super::Record::bucket`]).
//! Names are escaped as the limiter's keys are (`serve::fair`), so an
//! owner id with `:` never meets another key. Every change is one script,
//! atomic against every replica: [`INSERT`] moves the bucket's tasks
//! whose leases ran out from `o` to `f`, counts those left, inserts all
//! or none, and forgets the oldest of `f` past the bound on kept tasks;
//! [`SWAP`] replaces a record only at the version it was read at (compare
//! and swap), so two replicas that both find a lease expired never both
//! take the task over, and moves it between `o` and `f`. Each task key
//! expires with the task (its result's `ttl` after it finished, or `ttl`
//! after its lease ran out), so Redis keeps no more than that whoever
//! reads it; each set expires `lease + ttl` after its last write, which
//! every member's own expiry falls within, and members whose task expired
//! are trimmed by the next insert.

use std::time::Duration;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use tokio::sync::OnceCell;

use super::{Bounds, Full, Record, StoreDown};
use crate::grants::store::redacted;
use crate::serve::fair::redis_key as key;

/// The longest one operation may wait on Redis, connecting included.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Insert tasks of one bucket unless it would then have more than its
/// most unfinished; forget its oldest other tasks past its most kept.
/// KEYS[1], KEYS[2]: the bucket's `o` and `f` sets; KEYS[3..]: the tasks.
/// ARGV: now (ms), the most unfinished, the most kept, `ttl` (ms), the
/// sets' life (ms), the lease's end (ms), the task keys' prefix, then the
/// ids, then the records. Returns {1, forgotten} when inserted, else {0,
/// the count of unfinished tasks}.
const INSERT: &str = r"
local now = tonumber(ARGV[1])
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES')
for i = 1, #dead, 2 do
  redis.call('ZADD', KEYS[2], dead[i + 1], dead[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[4]))
local n = redis.call('ZCARD', KEYS[1])
local new = #KEYS - 2
if n + new > tonumber(ARGV[2]) then return {0, n} end
local excess = n + redis.call('ZCARD', KEYS[2]) + new - tonumber(ARGV[3])
local forgotten = 0
if excess > 0 then
  local victims = redis.call('ZRANGE', KEYS[2], 0, excess - 1)
  for _, id in ipairs(victims) do
    redis.call('DEL', ARGV[7] .. id:gsub('%%', '%%25'):gsub(':', '%%3A'))
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, excess - 1)
  forgotten = #victims
end
for i = 1, new do
  redis.call('HSET', KEYS[i + 2], 'v', '1', 'rec', ARGV[7 + new + i])
  redis.call('PEXPIRE', KEYS[i + 2], ARGV[5])
  redis.call('ZADD', KEYS[1], ARGV[6], ARGV[7 + i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return {1, forgotten}
";

/// Replace a record read at version ARGV[1] by ARGV[2]. KEYS[1]: the
/// task; KEYS[2], KEYS[3]: its bucket's `o` and `f` sets. ARGV[3]: the
/// key's life (ms); ARGV[4]: the id; ARGV[5]: `o` while unfinished, else
/// `f`; ARGV[6]: its score there; ARGV[7]: the sets' life (ms). Returns 1
/// if swapped.
const SWAP: &str = r"
local v = redis.call('HGET', KEYS[1], 'v')
if v ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', tostring(tonumber(v) + 1), 'rec', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local into, from = KEYS[2], KEYS[3]
if ARGV[5] == 'f' then into, from = KEYS[3], KEYS[2] end
redis.call('ZREM', from, ARGV[4])
redis.call('ZADD', into, ARGV[6], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[7])
redis.call('PEXPIRE', KEYS[3], ARGV[7])
return 1
";

pub(super) struct Remote {
    client: Result<::redis::Client, String>,
    shown: String,
    prefix: String,
    connection: OnceCell<ConnectionManager>,
    insert: Script,
    swap: Script,
}

impl Remote {
    pub(super) fn new(url: &str, prefix: &str) -> Self {
        Self {
            client: crate::grants::store::redis_client(url).map_err(|e| e.to_string()),
            shown: redacted(url),
            prefix: prefix.to_owned(),
            connection: OnceCell::new(),
            insert: Script::new(INSERT),
            swap: Script::new(SWAP),
        }
    }

    async fn connection(&self) -> Result<ConnectionManager, StoreDown> {
        let client = self.client.as_ref().map_err(|e| self.down(e))?;
        crate::serve::redis_connection::connection(&self.connection, client, TIMEOUT)
            .await
            .map_err(|e| self.down(&e))
    }

    /// The failure, logged for the operator with the URL as logs may
    /// show it.
    fn down(&self, error: &dyn std::fmt::Display) -> StoreDown {
        tracing::warn!(redis = %self.shown, %error, "the task store in Redis failed");
        StoreDown
    }

    fn task_key(&self, id: &str) -> String {
        key(&self.prefix, "t", id)
    }

    /// The bucket's sets: its unfinished tasks, and the others.
    fn bucket_keys(&self, bucket: &str) -> (String, String) {
        (
            key(&self.prefix, "o", bucket),
            key(&self.prefix, "f", bucket),
        )
    }

    pub(super) async fn insert(
        &self,
        records: &[Record],
        bounds: Bounds,
        now_ms: u64,
        times: Times,
    ) -> Result<Result<usize, Full>, StoreDown> {
        let Some(first) = records.first() else {
            return Ok(Ok(0));
        };
        let mut connection = self.connection().await?;
        let mut invocation = self.insert.prepare_invoke();
        let (live, others) = self.bucket_keys(first.bucket());
        invocation
            .key(live)
            .key(others)
            .arg(now_ms)
            .arg(bounds.unfinished)
            .arg(bounds.kept)
            .arg(times.ttl_ms)
            .arg(times.sets_life_ms())
            .arg(first.lease_until_ms)
            .arg(key(&self.prefix, "t", ""));
        for record in records {
            invocation.key(self.task_key(&record.id)).arg(&record.id);
        }
        for record in records {
            let mut record = record.clone();
            record.version = 1;
            invocation.arg(serde_json::to_string(&record).map_err(|e| self.down(&e))?);
        }
        let answer: (i64, i64) = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(|e| self.down(&e))?;
        Ok(match answer {
            (1, forgotten) => Ok(usize::try_from(forgotten).unwrap_or(0)),
            (_, unfinished) => Err(Full {
                unfinished: u32::try_from(unfinished).unwrap_or(u32::MAX),
            }),
        })
    }

    pub(super) async fn get(&self, id: &str) -> Result<Option<Record>, StoreDown> {
        let mut connection = self.connection().await?;
        let (version, text): (Option<u64>, Option<String>) = ::redis::cmd("HMGET")
            .arg(self.task_key(id))
            .arg("v")
            .arg("rec")
            .query_async(&mut connection)
            .await
            .map_err(|e| self.down(&e))?;
        let (Some(version), Some(text)) = (version, text) else {
            return Ok(None);
        };
        let mut record: Record = serde_json::from_str(&text).map_err(|e| self.down(&e))?;
        record.version = version;
        Ok(Some(record))
    }

    pub(super) async fn swap(
        &self,
        new: &Record,
        now_ms: u64,
        times: Times,
    ) -> Result<bool, StoreDown> {
        let mut connection = self.connection().await?;
        let set = if new.state.is_finished() { "f" } else { "o" };
        let (live, others) = self.bucket_keys(new.bucket());
        let swapped: i64 = self
            .swap
            .key(self.task_key(&new.id))
            .key(live)
            .key(others)
            .arg(new.version)
            .arg(serde_json::to_string(new).map_err(|e| self.down(&e))?)
            .arg(new.expires_ms(times.ttl_ms).saturating_sub(now_ms).max(1))
            .arg(&new.id)
            .arg(set)
            .arg(new.expires_ms(0))
            .arg(times.sets_life_ms())
            .invoke_async(&mut connection)
            .await
            .map_err(|e| self.down(&e))?;
        Ok(swapped == 1)
    }

    pub(super) async fn remove(&self, bucket: &str, ids: &[String]) -> Result<(), StoreDown> {
        let mut connection = self.connection().await?;
        let (live, others) = self.bucket_keys(bucket);
        let mut pipe = ::redis::pipe();
        pipe.atomic();
        for id in ids {
            pipe.del(self.task_key(id)).ignore();
            pipe.zrem(&live, id).ignore();
            pipe.zrem(&others, id).ignore();
        }
        pipe.query_async::<()>(&mut connection)
            .await
            .map_err(|e| self.down(&e))
    }
}

/// How long a task's key and its bucket's sets live.
#[derive(Debug, Clone, Copy)]
pub(super) struct Times {
    pub(super) ttl_ms: u64,
    pub(super) lease_ms: u64,
}

impl Times {
    /// A set outlives every member: a member's task expires at most a
    /// lease and a `ttl` after the write that last put it there.
    fn sets_life_ms(self) -> u64 {
        self.ttl_ms.saturating_add(self.lease_ms).max(1)
    }
}
