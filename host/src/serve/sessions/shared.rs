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

/// Read a session's owner (`KEYS[1]`), and push back its expiry by
/// `ARGV[1]` ms when it exists. Returns the owner, or nil.
const OWNER: &str = r"
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return owner
";

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
    owner: Script,
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
        let client = ::redis::Client::open(url).map_err(|source| SharedError::Redis {
            shown: shown.clone(),
            source,
        })?;
        Ok(Some(Arc::new(Self {
            client,
            shown,
            prefix: settings.prefix().to_owned(),
            ttl: settings.idle(),
            connection: OnceCell::new(),
            owner: Script::new(OWNER),
        })))
    }

    /// The key of session `id`: escaped (an id is a client's header) and of
    /// a kind no store and no limiter key has (theirs are one letter or
    /// two), so a session can never name another part's data, whatever
    /// the prefixes.
    fn key(&self, id: &str) -> String {
        crate::serve::fair::redis_key(&self.prefix, "mcp-session", id)
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
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

    /// The principal that owns session `id`, pushing back its expiry;
    /// `None` when no replica knows it any more (ended or expired).
    pub(crate) async fn owner(&self, id: &str) -> Result<Option<String>, SharedError> {
        // No session toolhost made has an id like it: known to no replica.
        if !plausible(id) {
            return Ok(None);
        }
        let mut connection = self.connection().await?;
        let mut invocation = self.owner.key(self.key(id));
        invocation.arg(self.ttl_ms());
        match tokio::time::timeout(TIMEOUT, invocation.invoke_async(&mut connection)).await {
            Ok(answer) => answer.map_err(|source| self.failed(source)),
            Err(_) => Err(SharedError::Timeout {
                shown: self.shown.clone(),
            }),
        }
    }

    /// Record that principal `owner` opened session `id`.
    pub(crate) async fn claim(&self, id: &str, owner: &str) -> Result<(), SharedError> {
        let key = self.key(id);
        self.run::<()>(|pipe| {
            pipe.hset(&key, "owner", owner)
                .ignore()
                .pexpire(&key, self.ttl_ms().try_into().unwrap_or(i64::MAX))
                .ignore();
        })
        .await
    }

    /// Push back the expiry of sessions `ids`, which have calls in flight
    /// here. A session already gone stays gone.
    pub(crate) async fn renew(&self, ids: &[String]) -> Result<(), SharedError> {
        if ids.is_empty() {
            return Ok(());
        }
        let ttl = self.ttl_ms().try_into().unwrap_or(i64::MAX);
        self.run::<()>(|pipe| {
            for id in ids {
                pipe.pexpire(self.key(id), ttl).ignore();
            }
        })
        .await
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
        let key = self.key(id);
        self.run::<()>(|pipe| {
            pipe.del(&key).ignore();
        })
        .await
    }
}

#[async_trait::async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        Ok(self.load_state(session_id).await?)
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        Ok(self.store_state(session_id, state).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        Ok(self.delete_state(session_id).await?)
    }
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
