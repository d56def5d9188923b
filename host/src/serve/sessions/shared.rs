//! MCP sessions kept in Redis (`[serve.sessions] redis = …`), so that any
//! replica behind a load balancer serves a session another replica
//! opened: no sticky sessions.
//!
//! **One hash per session**, `PREFIX:ID`, with two fields: `state`, what
//! rmcp needs to bring the session back on another replica (the client's
//! `initialize` parameters, as JSON, replayed there), and `owner`, the id
//! of the principal that opened it: a restored session stays its owner's,
//! and any other principal presenting the id is told there is no such
//! session, on every replica alike.
//!
//! **Redis decides whether a session is alive.** Each request naming a
//! session reads its owner and pushes back its expiry in one script
//! ([`OWNER`]); a session whose hash is gone (ended by `DELETE` on any
//! replica, or expired) is closed on the replica that still holds it,
//! and answered 404. The hash expires after the idle time, renewed by
//! every request and, each reaper tick, by every session with a call in
//! flight, so a long call keeps its session on every replica.
//!
//! **What is not shared**: a session's streams and the calls in flight
//! live on the replica that runs them. A call's answer goes back on the
//! request that made it; a client that loses that replica loses the calls
//! it had in flight there (it is answered with a transport error and may
//! retry), never its session.

use std::sync::Arc;
use std::time::Duration;

use ::redis::Script;
use ::redis::aio::ConnectionManager;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore, SessionStoreError,
};
use tokio::sync::OnceCell;

use crate::grants::store::redacted;
use crate::manifest::SessionSettings;

/// The longest one operation may wait on Redis, connecting included: a
/// request naming a session waits no longer than this for its check.
const TIMEOUT: Duration = Duration::from_secs(1);

/// Read a session's owner (`KEYS[1]`, the session's hash) and, when it
/// exists and `ARGV[3]` is empty or names that owner, push back its expiry
/// by `ARGV[1]` ms, here and in its owner's set of sessions (the hash's
/// `of` field) for session id `ARGV[2]`: a request from another principal
/// naming the session does not keep it alive. Returns the owner, or nil.
const OWNER: &str = r"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and (ARGV[3] == '' or ARGV[3] == owner) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  local of = redis.call('HGET', KEYS[1], 'of')
  if of then
    local now = redis.call('TIME')
    local ms = now[1] * 1000 + math.floor(now[2] / 1000)
    redis.call('ZADD', of, 'XX', ms + ARGV[1], ARGV[2])
    if redis.call('PTTL', of) < tonumber(ARGV[1]) then redis.call('PEXPIRE', of, ARGV[1]) end
  end
end
return owner
";

/// Hold a place among a principal's sessions (`KEYS[1]`, a sorted set of
/// session ids by the time they expire) for a session being opened:
/// forget expired members, then add `ARGV[3]` for `ARGV[4]` ms unless the
/// principal already has `ARGV[1]`; the set lives at least `ARGV[2]` ms.
/// Returns 1 when the place is held, 0 when the share is full. Redis's
/// clock decides expiry, so replicas' clocks need not agree.
const RESERVE: &str = r"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local now = redis.call('TIME')
local ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[4]), ARGV[3])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
";

