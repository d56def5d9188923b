//! Tokens checked as a resource server must check them: an issuer made in
//! the test (an RSA key from testdata, EC and Ed25519 keys made now) signs
//! tokens, good and bad, and the checker reads its key set from a file or
//! from a real HTTP server on loopback.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use serde_json::{Value, json};

use super::*;

const ISSUER: &str = "https://idp.example.com";
const AUDIENCE: &str = "https://tools.example.com/mcp";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An identity provider's signing keys.
pub(super) struct Issuer {
    rsa: RsaKeyPair,
    ec: EcdsaKeyPair,
    ed: Ed25519KeyPair,
}

impl Issuer {
    pub(super) fn new() -> Self {
        let rng = SystemRandom::new();
        let rsa = RsaKeyPair::from_der(include_bytes!("testdata/rsa-2048.der")).unwrap();
        let ec_doc =
            EcdsaKeyPair::generate_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let ec =
            EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, ec_doc.as_ref(), &rng)
                .unwrap();
        let ed_doc = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let ed = Ed25519KeyPair::from_pkcs8(ed_doc.as_ref()).unwrap();
        Self { rsa, ec, ed }
    }

    /// The key set, each key under its id.
    pub(super) fn jwks(&self) -> Value {
        let public: ring::rsa::PublicKeyComponents<Vec<u8>> = self.rsa.public().into();
        let ec = self.ec.public_key().as_ref();
        json!({"keys": [
            {"kty": "RSA", "kid": "rsa-1", "alg": "RS256", "use": "sig",
             "n": b64(&public.n), "e": b64(&public.e)},
            {"kty": "EC", "crv": "P-256", "kid": "ec-1", "use": "sig",
             "x": b64(&ec[1..33]), "y": b64(&ec[33..65])},
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed-1", "x": b64(self.ed.public_key().as_ref())},
            // Keys the checker must leave out: a shared secret, an encryption key.
            {"kty": "oct", "kid": "hmac-1", "k": b64(b"a shared secret of some length")},
            {"kty": "EC", "crv": "P-256", "kid": "enc-1", "use": "enc",
             "x": b64(&ec[1..33]), "y": b64(&ec[33..65])},
        ]})
    }

    /// A token with header `alg` and `kid` over `claims`, signed as `alg`
    /// says (HS256 with `hmac_secret`, `none` unsigned).
    pub(super) fn sign(&self, alg: &str, kid: Option<&str>, claims: &Value) -> String {
        self.sign_typed(alg, kid, Some("at+jwt"), claims)
    }

    /// As [`Issuer::sign`], with header `typ` (none when `None`).
    pub(super) fn sign_typed(
        &self,
        alg: &str,
        kid: Option<&str>,
        typ: Option<&str>,
        claims: &Value,
    ) -> String {
        let mut header = json!({"alg": alg});
        if let Some(typ) = typ {
            header["typ"] = json!(typ);
        }
        if let Some(kid) = kid {
            header["kid"] = json!(kid);
        }
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match alg {
            "RS256" | "PS256" => {
                let padding: &dyn sig::RsaEncoding = if alg == "RS256" {
                    &sig::RSA_PKCS1_SHA256
                } else {
                    &sig::RSA_PSS_SHA256
                };
                let mut out = vec![0; self.rsa.public().modulus_len()];
                self.rsa
                    .sign(padding, &rng, input.as_bytes(), &mut out)
                    .unwrap();
                out
            }
            "ES256" => self
                .ec
                .sign(&rng, input.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec(),
            "EdDSA" => self.ed.sign(input.as_bytes()).as_ref().to_vec(),
            "HS256" => {
                // The confusion attack: the public key's bytes as the secret.
                let secret = self.rsa.public().as_ref().to_vec();
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret);
                ring::hmac::sign(&key, input.as_bytes()).as_ref().to_vec()
            }
            _ => Vec::new(),
        };
        format!("{input}.{}", b64(&signature))
    }
}

/// Claims a good token carries, for `sub`.
pub(super) fn claims(sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": now() + 600,
           "iat": now(), "scope": "tools:calc notes:read"})
}

fn with(mut claims: Value, key: &str, value: Value) -> Value {
    claims[key] = value;
    claims
}

