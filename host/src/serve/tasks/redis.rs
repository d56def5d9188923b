//! Tasks in Redis, shared by every replica that names the same server and
//! prefix, so any replica answers for a task another started.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `PREFIX:t:ID` | hash `{v, rec}`, expires with the task | the record as JSON and its version |
//! | `PREFIX:o:OWNER` | sorted set | the owner's tasks not yet finished, scored by lease expiry (ms) |
//!
//! Names are escaped as the limiter's keys are (`serve::fair`), so an
//! owner id with `:` never meets another key. Every change is one script,
//! atomic against every replica: [`INSERT`] counts the owner's unfinished
//! tasks whose leases hold and inserts all or none; [`SWAP`] replaces a
//! record only at the version it was read at (compare and swap), so two
//! replicas that both find a lease expired never both take the task over.
//! Each task key expires with the task (its result's `ttl` after it
//! finished, or `ttl` after its lease ran out), so Redis keeps no more
//! than that whoever reads it.

use std::time::Duration;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use tokio::sync::OnceCell;

use super::{Full, Record, StoreDown};
use crate::grants::store::redacted;
use crate::serve::fair::redis_key as key;

/// The longest one operation may wait on Redis, connecting included.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Insert tasks of one owner unless it would then have more than its
/// most unfinished. KEYS[1]: the owner's set; KEYS[2..]: the tasks.
/// ARGV: now (ms), the most, the keys' life (ms), the lease's end (ms),
/// then the ids, then the records. Returns -1 when inserted, else the
/// count of unfinished tasks.
const INSERT: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
local new = #KEYS - 1
if n + new > tonumber(ARGV[2]) then return n end
for i = 1, new do
  redis.call('HSET', KEYS[i + 1], 'v', '1', 'rec', ARGV[4 + new + i])
  redis.call('PEXPIRE', KEYS[i + 1], ARGV[3])
  redis.call('ZADD', KEYS[1], ARGV[4], ARGV[4 + i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return -1
";

/// Replace a record read at version ARGV[1] by ARGV[2]. KEYS[1]: the
/// task; KEYS[2]: its owner's set. ARGV[3]: the key's life (ms);
/// ARGV[4]: the id; ARGV[5]: its lease's end while unfinished, or empty
/// once finished (it leaves the owner's set). Returns 1 if swapped.
const SWAP: &str = r"
local v = redis.call('HGET', KEYS[1], 'v')
if v ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'v', tostring(tonumber(v) + 1), 'rec', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if ARGV[5] == '' then
  redis.call('ZREM', KEYS[2], ARGV[4])
else
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
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

    fn owner_key(&self, owner: &str) -> String {
        key(&self.prefix, "o", owner)
    }

    pub(super) async fn insert(
        &self,
        records: &[Record],
        max: u32,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Result<(), Full>, StoreDown> {
        let Some(first) = records.first() else {
            return Ok(Ok(()));
        };
        let mut connection = self.connection().await?;
        let mut invocation = self.insert.prepare_invoke();
        invocation
            .key(self.owner_key(&first.owner))
            .arg(now_ms)
            .arg(max)
            .arg(first.expires_ms(ttl_ms).saturating_sub(now_ms).max(1))
            .arg(first.lease_until_ms);
        for record in records {
            invocation.key(self.task_key(&record.id)).arg(&record.id);
        }
        for record in records {
            invocation.arg(serde_json::to_string(record).map_err(|e| self.down(&e))?);
        }
        let answer: i64 = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(|e| self.down(&e))?;
        Ok(match u32::try_from(answer) {
            Ok(unfinished) => Err(Full { unfinished }),
            Err(_) => Ok(()),
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
        ttl_ms: u64,
    ) -> Result<bool, StoreDown> {
        let mut connection = self.connection().await?;
        let lease = if new.state.is_finished() {
            String::new()
        } else {
            new.lease_until_ms.to_string()
        };
        let swapped: i64 = self
            .swap
            .key(self.task_key(&new.id))
            .key(self.owner_key(&new.owner))
            .arg(new.version)
            .arg(serde_json::to_string(new).map_err(|e| self.down(&e))?)
            .arg(new.expires_ms(ttl_ms).saturating_sub(now_ms).max(1))
            .arg(&new.id)
            .arg(lease)
            .invoke_async(&mut connection)
            .await
            .map_err(|e| self.down(&e))?;
        Ok(swapped == 1)
    }

    pub(super) async fn remove(&self, owner: &str, ids: &[String]) -> Result<(), StoreDown> {
        let mut connection = self.connection().await?;
        let mut pipe = ::redis::pipe();
        pipe.atomic();
        for id in ids {
            pipe.del(self.task_key(id)).ignore();
            pipe.zrem(self.owner_key(owner), id).ignore();
        }
        pipe.query_async::<()>(&mut connection)
            .await
            .map_err(|e| self.down(&e))
    }
}
