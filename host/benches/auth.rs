//! What telling callers apart costs a call (`[serve.auth]`): the check of
//! a bearer token, side by side for a static token, an OAuth access token
//! the server has checked before (remembered by its hash), and one it has
//! not (the signature verified: ES256, RS256, EdDSA), with the key set
//! held in memory (a file, read at start).
//!
//! Run with `scripts/bench.sh`, or `cargo bench -p toolhost --bench auth`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use serde_json::json;
use toolhost::identity::{Authenticator, JwksSource, OAuthSettings, Settings, StaticToken};

mod common;
use common::{fmt_us, percentiles};

const CALLS: usize = 2000;
const ISSUER: &str = "https://idp.example.com";
const AUDIENCE: &str = "https://tools.example.com/mcp";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

struct Keys {
    rsa: RsaKeyPair,
    ec: EcdsaKeyPair,
    ed: Ed25519KeyPair,
}

impl Keys {
    fn new() -> Self {
        let rng = SystemRandom::new();
        let rsa = RsaKeyPair::from_der(include_bytes!("../src/identity/testdata/rsa-2048.der"))
            .expect("the test RSA key");
        let doc =
            EcdsaKeyPair::generate_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let ec =
            EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref(), &rng)
                .unwrap();
        let ed = Ed25519KeyPair::from_pkcs8(Ed25519KeyPair::generate_pkcs8(&rng).unwrap().as_ref())
            .unwrap();
        Self { rsa, ec, ed }
    }

    fn jwks(&self) -> String {
        let rsa: ring::rsa::PublicKeyComponents<Vec<u8>> = self.rsa.public().into();
        let ec = self.ec.public_key().as_ref();
        json!({"keys": [
            {"kty": "RSA", "kid": "rsa", "n": b64(&rsa.n), "e": b64(&rsa.e)},
            {"kty": "EC", "crv": "P-256", "kid": "ec", "x": b64(&ec[1..33]), "y": b64(&ec[33..65])},
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": b64(self.ed.public_key().as_ref())},
        ]})
        .to_string()
    }

    /// A token of subject `sub`, signed with `alg`.
    fn token(&self, alg: &str, sub: &str) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let kid = match alg {
            "RS256" => "rsa",
            "ES256" => "ec",
            _ => "ed",
        };
        let header = json!({"alg": alg, "kid": kid, "typ": "at+jwt"});
        let claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "scope": "tools:*",
            "exp": now + 3600, "iat": now});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match alg {
            "RS256" => {
                let mut out = vec![0; self.rsa.public().modulus_len()];
                self.rsa
                    .sign(&sig::RSA_PKCS1_SHA256, &rng, input.as_bytes(), &mut out)
                    .unwrap();
                out
            }
            "ES256" => self
                .ec
                .sign(&rng, input.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec(),
            _ => self.ed.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", b64(&signature))
    }
}

fn measure(
    runtime: &tokio::runtime::Runtime,
    auth: &Authenticator,
    tokens: &[String],
) -> (Duration, Duration) {
    let samples = runtime.block_on(async {
        let mut samples = Vec::with_capacity(tokens.len());
        for token in tokens {
            let start = Instant::now();
            auth.authenticate(Some(token))
                .await
                .expect("the token is accepted");
            samples.push(start.elapsed());
        }
        samples
    });
    percentiles(samples)
}

fn main() {
    let runtime = common::runtime();
    let keys = Keys::new();
    let dir = tempfile::tempdir().expect("a temp dir");
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, keys.jwks()).unwrap();
    let static_token = "s".repeat(32);
    let mut settings = Settings::default();
    settings.oauth = Some(
        OAuthSettings::new(JwksSource::File(jwks), vec![ISSUER.into()], AUDIENCE.into())
            .unwrap()
            .with_algorithms(&["RS256".into(), "ES256".into(), "EdDSA".into()])
            .unwrap(),
    );
    settings
        .tokens
        .push(StaticToken::new("bench".into(), static_token.clone(), Vec::new()).unwrap());
    let auth = Authenticator::new(settings).expect("the authenticator");

    println!("auth: the check of one bearer token, {CALLS} checks each (p50 / p99)");
    let rows: Vec<(String, Vec<String>)> = vec![
        ("static token".into(), vec![static_token; CALLS]),
        (
            "OAuth ES256, checked before".into(),
            vec![keys.token("ES256", "alice"); CALLS],
        ),
        (
            "OAuth ES256, first check".into(),
            (0..CALLS)
                .map(|i| keys.token("ES256", &format!("u{i}")))
                .collect(),
        ),
        (
            "OAuth RS256, first check".into(),
            (0..CALLS)
                .map(|i| keys.token("RS256", &format!("u{i}")))
                .collect(),
        ),
        (
            "OAuth EdDSA, first check".into(),
            (0..CALLS)
                .map(|i| keys.token("EdDSA", &format!("u{i}")))
                .collect(),
        ),
    ];
    for (what, tokens) in rows {
        let (p50, p99) = measure(&runtime, &auth, &tokens);
        let us = |d: Duration| fmt_us(d.as_secs_f64() * 1e6);
        println!("  {what:<32} {:>10} {:>10}", us(p50), us(p99));
    }
}
