//! The Redis backend: state shared by every toolhost process that names the
//! same server.
//!
//! Layout: every key is `PREFIX:STORE:KIND:NS`, read from the right: `NS`
//! is the namespace ([`super::Store::namespace`]'s text with `%` and `:`
//! escaped as `%25` and `%3A`, or `g` for a global store), `KIND` one
//! letter, `STORE` a store name (which has no `:`), and `PREFIX` the rest
//! (which may have `:`). So no two stores, kinds or namespaces ever share a
//! key, whatever the prefixes and namespace values.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `PREFIX:STORE:h:NS` | hash | key → value |
//! | `PREFIX:STORE:i:NS` | sorted set, every score 0 | the keys, for listing in byte order without reading a value |
//! | `PREFIX:STORE:u:NS` | string | the namespace's bytes of keys and values (its keys are the hash's length) |
//! | `PREFIX:STORE:t:all` | hash | `namespaces` and `bytes` of the whole store |
//!
//! Every write is one Lua script, so it computes what it would make, checks
//! every quota and only then writes, atomically against every other
//! process: a refused write changes nothing. (Earlier builds kept a
//! namespace's hash at `PREFIX:STORE:g` or `PREFIX:STORE:s:VALUE`, where a
//! value with `:` could meet another store's keys; that data is neither
//! read nor moved.)

use std::collections::BTreeMap;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{AsyncCommands, Script};
use futures::future::BoxFuture;

use super::rules::{self, Refused};
use super::{Engine, Entry, Quota, StoreError};

/// How long to wait to connect, and for one answer. A call's own deadline
/// bounds it too; these keep a dead server from holding a call that long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// What every write script shares. KEYS: hash, index, byte counter,
/// totals. ARGV[1..4]: max_keys, max_bytes, max_namespaces,
/// max_store_bytes. `usage()` reads what the namespace and the store hold;
/// `refused(before, after)` names the first bound the write would grow
/// past (the rule of `rules::check`); `commit(before, after)` writes the
/// counts.
macro_rules! prelude {
    () => {
        r"
local function usage()
  local totals = redis.call('HMGET', KEYS[4], 'namespaces', 'bytes')
  return {keys = redis.call('HLEN', KEYS[1]), bytes = tonumber(redis.call('GET', KEYS[3]) or '0'),
          namespaces = tonumber(totals[1] or '0'), store = tonumber(totals[2] or '0')}
end
local function after(before, keys, bytes)
  local namespaces = before.namespaces
  if before.keys == 0 and keys > 0 then namespaces = namespaces + 1 end
  if before.keys > 0 and keys == 0 then namespaces = math.max(0, namespaces - 1) end
  return {keys = keys, bytes = bytes, namespaces = namespaces,
          store = math.max(0, before.store - before.bytes) + bytes}
end
local function refused(before, now)
  local bounds = {{'keys', 'keys', 1}, {'bytes', 'bytes', 2}, {'namespaces', 'namespaces', 3}, {'store-bytes', 'store', 4}}
  for _, b in ipairs(bounds) do
    local value = now[b[2]]
    if value > tonumber(ARGV[b[3]]) and value > before[b[2]] then return {b[1], value} end
  end
  return nil
end
local function commit(now)
  if now.keys == 0 then redis.call('DEL', KEYS[3]) else redis.call('SET', KEYS[3], now.bytes) end
  redis.call('HSET', KEYS[4], 'namespaces', now.namespaces, 'bytes', now.store)
end
"
    };
}

/// Set fields if every quota allows, all or none. ARGV[5..]: field, value
/// pairs, each field once. Returns {status, value}.
const SET_MANY: &str = concat!(
    prelude!(),
    r"
local before = usage()
local keys, bytes = before.keys, before.bytes
for i = 5, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if redis.call('HEXISTS', KEYS[1], field) == 1 then
    bytes = bytes - #field - redis.call('HSTRLEN', KEYS[1], field)
  else
    keys = keys + 1
  end
  bytes = bytes + #field + #value
end
local now = after(before, keys, bytes)
local over = refused(before, now)
if over then return over end
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[2], 0, ARGV[i])
end
commit(now)
return {'ok', 0}
"
);

