//! The Redis backend: state shared by every toolhost process that names the
//! same server.
//!
//! Layout: a namespace is one hash, `PREFIX:STORE:g` for a global store and
//! `PREFIX:STORE:s:VALUE` for a scoped one (store names have no `:`, so no
//! two namespaces share a key); its byte count is a string key beside it,
//! `PREFIX:STORE:u:…`. The key count is the hash's length. Every write is one
//! Lua script, so its quota check and its writes are atomic against every
//! other process, and a refused write changes nothing.

use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{AsyncCommands, Script};
use futures::future::BoxFuture;

use super::{Engine, Entry, KeyPage, PAGE, Quota, StoreError};

/// How long to wait to connect, and for one answer. A call's own deadline
/// bounds it too; these keep a dead server from holding a call that long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Set several fields if the namespace's quota allows, all or none.
/// KEYS: hash, byte counter. ARGV: max_keys, max_bytes, then field, value
/// pairs, each field once.
const SET_MANY: &str = r"
local keys = redis.call('HLEN', KEYS[1])
local bytes = tonumber(redis.call('GET', KEYS[2]) or '0')
for i = 3, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if redis.call('HEXISTS', KEYS[1], field) == 1 then
    bytes = bytes - redis.call('HSTRLEN', KEYS[1], field)
  else
    keys = keys + 1
    bytes = bytes + #field
  end
  bytes = bytes + #value
end
if keys > tonumber(ARGV[1]) then return {'keys', keys} end
if bytes > tonumber(ARGV[2]) then return {'bytes', bytes} end
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('SET', KEYS[2], bytes)
return {'ok', 0}
";

/// Delete fields and count their bytes out. KEYS: hash, byte counter. ARGV: fields.
const DELETE_MANY: &str = r"
local freed = 0
for i = 1, #ARGV do
  local len = redis.call('HSTRLEN', KEYS[1], ARGV[i])
  if redis.call('HDEL', KEYS[1], ARGV[i]) == 1 then freed = freed + #ARGV[i] + len end
end
if freed > 0 then redis.call('DECRBY', KEYS[2], freed) end
if redis.call('HLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
return 0
";

/// Add to a decimal counter if the quota allows, with Redis's own
/// `HINCRBY` (exact up to 2^63 - 1). KEYS: hash, byte counter. ARGV: field,
/// delta, max_keys, max_bytes. Returns {status, value}.
const INCREMENT: &str = r"
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old and not string.match(old, '^%d+$') then return {'nan', 0} end
local added = redis.pcall('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
if type(added) == 'table' and added.err then return {'overflow', 0} end
local text = redis.call('HGET', KEYS[1], ARGV[1])
local bytes = tonumber(redis.call('GET', KEYS[2]) or '0')
local keys = redis.call('HLEN', KEYS[1])
if old then bytes = bytes - #old else bytes = bytes + #ARGV[1] end
bytes = bytes + #text
local over = nil
if keys > tonumber(ARGV[3]) then over = {'keys', keys} elseif bytes > tonumber(ARGV[4]) then over = {'bytes', bytes} end
if over then
  if old then redis.call('HSET', KEYS[1], ARGV[1], old) else redis.call('HDEL', KEYS[1], ARGV[1]) end
  return over
end
redis.call('SET', KEYS[2], bytes)
return {'ok', text}
";

/// A store on a Redis server.
pub(crate) struct Redis {
    connection: ConnectionManager,
    /// `PREFIX:STORE:`.
    base: String,
    set_many: Script,
    delete_many: Script,
    increment: Script,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("redis: {e}"))
}

impl Redis {
    /// Connect to `url`; the connection reconnects by itself afterwards.
    pub(crate) async fn connect(url: &str, prefix: &str, store: &str) -> Result<Self, StoreError> {
        let client = ::redis::Client::open(url).map_err(unavailable)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2);
        let connection = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(unavailable)?;
        Ok(Self {
            connection,
            base: format!("{prefix}:{store}:"),
            set_many: Script::new(SET_MANY),
            delete_many: Script::new(DELETE_MANY),
            increment: Script::new(INCREMENT),
        })
    }

    /// The hash and the byte counter of namespace `ns`.
    fn keys(&self, ns: &str) -> (String, String) {
        if ns.is_empty() {
            (format!("{}g", self.base), format!("{}u:g", self.base))
        } else {
            (format!("{}{ns}", self.base), format!("{}u:{ns}", self.base))
        }
    }
}

