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
        let mut header = json!({"alg": alg, "typ": "at+jwt"});
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
        let e = oauth.clone().algorithms(&[name.into()]).unwrap_err();
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

/// A key set served over HTTP on loopback, as an issuer serves it, and the
/// two ways an issuer's endpoint fails: garbage and no answer at all.
mod served {
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
        assert!(refused.to_string().contains("not a JWK Set"), "{refused}");
    }

    #[tokio::test]
    async fn an_endpoint_that_hangs_costs_one_fetch_timeout_then_answers_at_once() {
        let url = serve(Router::new().route(
            "/jwks",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                ""
            }),
        ))
        .await;
        let auth = url_authenticator(&url);
        let token = Issuer::new().sign("ES256", Some("ec-1"), &claims("alice"));
        let refused = auth.authenticate(Some(&token)).await.unwrap_err();
        assert!(
            refused.to_string().contains("no answer within"),
            "{refused}"
        );
        // The next request does not wait for the endpoint again.
        let again = tokio::time::timeout(Duration::from_secs(1), auth.authenticate(Some(&token)))
            .await
            .expect("the second request does not wait for the endpoint");
        assert!(matches!(again, Err(AuthError::Unavailable(_))), "{again:?}");
    }
}
