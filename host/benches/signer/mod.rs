//! An identity provider for the benches: RSA, EC and Ed25519 keys, their
//! key set, and access tokens they sign for [`ISSUER`] and [`AUDIENCE`].

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use serde_json::json;

pub const ISSUER: &str = "https://idp.example.com";
pub const AUDIENCE: &str = "https://tools.example.com/mcp";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub struct Keys {
    rsa: RsaKeyPair,
    ec: EcdsaKeyPair,
    ed: Ed25519KeyPair,
}

impl Keys {
    pub fn new() -> Self {
        let rng = SystemRandom::new();
        let rsa = RsaKeyPair::from_der(include_bytes!("../../src/identity/testdata/rsa-2048.der"))
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

    pub fn jwks(&self) -> String {
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
    pub fn token(&self, alg: &str, sub: &str) -> String {
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
