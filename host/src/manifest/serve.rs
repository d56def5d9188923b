//! The `[serve]` table: how `toolhost serve` tells its callers apart
//! (`[serve.auth]`), how it shares itself out among them
//! (`[serve.limits]`, see [`crate::fair_shares`]), and where replicas keep
//! the MCP sessions of 2025-11-25 clients (`[serve.sessions]`).
//!
//! ```toml
//! [serve.auth]
//! jwks = "https://idp.example.com/.well-known/jwks.json"   # or a file
//! issuers = ["https://idp.example.com"]
//! audience = "https://tools.example.com/mcp"               # this server's URL
//! algorithms = ["RS256", "ES256"]                          # default: RS256 PS256 ES256 EdDSA
//! leeway = "30s"
//! context.user = "claim:sub"          # stores scoped by `user` are the caller's own
//! context.conversation = "caller"     # the request may set this one
//!
//! [[serve.auth.token]]                # static tokens, each a named principal
//! principal = "ci-bot"
//! env = "CI_BOT_TOKEN"                # or file = "secrets/ci-bot.token"
//! scopes = ["tools:calc"]             # default: every tool (`tools:*`)
//! claims = { sub = "ci-bot", org = "acme" }
//!
//! [serve.limits]
//! redis = { env = "REDIS_URL" }       # or a literal URL; absent: in memory
//! per_principal = { rate = "100/min", concurrency = 4 }
//! per_tool = { rate = "1000/min" }
//! tool.fetch = { concurrency = 2 }
//!
//! [serve.sessions]
//! redis = { env = "REDIS_URL" }       # shared by replicas; absent: each its own
//! prefix = "toolhost:sessions"        # the default
//! idle = "2m"                         # closed after this long unused (default)
//! per_principal = 256                 # sessions one principal may hold open (default 256; 32 per address without auth)
//! [serve.tasks]                       # see crate::durable_tasks
//! redis = { env = "REDIS_URL" }       # or a literal URL; absent: in memory
//! ttl = "1h"
//! lease = "15s"
//! max_per_principal = 100
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::ManifestError;
use crate::durable_tasks::{TaskPolicy, TasksConfig};
use crate::fair_shares::{LimitsConfig, Policy};
use crate::grants::store::redacted;
use crate::identity::{ContextSource, JwksSource, OAuthSettings, Settings, StaticToken};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServe {
    auth: Option<RawAuth>,
    /// Read as a table first: `redis` may be `{ env = "NAME" }`, resolved
    /// here, so the URL's password need not be written in the manifest.
    limits: Option<toml::Table>,
    /// Read as a table first, like `limits`.
    tasks: Option<toml::Table>,
    /// Read as a table first, for `redis = { env = "NAME" }` as above.
    sessions: Option<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSessions {
    redis: Option<String>,
    prefix: Option<String>,
    idle: Option<String>,
    per_principal: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    jwks: Option<String>,
    /// Each an issuer's URL (using `jwks`), or `{ issuer, jwks }`: an
    /// issuer with a key set of its own.
    #[serde(default)]
    issuers: Vec<toml::Value>,
    audience: Option<String>,
    algorithms: Option<Vec<String>>,
    leeway: Option<String>,
    #[serde(default)]
    context: BTreeMap<String, String>,
    #[serde(default)]
    token: Vec<RawToken>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    principal: String,
    env: Option<String>,
    file: Option<PathBuf>,
    #[serde(default)]
    scopes: Vec<String>,
    #[serde(default)]
    claims: BTreeMap<String, String>,
}

/// What `[serve]` sets.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ServeSettings {
    /// `[serve.auth]`: who may call.
    pub auth: Settings,
    /// `[serve.limits]`: rate limits and concurrency caps per principal
    /// and per tool; `None`: calls are not limited.
    pub limits: Option<Policy>,
    /// `[serve.tasks]`: where durable tasks are kept and for how long (the
    /// defaults when the table is absent: in memory).
    pub tasks: TaskPolicy,
    /// `[serve.sessions]`: where MCP sessions are kept, how long an idle
    /// one lives, and each principal's share.
    pub sessions: SessionSettings,
}

/// The most MCP sessions one server keeps open at once; each costs about
/// 50 KB. 2026-07-28 requests need no session.
pub(crate) const MAX_SESSIONS: usize = 1024;

/// The key prefix of sessions in Redis when the manifest names none.
const DEFAULT_SESSIONS_PREFIX: &str = "toolhost:sessions";

/// How long a session lives unused when the manifest does not say.
const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(120);

