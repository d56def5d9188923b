//! OAuth 2.1 access tokens as JWTs (RFC 9068), checked as a resource
//! server checks them: the header's algorithm among those pinned, a key
//! of the issuers' set that fits it, the signature, `iss`, `aud` (RFC
//! 8707: this server's resource URL), `exp` and `nbf` within the leeway,
//! and a `sub`. Tokens that passed are remembered until they expire (or
//! the key set changes), so a caller's next request costs a hash.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::jwks::{KeySet, Keys};
use super::{AuthError, OAuthSettings, Principal};

/// The longest token read: access tokens are a few KiB at most.
const MAX_TOKEN: usize = 16 << 10;
/// The most checked tokens remembered; each is a few hundred bytes.
const MAX_REMEMBERED: u64 = 10_000;
/// The longest a checked token is remembered, whatever its `exp`.
const REMEMBER_AT_MOST: Duration = Duration::from_secs(300);

/// A checked token, remembered under its hash.
#[derive(Clone)]
struct Checked {
    principal: Principal,
    /// `exp`, in seconds since the epoch.
    expires: u64,
    /// The key set generation it was checked with.
    generation: u64,
}

pub(super) struct JwtChecker {
    settings: OAuthSettings,
    keys: Keys,
    remembered: moka::sync::Cache<blake3::Hash, Checked>,
}

impl std::fmt::Debug for JwtChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtChecker")
            .field("settings", &self.settings)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl JwtChecker {
    pub(super) fn new(settings: &OAuthSettings) -> Result<Self, String> {
        super::crypto::install();
        Ok(Self {
            settings: settings.clone(),
            keys: Keys::new(settings.jwks.clone())?,
            remembered: moka::sync::Cache::builder()
                .max_capacity(MAX_REMEMBERED)
                .time_to_live(REMEMBER_AT_MOST)
                .build(),
        })
    }

    pub(super) async fn check(&self, token: &str) -> Result<Principal, AuthError> {
        if token.len() > MAX_TOKEN {
            return Err(invalid(format!("it is over {} KiB", MAX_TOKEN >> 10)));
        }
        let hash = blake3::hash(token.as_bytes());
        if let Some(checked) = self.remembered.get(&hash)
            && checked
                .expires
                .saturating_add(self.settings.leeway.as_secs())
                > now()
            && self.keys.generation_is(checked.generation)
        {
            return Ok(checked.principal);
        }
        let (kid, alg) = self.header(token)?;
        let set = self.keys.for_token(kid.as_deref(), alg).await?;
        let claims = self.verify(token, kid.as_deref(), alg, &set)?;
        let principal = principal(&claims)?;
        if let Some(expires) = claims.get("exp").and_then(Value::as_u64) {
            let checked = Checked {
                principal: principal.clone(),
                expires,
                generation: set.generation,
            };
            self.remembered.insert(hash, checked);
        }
        Ok(principal)
    }

    /// The header's key id and algorithm, the algorithm among those
    /// pinned.
    fn header(&self, token: &str) -> Result<(Option<String>, Algorithm), AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            let named = raw_alg(token).map_or(String::new(), |alg| format!(" (it names {alg:?})"));
            invalid(format!(
                "its header cannot be read, or names an algorithm never accepted{named}; send a \
                 JWT access token signed with {}",
                self.accepted()
            ))
        })?;
        if !self.settings.algorithms.contains(&header.alg) {
            return Err(invalid(format!(
                "it is signed with {:?}, which this server does not accept; it accepts {}",
                header.alg,
                self.accepted()
            )));
        }
        Ok((header.kid, header.alg))
    }

    fn accepted(&self) -> String {
        let names: Vec<String> = self
            .settings
            .algorithms
            .iter()
            .map(|a| format!("{a:?}"))
            .collect();
        names.join(", ")
    }

    /// The token's claims, if a key of `set` that fits verifies it and the
    /// claims hold.
    fn verify(
        &self,
        token: &str,
        kid: Option<&str>,
        alg: Algorithm,
        set: &KeySet,
    ) -> Result<Map<String, Value>, AuthError> {
        let mut validation = Validation::new(alg);
        validation.set_issuer(&self.settings.issuers);
        validation.set_audience(&[&self.settings.audience]);
        validation.leeway = self.settings.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let mut candidates = set.keys.iter().filter(|k| k.fits(kid, alg)).peekable();
        if candidates.peek().is_none() {
            return Err(invalid(match kid {
                Some(kid) => format!(
                    "it names key {:?}, which the issuers' key set does not hold; get a new token",
                    crate::printable::one_line(kid, 64)
                ),
                None => format!("the issuers' key set holds no {alg:?} key"),
            }));
        }
        let mut last = None;
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation) {
                Ok(data) => return Ok(data.claims),
                // Another key may verify it; any other failure is the
                // token's own (its claims were read after its signature).
                Err(e) if matches!(e.kind(), ErrorKind::InvalidSignature) => last = Some(e),
                Err(e) => return Err(invalid(explain(e.kind(), &self.settings))),
            }
        }
        Err(invalid(last.map_or_else(String::new, |e| {
            explain(e.kind(), &self.settings)
        })))
    }
}

/// Why a token failed, in words that name the fix.
fn explain(kind: &ErrorKind, settings: &OAuthSettings) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "it has expired (`exp`); get a new token".into(),
        ErrorKind::ImmatureSignature => "it is not valid yet (`nbf`); check the clocks".into(),
        ErrorKind::InvalidAudience => format!(
            "it is for another resource (`aud`); ask the authorization server for a token for {}",
            settings.audience
        ),
        ErrorKind::InvalidIssuer => format!(
            "its issuer (`iss`) is not accepted here; this server accepts tokens from {}",
            settings.issuers.join(", ")
        ),
        ErrorKind::MissingRequiredClaim(claim) => {
            format!(
                "its `{claim}` claim is missing or of the wrong type; an access token carries \
                 exp (a number), iss, aud and sub"
            )
        }
        ErrorKind::InvalidClaimFormat(claim) => {
            format!("its `{claim}` claim has the wrong type (a number or string as RFC 7519 says)")
        }
        ErrorKind::InvalidSignature => "its signature does not verify".into(),
        _ => "it is not a well-formed signed JWT".into(),
    }
}

/// The principal of checked `claims`: its id from `iss` and `sub`, its
/// scopes from `scope` (space-separated, RFC 9068) or `scp` (a list).
fn principal(claims: &Map<String, Value>) -> Result<Principal, AuthError> {
    let text = |name: &str| claims.get(name).and_then(Value::as_str);
    let (Some(iss), Some(sub)) = (text("iss"), text("sub")) else {
        return Err(invalid("its `iss` and `sub` claims must be strings".into()));
    };
    let mut scopes = BTreeSet::new();
    if let Some(scope) = text("scope") {
        scopes.extend(scope.split_whitespace().map(str::to_owned));
    }
    match claims.get("scp") {
        Some(Value::String(s)) => scopes.extend(s.split_whitespace().map(str::to_owned)),
        Some(Value::Array(list)) => {
            scopes.extend(list.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        _ => {}
    }
    Ok(Principal::new(
        format!("oauth:{iss}#{sub}"),
        "oauth".into(),
        claims.clone(),
        scopes,
    ))
}

/// The `alg` a token's header names, read loosely, for the message about
/// a header that does not parse (`none`, say).
fn raw_alg(token: &str) -> Option<String> {
    let header = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    value
        .get("alg")?
        .as_str()
        .map(|a| crate::printable::one_line(a, 16))
}

fn invalid(message: String) -> AuthError {
    AuthError::InvalidToken(message)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
