//! OAuth 2.1 access tokens as JWTs (RFC 9068), checked as a resource
//! server checks them: the header's algorithm among those pinned and its
//! type an access token's (or unstated), the issuer the token names among
//! those accepted, a key of *that issuer's* set that fits, the signature,
//! `iss` again, `aud` (RFC 8707: this server's resource URL), `exp` and
//! `nbf` within the leeway, and a `sub`. Tokens that passed are remembered
//! until they expire (or their issuer's key set changes), so a caller's
//! next request costs a hash.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::jwks::{KeySet, Keys, Timing};
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
    /// Its issuer's key set, and the generation it was checked with.
    keys: Arc<Keys>,
    generation: u64,
}

pub(super) struct JwtChecker {
    settings: OAuthSettings,
    /// Each accepted issuer's key set; issuers that name the same source
    /// share one, fetched once.
    keys: BTreeMap<String, Arc<Keys>>,
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
    pub(super) fn new(settings: &OAuthSettings, timing: Timing) -> Result<Self, String> {
        super::crypto::install();
        let mut sets: Vec<(&super::JwksSource, Arc<Keys>)> = Vec::new();
        let mut keys = BTreeMap::new();
        for (issuer, source) in settings.issuers() {
            let set = match sets.iter().find(|(s, _)| *s == source) {
                Some((_, set)) => Arc::clone(set),
                None => {
                    let set = Arc::new(Keys::new(source.clone(), timing)?);
                    sets.push((source, Arc::clone(&set)));
                    set
                }
            };
            keys.insert(issuer.to_owned(), set);
        }
        Ok(Self {
            settings: settings.clone(),
            keys,
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
                .saturating_add(self.settings.leeway().as_secs())
                > now()
            && checked.keys.generation_is(checked.generation)
            && !checked.keys.held_too_long()
        {
            return Ok(checked.principal);
        }
        let (kid, alg) = self.header(token)?;
        let (issuer, keys) = self.issuer(token)?;
        let set = keys.for_token(kid.as_deref(), alg).await?;
        let claims = self.verify(token, (kid.as_deref(), alg), issuer, &set)?;
        let principal = principal(&claims)?;
        if let Some(expires) = claims.get("exp").and_then(Value::as_u64) {
            let checked = Checked {
                principal: principal.clone(),
                expires,
                keys: Arc::clone(keys),
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
        if !self.settings.algorithms().contains(&header.alg) {
            return Err(invalid(format!(
                "it is signed with {:?}, which this server does not accept; it accepts {}",
                header.alg,
                self.accepted()
            )));
        }
        // RFC 9068 types access tokens `at+jwt`; many providers still say
        // `JWT` or nothing. Any other type is another kind of token (a
        // DPoP proof, a logout or event token) that must not pass for one.
        if let Some(typ) = &header.typ {
            let typ = typ.to_ascii_lowercase();
            if !matches!(typ.as_str(), "jwt" | "at+jwt" | "application/at+jwt") {
                return Err(invalid(format!(
                    "its type (`typ`) is {:?}, not an access token's; send an access token \
                     (`at+jwt`)",
                    crate::printable::one_line(&typ, 32)
                )));
            }
        }
        Ok((header.kid, header.alg))
    }

    /// The issuer the token names (read before its signature is checked,
    /// only to pick the key set it is checked with) and that issuer's key
    /// set; a token naming no accepted issuer is refused without a fetch.
    fn issuer(&self, token: &str) -> Result<(&str, &Arc<Keys>), AuthError> {
        let named = unverified_claims(token)
            .and_then(|claims| claims.get("iss").and_then(Value::as_str).map(str::to_owned));
        let Some(named) = named else {
            return Err(invalid(
                "its claims cannot be read, or carry no `iss`; send a JWT access token".into(),
            ));
        };
        self.keys
            .get_key_value(&named)
            .map(|(issuer, keys)| (issuer.as_str(), keys))
            .ok_or_else(|| invalid(explain(&ErrorKind::InvalidIssuer, &self.settings)))
    }

    fn accepted(&self) -> String {
        let names: Vec<String> = self
            .settings
            .algorithms()
            .iter()
            .map(|a| format!("{a:?}"))
            .collect();
        names.join(", ")
    }

    /// The token's claims, if a key of `set` (`issuer`'s) that fits its
    /// header's `kid` and `alg` verifies it and the claims hold.
    fn verify(
        &self,
        token: &str,
        (kid, alg): (Option<&str>, Algorithm),
        issuer: &str,
        set: &KeySet,
    ) -> Result<Map<String, Value>, AuthError> {
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[self.settings.audience()]);
        validation.leeway = self.settings.leeway().as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let mut candidates = set.keys.iter().filter(|k| k.fits(kid, alg)).peekable();
        if candidates.peek().is_none() {
            return Err(invalid(match kid {
                Some(kid) => format!(
                    "it names key {:?}, which its issuer's key set does not hold; get a new token",
                    crate::printable::one_line(kid, 64)
                ),
                None => format!("its issuer's key set holds no {alg:?} key"),
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
            settings.audience()
        ),
        ErrorKind::InvalidIssuer => format!(
            "its issuer (`iss`) is not accepted here; this server accepts tokens from {}",
            settings
                .issuers()
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
                .join(", ")
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
    part(token, 0)?
        .get("alg")?
        .as_str()
        .map(|a| crate::printable::one_line(a, 16))
}

/// The token's claims as written, signature unchecked.
fn unverified_claims(token: &str) -> Option<Map<String, Value>> {
    match part(token, 1)? {
        Value::Object(claims) => Some(claims),
        _ => None,
    }
}

/// Part `index` of a compact JWS (0 the header, 1 the claims), decoded.
fn part(token: &str, index: usize) -> Option<Value> {
    let text = token.split('.').nth(index)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn invalid(message: String) -> AuthError {
    AuthError::InvalidToken(message)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