/// Record that principal `ARGV[1]` opened session `ARGV[3]` (hash
/// `KEYS[1]`), turning its place `ARGV[2]` in its set `KEYS[2]` into the
/// session's (forgetting expired members); both live `ARGV[4]` ms unused.
/// With no `KEYS[2]` (callers are not told apart), no set is kept.
const CLAIM: &str = r"
if redis.replicate_commands then pcall(redis.replicate_commands) end
redis.call('HSET', KEYS[1], 'owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if not KEYS[2] then return 1 end
local now = redis.call('TIME')
local ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call('HSET', KEYS[1], 'of', KEYS[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ms)
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[2], ms + tonumber(ARGV[4]), ARGV[3])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
return 1
";

/// Of the sessions whose hashes are `KEYS` (ids `ARGV[2i]`), push back
/// by `ARGV[1]` ms the expiry of those marked busy (`ARGV[2i+1]` is `1`),
/// in their owners' sets too. Returns the ids of those already gone
/// (ended on another replica, or expired).
const RENEW: &str = r"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local now = redis.call('TIME')
local ms = now[1] * 1000 + math.floor(now[2] / 1000)
local ttl = tonumber(ARGV[1])
local gone = {}
for i, key in ipairs(KEYS) do
  local id = ARGV[2 * i]
  if redis.call('EXISTS', key) == 0 then
    table.insert(gone, id)
  elseif ARGV[2 * i + 1] == '1' then
    redis.call('PEXPIRE', key, ttl)
    local of = redis.call('HGET', key, 'of')
    if of then
      redis.call('ZADD', of, 'XX', ms + ttl, id)
      if redis.call('PTTL', of) < ttl then redis.call('PEXPIRE', of, ttl) end
    end
  end
end
return gone
";

/// End session `ARGV[1]` (hash `KEYS[1]`): its hash, and its place in its
/// owner's set.
const END: &str = r"
local of = redis.call('HGET', KEYS[1], 'of')
redis.call('DEL', KEYS[1])
if of then redis.call('ZREM', of, ARGV[1]) end
return 1
";

/// How long a place held for a session being opened lasts if the opening
/// never finishes (the client's `initialize` failed, or this replica
/// stopped): longer than any `initialize` takes.
const PLACE_HELD: Duration = Duration::from_secs(30);

/// A failure of the session store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SharedError {
    /// Redis could not be reached, or refused the command.
    #[error("the session store at {shown} failed: {source}")]
    Redis {
        shown: String,
        #[source]
        source: ::redis::RedisError,
    },
    /// Redis did not answer in time.
    #[error("the session store at {shown} did not answer within {TIMEOUT:?}")]
    Timeout { shown: String },
    /// A session's stored state is not what this version writes.
    #[error("the stored state of MCP session {id} cannot be read: {source}")]
    Unreadable {
        id: String,
        #[source]
        source: serde_json::Error,
    },
}

/// The sessions of every replica that names the same Redis and prefix.
pub(crate) struct SharedSessions {
    client: ::redis::Client,
    /// The URL as logs may show it.
    shown: String,
    prefix: String,
    /// How long a session lives unused.
    ttl: Duration,
    connection: OnceCell<ConnectionManager>,
    scripts: Scripts,
}

/// The scripts, hashed once.
struct Scripts {
    owner: Script,
    reserve: Script,
    claim: Script,
    renew: Script,
    end: Script,
}

/// A place held in a principal's share of the shared sessions for a
/// session being opened, to be claimed by it or released.
#[derive(Debug)]
pub(crate) struct Place {
    /// The principal's set of sessions.
    set: String,
    /// The member holding the place.
    member: String,
}