/// The longest idle time the manifest may set: a session's state is kept
/// (in memory and in Redis) this long after its last use.
const MAX_SESSION_IDLE: Duration = Duration::from_secs(24 * 3600);

/// `[serve.sessions]`, validated. The defaults: each replica keeps its own
/// sessions, in memory; an idle session closes after two minutes; one
/// principal may hold a quarter of the 1,024 sessions a server keeps, so
/// that one caller cannot take them all, and one client address (when
/// callers are not told apart) 32 of them.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSettings {
    redis: Option<String>,
    prefix: String,
    idle: Duration,
    /// As the operator set it; `None`: the defaults below.
    per_principal: Option<usize>,
}

/// The sessions one principal (or, without `[serve.auth]`, one client
/// address) may hold by default: a quarter of [`MAX_SESSIONS`], so that
/// one caller can never take them all (at least three others always
/// find room), while a client that opens a session per conversation
/// still has hundreds.
const DEFAULT_SESSION_SHARE: usize = MAX_SESSIONS / 4;

/// The sessions one client address (an IPv6 /64) may hold by default
/// when callers are not told apart (no `[serve.auth]`): a thirty-second
/// of [`MAX_SESSIONS`]. Anyone who can reach the server has an address,
/// and a quarter each would let four of them (or four /64s) hold every
/// session; 32 is still far more than one client's conversations.
const DEFAULT_ADDRESS_SHARE: usize = MAX_SESSIONS / 32;

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            redis: None,
            prefix: DEFAULT_SESSIONS_PREFIX.to_owned(),
            idle: DEFAULT_SESSION_IDLE,
            per_principal: None,
        }
    }
}

impl std::fmt::Debug for SessionSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSettings")
            .field("redis", &self.redis.as_deref().map(redacted))
            .field("prefix", &self.prefix)
            .field("idle", &self.idle)
            .field("per_principal", &self.per_principal())
            .field("per_address", &self.per_address())
            .finish()
    }
}

impl SessionSettings {
    /// The Redis server sessions are kept on, shared by every replica
    /// that names it; `None`: each replica keeps its own.
    pub fn redis(&self) -> Option<&str> {
        self.redis.as_deref()
    }

    /// The prefix of every session key in Redis.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How long a session lives with nothing in flight and nothing from
    /// its client.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// The most sessions one principal may hold open (on every replica,
    /// when sessions are shared): `per_principal`, 256 by default.
    pub fn per_principal(&self) -> usize {
        self.per_principal.unwrap_or(DEFAULT_SESSION_SHARE)
    }

    /// The most sessions one client address (an IPv6 /64) may hold open
    /// when callers are not told apart (no `[serve.auth]`):
    /// `per_principal` when set, else 32.
    pub fn per_address(&self) -> usize {
        self.per_principal.unwrap_or(DEFAULT_ADDRESS_SHARE)
    }

    /// The defaults, shared on the Redis at `url` (the crate's own tests).
    #[cfg(test)]
    pub(crate) fn shared_on(url: &str) -> Self {
        Self {
            redis: Some(url.to_owned()),
            ..Self::default()
        }
    }
}

