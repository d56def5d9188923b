//! An issuer's public keys (a JWK Set, RFC 7517), read from a file or
//! fetched over HTTPS, kept in memory and refreshed when a token names a
//! key the set does not hold (at most once per [`MIN_REFRESH`], so tokens
//! with invented key ids cannot make the server hammer the issuer) or,
//! in the background without holding up a request, when the set is older
//! than [`MAX_AGE`]. A fetch that fails keeps the keys already held, for
//! [`MAX_STALE`] at most: an issuer that cannot be reached for that long
//! may have revoked them.
//!
//! The key set is untrusted input too: it is read within [`MAX_JWKS`]
//! bytes and [`FETCH_TIMEOUT`], with no redirects; keys of types toolhost
//! does not verify, or marked for encryption, are left out, one at a time.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use serde::Deserialize;

use super::AuthError;

/// The largest key set read: a few dozen RSA keys fit many times over.
const MAX_JWKS: usize = 256 << 10;
/// The most keys kept from one set.
const MAX_KEYS: usize = 64;
/// How long one fetch of the key set may take, connecting included: a
/// request whose token needs the fetch waits this long at most.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The least time between two fetches, so that tokens naming unknown key
/// ids cost the issuer one fetch per this interval, however many arrive.
const MIN_REFRESH: Duration = Duration::from_secs(30);
/// How long a fetched set is used before it is fetched again: keys an
/// issuer revoked stop verifying within this time, once a fetch succeeds
/// (while fetches fail, the keys held stay in use, and each failure is
/// logged).
const MAX_AGE: Duration = Duration::from_secs(600);
/// The longest a set is used while every fetch fails: past it, tokens are
/// refused as unavailable (503) rather than checked with keys the issuer
/// may have revoked a day ago. Long enough to ride out an identity
/// provider's outage.
const MAX_STALE: Duration = Duration::from_secs(24 * 3600);

/// How the set is kept fresh: the constants above, shortened by tests.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timing {
    pub(super) fetch_timeout: Duration,
    pub(super) min_refresh: Duration,
    pub(super) max_age: Duration,
    pub(super) max_stale: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            fetch_timeout: FETCH_TIMEOUT,
            min_refresh: MIN_REFRESH,
            max_age: MAX_AGE,
            max_stale: MAX_STALE,
        }
    }
}

/// Where the key set is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JwksSource {
    /// A file (re-read on refresh, so that rotating it needs no restart).
    File(PathBuf),
    /// An `https://` URL (or `http://` on a loopback host).
    Url(url::Url),
}

impl JwksSource {
    /// `text` as a URL (`https://…`) or a path, relative to `base`.
    ///
    /// # Errors
    ///
    /// A plain `http://` URL to a host that is not loopback, or a URL of
    /// another scheme.
    pub fn parse(text: &str, base: &Path) -> Result<Self, String> {
        if !text.contains("://") {
            return Ok(Self::File(base.join(text)));
        }
        let url = url::Url::parse(text).map_err(|e| format!("jwks {text:?}: {e}"))?;
        let loopback = match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        match url.scheme() {
            "https" => Ok(Self::Url(url)),
            "http" if loopback => Ok(Self::Url(url)),
            _ => Err(format!(
                "jwks {text:?}: the key set is fetched over https only (plain http only from a \
                 loopback host); write its https URL or a file path"
            )),
        }
    }
}

impl std::fmt::Display for JwksSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Url(url) => write!(f, "{url}"),
        }
    }
}

/// One usable key of the set.
pub(super) struct Key {
    pub(super) kid: Option<String>,
    /// The algorithm the key is for, when the set says.
    alg: Option<Algorithm>,
    family: AlgorithmFamily,
    pub(super) decoding: DecodingKey,
}

impl Key {
    /// Whether a token with header `kid` and `alg` may be checked with
    /// this key: the same id (or none given), and an algorithm of the
    /// key's family (and the key's own, when it names one).
    pub(super) fn fits(&self, kid: Option<&str>, alg: Algorithm) -> bool {
        (kid.is_none() || kid == self.kid.as_deref())
            && self.family.algorithms().contains(&alg)
            && self.alg.is_none_or(|a| a == alg)
    }
}

/// A key set as fetched, with its generation (which changes on every
/// successful fetch, so caches of checked tokens know to forget).
pub(super) struct KeySet {
    pub(super) keys: Vec<Key>,
    pub(super) generation: u64,
    /// The hash of the set's bytes as read.
    fingerprint: Option<blake3::Hash>,
    fetched: Option<Instant>,
}

/// The key set and how to refresh it.
pub(super) struct Keys {
    source: JwksSource,
    timing: Timing,
    current: RwLock<Arc<KeySet>>,
    /// Held by the one request (or background task) that refreshes; the
    /// last attempt's time and whether it failed (and why).
    refresh: Arc<tokio::sync::Mutex<Attempt>>,
    client: std::sync::OnceLock<reqwest::Client>,
}

