//! The `[serve]` table: how `toolhost serve` tells its callers apart
//! (`[serve.auth]`) and how it shares itself out among them
//! (`[serve.limits]`, see [`crate::fair_shares`]).
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
//! [serve.tasks]                       # see crate::durable_tasks
//! redis = { env = "REDIS_URL" }       # or a literal URL; absent: in memory
//! ttl = "1h"
//! lease = "15s"
//! max_per_principal = 100
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ManifestError;
use crate::durable_tasks::{TaskPolicy, TasksConfig};
use crate::fair_shares::{LimitsConfig, Policy};
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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    jwks: Option<String>,
    #[serde(default)]
    issuers: Vec<String>,
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
        let tasks = match self.tasks {
            Some(table) => tasks(table, base, lookup_env)
                .map_err(|message| ManifestError::file(file, format!("`serve.tasks{message}")))?,
            None => TaskPolicy::default(),
        };
        Ok(ServeSettings {
            auth,
            limits,
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
    redis_from_env(&mut table, lookup_env)?;
    let config = LimitsConfig::deserialize(toml::Value::Table(table))
        .map_err(|e| format!("`: {}", e.message().trim()))?;
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
    redis_from_env(&mut table, lookup_env)?;
    let config = TasksConfig::deserialize(toml::Value::Table(table))
        .map_err(|e| format!("`: {}", e.message().trim()))?;
    config.validate(base).map_err(|e| {
        e.to_string()
            .strip_prefix("`serve.tasks")
            .map_or_else(|| format!("`: {e}"), str::to_owned)
    })
}

/// Replace a table's `redis = { env = "NAME" }` with the URL the variable
/// holds, so the URL's password need not be written in the manifest.
fn redis_from_env(
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
        let (Some(jwks), Some(audience)) = (&self.jwks, &self.audience) else {
            return Err((
                if self.jwks.is_none() {
                    "jwks"
                } else {
                    "audience"
                }
                .into(),
                "OAuth tokens need jwks (the issuers' key set: a file or https URL), issuers and \
                 audience (this server's URL) together"
                    .into(),
            ));
        };
        let jwks = JwksSource::parse(jwks, base).map_err(|e| ("jwks".to_owned(), e))?;
        let mut oauth = OAuthSettings::new(jwks, self.issuers.clone(), audience.clone())
            .map_err(|e| ("issuers".to_owned(), e))?;
        if let Some(names) = &self.algorithms {
            oauth = oauth
                .algorithms(names)
                .map_err(|e| ("algorithms".to_owned(), e))?;
        }
        if let Some(text) = &self.leeway {
            let leeway = crate::duration::parse(text)
                .map_err(|e| ("leeway".to_owned(), format!("{e}; write e.g. \"30s\"")))?;
            oauth = oauth.leeway(leeway).map_err(|e| ("leeway".to_owned(), e))?;
        }
        Ok(Some(oauth))
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