/// An authenticator of tokens from [`ISSUER`] for [`AUDIENCE`], its key
/// set at `jwks`.
fn authenticator(jwks: JwksSource) -> Authenticator {
    let oauth = OAuthSettings::new(jwks, vec![ISSUER.into()], AUDIENCE.into()).unwrap();
    Authenticator::new(Settings {
        oauth: Some(oauth),
        ..Settings::default()
    })
    .unwrap()
}

fn file_authenticator(issuer: &Issuer) -> (Authenticator, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, issuer.jwks().to_string()).unwrap();
    (authenticator(JwksSource::File(path)), dir)
}

#[tokio::test]
async fn a_good_token_of_each_key_type_is_its_principal() {
    let issuer = Issuer::new();
    let (auth, _dir) = file_authenticator(&issuer);
    for (alg, kid) in [("RS256", "rsa-1"), ("ES256", "ec-1"), ("EdDSA", "ed-1")] {
        let token = issuer.sign(alg, Some(kid), &claims("alice"));
        let principal = auth.authenticate(Some(&token)).await.unwrap();
        assert_eq!(principal.id(), format!("oauth:{ISSUER}#alice"), "{alg}");
        assert_eq!(principal.class(), "oauth");
        assert!(principal.holds(&["tools:calc".into(), "notes:read".into()]));
        assert!(!principal.holds(&["tools:recall".into()]));
    }
    // Without a key id, the keys that fit the algorithm are tried.
    let token = issuer.sign("ES256", None, &claims("bob"));
    assert_eq!(
        auth.authenticate(Some(&token)).await.unwrap().id(),
        format!("oauth:{ISSUER}#bob")
    );
}

/// Each bad token is refused with a message that says what was wrong.
#[tokio::test]
async fn bad_tokens_are_refused_each_with_its_reason() {
    let issuer = Issuer::new();
    let (auth, _dir) = file_authenticator(&issuer);
    let good = claims("alice");
    let cases = [
        (
            "expired",
            issuer.sign(
                "ES256",
                Some("ec-1"),
                &with(good.clone(), "exp", json!(now() - 3600)),
            ),
            "expired",
        ),
        (
            "not yet valid",
            issuer.sign(
                "ES256",
                Some("ec-1"),
                &with(good.clone(), "nbf", json!(now() + 3600)),
            ),
            "not valid yet",
        ),
        // The type confusion of jsonwebtoken < 10.3: a string `nbf` was skipped.
        (
            "string nbf",
            issuer.sign(
                "ES256",
                Some("ec-1"),
                &with(good.clone(), "nbf", json!("99999999999")),
            ),
            "wrong type",
        ),
        (
            "string exp",
            issuer.sign(
                "ES256",
                Some("ec-1"),
                &with(good.clone(), "exp", json!("never")),
            ),
            "`exp` claim is missing or of the wrong type",
        ),
        (
            "no exp",
            issuer.sign("ES256", Some("ec-1"), &{
                let mut c = good.clone();
                c.as_object_mut().unwrap().remove("exp");
                c
            }),
            "`exp` claim is missing",
        ),
        (
            "wrong audience",
            issuer.sign(
                "ES256",
                Some("ec-1"),
                &with(good.clone(), "aud", json!("https://other.example.com")),
            ),
            "another resource",
        ),
        (
            "wrong issuer",
            issuer.sign(
                "ES256",
                Some("ec-1"),
                &with(good.clone(), "iss", json!("https://evil.example.com")),
            ),
            "issuer",
        ),
        (
            "alg none",
            issuer.sign("none", Some("ec-1"), &good),
            "\"none\"",
        ),
        (
            "HMAC with the public key",
            issuer.sign("HS256", Some("rsa-1"), &good),
            "HS256",
        ),
        (
            "HMAC with the shared-secret key",
            issuer.sign("HS256", Some("hmac-1"), &good),
            "HS256",
        ),
        (
            "unknown kid",
            issuer.sign("ES256", Some("ec-9"), &good),
            "does not hold",
        ),
        (
            "encryption key",
            issuer.sign("ES256", Some("enc-1"), &good),
            "does not hold",
        ),
        (
            "key of another type",
            issuer.sign("ES256", Some("rsa-1"), &good),
            "does not hold",
        ),
        (
            "another issuer's key",
            Issuer::new().sign("ES256", Some("ec-1"), &good),
            "signature does not verify",
        ),
        ("garbage", "not.a.token".to_owned(), "header"),
    ];
    for (what, token, expected) in cases {
        let refused = auth.authenticate(Some(&token)).await.unwrap_err();
        assert!(
            matches!(refused, AuthError::InvalidToken(_)),
            "{what}: {refused:?}"
        );
        assert!(refused.to_string().contains(expected), "{what}: {refused}");
        assert_eq!(refused.code(), Some("invalid_token"));
    }
    assert_eq!(
        auth.authenticate(None).await.unwrap_err(),
        AuthError::Missing
    );
}