impl RawServe {
    pub(super) fn validate(
        self,
        file: &Path,
        base: &Path,
        lookup_env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ServeSettings, ManifestError> {
        let auth = match self.auth {
            Some(raw) => raw.validate(base).map_err(|(key, message)| {
                ManifestError::file(file, format!("`serve.auth.{key}`: {message}"))
            })?,
            None => Settings::default(),
        };
        let limits =
            match self.limits {
                Some(table) => Some(limits(table, lookup_env).map_err(|message| {
                    ManifestError::file(file, format!("`serve.limits{message}"))
                })?),
                None => None,
            };
        let sessions = match self.sessions {
            Some(table) => sessions(table, lookup_env).map_err(|message| {
                ManifestError::file(file, format!("`serve.sessions{message}"))
            })?,
            None => SessionSettings::default(),
        };
        let tasks = match self.tasks {
            Some(table) => tasks(table, base, lookup_env)
                .map_err(|message| ManifestError::file(file, format!("`serve.tasks{message}")))?,
            None => TaskPolicy::default(),
        };
        Ok(ServeSettings {
            auth,
            limits,
            sessions,
            tasks,
        })
    }
}

/// `[serve.limits]` checked, its `redis = { env = "NAME" }` read from the
/// environment. The error follows `serve.limits` in the message: `.KEY`:
/// the problem and the fix.
fn limits(
    mut table: toml::Table,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Policy, String> {
    resolve_redis(&mut table, lookup_env)?;
    let config: LimitsConfig = serde_path_to_error::deserialize(toml::Value::Table(table))
        .map_err(|e| path_error(&e, "[serve.limits] in docs/serving.md (\"Fair shares\")"))?;
    config.validate().map_err(|e| {
        // `InvalidLimits` names the key in full; keep its text after `serve.limits`.
        e.to_string()
            .strip_prefix("`serve.limits")
            .map_or_else(|| format!("`: {e}"), str::to_owned)
    })
}

/// `[serve.tasks]` checked, its `redis = { env = "NAME" }` read from the
/// environment; errors as [`limits`]'s.
fn tasks(
    mut table: toml::Table,
    base: &Path,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<TaskPolicy, String> {
    resolve_redis(&mut table, lookup_env)?;
    let config: TasksConfig = serde_path_to_error::deserialize(toml::Value::Table(table))
        .map_err(|e| path_error(&e, "[serve.tasks] in docs/serving.md (\"Tasks\")"))?;
    config.validate(base).map_err(|e| {
        e.to_string()
            .strip_prefix("`serve.tasks")
            .map_or_else(|| format!("`: {e}"), str::to_owned)
    })
}

/// A deserialization error of a `[serve.*]` table, after the table's name:
/// `.KEY`: the problem, and where the keys are documented (`doc`).
fn path_error(e: &serde_path_to_error::Error<toml::de::Error>, doc: &str) -> String {
    let path = e.path().to_string();
    let at = if path == "." {
        String::new()
    } else {
        format!(".{path}")
    };
    format!("{at}`: {}; see {doc}", e.inner().message().trim())
}

/// Replace `redis = { env = "NAME" }` in `table` by the variable's value.
/// The error follows the table's name: `.redis`: the problem and the fix.
fn resolve_redis(
    table: &mut toml::Table,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    let Some(toml::Value::Table(source)) = table.get("redis") else {
        return Ok(());
    };
    let env = match (source.get("env"), source.len()) {
        (Some(toml::Value::String(env)), 1) => env.clone(),
        _ => {
            return Err(
                ".redis`: write the URL, or { env = \"NAME\" } to read it from \
                 the environment variable NAME"
                    .into(),
            );
        }
    };
    let url = lookup_env(&env).ok_or_else(|| {
        format!(
            ".redis`: environment variable {env} is not set; export it before starting toolhost"
        )
    })?;
    table.insert("redis".into(), toml::Value::String(url));
    Ok(())
}

/// `[serve.sessions]` checked, its `redis = { env = "NAME" }` read from
/// the environment. The error follows `serve.sessions` in the message.
fn sessions(
    mut table: toml::Table,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<SessionSettings, String> {
    resolve_redis(&mut table, lookup_env)?;
    let raw: RawSessions = serde_path_to_error::deserialize(toml::Value::Table(table))
        .map_err(|e| path_error(&e, "[serve.sessions] in docs/deploy.md"))?;
    let mut settings = SessionSettings::default();
    if let Some(url) = raw.redis {
        if !crate::grants::store::is_redis_url(&url) {
            return Err(format!(
                ".redis`: {:?} is not a Redis URL; write e.g. \"redis://127.0.0.1:6379\", or \
                 remove `redis` to keep each replica's sessions in its memory",
                redacted(&url)
            ));
        }
        settings.redis = Some(url);
    } else if raw.prefix.is_some() {
        return Err(
            ".prefix`: only sessions kept in Redis have a key prefix; set `redis` or \
                    remove `prefix`"
                .into(),
        );
    }
    if let Some(prefix) = raw.prefix {
        if prefix.is_empty() || prefix.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                ".prefix`: {prefix:?} must be non-empty, without spaces; write e.g. \
                 \"{DEFAULT_SESSIONS_PREFIX}\""
            ));
        }
        settings.prefix = prefix;
    }
    if let Some(text) = raw.idle {
        let idle = crate::duration::parse(&text).map_err(|e| format!(".idle`: {e}"))?;
        if idle < Duration::from_secs(1) || idle > MAX_SESSION_IDLE {
            return Err(format!(
                ".idle`: {text:?} is outside 1s to 24h; write e.g. \"2m\""
            ));
        }
        settings.idle = idle;
    }
    if let Some(most) = raw.per_principal {
        if most == 0 || most > MAX_SESSIONS {
            return Err(format!(
                ".per_principal`: {most} is outside 1 to {MAX_SESSIONS} (the most sessions a \
                 server keeps); write e.g. {}",
                MAX_SESSIONS / 4
            ));
        }
        settings.per_principal = Some(most);
    }
    Ok(settings)
}

type KeyResult<T> = Result<T, (String, String)>;

impl RawAuth {
    fn validate(self, base: &Path) -> KeyResult<Settings> {
        let mut settings = Settings {
            oauth: self.oauth(base)?,
            ..Settings::default()
        };
        for (key, source) in self.context {
            let source: ContextSource =
                source.parse().map_err(|e| (format!("context.{key}"), e))?;
            settings.context.insert(key, source);
        }
        for (i, raw) in self.token.into_iter().enumerate() {
            let token = raw.validate(base).map_err(|e| (format!("token[{i}]"), e))?;
            settings.tokens.push(token);
        }
        Ok(settings)
    }

