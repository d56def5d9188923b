//! jsonwebtoken's signature checks on ring, which is already in the build
//! for rustls: verification only (toolhost never signs a token), and no
//! HMAC at all, so a token can never be checked against a shared secret
//! (or against a public key's bytes taken for one).
//!
//! jsonwebtoken ≥ 10 asks its user for a crypto provider; its own are
//! RustCrypto's RSA (a second RSA implementation in the build) or
//! aws-lc-rs (a C build). ring verifies every asymmetric JWS algorithm.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{ErrorKind, Result};
use jsonwebtoken::signature::{Error as SignatureError, Verifier};
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::signature::{self as ring_signature, RsaPublicKeyComponents, UnparsedPublicKey};

/// The provider toolhost installs: [`verifier`] for every asymmetric
/// algorithm, no signer.
static RING: CryptoProvider = CryptoProvider {
    signer_factory: no_signer,
    verifier_factory: verifier,
    key_utils: KeyUtils::new_unimplemented(),
};

/// Make [`RING`] the process's provider, once. An embedder that installed
/// its own first keeps it: any provider verifies the same signatures.
pub(super) fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err only when a provider is already installed, which is fine.
        let _ = RING.install_default();
    });
}

fn no_signer(_: &Algorithm, _: &EncodingKey) -> Result<Box<dyn JwtSigner>> {
    Err(ErrorKind::InvalidAlgorithm.into())
}

/// A verifier of `algorithm` with `key`; HMAC (and any algorithm ring does
/// not verify) is refused.
fn verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>> {
    let scheme = scheme(*algorithm).ok_or(ErrorKind::InvalidAlgorithm)?;
    let key = match (scheme, key.kind()) {
        (Scheme::Rsa(_), DecodingKeyKind::RsaModulusExponent { n, e }) => PublicKey::Rsa {
            n: n.clone(),
            e: e.clone(),
        },
        (Scheme::Other(_), DecodingKeyKind::SecretOrDer(bytes)) => PublicKey::Raw(bytes.clone()),
        _ => return Err(ErrorKind::InvalidKeyFormat.into()),
    };
    Ok(Box::new(RingVerifier {
        algorithm: *algorithm,
        scheme,
        key,
    }))
}

/// How ring checks one algorithm's signature.
#[derive(Clone, Copy)]
enum Scheme {
    /// RSA, from the key's modulus and exponent.
    Rsa(&'static ring_signature::RsaParameters),
    /// ECDSA (an uncompressed point) or Ed25519 (the raw key).
    Other(&'static dyn ring_signature::VerificationAlgorithm),
}

/// The scheme of each algorithm toolhost accepts; none for HMAC.
fn scheme(algorithm: Algorithm) -> Option<Scheme> {
    use ring_signature as s;
    Some(match algorithm {
        Algorithm::RS256 => Scheme::Rsa(&s::RSA_PKCS1_2048_8192_SHA256),
        Algorithm::RS384 => Scheme::Rsa(&s::RSA_PKCS1_2048_8192_SHA384),
        Algorithm::RS512 => Scheme::Rsa(&s::RSA_PKCS1_2048_8192_SHA512),
        Algorithm::PS256 => Scheme::Rsa(&s::RSA_PSS_2048_8192_SHA256),
        Algorithm::PS384 => Scheme::Rsa(&s::RSA_PSS_2048_8192_SHA384),
        Algorithm::PS512 => Scheme::Rsa(&s::RSA_PSS_2048_8192_SHA512),
        // JWS ECDSA signatures are r ‖ s (RFC 7518 §3.4), ring's "fixed".
        Algorithm::ES256 => Scheme::Other(&s::ECDSA_P256_SHA256_FIXED),
        Algorithm::ES384 => Scheme::Other(&s::ECDSA_P384_SHA384_FIXED),
        Algorithm::EdDSA => Scheme::Other(&s::ED25519),
        _ => return None,
    })
}

/// A public key in the form its scheme reads.
enum PublicKey {
    Rsa { n: Vec<u8>, e: Vec<u8> },
    Raw(Vec<u8>),
}

struct RingVerifier {
    algorithm: Algorithm,
    scheme: Scheme,
    key: PublicKey,
}

impl Verifier<Vec<u8>> for RingVerifier {
    fn verify(
        &self,
        message: &[u8],
        signature: &Vec<u8>,
    ) -> std::result::Result<(), SignatureError> {
        let checked = match (&self.key, self.scheme) {
            (PublicKey::Rsa { n, e }, Scheme::Rsa(parameters)) => {
                RsaPublicKeyComponents { n, e }.verify(parameters, message, signature)
            }
            (PublicKey::Raw(bytes), Scheme::Other(algorithm)) => {
                UnparsedPublicKey::new(algorithm, bytes).verify(message, signature)
            }
            _ => return Err(SignatureError::new()),
        };
        checked.map_err(|_| SignatureError::new())
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}
