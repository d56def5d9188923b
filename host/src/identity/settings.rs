//! `[serve.auth]`, validated: who may call, and where the context keys
//! stores are scoped by come from.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jsonwebtoken::Algorithm;

use super::JwksSource;

/// How a serving toolhost tells its callers apart. The default accepts
/// every caller as one (what a loopback server, or one behind a single
/// `--token-env` token, does).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Settings {
    /// OAuth 2.1 access tokens, checked as a resource server.
    pub oauth: Option<OAuthSettings>,
    /// Static tokens, each standing for a named principal.
    pub tokens: Vec<StaticToken>,
    /// Where each context key of a call comes from. A key bound to a claim
    /// is the principal's; a request that sends it is refused.
    pub context: BTreeMap<String, ContextSource>,
}

impl Settings {
    /// Whether callers are told apart at all: OAuth or static tokens.
    #[must_use]
    pub fn is_enabled(&self) -> bool {
        self.oauth.is_some() || !self.tokens.is_empty()
    }

    /// Whether the context bindings can work: a binding to a claim or to the
    /// principal needs identities to come from, and a claim binding needs
    /// claims that cannot be two callers' at once (one issuer, or static
    /// tokens alone: with several issuers, or issuers and static tokens, two
    /// callers can have the same `sub`).
    ///
    /// # Errors
    ///
    /// The message names the binding and the fix.
    pub fn check(&self) -> Result<(), String> {
        let from_identity = self
            .context
            .iter()
            .find(|(_, source)| !matches!(source, ContextSource::Caller));
        if let Some((key, _)) = from_identity
            && !self.is_enabled()
        {
            return Err(format!(
                "`context.{key}` is filled from the caller's identity, but no identities are \
                 configured: add OAuth (jwks, issuers, audience) or [[serve.auth.token]] entries"
            ));
        }
        let sources = self.oauth.as_ref().map_or(0, |o| o.issuers.len())
            + usize::from(!self.tokens.is_empty());
        if sources > 1
            && let Some((key, ContextSource::Claim(claim))) = self
                .context
                .iter()
                .find(|(_, source)| matches!(source, ContextSource::Claim(_)))
        {
            return Err(format!(
                "`context.{key} = \"claim:{claim}\"` could give two callers the same value: \
                 tokens come from several issuers, or from an issuer and static tokens; bind it \
                 to \"principal\" (the caller's id, unique across them) instead"
            ));
        }
        Ok(())
    }
}

/// Where one context key of a call comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextSource {
    /// The principal's claim of this name (`"claim:sub"`).
    Claim(String),
    /// The principal's id (`"principal"`): `token:NAME` or
    /// `oauth:ISSUER#SUBJECT`, unique across every source of identities.
    Principal,
    /// The caller, in the request (`"caller"`): any principal may send any
    /// value, so a store scoped by it is shared by every principal.
    Caller,
}

impl std::str::FromStr for ContextSource {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.strip_prefix("claim:") {
            Some(claim) if !claim.is_empty() => Ok(Self::Claim(claim.to_owned())),
            _ if text == "caller" => Ok(Self::Caller),
            _ if text == "principal" => Ok(Self::Principal),
            _ => Err(format!(
                "{text:?} is not a context source; write \"principal\" (the caller's id), \
                 \"claim:NAME\" (a claim of the caller's token, e.g. \"claim:sub\") or \
                 \"caller\" (the request's value)"
            )),
        }
    }
}

/// OAuth 2.1 bearer tokens (JWTs), checked as a resource server checks
/// them (RFC 9068, RFC 8707): signed with a pinned algorithm by a key of
/// the key set of the issuer the token names, issued by an accepted
/// issuer, for this server's audience, within `exp` and `nbf` give or take
/// `leeway`.
///
/// Each issuer has its key set: a token naming one issuer is never checked
/// with another's keys (issuers that share one set, the usual case of one
/// identity provider, name the same source, fetched once).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OAuthSettings {
    /// The accepted `iss` values, each with where its public keys are.
    issuers: Vec<(String, JwksSource)>,
    audience: String,
    algorithms: Vec<Algorithm>,
    leeway: Duration,
}