/// A script's `{status, value}` answer as a result.
fn verdict(status: &str, value: i64, quota: &Quota) -> Result<(), StoreError> {
    match status {
        "ok" => Ok(()),
        "keys" => Err(super::too_many_keys(value.unsigned_abs(), quota)),
        "bytes" => Err(super::too_many_bytes(value.unsigned_abs(), quota)),
        "nan" => Err(StoreError::NotACounter(
            "the value is not a decimal number".into(),
        )),
        _ => Err(StoreError::NotACounter(
            "Redis counters hold 0 to 2^63 - 1, and this increment would leave that range".into(),
        )),
    }
}

impl Engine for Redis {
    fn get<'a>(
        &'a self,
        ns: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(async move {
            let (hash, _) = self.keys(ns);
            self.connection
                .clone()
                .hget(hash, key)
                .await
                .map_err(unavailable)
        })
    }

    fn exists<'a>(&'a self, ns: &'a str, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let (hash, _) = self.keys(ns);
            self.connection
                .clone()
                .hexists(hash, key)
                .await
                .map_err(unavailable)
        })
    }

    fn list<'a>(&'a self, ns: &'a str, cursor: u64) -> BoxFuture<'a, Result<KeyPage, StoreError>> {
        Box::pin(async move {
            let (hash, _) = self.keys(ns);
            // HSCAN's cursor is the page token; a page may repeat a key that
            // was written during the scan, as Redis documents.
            let (next, pairs): (u64, Vec<String>) = ::redis::cmd("HSCAN")
                .arg(&hash)
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut self.connection.clone())
                .await
                .map_err(unavailable)?;
            let keys = pairs.into_iter().step_by(2).collect();
            Ok((keys, (next != 0).then_some(next)))
        })
    }

    fn get_many<'a>(
        &'a self,
        ns: &'a str,
        keys: Vec<String>,
    ) -> BoxFuture<'a, Result<Vec<Option<Entry>>, StoreError>> {
        Box::pin(async move {
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let (hash, _) = self.keys(ns);
            let values: Vec<Option<Vec<u8>>> = ::redis::cmd("HMGET")
                .arg(&hash)
                .arg(&keys)
                .query_async(&mut self.connection.clone())
                .await
                .map_err(unavailable)?;
            Ok(keys
                .into_iter()
                .zip(values)
                .map(|(k, v)| v.map(|v| (k, v)))
                .collect())
        })
    }

    fn set_many<'a>(
        &'a self,
        ns: &'a str,
        entries: Vec<Entry>,
        quota: Quota,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let (hash, usage) = self.keys(ns);
            // Each key once, its last value winning, as if set in order.
            let mut last = std::collections::HashMap::with_capacity(entries.len());
            for (i, (key, _)) in entries.iter().enumerate() {
                last.insert(key.as_str(), i);
            }
            let mut invocation = self.set_many.key(&hash);
            invocation
                .key(&usage)
                .arg(quota.max_keys)
                .arg(quota.max_bytes);
            for (i, (key, value)) in entries.iter().enumerate() {
                if last.get(key.as_str()) == Some(&i) {
                    invocation.arg(key).arg(value.as_slice());
                }
            }
            let (status, value): (String, i64) = invocation
                .invoke_async(&mut self.connection.clone())
                .await
                .map_err(unavailable)?;
            verdict(&status, value, &quota)
        })
    }

    fn delete_many<'a>(
        &'a self,
        ns: &'a str,
        keys: Vec<String>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if keys.is_empty() {
                return Ok(());
            }
            let (hash, usage) = self.keys(ns);
            let mut invocation = self.delete_many.key(&hash);
            invocation.key(&usage).arg(&keys);
            let _: i64 = invocation
                .invoke_async(&mut self.connection.clone())
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }

    fn increment<'a>(
        &'a self,
        ns: &'a str,
        key: &'a str,
        delta: u64,
        quota: Quota,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let (hash, usage) = self.keys(ns);
            let mut invocation = self.increment.key(&hash);
            invocation
                .key(&usage)
                .arg(key)
                .arg(delta)
                .arg(quota.max_keys)
                .arg(quota.max_bytes);
            let (status, value): (String, ::redis::Value) = invocation
                .invoke_async(&mut self.connection.clone())
                .await
                .map_err(unavailable)?;
            let number = |v: &::redis::Value| -> Option<u64> {
                match v {
                    ::redis::Value::Int(n) => u64::try_from(*n).ok(),
                    ::redis::Value::BulkString(bytes) => {
                        std::str::from_utf8(bytes).ok()?.parse().ok()
                    }
                    _ => None,
                }
            };
            if status == "ok" {
                return number(&value)
                    .ok_or_else(|| unavailable("the counter script answered oddly"));
            }
            let value = number(&value).map_or(0, |n| i64::try_from(n).unwrap_or(i64::MAX));
            verdict(&status, value, &quota).map(|()| 0)
        })
    }
}