    fn oauth(&self, base: &Path) -> KeyResult<Option<OAuthSettings>> {
        let given = self.jwks.is_some() || !self.issuers.is_empty() || self.audience.is_some();
        if !given {
            if self.algorithms.is_some() || self.leeway.is_some() {
                return Err(("jwks".into(), "algorithms and leeway are for OAuth tokens: set jwks, issuers and audience too".into()));
            }
            return Ok(None);
        }
        let Some(audience) = &self.audience else {
            return Err((
                "audience".into(),
                "OAuth tokens need jwks (the issuers' key set: a file or https URL), issuers and \
                 audience (this server's URL) together"
                    .into(),
            ));
        };
        let shared = self
            .jwks
            .as_deref()
            .map(|jwks| JwksSource::parse(jwks, base).map_err(|e| ("jwks".to_owned(), e)))
            .transpose()?;
        let issuers = self
            .issuers
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                issuer(entry, shared.as_ref(), base).map_err(|e| (format!("issuers[{i}]"), e))
            })
            .collect::<KeyResult<Vec<_>>>()?;
        let mut oauth = OAuthSettings::per_issuer(issuers, audience.clone())
            .map_err(|e| ("issuers".to_owned(), e))?;
        if let Some(names) = &self.algorithms {
            oauth = oauth
                .with_algorithms(names)
                .map_err(|e| ("algorithms".to_owned(), e))?;
        }
        if let Some(text) = &self.leeway {
            let leeway = crate::duration::parse(text)
                .map_err(|e| ("leeway".to_owned(), format!("{e}; write e.g. \"30s\"")))?;
            oauth = oauth
                .with_leeway(leeway)
                .map_err(|e| ("leeway".to_owned(), e))?;
        }
        Ok(Some(oauth))
    }
}

/// One entry of `issuers`: a URL whose tokens `shared` checks, or
/// `{ issuer = "…", jwks = "…" }` with a key set of its own.
fn issuer(
    entry: &toml::Value,
    shared: Option<&JwksSource>,
    base: &Path,
) -> Result<(String, JwksSource), String> {
    let fix = "write the issuer's URL (\"https://idp.example.com\"), or { issuer = \"https://…\", \
               jwks = \"https://…/jwks.json\" } for an issuer with a key set of its own";
    match entry {
        toml::Value::String(issuer) => match shared {
            Some(jwks) => Ok((issuer.clone(), jwks.clone())),
            None => Err(format!(
                "{issuer:?} has no key set: set `jwks` (shared by the issuers listed as URLs), or \
                 write {{ issuer = {issuer:?}, jwks = \"…\" }}"
            )),
        },
        toml::Value::Table(table) => {
            let text = |key: &str| table.get(key).and_then(toml::Value::as_str);
            match (text("issuer"), text("jwks"), table.len()) {
                (Some(issuer), Some(jwks), 2) => {
                    Ok((issuer.to_owned(), JwksSource::parse(jwks, base)?))
                }
                _ => Err(fix.into()),
            }
        }
        _ => Err(fix.into()),
    }
}

impl RawToken {
    /// The token's entry; the token itself is read when `serve` starts,
    /// so that other commands need neither the variable nor the file.
    fn validate(self, base: &Path) -> Result<StaticToken, String> {
        let mut token = match (self.env, self.file) {
            (Some(env), None) => StaticToken::from_env(self.principal, env, self.scopes)?,
            (None, Some(file)) => {
                StaticToken::from_file(self.principal, base.join(file), self.scopes)?
            }
            _ => {
                return Err(
                    "give the token as env = \"NAME\" (an environment variable) or file = \
                     \"PATH\", one of them; never in the manifest itself"
                        .into(),
                );
            }
        };
        token.claims.extend(self.claims);
        Ok(token)
    }
}