impl std::fmt::Debug for SharedSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSessions")
            .field("redis", &self.shown)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl SharedSessions {
    /// The store `settings` names, if they name one. Nothing is connected
    /// yet: the first request that needs Redis connects.
    ///
    /// # Errors
    ///
    /// [`SharedError::Redis`] for a URL the client cannot use (the
    /// manifest checked it; an embedder's settings may not have).
    pub(crate) fn new(settings: &SessionSettings) -> Result<Option<Arc<Self>>, SharedError> {
        let Some(url) = settings.redis() else {
            return Ok(None);
        };
        let shown = redacted(url);
        let client =
            crate::grants::store::redis_client(url).map_err(|source| SharedError::Redis {
                shown: shown.clone(),
                source,
            })?;
        Ok(Some(Arc::new(Self {
            client,
            shown,
            prefix: settings.prefix().to_owned(),
            ttl: settings.idle(),
            connection: OnceCell::new(),
            scripts: Scripts {
                owner: Script::new(OWNER),
                reserve: Script::new(RESERVE),
                claim: Script::new(CLAIM),
                renew: Script::new(RENEW),
                end: Script::new(END),
            },
        })))
    }

    /// The key of session `id`: escaped (an id is a client's header) and of
    /// a kind no store and no limiter key has (theirs are one letter or
    /// two), so a session can never name another part's data, whatever
    /// the prefixes.
    fn key(&self, id: &str) -> String {
        crate::serve::fair::redis_key(&self.prefix, "mcp-session", id)
    }

    /// The key of the set of sessions principal `owner` holds open, on
    /// every replica.
    fn set_of(&self, owner: &str) -> String {
        crate::serve::fair::redis_key(&self.prefix, "mcp-sessions-of", owner)
    }

    fn ttl_ms(&self) -> u64 {
        millis(self.ttl)
    }

    async fn connection(&self) -> Result<ConnectionManager, SharedError> {
        crate::serve::redis_connection::connection(&self.connection, &self.client, TIMEOUT)
            .await
            .map_err(|source| self.failed(source))
    }

    fn failed(&self, source: ::redis::RedisError) -> SharedError {
        SharedError::Redis {
            shown: self.shown.clone(),
            source,
        }
    }

    /// Run `command` on Redis within [`TIMEOUT`].
    async fn run<T: ::redis::FromRedisValue>(
        &self,
        command: impl FnOnce(&mut ::redis::Pipeline),
    ) -> Result<T, SharedError> {
        let mut connection = self.connection().await?;
        let mut pipeline = ::redis::pipe();
        command(&mut pipeline);
        match tokio::time::timeout(TIMEOUT, pipeline.query_async(&mut connection)).await {
            Ok(answer) => answer.map_err(|source| self.failed(source)),
            Err(_) => Err(SharedError::Timeout {
                shown: self.shown.clone(),
            }),
        }
    }

    /// Invoke `invocation` on Redis within [`TIMEOUT`].
    async fn invoke<T: ::redis::FromRedisValue>(
        &self,
        invocation: &::redis::ScriptInvocation<'_>,
    ) -> Result<T, SharedError> {
        let mut connection = self.connection().await?;
        match tokio::time::timeout(TIMEOUT, invocation.invoke_async(&mut connection)).await {
            Ok(answer) => answer.map_err(|source| self.failed(source)),
            Err(_) => Err(SharedError::Timeout {
                shown: self.shown.clone(),
            }),
        }
    }

    /// The principal that owns session `id`; `None` when no replica knows
    /// it any more (ended or expired). Its expiry is pushed back when
    /// `asker` is its owner, or `None` (callers are not told apart).
    pub(crate) async fn owner(
        &self,
        id: &str,
        asker: Option<&str>,
    ) -> Result<Option<String>, SharedError> {
        // No session toolhost made has an id like it: known to no replica.
        if !plausible(id) {
            return Ok(None);
        }
        let mut invocation = self.scripts.owner.key(self.key(id));
        invocation
            .arg(self.ttl_ms())
            .arg(id)
            .arg(asker.unwrap_or(""));
        self.invoke(&invocation).await
    }

    /// Hold a place for a session `owner` is opening, unless it holds
    /// `share` sessions open on the replicas already: `None` then.
    pub(crate) async fn reserve(
        &self,
        owner: &str,
        share: usize,
    ) -> Result<Option<Place>, SharedError> {
        let place = Place {
            set: self.set_of(owner),
            member: format!("opening:{:032x}", fastrand::u128(..)),
        };
        let held = millis(PLACE_HELD);
        let mut invocation = self.scripts.reserve.key(&place.set);
        invocation
            .arg(share)
            .arg(self.ttl_ms().max(held))
            .arg(&place.member)
            .arg(held);
        let taken: i64 = self.invoke(&invocation).await?;
        Ok((taken == 1).then_some(place))
    }

    /// Give back a place no session took.
    pub(crate) async fn release(&self, place: &Place) -> Result<(), SharedError> {
        self.run::<()>(|pipe| {
            pipe.zrem(&place.set, &place.member).ignore();
        })
        .await
    }

    /// Record that principal `owner` opened session `id`, in `place` when
    /// one was held for it, and in the owner's count when `counted`
    /// (callers are told apart).
    pub(crate) async fn claim(
        &self,
        id: &str,
        owner: &str,
        place: Option<&Place>,
        counted: bool,
    ) -> Result<(), SharedError> {
        let mut invocation = self.scripts.claim.key(self.key(id));
        if counted {
            invocation.key(place.map_or_else(|| self.set_of(owner), |place| place.set.clone()));
        }
        invocation
            .arg(owner)
            .arg(place.map_or("", |place| place.member.as_str()))
            .arg(id)
            .arg(self.ttl_ms());
        self.invoke::<i64>(&invocation).await.map(drop)
    }

    /// Of `held`, the sessions this replica holds (each marked busy when
    /// it has calls in flight here), push back the expiry of the busy
    /// ones, and return the ids of those already gone (ended on another
    /// replica, or expired), to be closed here, their calls stopped.
    pub(crate) async fn renew(&self, held: &[(String, bool)]) -> Result<Vec<String>, SharedError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = self.scripts.renew.prepare_invoke();
        invocation.arg(self.ttl_ms());
        for (id, busy) in held {
            invocation
                .key(self.key(id))
                .arg(id)
                .arg(if *busy { "1" } else { "0" });
        }
        self.invoke(&invocation).await
    }

    async fn load_state(&self, id: &str) -> Result<Option<SessionState>, SharedError> {
        let key = self.key(id);
        let ((state, owner),): ((Option<String>, Option<String>),) = self
            .run(|pipe| {
                pipe.cmd("HMGET").arg(&key).arg("state").arg("owner");
            })
            .await?;
        // A session whose opening never finished (no owner recorded) is
        // nobody's: it is not brought back.
        let (Some(state), Some(_)) = (state, owner) else {
            return Ok(None);
        };
        serde_json::from_str(&state)
            .map(Some)
            .map_err(|source| SharedError::Unreadable {
                id: id.to_owned(),
                source,
            })
    }

    async fn store_state(&self, id: &str, state: &SessionState) -> Result<(), SharedError> {
        let json = serde_json::to_string(state).map_err(|source| SharedError::Unreadable {
            id: id.to_owned(),
            source,
        })?;
        let key = self.key(id);
        self.run::<()>(|pipe| {
            pipe.hset(&key, "state", json)
                .ignore()
                .pexpire(&key, self.ttl_ms().try_into().unwrap_or(i64::MAX))
                .ignore();
        })
        .await
    }

    async fn delete_state(&self, id: &str) -> Result<(), SharedError> {
        let mut invocation = self.scripts.end.key(self.key(id));
        invocation.arg(id);
        self.invoke::<i64>(&invocation).await.map(drop)
    }
}