/// The algorithms accepted unless the manifest pins others: the
/// asymmetric ones identity providers sign access tokens with.
pub const DEFAULT_ALGORITHMS: [Algorithm; 4] = [
    Algorithm::RS256,
    Algorithm::PS256,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

/// The clock skew allowed by default: small, as RFC 9068 asks.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);

impl OAuthSettings {
    /// Tokens from `issuers` for `audience`, checked with the keys at
    /// `jwks` (one set the issuers share), with the default algorithms and
    /// leeway.
    ///
    /// # Errors
    ///
    /// No issuer, an empty or repeated one, or an audience that is not an
    /// absolute `https://` (or loopback `http://`) URL.
    pub fn new(jwks: JwksSource, issuers: Vec<String>, audience: String) -> Result<Self, String> {
        Self::per_issuer(
            issuers.into_iter().map(|i| (i, jwks.clone())).collect(),
            audience,
        )
    }

    /// Tokens from each issuer of `issuers`, checked with the keys of its
    /// own key set, for `audience`.
    ///
    /// # Errors
    ///
    /// As [`OAuthSettings::new`].
    pub fn per_issuer(
        issuers: Vec<(String, JwksSource)>,
        audience: String,
    ) -> Result<Self, String> {
        if issuers.is_empty() {
            return Err(
                "name the issuers whose tokens are accepted (`issuers = [\"https://…\"]`, or \
                 --issuer)"
                    .into(),
            );
        }
        if issuers.iter().any(|(i, _)| i.trim().is_empty()) {
            return Err(
                "an issuer is empty; write the issuer's URL as its tokens' `iss` has it".into(),
            );
        }
        let mut seen = BTreeSet::new();
        if let Some((repeated, _)) = issuers.iter().find(|(i, _)| !seen.insert(i.as_str())) {
            return Err(format!(
                "issuer {repeated:?} is named twice; name each issuer once, with its key set"
            ));
        }
        check_resource_url(&audience)?;
        Ok(Self {
            issuers,
            audience,
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            leeway: DEFAULT_LEEWAY,
        })
    }

    /// Accept `algorithms` only.
    ///
    /// # Errors
    ///
    /// A name that is not an asymmetric JWS algorithm (HMAC and `none` are
    /// never accepted: a public key is not a shared secret), or none.
    pub fn with_algorithms(mut self, names: &[String]) -> Result<Self, String> {
        if names.is_empty() {
            return Err("name at least one algorithm, e.g. [\"RS256\", \"ES256\"]".into());
        }
        self.algorithms = names
            .iter()
            .map(|name| {
                name.parse::<Algorithm>()
                    .ok()
                    .filter(|a| {
                        !matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
                    })
                    .ok_or_else(|| {
                        format!(
                            "{name:?} is not accepted; use RS256, RS384, RS512, PS256, PS384, \
                             PS512, ES256, ES384 or EdDSA (HMAC and `none` never are)"
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// Allow `leeway` of clock skew.
    ///
    /// # Errors
    ///
    /// More than five minutes: a token that expired longer ago than that is
    /// expired.
    pub fn with_leeway(mut self, leeway: Duration) -> Result<Self, String> {
        if leeway > Duration::from_secs(300) {
            return Err(
                "a leeway over 5 minutes lets expired tokens in; write e.g. \"30s\"".into(),
            );
        }
        self.leeway = leeway;
        Ok(self)
    }

    /// The algorithms and leeway of `other`, which were checked when it
    /// was built.
    #[must_use]
    pub fn checked_like(mut self, other: &Self) -> Self {
        self.algorithms.clone_from(&other.algorithms);
        self.leeway = other.leeway;
        self
    }

    /// The accepted issuers, each with its key set.
    pub fn issuers(&self) -> impl Iterator<Item = (&str, &JwksSource)> {
        self.issuers.iter().map(|(i, jwks)| (i.as_str(), jwks))
    }

    /// This server's resource URL: the `aud` a token must carry.
    #[must_use]
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// The signature algorithms accepted; never `none` or HMAC.
    #[must_use]
    pub fn algorithms(&self) -> &[Algorithm] {
        &self.algorithms
    }

    /// The clock skew allowed on `exp` and `nbf`.
    #[must_use]
    pub fn leeway(&self) -> Duration {
        self.leeway
    }
}

/// Whether `url` is a resource URL a token can name: absolute, `https`
/// (or `http` on a loopback host, for tests and local use), without a
/// fragment.
fn check_resource_url(url: &str) -> Result<(), String> {
    let fix = "write this server's URL as clients reach it, e.g. \"https://tools.example.com/mcp\"";
    let parsed = url::Url::parse(url).map_err(|e| format!("audience {url:?}: {e}; {fix}"))?;
    let loopback = match parsed.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match parsed.scheme() {
        "https" => {}
        "http" if loopback => {}
        _ => return Err(format!("audience {url:?} is not an https URL; {fix}")),
    }
    if parsed.fragment().is_some() {
        return Err(format!(
            "audience {url:?} has a fragment (RFC 8707 forbids one); {fix}"
        ));
    }
    Ok(())
}

/// A token given to one principal by the operator.
#[derive(Clone)]
#[non_exhaustive]
pub struct StaticToken {
    /// The principal's name: its id in logs, limits and task ownership.
    pub principal: String,
    /// Where the token is: read when the server starts, so that commands
    /// other than `serve` never read serving secrets.
    source: TokenSource,
    /// The scopes it holds.
    pub scopes: Vec<String>,
    /// The claims it carries, for context binding (`sub` is the
    /// principal's name unless given).
    pub claims: BTreeMap<String, String>,
}

/// Where a static token is.
#[derive(Clone)]
enum TokenSource {
    Value(String),
    Env(String),
    File(std::path::PathBuf),
}

/// The fewest characters a static token may have: guessing one must be
/// hopeless (16 characters of `openssl rand -hex` are 64 bits).
pub const MIN_TOKEN_LENGTH: usize = 16;

impl StaticToken {
    /// `token` for `principal`, holding `scopes` (every tool's, `tools:*`,
    /// when empty).
    ///
    /// # Errors
    ///
    /// An empty principal name, or a token shorter than
    /// 16 characters or with spaces or control characters.
    pub fn new(principal: String, token: String, scopes: Vec<String>) -> Result<Self, String> {
        let token = checked(&principal, &token)?;
        Self::with_source(principal, TokenSource::Value(token), scopes)
    }

    /// The token in environment variable `name`, read when the server
    /// starts.
    ///
    /// # Errors
    ///
    /// An empty principal name.
    pub fn from_env(principal: String, name: String, scopes: Vec<String>) -> Result<Self, String> {
        Self::with_source(principal, TokenSource::Env(name), scopes)
    }

    /// The token in file `path` (its first line), read when the server
    /// starts.
    ///
    /// # Errors
    ///
    /// An empty principal name.
    pub fn from_file(
        principal: String,
        path: std::path::PathBuf,
        scopes: Vec<String>,
    ) -> Result<Self, String> {
        Self::with_source(principal, TokenSource::File(path), scopes)
    }

    fn with_source(
        principal: String,
        source: TokenSource,
        scopes: Vec<String>,
    ) -> Result<Self, String> {
        if principal.trim().is_empty() || principal.chars().any(char::is_control) {
            return Err("name the token's principal (`principal = \"alice\"`)".into());
        }
        let scopes = if scopes.is_empty() {
            vec![super::principal::ALL_TOOLS.to_owned()]
        } else {
            scopes
        };
        let claims = BTreeMap::from([("sub".to_owned(), principal.clone())]);
        Ok(Self {
            principal,
            source,
            scopes,
            claims,
        })
    }

    /// The token, read from where it is and checked.
    pub(super) fn value(&self) -> Result<String, String> {
        let principal = &self.principal;
        let text = match &self.source {
            TokenSource::Value(token) => return Ok(token.clone()),
            TokenSource::Env(name) => std::env::var(name).map_err(|_| {
                format!(
                    "the token of `{principal}` is read from environment variable {name}, which is \
                     not set; export it before starting the server"
                )
            })?,
            TokenSource::File(path) => std::fs::read_to_string(path).map_err(|e| {
                format!(
                    "the token of `{principal}`: cannot read {} ({e})",
                    path.display()
                )
            })?,
        };
        checked(principal, text.lines().next().unwrap_or(""))
    }
}

/// `token`, trimmed, if it is long enough and holds no spaces or control
/// characters.
fn checked(principal: &str, token: &str) -> Result<String, String> {
    let token = token.trim();
    if token.chars().count() < MIN_TOKEN_LENGTH
        || token.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "the token of `{principal}` is under {MIN_TOKEN_LENGTH} characters or holds spaces; \
             make one with `openssl rand -hex 32`"
        ));
    }
    Ok(token.to_owned())
}

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            TokenSource::Value(_) => "<redacted>".to_owned(),
            TokenSource::Env(name) => format!("env {name}"),
            TokenSource::File(path) => format!("file {}", path.display()),
        };
        f.debug_struct("StaticToken")
            .field("principal", &self.principal)
            .field("token", &source)
            .field("scopes", &self.scopes)
            .field("claims", &self.claims)
            .finish()
    }
}
