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
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ManifestError;
use crate::fair_shares::{LimitsConfig, Policy};
use crate::identity::{ContextSource, JwksSource, OAuthSettings, Settings, StaticToken};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServe {
    auth: Option<RawAuth>,
    /// Read as a table first: `redis` may be `{ env = "NAME" }`, resolved
    /// here, so the URL's password need not be written in the manifest.
    limits: Option<toml::Table>,
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
        Ok(ServeSettings { auth, limits })
    }
}

/// `[serve.limits]` checked, its `redis = { env = "NAME" }` read from the
/// environment. The error follows `serve.limits` in the message: `.KEY`:
/// the problem and the fix.
fn limits(
    mut table: toml::Table,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<Policy, String> {
    if let Some(toml::Value::Table(source)) = table.get("redis") {
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
                ".redis`: environment variable {env} is not set; export it before starting \
                 toolhost"
            )
        })?;
        table.insert("redis".into(), toml::Value::String(url));
    }
    let config: LimitsConfig = serde_path_to_error::deserialize(toml::Value::Table(table))
        .map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." {
                String::new()
            } else {
                format!(".{path}")
            };
            format!(
                "{at}`: {}; see [serve.limits] in docs/serving.md (\"Fair shares\")",
                e.inner().message().trim()
            )
        })?;
    config.validate().map_err(|e| {
        // `InvalidLimits` names the key in full; keep its text after `serve.limits`.
        e.to_string()
            .strip_prefix("`serve.limits")
            .map_or_else(|| format!("`: {e}"), str::to_owned)
    })
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