#[async_trait::async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        self.load_state(session_id).await.map_err(unshown)
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        self.store_state(session_id, state).await.map_err(unshown)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.delete_state(session_id).await.map_err(unshown)
    }
}

/// What rmcp is told of a store failure: it writes its errors into the
/// body of its 500 answer, and a client must not learn where the store
/// is or how it failed. The failure itself goes to the log.
fn unshown(error: SharedError) -> SessionStoreError {
    tracing::warn!(error = %error, "the MCP session store failed");
    "the store MCP sessions are shared through failed; try again, or start a new session with \
     initialize"
        .into()
}

/// `duration` in whole milliseconds, at least one.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Whether `id` could be a session id rmcp made (a UUID or similar: short,
/// of letters, digits, `-` and `_`), checked before it is sent to Redis.
fn plausible(id: &str) -> bool {
    (1..=MAX_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The longest session id looked up.
const MAX_ID: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_key_is_escaped_and_of_a_kind_no_store_has() {
        let settings = crate::manifest::SessionSettings::default();
        assert!(settings.redis().is_none());
        // An id from a client's header is escaped: it cannot add a level.
        let key = crate::serve::fair::redis_key("toolhost:sessions", "mcp-session", "h:g");
        assert_eq!(key, "toolhost:sessions:mcp-session:h%3Ag");
        assert!(plausible("0f6c5a3e-8d7b-4c55-9a0e-2b1d4e6f7a8b"));
        for hostile in ["", "h:g", "a b", "ü", &"x".repeat(MAX_ID + 1)] {
            assert!(!plausible(hostile), "{hostile:?}");
        }
    }
}