/// A token tampered with after it was checked once is checked again: the
/// memory of checked tokens is keyed by the whole token.
#[tokio::test]
async fn a_remembered_token_is_the_exact_token() {
    let issuer = Issuer::new();
    let (auth, _dir) = file_authenticator(&issuer);
    let token = issuer.sign("ES256", Some("ec-1"), &claims("alice"));
    auth.authenticate(Some(&token)).await.unwrap();
    let mut tampered = token.clone();
    tampered.pop();
    tampered.push(if token.ends_with('A') { 'B' } else { 'A' });
    assert!(auth.authenticate(Some(&tampered)).await.is_err());
    assert!(auth.authenticate(Some(&token)).await.is_ok());
}

/// A key added to the file is found when a token names it; a token with
/// an invented key id right after does not make the checker read again.
#[tokio::test]
async fn an_unknown_key_id_refreshes_the_set_at_most_once_per_interval() {
    let old = Issuer::new();
    let new = Issuer::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, old.jwks().to_string()).unwrap();
    let auth = authenticator(JwksSource::File(path.clone()));
    // Rotation: the new set holds the new key under a new id.
    let mut rotated = new.jwks();
    rotated["keys"][1]["kid"] = json!("ec-2");
    std::fs::write(&path, rotated.to_string()).unwrap();
    let token = new.sign("ES256", Some("ec-2"), &claims("alice"));
    auth.authenticate(Some(&token)).await.unwrap();
    // Within the interval the set is not read again, whatever a token names.
    let mut again = rotated.clone();
    again["keys"][1]["kid"] = json!("ec-3");
    std::fs::write(&path, again.to_string()).unwrap();
    let token = new.sign("ES256", Some("ec-3"), &claims("alice"));
    let refused = auth.authenticate(Some(&token)).await.unwrap_err();
    assert!(refused.to_string().contains("does not hold"), "{refused}");
}

#[test]
fn a_key_set_file_that_is_garbage_or_has_no_usable_key_is_a_load_error() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("garbage", "this is not json", "not a JWK Set"),
        ("no keys", r#"{"keys": []}"#, "no public signing key"),
        (
            "only a secret",
            r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#,
            "no public signing key",
        ),
    ];
    for (what, text, expected) in cases {
        let path = dir.path().join(format!("{what}.json"));
        std::fs::write(&path, text).unwrap();
        let oauth =
            OAuthSettings::new(JwksSource::File(path), vec![ISSUER.into()], AUDIENCE.into())
                .unwrap();
        let e = Authenticator::new(Settings {
            oauth: Some(oauth),
            ..Settings::default()
        })
        .unwrap_err();
        assert!(e.contains(expected), "{what}: {e}");
    }
}

#[test]
fn settings_refuse_hmac_none_and_plain_http_to_other_hosts() {
    let jwks = JwksSource::File("jwks.json".into());
    let oauth = OAuthSettings::new(jwks.clone(), vec![ISSUER.into()], AUDIENCE.into()).unwrap();
    for name in ["HS256", "none", "RSA-OAEP"] {
        let e = oauth.clone().with_algorithms(&[name.into()]).unwrap_err();
        assert!(e.contains("never are"), "{name}: {e}");
    }
    assert!(OAuthSettings::new(jwks.clone(), vec![], AUDIENCE.into()).is_err());
    let e = OAuthSettings::new(
        jwks.clone(),
        vec![ISSUER.into()],
        "http://tools.example.com/mcp".into(),
    )
    .unwrap_err();
    assert!(e.contains("not an https URL"), "{e}");
    assert!(
        OAuthSettings::new(
            jwks,
            vec![ISSUER.into()],
            "http://127.0.0.1:8080/mcp".into()
        )
        .is_ok()
    );
    let base = std::path::Path::new("/etc/toolhost");
    assert!(
        JwksSource::parse("http://idp.example.com/jwks", base)
            .unwrap_err()
            .contains("https only")
    );
    assert!(matches!(
        JwksSource::parse("http://127.0.0.1:9/jwks", base),
        Ok(JwksSource::Url(_))
    ));
    assert_eq!(
        JwksSource::parse("keys/jwks.json", base).unwrap(),
        JwksSource::File(base.join("keys/jwks.json"))
    );
}

