//! What telling callers apart costs a call (`[serve.auth]`): the check of
//! a bearer token, side by side for a static token, an OAuth access token
//! the server has checked before (remembered by its hash), and one it has
//! not (the signature verified: ES256, RS256, EdDSA), with the key set
//! held in memory (a file, read at start).
//!
//! Run with `scripts/bench.sh`, or `cargo bench -p toolhost --bench auth`.

use std::time::{Duration, Instant};

use toolhost::identity::{Authenticator, JwksSource, OAuthSettings, Settings, StaticToken};

mod common;
mod signer;
use common::{fmt_us, percentiles};
use signer::{AUDIENCE, ISSUER, Keys};

const CALLS: usize = 2000;

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