type AttemptGuard = tokio::sync::OwnedMutexGuard<Attempt>;

#[derive(Default)]
struct Attempt {
    at: Option<Instant>,
    failed: Option<String>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// The keys at `source`; a file is read now, a URL at first use.
    pub(super) fn new(source: JwksSource, timing: Timing) -> Result<Self, String> {
        let keys = Self {
            source,
            timing,
            current: RwLock::new(Arc::new(KeySet {
                keys: Vec::new(),
                generation: 0,
                fingerprint: None,
                fetched: None,
            })),
            refresh: Arc::default(),
            client: std::sync::OnceLock::new(),
        };
        if let JwksSource::File(path) = &keys.source {
            let bytes = read_file(path)?;
            keys.install((parse(&bytes)?, blake3::hash(&bytes)));
        }
        Ok(keys)
    }

    /// Whether the set held now is the one of `generation`.
    pub(super) fn generation_is(&self, generation: u64) -> bool {
        self.now().generation == generation
    }

    fn now(&self) -> Arc<KeySet> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn install(&self, (keys, fingerprint): (Vec<Key>, blake3::Hash)) -> Arc<KeySet> {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        // The same keys fetched again keep their generation, so the tokens
        // they checked stay remembered.
        let generation = if current.fingerprint == Some(fingerprint) {
            current.generation
        } else {
            current.generation + 1
        };
        let set = Arc::new(KeySet {
            keys,
            generation,
            fingerprint: Some(fingerprint),
            fetched: Some(Instant::now()),
        });
        *current = set.clone();
        set
    }