/// Delete fields and count them out. ARGV[5..]: fields.
const DELETE_MANY: &str = concat!(
    prelude!(),
    r"
local before = usage()
local keys, bytes = before.keys, before.bytes
for i = 5, #ARGV do
  local len = redis.call('HSTRLEN', KEYS[1], ARGV[i])
  if redis.call('HDEL', KEYS[1], ARGV[i]) == 1 then
    redis.call('ZREM', KEYS[2], ARGV[i])
    keys = keys - 1
    bytes = bytes - #ARGV[i] - len
  end
end
if keys ~= before.keys then commit(after(before, keys, bytes)) end
return {'ok', 0}
"
);

/// Add to a counter if every quota allows, by the rule of
/// `rules::incremented`: canonical decimal text from 0 to 2^63 - 1, added
/// as decimal text (Lua's numbers are doubles, exact only to 2^53).
/// ARGV[5]: field, ARGV[6]: delta in decimal. Returns {status, value}.
const INCREMENT: &str = concat!(
    prelude!(),
    r"
local MAX = '9223372036854775807'
local function fits(n)
  if #n ~= #MAX then return #n < #MAX end
  for i = 1, #n do
    local a, b = string.byte(n, i), string.byte(MAX, i)
    if a ~= b then return a < b end
  end
  return true
end
local function counter(text)
  return (text == '0' or string.find(text, '^[1-9][0-9]*$') ~= nil) and fits(text)
end
local function add(a, b)
  local digits, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then d = d + string.byte(a, i) - 48; i = i - 1 end
    if j > 0 then d = d + string.byte(b, j) - 48; j = j - 1 end
    digits[#digits + 1] = string.char(48 + d % 10)
    carry = math.floor(d / 10)
  end
  return string.reverse(table.concat(digits))
end
local field = ARGV[5]
local old = redis.call('HGET', KEYS[1], field)
if old and not counter(old) then return {'not-a-counter', 0} end
local sum = add(old or '0', ARGV[6])
if not fits(sum) then return {'overflow', old or '0'} end
local before = usage()
local keys, bytes = before.keys, before.bytes
if old then bytes = bytes - #field - #old else keys = keys + 1 end
local now = after(before, keys, bytes + #field + #sum)
local over = refused(before, now)
if over then return over end
redis.call('HSET', KEYS[1], field, sum)
redis.call('ZADD', KEYS[2], 0, field)
commit(now)
return {'ok', sum}
"
);

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

/// The key of kind `kind` (one letter) for namespace `ns` under `base`
/// (`PREFIX:STORE:`): see the module's layout.
pub(crate) fn key(base: &str, kind: char, ns: &str) -> String {
    let mut key = String::with_capacity(base.len() + ns.len() + 4);
    key.push_str(base);
    key.push(kind);
    key.push(':');
    if ns.is_empty() {
        key.push('g');
    }
    for c in ns.chars() {
        match c {
            '%' => key.push_str("%25"),
            ':' => key.push_str("%3A"),
            c => key.push(c),
        }
    }
    key
}

/// The keys a script of namespace `ns` touches, in `KEYS` order.
struct Keys([String; 4]);

impl Redis {
    /// Connect to `url`; the connection reconnects by itself afterwards.
    pub(crate) async fn connect(url: &str, prefix: &str, store: &str) -> Result<Self, StoreError> {
        // The server's errors go to the operator's log: they name the server
        // by its URL with every secret hidden.
        let failed = |e: ::redis::RedisError| unavailable(format!("{}: {e}", super::redacted(url)));
        let client = crate::grants::store::redis_client(url).map_err(failed)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2);
        let connection = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(failed)?;
        Ok(Self {
            connection,
            base: format!("{prefix}:{store}:"),
            set_many: Script::new(SET_MANY),
            delete_many: Script::new(DELETE_MANY),
            increment: Script::new(INCREMENT),
        })
    }

    fn keys(&self, ns: &str) -> Keys {
        Keys([
            key(&self.base, 'h', ns),
            key(&self.base, 'i', ns),
            key(&self.base, 'u', ns),
            format!("{}t:all", self.base),
        ])
    }

    /// Run `script` over `keys` with the quota and `args`, the arguments
    /// moved into the command one by one, so the host holds one copy of a
    /// batch while it is sent (and not a second in a script invocation).
    async fn run<T: ::redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &Keys,
        quota: &Quota,
        args: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<T, StoreError> {
        let mut cmd = ::redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(keys.0.len())
            .arg(&keys.0[..]);
        cmd.arg(quota.max_keys)
            .arg(quota.max_bytes)
            .arg(quota.max_namespaces)
            .arg(quota.max_store_bytes);
        for arg in args {
            cmd.arg(arg);
        }
        let mut connection = self.connection.clone();
        match cmd.query_async(&mut connection).await {
            Err(e)
                if e.kind() == ::redis::ErrorKind::Server(::redis::ServerErrorKind::NoScript) =>
            {
                let _: String = script
                    .load_async(&mut connection)
                    .await
                    .map_err(unavailable)?;
                cmd.query_async(&mut connection).await.map_err(unavailable)
            }
            result => result.map_err(unavailable),
        }
    }
}

/// A write script's `{status, value}` answer as a result (an increment's
/// overflow aside: `Redis::increment` reads that one).
fn verdict(status: &str, value: &::redis::Value, quota: &Quota) -> Result<(), StoreError> {
    match status {
        "ok" => Ok(()),
        "not-a-counter" => Err(rules::not_a_counter()),
        refused => match (Refused::named(refused), value) {
            (Some(bound), ::redis::Value::Int(n)) => {
                Err(bound.error(u64::try_from(*n).unwrap_or(0), quota))
            }
            _ => Err(unavailable(format!("a script answered {refused:?}"))),
        },
    }
}

impl Engine for Redis {
    fn get<'a>(
        &'a self,
        ns: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(async move {
            let [hash, ..] = &self.keys(ns).0;
            self.connection
                .clone()
                .hget(hash, key)
                .await
                .map_err(unavailable)
        })
    }

    fn exists<'a>(&'a self, ns: &'a str, key: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let [hash, ..] = &self.keys(ns).0;
            self.connection
                .clone()
                .hexists(hash, key)
                .await
                .map_err(unavailable)
        })
    }

    fn list<'a>(
        &'a self,
        ns: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<String>, bool), StoreError>> {
        Box::pin(async move {
            let [_, index, ..] = &self.keys(ns).0;
            let start = match after {
                Some(key) => [b"(", key.as_bytes()].concat(),
                None => b"-".to_vec(),
            };
            let found: Vec<Vec<u8>> = ::redis::cmd("ZRANGEBYLEX")
                .arg(index)
                .arg(start)
                .arg("+")
                .arg("LIMIT")
                .arg(0)
                .arg(limit.saturating_add(1))
                .query_async(&mut self.connection.clone())
                .await
                .map_err(unavailable)?;
            let more = found.len() > limit;
            let keys = found
                .into_iter()
                .take(limit)
                .map(|key| {
                    // Only toolhost writes the index, and keys are strings.
                    String::from_utf8(key)
                        .map_err(|_| unavailable(format!("{index} holds a key that is not UTF-8")))
                })
                .collect::<Result<_, _>>()?;
            Ok((keys, more))
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
            let [hash, ..] = &self.keys(ns).0;
            let values: Vec<Option<Vec<u8>>> = ::redis::cmd("HMGET")
                .arg(hash)
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
            if entries.is_empty() {
                return Ok(());
            }
            // Each key once, its last value winning, as if set in order.
            let last: BTreeMap<String, Vec<u8>> = entries.into_iter().collect();
            let args = last
                .into_iter()
                .flat_map(|(key, value)| [key.into_bytes(), value]);
            let (status, value): (String, ::redis::Value) = self
                .run(&self.set_many, &self.keys(ns), &quota, args)
                .await?;
            verdict(&status, &value, &quota)
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
            let args = keys.into_iter().map(String::into_bytes);
            // Deletes are never refused: the quota only fills ARGV[1..4].
            let (status, value): (String, ::redis::Value) = self
                .run(&self.delete_many, &self.keys(ns), &Quota::default(), args)
                .await?;
            verdict(&status, &value, &Quota::default())
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
            let args = [key.as_bytes().to_vec(), delta.to_string().into_bytes()];
            let (status, value): (String, ::redis::Value) = self
                .run(&self.increment, &self.keys(ns), &quota, args)
                .await?;
            if status == "ok" {
                let sum = match &value {
                    ::redis::Value::BulkString(bytes) => rules::counter(bytes),
                    _ => None,
                };
                return sum.ok_or_else(|| unavailable("the counter script answered oddly"));
            }
            if status == "overflow" {
                let current = match &value {
                    ::redis::Value::BulkString(bytes) => rules::counter(bytes).unwrap_or(0),
                    _ => 0,
                };
                return Err(rules::overflow(current, delta));
            }
            verdict(&status, &value, &quota).map(|()| 0)
        })
    }
}

#[cfg(test)]
mod tests;
