//! Who is calling: the principal behind a request to `toolhost serve`, from
//! an OAuth 2.1 access token (a JWT checked as a resource server checks
//! it) or from one of the manifest's static tokens; and what that principal
//! may do: the scopes it holds, and the context keys its claims fill.
//!
//! - [`Settings`]: `[serve.auth]` (and the `--jwks`, `--issuer`,
//!   `--audience`, `--context-claim` flags), validated.
//! - [`Authenticator`]: a bearer token in, a [`Principal`] or an
//!   [`AuthError`] out. JWTs are checked against a key set read from a
//!   file or fetched over HTTPS (`jwks`), cached, refreshed when a token
//!   names a key it does not know; tokens already checked are remembered
//!   until they expire, so a caller's next request costs a hash.
//! - [`Principal::context`]: the call's injected context, its bound keys
//!   filled from the principal's claims and never from the request.
//!
//! Nothing here passes a token on: a principal keeps its claims, never the
//! token it came from.

mod crypto;
mod jwks;
mod jwt;
mod principal;
mod settings;
mod tokens;

use std::sync::Arc;

pub use jwks::JwksSource;
pub(crate) use principal::ALL_TOOLS;
pub use principal::{ContextError, Principal};
pub use settings::{ContextSource, OAuthSettings, Settings, StaticToken};

/// Why a request's credentials are not accepted. The message says what
/// was wrong and how to get it right; it never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Authorization: Bearer` header.
    #[error("this server needs a bearer token: send `Authorization: Bearer <token>`")]
    Missing,
    /// The token is not one this server accepts (RFC 6750 `invalid_token`).
    #[error("the bearer token is not accepted: {0}")]
    InvalidToken(String),
    /// The token may be fine, but the keys to check it cannot be had now
    /// (the key set's endpoint is down or serves garbage).
    #[error("the token cannot be checked now: {0}; try again shortly")]
    Unavailable(String),
}

impl AuthError {
    /// The RFC 6750 error code, for `WWW-Authenticate`.
    #[must_use]
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Self::Missing => None,
            Self::InvalidToken(_) => Some("invalid_token"),
            Self::Unavailable(_) => Some("temporarily_unavailable"),
        }
    }

    /// A short label for metrics and logs.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "missing_token",
            Self::InvalidToken(_) => "invalid_token",
            Self::Unavailable(_) => "keys_unavailable",
        }
    }
}

/// Checks bearer tokens against [`Settings`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Authenticator {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: Settings,
    tokens: tokens::StaticTokens,
    jwt: Option<jwt::JwtChecker>,
}

impl Authenticator {
    /// An authenticator for `settings`. Static tokens and a key set read
    /// from a file are read now; a key set fetched over HTTPS is fetched at
    /// the first token.
    ///
    /// # Errors
    ///
    /// A static token cannot be read (or is shared, or too short), or the
    /// key set file cannot be read or holds no usable key; the message says
    /// the fix.
    pub fn new(settings: Settings) -> Result<Self, String> {
        Self::with_timing(settings, jwks::Timing::default())
    }

    /// An authenticator whose key sets are kept fresh by `timing`.
    fn with_timing(settings: Settings, timing: jwks::Timing) -> Result<Self, String> {
        let tokens = tokens::StaticTokens::new(&settings.tokens)?;
        let jwt = settings
            .oauth
            .as_ref()
            .map(|oauth| jwt::JwtChecker::new(oauth, timing))
            .transpose()?;
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                tokens,
                jwt,
            }),
        })
    }

    /// The settings this authenticator checks by.
    #[must_use]
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The principal `token` (the value of a bearer `Authorization`
    /// header, without the scheme) stands for.
    ///
    /// # Errors
    ///
    /// [`AuthError`]: a token no static token matches and no issuer's key
    /// verifies, an expired or not-yet-valid one, one for another audience
    /// or issuer, or (`Unavailable`) one whose key set cannot be fetched.
    pub async fn authenticate(&self, token: Option<&str>) -> Result<Principal, AuthError> {
        let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
            return Err(AuthError::Missing);
        };
        if let Some(principal) = self.inner.tokens.find(token) {
            return Ok(principal);
        }
        match &self.inner.jwt {
            Some(jwt) => jwt.check(token).await,
            None => Err(AuthError::InvalidToken(
                "it is none of this server's tokens; ask its operator for one".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