    /// The key set to check a token with header `kid` and `alg` by. When it
    /// holds no key that fits, it is fetched again first (at most
    /// `fetch_timeout`, once per `min_refresh`; other requests wait for
    /// that one fetch rather than start their own). When it is old, it is
    /// fetched again in the background and the keys held check the token;
    /// when no fetch has succeeded for `max_stale`, the keys are used only
    /// once a fetch confirms them.
    pub(super) async fn for_token(
        self: &Arc<Self>,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<KeySet>, AuthError> {
        let fits = |set: &KeySet| set.keys.iter().any(|k| k.fits(kid, alg));
        let set = self.now();
        if fits(&set) && !self.too_stale(&set) {
            if set
                .fetched
                .is_none_or(|at| at.elapsed() > self.timing.max_age)
            {
                self.refresh_in_background();
            }
            return Ok(set);
        }
        let (set, failed) = self.refreshed(set.generation).await;
        match failed {
            // The set held still verifies what it can (a missing key may be
            // one the set would have had), unless it is too old to trust.
            Some(_) if fits(&set) && !self.too_stale(&set) => Ok(set),
            Some(_) if fits(&set) => Err(AuthError::Unavailable(format!(
                "the issuer's key set has not been fetched for over {}, and cannot be now",
                span(self.timing.max_stale)
            ))),
            Some(_) => Err(AuthError::Unavailable(
                "the issuer's key set cannot be fetched now".into(),
            )),
            None => Ok(set),
        }
    }

    /// Whether no fetch of `set` has succeeded for `max_stale`: the issuer
    /// may have revoked its keys since.
    fn too_stale(&self, set: &KeySet) -> bool {
        set.fetched
            .is_some_and(|at| at.elapsed() > self.timing.max_stale)
    }

    /// Whether the set held now is too old to use without a fetch.
    pub(super) fn held_too_long(&self) -> bool {
        self.too_stale(&self.now())
    }

    /// The set after a fetch (unless the last attempt is under
    /// `min_refresh` old, or the set changed from generation `seen` while
    /// this request waited for another's fetch), and why the last attempt
    /// failed, if it did. The fetch runs on a task of its own: a request
    /// that goes away (its client hung up) does not cancel it, so no caller
    /// can leave the attempt recorded and the fetch undone.
    async fn refreshed(self: &Arc<Self>, seen: u64) -> (Arc<KeySet>, Option<String>) {
        let attempt = Arc::clone(&self.refresh).lock_owned().await;
        let set = self.now();
        if set.generation != seen {
            return (set, None);
        }
        let keys = Arc::clone(self);
        let fetch = tokio::spawn(async move {
            let (set, attempt) = keys.refresh_if_due(attempt).await;
            (set, attempt.failed.clone())
        });
        fetch
            .await
            .unwrap_or_else(|_| (self.now(), Some("the fetch stopped".into())))
    }

    /// Fetch the set again on a task of its own, unless a fetch is running
    /// or the last attempt is too recent.
    fn refresh_in_background(self: &Arc<Self>) {
        let Ok(attempt) = Arc::clone(&self.refresh).try_lock_owned() else {
            return;
        };
        if self.too_soon(&attempt) {
            return;
        }
        let keys = Arc::clone(self);
        tokio::spawn(async move {
            let _ = keys.refresh_if_due(attempt).await;
        });
    }

    fn too_soon(&self, attempt: &Attempt) -> bool {
        attempt
            .at
            .is_some_and(|at| at.elapsed() < self.timing.min_refresh)
    }

    /// Fetch the set again unless the last attempt was under `min_refresh`
    /// ago; the set held then, and how the last attempt went.
    async fn refresh_if_due(&self, mut attempt: AttemptGuard) -> (Arc<KeySet>, AttemptGuard) {
        if self.too_soon(&attempt) {
            return (self.now(), attempt);
        }
        attempt.at = Some(Instant::now());
        match self.fetch().await {
            Ok(keys) => {
                attempt.failed = None;
                let set = self.install(keys);
                tracing::info!(jwks = %self.source, keys = set.keys.len(), "key set refreshed");
                (set, attempt)
            }
            Err(e) => {
                tracing::warn!(jwks = %self.source, error = %e, "cannot refresh the key set; keeping the keys held");
                attempt.failed = Some(e);
                (self.now(), attempt)
            }
        }
    }

    /// The set, read again from its file or fetched from its URL.
    async fn fetch(&self) -> Result<(Vec<Key>, blake3::Hash), String> {
        let bytes = match &self.source {
            JwksSource::File(path) => read_file(path)?,
            JwksSource::Url(url) => {
                let limit = self.timing.fetch_timeout;
                tokio::time::timeout(limit, self.download(url.clone()))
                    .await
                    .map_err(|_| format!("no answer within {} ms", limit.as_millis()))??
            }
        };
        Ok((parse(&bytes)?, blake3::hash(&bytes)))
    }

    async fn download(&self, url: url::Url) -> Result<Vec<u8>, String> {
        let client = self.client()?;
        let response = client
            .get(url)
            .header(
                reqwest::header::ACCEPT,
                "application/json, application/jwk-set+json",
            )
            .send()
            .await
            .map_err(|e| format!("cannot fetch it: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("it answered HTTP {}", response.status().as_u16()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_JWKS as u64)
        {
            return Err(format!("it is over {} KiB", MAX_JWKS >> 10));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("reading it: {e}"))?;
            if body.len() + chunk.len() > MAX_JWKS {
                return Err(format!("it is over {} KiB", MAX_JWKS >> 10));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn client(&self) -> Result<&reqwest::Client, String> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        // The ring provider is already in the build for wasi:http.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(self.timing.fetch_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("toolhost/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(self.client.get_or_init(|| client))
    }
}

/// `d` in hours, or seconds when under one.
fn span(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 3600 => format!("{} h", s / 3600),
        s => format!("{s} s"),
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    let fix = "point `jwks` at the issuer's JWK Set file or https URL";
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read the key set {} ({e}); {fix}", path.display()))?;
    if meta.len() > MAX_JWKS as u64 {
        return Err(format!(
            "the key set {} is over {} KiB; {fix}",
            path.display(),
            MAX_JWKS >> 10
        ));
    }
    std::fs::read(path)
        .map_err(|e| format!("cannot read the key set {} ({e}); {fix}", path.display()))
}

#[derive(Deserialize)]
struct RawSet {
    keys: Vec<serde_json::Value>,
}

/// The usable keys of a JWK Set. A key of a type toolhost does not verify
/// (HMAC secrets, encryption keys, unknown types) is left out; a set with
/// no usable key at all is an error.
fn parse(bytes: &[u8]) -> Result<Vec<Key>, String> {
    let raw: RawSet = serde_json::from_slice(bytes)
        .map_err(|e| format!("it is not a JWK Set ({{\"keys\": [...]}}): {e}"))?;
    let keys: Vec<Key> = raw
        .keys
        .into_iter()
        .filter_map(|value| serde_json::from_value::<Jwk>(value).ok())
        .filter_map(usable)
        .take(MAX_KEYS)
        .collect();
    if keys.is_empty() {
        return Err(
            "it holds no public signing key (RSA, EC P-256/P-384 or Ed25519) toolhost can use"
                .into(),
        );
    }
    Ok(keys)
}

fn usable(jwk: Jwk) -> Option<Key> {
    if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
        return None;
    }
    // A curve fixes the algorithm: a P-384 key never checks an ES256 token.
    let (family, curve_alg) = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => (AlgorithmFamily::Rsa, None),
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => (AlgorithmFamily::Ec, Some(Algorithm::ES256)),
            EllipticCurve::P384 => (AlgorithmFamily::Ec, Some(Algorithm::ES384)),
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            (AlgorithmFamily::Ed, Some(Algorithm::EdDSA))
        }
        // A shared secret is never a key a token is checked with here.
        _ => return None,
    };
    let alg = match jwk.common.key_algorithm {
        None => curve_alg,
        Some(a) => {
            let alg = a.to_string().parse::<Algorithm>().ok()?;
            if curve_alg.is_some_and(|c| c != alg) {
                return None;
            }
            Some(alg)
        }
    };
    let decoding = DecodingKey::from_jwk(&jwk).ok()?;
    Some(Key {
        kid: jwk.common.key_id,
        alg,
        family,
        decoding,
    })
}