/// RFC 9068's `at+jwt`, the `JWT` many providers still write, or no type
/// are access tokens; a DPoP proof or a logout token signed by the same
/// issuer is not.
#[tokio::test]
async fn a_token_typed_as_another_kind_of_jwt_is_refused() {
    let issuer = Issuer::new();
    let (auth, _dir) = file_authenticator(&issuer);
    for typ in [
        Some("at+jwt"),
        Some("application/at+jwt"),
        Some("JWT"),
        None,
    ] {
        let token = issuer.sign_typed("ES256", Some("ec-1"), typ, &claims("alice"));
        assert!(auth.authenticate(Some(&token)).await.is_ok(), "{typ:?}");
    }
    for typ in ["dpop+jwt", "logout+jwt", "secevent+jwt"] {
        let token = issuer.sign_typed("ES256", Some("ec-1"), Some(typ), &claims("alice"));
        let refused = auth.authenticate(Some(&token)).await.unwrap_err();
        assert!(
            refused.to_string().contains("not an access token's"),
            "{typ}: {refused}"
        );
    }
}

/// Two issuers, each with its key set: a token is checked with the keys
/// of the issuer it names, never with another accepted issuer's.
#[tokio::test]
async fn each_issuer_is_checked_with_its_own_key_set_only() {
    const OTHER: &str = "https://other-idp.example.com";
    let (one, two) = (Issuer::new(), Issuer::new());
    let dir = tempfile::tempdir().unwrap();
    let (one_keys, two_keys) = (dir.path().join("one.json"), dir.path().join("two.json"));
    std::fs::write(&one_keys, one.jwks().to_string()).unwrap();
    std::fs::write(&two_keys, two.jwks().to_string()).unwrap();
    let oauth = OAuthSettings::per_issuer(
        vec![
            (ISSUER.into(), JwksSource::File(one_keys)),
            (OTHER.into(), JwksSource::File(two_keys)),
        ],
        AUDIENCE.into(),
    )
    .unwrap();
    let auth = Authenticator::new(Settings {
        oauth: Some(oauth),
        ..Settings::default()
    })
    .unwrap();
    let of_other = with(claims("bob"), "iss", json!(OTHER));
    // Each issuer's own key: accepted, as that issuer's principal.
    let alice = auth
        .authenticate(Some(&one.sign("ES256", Some("ec-1"), &claims("alice"))))
        .await
        .unwrap();
    assert_eq!(alice.id(), format!("oauth:{ISSUER}#alice"));
    let bob = auth
        .authenticate(Some(&two.sign("ES256", Some("ec-1"), &of_other)))
        .await
        .unwrap();
    assert_eq!(bob.id(), format!("oauth:{OTHER}#bob"));
    // One issuer's key signing a token that names the other: refused,
    // with the same key id and with none.
    for kid in [Some("ec-1"), None] {
        let forged = one.sign("ES256", kid, &of_other);
        let refused = auth.authenticate(Some(&forged)).await.unwrap_err();
        assert!(matches!(refused, AuthError::InvalidToken(_)), "{refused:?}");
    }
    // An issuer named twice is a settings error.
    let twice = OAuthSettings::new(
        JwksSource::File("jwks.json".into()),
        vec![ISSUER.into(), ISSUER.into()],
        AUDIENCE.into(),
    );
    assert!(twice.unwrap_err().contains("named twice"));
}

/// A key set served over HTTP on loopback, as an issuer serves it, and the
/// two ways an issuer's endpoint fails: garbage and no answer at all.
mod served {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use axum::Router;
    use axum::routing::get;

    async fn serve(router: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{addr}/jwks")
    }

    fn url_authenticator(url: &str) -> Authenticator {
        authenticator(JwksSource::parse(url, std::path::Path::new(".")).unwrap())
    }

    #[tokio::test]
    async fn a_key_set_fetched_over_http_checks_tokens() {
        let issuer = Issuer::new();
        let jwks = issuer.jwks().to_string();
        let url = serve(Router::new().route("/jwks", get(move || async move { jwks }))).await;
        let auth = url_authenticator(&url);
        let token = issuer.sign("RS256", Some("rsa-1"), &claims("alice"));
        assert!(auth.authenticate(Some(&token)).await.is_ok());
    }

    #[tokio::test]
    async fn an_endpoint_serving_garbage_makes_tokens_unavailable_not_accepted() {
        let url = serve(Router::new().route("/jwks", get(|| async { "<html>oops</html>" }))).await;
        let auth = url_authenticator(&url);
        let token = Issuer::new().sign("ES256", Some("ec-1"), &claims("alice"));
        let refused = auth.authenticate(Some(&token)).await.unwrap_err();
        assert!(matches!(refused, AuthError::Unavailable(_)), "{refused:?}");
        // What went wrong is logged for the operator, not told the caller.
        assert!(
            refused.to_string().contains("cannot be fetched now"),
            "{refused}"
        );
        assert!(!refused.to_string().contains(&url), "{refused}");
    }

    /// An authenticator of the key set at `url` kept fresh by `timing`.
    fn timed_authenticator(url: &str, timing: jwks::Timing) -> Authenticator {
        let jwks = JwksSource::parse(url, std::path::Path::new(".")).unwrap();
        let oauth = OAuthSettings::new(jwks, vec![ISSUER.into()], AUDIENCE.into()).unwrap();
        let settings = Settings {
            oauth: Some(oauth),
            ..Settings::default()
        };
        Authenticator::with_timing(settings, timing).unwrap()
    }

    /// A key set endpoint that counts its requests: the first `good` get
    /// `jwks`, the later ones never an answer.
    async fn serve_then_hang(jwks: String, good: usize) -> (String, Arc<AtomicUsize>) {
        let count = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&count);
        let url = serve(Router::new().route(
            "/jwks",
            get(move || {
                let (count, jwks) = (Arc::clone(&counted), jwks.clone());
                async move {
                    if count.fetch_add(1, Ordering::SeqCst) < good {
                        return jwks;
                    }
                    std::future::pending::<()>().await;
                    String::new()
                }
            }),
        ))
        .await;
        (url, count)
    }

    /// The first request pays the fetch timeout; the requests after it,
    /// within the refresh interval, do not make the server ask again.
    #[tokio::test]
    async fn an_endpoint_that_hangs_is_asked_once_per_interval() {
        let (url, fetches) = serve_then_hang(String::new(), 0).await;
        let timing = jwks::Timing {
            fetch_timeout: Duration::from_millis(200),
            ..jwks::Timing::default()
        };
        let auth = timed_authenticator(&url, timing);
        let token = Issuer::new().sign("ES256", Some("ec-1"), &claims("alice"));
        for _ in 0..3 {
            let refused = auth.authenticate(Some(&token)).await.unwrap_err();
            assert!(matches!(refused, AuthError::Unavailable(_)), "{refused:?}");
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
    }

    /// An old key set is fetched again in the background: the request that
    /// finds it old is checked with the keys held, even while the issuer's
    /// endpoint does not answer (with a fetch timeout of an hour, waiting
    /// for it would hang this test).
    #[tokio::test]
    async fn an_old_key_set_is_refreshed_without_holding_up_the_request() {
        let issuer = Issuer::new();
        let (url, fetches) = serve_then_hang(issuer.jwks().to_string(), 1).await;
        let timing = jwks::Timing {
            fetch_timeout: Duration::from_secs(3600),
            min_refresh: Duration::ZERO,
            max_age: Duration::ZERO,
            ..jwks::Timing::default()
        };
        let auth = timed_authenticator(&url, timing);
        // Each token is new, so none is remembered: each is checked.
        for sub in ["alice", "bob", "carol"] {
            let token = issuer.sign("ES256", Some("ec-1"), &claims(sub));
            let checked =
                tokio::time::timeout(Duration::from_secs(60), auth.authenticate(Some(&token)))
                    .await
                    .expect("the request does not wait for the refresh");
            assert!(checked.is_ok(), "{checked:?}");
        }
        // The first fetch, and one background refresh still waiting (one
        // at a time, whatever the requests).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while fetches.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }

    /// A request whose client goes away while it waits for a fetch does not
    /// cancel the fetch: the new key it brings checks the next token, within
    /// the refresh interval that the abandoned attempt started.
    #[tokio::test]
    async fn a_request_dropped_mid_fetch_does_not_leave_the_fetch_undone() {
        let (old, new) = (Issuer::new(), Issuer::new());
        let mut rotated = new.jwks();
        rotated["keys"][1]["kid"] = json!("ec-2");
        let (first, later) = (old.jwks().to_string(), rotated.to_string());
        let count = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&count);
        let url = serve(Router::new().route(
            "/jwks",
            get(move || {
                let (count, first, later) = (Arc::clone(&counted), first.clone(), later.clone());
                async move {
                    if count.fetch_add(1, Ordering::SeqCst) == 0 {
                        return first;
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    later
                }
            }),
        ))
        .await;
        let timing = jwks::Timing {
            min_refresh: Duration::ZERO,
            ..jwks::Timing::default()
        };
        let auth = timed_authenticator(&url, timing);
        let token = old.sign("ES256", Some("ec-1"), &claims("alice"));
        assert!(auth.authenticate(Some(&token)).await.is_ok());
        // A token naming the new key starts a fetch; its request is dropped.
        let token = new.sign("ES256", Some("ec-2"), &claims("bob"));
        let dropped =
            tokio::time::timeout(Duration::from_millis(50), auth.authenticate(Some(&token))).await;
        assert!(dropped.is_err(), "the fetch takes 300 ms: {dropped:?}");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match auth.authenticate(Some(&token)).await {
                Ok(bob) => break assert_eq!(bob.id(), format!("oauth:{ISSUER}#bob")),
                Err(e) if std::time::Instant::now() > deadline => panic!("{e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        assert_eq!(
            count.load(Ordering::SeqCst),
            2,
            "one fetch, not one per request"
        );
    }

    /// A key set unused for longer than `max_stale` (a quiet weekend) is
    /// fetched again before the next token is checked, not refused.
    #[tokio::test]
    async fn an_idle_key_set_past_its_staleness_bound_is_fetched_not_refused() {
        let issuer = Issuer::new();
        let (url, fetches) = serve_then_hang(issuer.jwks().to_string(), 2).await;
        let timing = jwks::Timing {
            min_refresh: Duration::ZERO,
            max_stale: Duration::from_millis(200),
            ..jwks::Timing::default()
        };
        let auth = timed_authenticator(&url, timing);
        let token = issuer.sign("ES256", Some("ec-1"), &claims("alice"));
        assert!(auth.authenticate(Some(&token)).await.is_ok());
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The same token, remembered: too old to be taken on trust.
        assert!(auth.authenticate(Some(&token)).await.is_ok());
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }

    /// Keys held while every fetch fails stop checking tokens after
    /// `max_stale`: the issuer may have revoked them.
    #[tokio::test]
    async fn keys_that_cannot_be_refreshed_for_too_long_stop_checking_tokens() {
        let issuer = Issuer::new();
        let (url, _) = serve_then_hang(issuer.jwks().to_string(), 1).await;
        let timing = jwks::Timing {
            fetch_timeout: Duration::from_millis(100),
            min_refresh: Duration::ZERO,
            max_age: Duration::ZERO,
            max_stale: Duration::from_millis(300),
        };
        let auth = timed_authenticator(&url, timing);
        let token = issuer.sign("ES256", Some("ec-1"), &claims("alice"));
        assert!(auth.authenticate(Some(&token)).await.is_ok());
        tokio::time::sleep(Duration::from_millis(400)).await;
        let token = issuer.sign("ES256", Some("ec-1"), &claims("bob"));
        let refused = auth.authenticate(Some(&token)).await.unwrap_err();
        assert!(matches!(refused, AuthError::Unavailable(_)), "{refused:?}");
        assert!(
            refused.to_string().contains("not been fetched for over"),
            "{refused}"
        );
    }
}
