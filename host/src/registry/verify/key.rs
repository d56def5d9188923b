//! Signature keys from PEM files: [`PublicKey`] (a `PUBLIC KEY` block, the
//! SubjectPublicKeyInfo that `cosign generate-key-pair` writes as
//! `cosign.pub` and `openssl pkey -pubout` writes) and [`SigningKey`] (a
//! PKCS#8 `PRIVATE KEY` block, what `openssl genpkey` writes).
//!
//! Supported: ECDSA on P-256 (cosign's default), ECDSA on P-384 and
//! Ed25519; ECDSA signatures are ASN.1 DER, as cosign writes them. ECDSA
//! hashes with SHA-256 whatever the curve, as cosign's `sign --key` and
//! `verify --key` do (P-384 signatures over SHA-384 are accepted too). All
//! cryptography is ring's, but for P-384 signing over SHA-256, which ring
//! does not offer (RustCrypto's `p384`); this file reads the key
//! containers, strictly (one PEM block, the right label, DER with nothing
//! left over), because a key file that two programs read differently is a
//! key nobody checked.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _};

use super::der::{self, Reader};
use crate::registry::digest::Digest;

/// The largest key file read: keys are under a kilobyte, and a bigger
/// file is a mistake (a bundle, a binary) better named than parsed.
const MAX_PEM: usize = 64 * 1024;

/// The PEM label of a SubjectPublicKeyInfo.
const PUBLIC_LABEL: &str = "PUBLIC KEY";
/// The PEM label of an unencrypted PKCS#8 private key.
const PRIVATE_LABEL: &str = "PRIVATE KEY";

/// How to make a key toolhost reads, for messages.
const GENERATE: &str = "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out signing.pem \
     && openssl pkey -in signing.pem -pubout -out signing.pub";

/// What toolhost verifies, for messages.
const SUPPORTED: &str = "ECDSA P-256 (cosign's default), ECDSA P-384 and Ed25519";

// Object identifiers, as the DER contents of an OBJECT IDENTIFIER.
/// id-ecPublicKey, 1.2.840.10045.2.1 (RFC 5480).
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// prime256v1 (P-256), 1.2.840.10045.3.1.7.
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// secp384r1 (P-384), 1.3.132.0.34.
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
/// secp521r1 (P-521), 1.3.132.0.35: recognised only to be named when refused.
const OID_P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
/// id-Ed25519, 1.3.101.112 (RFC 8410).
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];
/// id-Ed448, 1.3.101.113: recognised only to be named when refused.
const OID_ED448: &[u8] = &[0x2b, 0x65, 0x71];
/// rsaEncryption, 1.2.840.113549.1.1.1: recognised only to be named.
const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
/// id-RSASSA-PSS, 1.2.840.113549.1.1.10: recognised only to be named.
const OID_RSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];

/// A signature algorithm toolhost verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// ECDSA on NIST P-256 with SHA-256: cosign's default.
    EcdsaP256,
    /// ECDSA on NIST P-384 (SHA-384, or SHA-256 as cosign may use).
    EcdsaP384,
    /// Ed25519 (pure, over the message itself).
    Ed25519,
}

impl Algorithm {
    /// The length of the raw public key inside the SPKI's BIT STRING.
    fn raw_key_len(self) -> usize {
        match self {
            Self::EcdsaP256 => 65,
            Self::EcdsaP384 => 97,
            Self::Ed25519 => 32,
        }
    }

    /// The DER AlgorithmIdentifier contents naming this key type.
    fn identifier(self) -> Vec<u8> {
        match self {
            Self::EcdsaP256 => [
                der::tlv(der::OID, OID_EC_PUBLIC_KEY),
                der::tlv(der::OID, OID_P256),
            ]
            .concat(),
            Self::EcdsaP384 => [
                der::tlv(der::OID, OID_EC_PUBLIC_KEY),
                der::tlv(der::OID, OID_P384),
            ]
            .concat(),
            Self::Ed25519 => der::tlv(der::OID, OID_ED25519),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::EcdsaP256 => "ecdsa-p256",
            Self::EcdsaP384 => "ecdsa-p384",
            Self::Ed25519 => "ed25519",
        })
    }
}

/// Why a key file cannot be used; each message names the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The file is larger than any key.
    #[error(
        "the key file has {0} bytes, more than any key ({MAX_PEM}): point at the PEM key file itself"
    )]
    TooLarge(usize),
    /// No `-----BEGIN …-----` line.
    #[error(
        "no PEM block found: a key file holds `-----BEGIN {expected}-----` … `-----END {expected}-----`; make one with `{GENERATE}`"
    )]
    NotPem {
        /// The label that was wanted.
        expected: &'static str,
    },
    /// A BEGIN line without its END line.
    #[error(
        "the PEM block `{label}` has no `-----END {label}-----` line: the file is truncated; copy or export it again"
    )]
    Unterminated {
        /// The label of the open block.
        label: String,
    },
    /// More than one PEM block: which key is meant would be a guess.
    #[error("the file holds more than one PEM block: keep exactly one key per file")]
    SeveralBlocks,
    /// A PEM block of another kind than the one wanted.
    #[error("the PEM block is `{found}`, not `{expected}`: {fix}")]
    Label {
        /// The label found.
        found: String,
        /// The label wanted.
        expected: &'static str,
        /// What to run or write instead.
        fix: String,
    },
    /// cosign's own passphrase-encrypted private key format.
    #[error(
        "`{0}` is cosign's encrypted key format; toolhost reads PKCS#8 PEM keys: generate one with `{GENERATE}` \
         and give cosign its own copy with `cosign import-key-pair --key signing.pem`"
    )]
    CosignKey(String),
    /// The text between the PEM lines is not base64.
    #[error(
        "the PEM body is not valid base64 ({0}): the file is damaged or truncated; copy or export it again"
    )]
    Base64(String),
    /// The decoded bytes are not the DER structure a key is.
    #[error(
        "the key is not well-formed DER ({0}): export it again with `openssl pkey -pubout` (public) or `openssl pkey` (private)"
    )]
    Der(String),
    /// A well-formed key of a kind toolhost does not verify.
    #[error("{0} is not supported: toolhost uses {SUPPORTED} keys; make one with `{GENERATE}`")]
    Unsupported(String),
    /// ring refused the private key (e.g. public and private halves disagree).
    #[error("the private key was refused ({0}): generate a new one with `{GENERATE}`")]
    Rejected(String),
    /// The system random number generator failed.
    #[error("the system random number generator failed: retry; if it persists, check /dev/urandom")]
    Random,
}

/// A public key that verifies signatures.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PublicKey {
    algorithm: Algorithm,
    /// The raw key ring takes: `0x04‖X‖Y` for ECDSA, 32 bytes for Ed25519.
    raw: Vec<u8>,
    /// The SubjectPublicKeyInfo DER, which the fingerprint hashes.
    spki: Vec<u8>,
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` (SubjectPublicKeyInfo), as in `cosign.pub`.
    ///
    /// # Errors
    /// A [`KeyError`] naming what is wrong with the text and how to make a
    /// key toolhost reads.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        Self::from_spki_der(&pem_decode(text, PUBLIC_LABEL)?)
    }

    /// Reads a SubjectPublicKeyInfo in DER.
    ///
    /// # Errors
    /// [`KeyError::Der`] for malformed DER (trailing bytes included),
    /// [`KeyError::Unsupported`] for another algorithm or curve.
    pub fn from_spki_der(spki: &[u8]) -> Result<Self, KeyError> {
        let mut outer = Reader::new(spki);
        let body = outer.read(der::SEQUENCE).map_err(KeyError::Der)?;
        outer.finish().map_err(KeyError::Der)?;
        let mut fields = Reader::new(body);
        let identifier = fields.read(der::SEQUENCE).map_err(KeyError::Der)?;
        let bits = fields.read(der::BIT_STRING).map_err(KeyError::Der)?;
        fields.finish().map_err(KeyError::Der)?;
        let algorithm = read_algorithm(identifier)?;
        let raw = match bits.split_first() {
            Some((0, raw)) => raw,
            _ => return Err(KeyError::Der("the key's BIT STRING has unused bits".into())),
        };
        check_raw_key(algorithm, raw)?;
        Ok(Self {
            algorithm,
            raw: raw.to_vec(),
            spki: spki.to_vec(),
        })
    }

    /// Builds the key from ring's raw form (validated like a parsed one).
    fn from_raw(algorithm: Algorithm, raw: &[u8]) -> Result<Self, KeyError> {
        check_raw_key(algorithm, raw)?;
        let identifier = der::tlv(der::SEQUENCE, &algorithm.identifier());
        let bits = der::tlv(der::BIT_STRING, &[&[0], raw].concat());
        let spki = der::tlv(der::SEQUENCE, &[identifier, bits].concat());
        Ok(Self {
            algorithm,
            raw: raw.to_vec(),
            spki,
        })
    }

    /// The key as a PEM `PUBLIC KEY`, as `cosign.pub` holds it.
    #[must_use]
    pub fn to_pem(&self) -> String {
        pem_encode(PUBLIC_LABEL, &self.spki)
    }

    /// The key's SubjectPublicKeyInfo in DER, as a transparency log's key
    /// ID hashes it.
    #[must_use]
    pub fn spki_der(&self) -> &[u8] {
        &self.spki
    }

    /// The key's algorithm.
    #[must_use]
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// `SHA256:` and the first 16 hex digits of the SHA-256 of the key's
    /// SubjectPublicKeyInfo: short enough for a message, long enough that
    /// two keys never share one by chance.
    #[must_use]
    pub fn fingerprint(&self) -> String {
        format!("SHA256:{}", &Digest::of(&self.spki).hex()[..16])
    }

    /// Whether `signature` (ASN.1 DER for ECDSA, 64 bytes for Ed25519) is
    /// this key's signature over `message`.
    #[must_use]
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        let verify = |algorithm: &'static dyn signature::VerificationAlgorithm| {
            signature::UnparsedPublicKey::new(algorithm, &self.raw)
                .verify(message, signature)
                .is_ok()
        };
        match self.algorithm {
            Algorithm::EcdsaP256 => verify(&signature::ECDSA_P256_SHA256_ASN1),
            // SHA-384 is the curve's own hash, but cosign has signed with
            // SHA-256 whatever the curve: either is the key holder's choice,
            // and both are collision resistant.
            Algorithm::EcdsaP384 => {
                verify(&signature::ECDSA_P384_SHA384_ASN1)
                    || verify(&signature::ECDSA_P384_SHA256_ASN1)
            }
            Algorithm::Ed25519 => verify(&signature::ED25519),
        }
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.algorithm, self.fingerprint())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// A private key that signs, read from a PKCS#8 PEM `PRIVATE KEY`.
pub struct SigningKey {
    pair: Pair,
    public: PublicKey,
}

/// The key pair for each supported algorithm: ring's, but for P-384,
/// which cosign signs over SHA-256 and ring only over SHA-384.
enum Pair {
    Ecdsa(EcdsaKeyPair),
    EcdsaP384(p384::ecdsa::SigningKey),
    Ed25519(Ed25519KeyPair),
}

impl SigningKey {
    /// Reads a PKCS#8 PEM `PRIVATE KEY` (what `openssl genpkey` writes).
    ///
    /// # Errors
    /// A [`KeyError`]: cosign's encrypted format, a SEC1 or encrypted
    /// PKCS#8 key (each with the command that converts it), an unsupported
    /// algorithm, or a key ring refuses.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        Self::from_pkcs8(&pem_decode(text, PRIVATE_LABEL)?)
    }

    /// Reads a PKCS#8 private key in DER.
    fn from_pkcs8(pkcs8: &[u8]) -> Result<Self, KeyError> {
        let mut outer = Reader::new(pkcs8);
        let body = outer.read(der::SEQUENCE).map_err(KeyError::Der)?;
        outer.finish().map_err(KeyError::Der)?;
        let mut fields = Reader::new(body);
        fields.read(der::INTEGER).map_err(KeyError::Der)?;
        let algorithm = read_algorithm(fields.read(der::SEQUENCE).map_err(KeyError::Der)?)?;
        let rejected = |error: ring::error::KeyRejected| KeyError::Rejected(error.to_string());
        let pair = match algorithm {
            Algorithm::EcdsaP256 => {
                let signing = &signature::ECDSA_P256_SHA256_ASN1_SIGNING;
                let rng = SystemRandom::new();
                Pair::Ecdsa(EcdsaKeyPair::from_pkcs8(signing, pkcs8, &rng).map_err(rejected)?)
            }
            Algorithm::EcdsaP384 => {
                use p384::pkcs8::DecodePrivateKey as _;
                let secret = p384::SecretKey::from_pkcs8_der(pkcs8)
                    .map_err(|e| KeyError::Rejected(e.to_string()))?;
                Pair::EcdsaP384(p384::ecdsa::SigningKey::from(secret))
            }
            // OpenSSL writes Ed25519 keys as PKCS#8 v1, without the public
            // half, which ring checks only in v2 documents.
            Algorithm::Ed25519 => {
                Pair::Ed25519(Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8).map_err(rejected)?)
            }
        };
        let raw = match &pair {
            Pair::Ecdsa(pair) => pair.public_key().as_ref().to_vec(),
            Pair::EcdsaP384(pair) => pair
                .verifying_key()
                .to_encoded_point(false)
                .as_bytes()
                .to_vec(),
            Pair::Ed25519(pair) => pair.public_key().as_ref().to_vec(),
        };
        let public = PublicKey::from_raw(algorithm, &raw)?;
        Ok(Self { pair, public })
    }

    /// A new ECDSA P-256 key and its PKCS#8 PEM, to write to a file.
    ///
    /// # Errors
    /// [`KeyError::Random`] when the system random number generator fails.
    pub fn generate_p256() -> Result<(Self, String), KeyError> {
        let rng = SystemRandom::new();
        let document =
            EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
                .map_err(|_| KeyError::Random)?;
        let key = Self::from_pkcs8(document.as_ref())?;
        Ok((key, pem_encode(PRIVATE_LABEL, document.as_ref())))
    }

    /// The signature over `message`: ASN.1 DER for ECDSA (as cosign writes
    /// it), 64 bytes for Ed25519.
    ///
    /// # Errors
    /// [`KeyError::Random`] when the system random number generator fails
    /// (ECDSA needs a fresh nonce per signature).
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        match &self.pair {
            Pair::Ecdsa(pair) => pair
                .sign(&SystemRandom::new(), message)
                .map(|signature| signature.as_ref().to_vec())
                .map_err(|_| KeyError::Random),
            Pair::EcdsaP384(pair) => {
                use p384::ecdsa::signature::hazmat::PrehashSigner as _;
                // Deterministic nonces (RFC 6979): no random source needed.
                let hash = ring::digest::digest(&ring::digest::SHA256, message);
                let signature: p384::ecdsa::Signature = pair
                    .sign_prehash(hash.as_ref())
                    .map_err(|e| KeyError::Rejected(e.to_string()))?;
                Ok(signature.to_der().as_bytes().to_vec())
            }
            Pair::Ed25519(pair) => Ok(pair.sign(message).as_ref().to_vec()),
        }
    }

    /// The public half, which verifies this key's signatures.
    #[must_use]
    pub fn public_key(&self) -> PublicKey {
        self.public.clone()
    }
}

impl fmt::Debug for SigningKey {
    /// Names the key by its public half; the secret never reaches a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.public)
    }
}

/// The algorithm an AlgorithmIdentifier's contents name.
fn read_algorithm(identifier: &[u8]) -> Result<Algorithm, KeyError> {
    let mut fields = Reader::new(identifier);
    let oid = fields.read(der::OID).map_err(KeyError::Der)?;
    let algorithm = match oid {
        OID_EC_PUBLIC_KEY => {
            if fields.peek() != Some(der::OID) {
                return Err(KeyError::Unsupported(
                    "an EC key with explicit curve parameters (not a named curve)".into(),
                ));
            }
            match fields.read(der::OID).map_err(KeyError::Der)? {
                OID_P256 => Algorithm::EcdsaP256,
                OID_P384 => Algorithm::EcdsaP384,
                OID_P521 => return Err(KeyError::Unsupported("an EC key on curve P-521".into())),
                curve => {
                    return Err(KeyError::Unsupported(format!(
                        "an EC key on curve {}",
                        dotted(curve)
                    )));
                }
            }
        }
        OID_ED25519 => Algorithm::Ed25519,
        OID_RSA | OID_RSA_PSS => return Err(KeyError::Unsupported("an RSA key".into())),
        OID_ED448 => return Err(KeyError::Unsupported("an Ed448 key".into())),
        other => {
            return Err(KeyError::Unsupported(format!(
                "a key of algorithm {}",
                dotted(other)
            )));
        }
    };
    fields.finish().map_err(KeyError::Der)?;
    Ok(algorithm)
}

/// Refuses a raw key of the wrong length or, for ECDSA, not an
/// uncompressed point (ring takes only those).
fn check_raw_key(algorithm: Algorithm, raw: &[u8]) -> Result<(), KeyError> {
    if raw.len() != algorithm.raw_key_len() {
        return Err(KeyError::Der(format!(
            "the {algorithm} key has {} bytes where {} belong",
            raw.len(),
            algorithm.raw_key_len()
        )));
    }
    if algorithm != Algorithm::Ed25519 && raw[0] != 0x04 {
        return Err(KeyError::Unsupported("a compressed EC point".into()));
    }
    Ok(())
}

/// An object identifier in dotted form, for messages.
fn dotted(oid: &[u8]) -> String {
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for &byte in oid {
        value = (value << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            arcs.push(value);
            value = 0;
        }
    }
    let Some(&first) = arcs.first() else {
        return "an empty OID".into();
    };
    let (top, second) = if first < 80 {
        (first / 40, first % 40)
    } else {
        (2, first - 80)
    };
    let rest: Vec<String> = arcs[1..].iter().map(u64::to_string).collect();
    format!("OID {top}.{second}.{}", rest.join("."))
}

/// The DER inside the one PEM block of `text`, which must carry `expected`.
fn pem_decode(text: &str, expected: &'static str) -> Result<Vec<u8>, KeyError> {
    if text.len() > MAX_PEM {
        return Err(KeyError::TooLarge(text.len()));
    }
    let mut lines = text.lines().map(str::trim);
    // Text before the block is allowed (RFC 7468 §5.2: explanatory text).
    let label = lines
        .by_ref()
        .find_map(|line| line.strip_prefix("-----BEGIN ")?.strip_suffix("-----"))
        .ok_or(KeyError::NotPem { expected })?;
    check_label(label, expected)?;
    let end = format!("-----END {label}-----");
    let mut body = String::new();
    let mut ended = false;
    for line in lines.by_ref() {
        if line == end {
            ended = true;
            break;
        }
        if line.starts_with("-----") {
            break;
        }
        body.push_str(line);
    }
    if !ended {
        return Err(KeyError::Unterminated {
            label: label.into(),
        });
    }
    if lines.any(|line| line.starts_with("-----BEGIN ")) {
        return Err(KeyError::SeveralBlocks);
    }
    let der = BASE64
        .decode(body.as_bytes())
        .map_err(|error| KeyError::Base64(error.to_string()))?;
    if der.is_empty() {
        return Err(KeyError::Base64("the block is empty".into()));
    }
    Ok(der)
}

/// Refuses a block of another kind, naming the conversion that helps.
fn check_label(found: &str, expected: &'static str) -> Result<(), KeyError> {
    if found == expected {
        return Ok(());
    }
    if found.contains("SIGSTORE PRIVATE KEY") || found.contains("COSIGN PRIVATE KEY") {
        return Err(if expected == PRIVATE_LABEL {
            KeyError::CosignKey(found.into())
        } else {
            label_error(
                found,
                expected,
                "give the public key: `cosign public-key --key cosign.key > cosign.pub`",
            )
        });
    }
    if found.starts_with("RSA ") {
        return Err(KeyError::Unsupported("an RSA key".into()));
    }
    let fix = match (expected, found) {
        (PUBLIC_LABEL, "CERTIFICATE") => {
            "take its key with `openssl x509 -in CERT.pem -pubkey -noout > key.pub`"
        }
        (PUBLIC_LABEL, label) if label.ends_with("PRIVATE KEY") => {
            "this is a private key; give its public half, made with `openssl pkey -in KEY.pem -pubout -out key.pub`"
        }
        (PRIVATE_LABEL, "EC PRIVATE KEY" | "ENCRYPTED PRIVATE KEY") => {
            "convert it to unencrypted PKCS#8 with `openssl pkey -in KEY.pem -out signing.pem`"
        }
        (PRIVATE_LABEL, PUBLIC_LABEL) => {
            "this is a public key; signing needs the private key it was made from"
        }
        _ => {
            "export the key again with `openssl pkey` (private) or `openssl pkey -pubout` (public)"
        }
    };
    Err(label_error(found, expected, fix))
}

/// A [`KeyError::Label`].
fn label_error(found: &str, expected: &'static str, fix: &str) -> KeyError {
    KeyError::Label {
        found: found.into(),
        expected,
        fix: fix.into(),
    }
}

/// `der` as a PEM block with `label`, 64 base64 characters a line.
fn pem_encode(label: &str, der: &[u8]) -> String {
    let encoded = BASE64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in encoded.as_bytes().chunks(64) {
        // Base64 output is ASCII, so every chunk is valid UTF-8.
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cosign's test key from sigstore-rs (`src/cosign/signature_layers.rs`,
    /// `build_correct_signature_layer_without_bundle`): a P-256 cosign.pub.
    const COSIGN_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENptdY/l3nB0yqkXLBWkZWQwo6+cu
OSWS1X9vPavpiQOoTTGC0xX57OojUadxF1cdQmrsiReWg2Wn4FneJfa8xw==
-----END PUBLIC KEY-----
";

    /// An RSA-1024 public key made with `openssl genpkey -algorithm RSA`.
    const RSA_PUB: &str = "-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDL2ffV6gWIikqYlb7BqGsfyXBq
ltg7qWq8cSWIv8bbwU9/mfqQa+rWRiyPM8bl8pYFZI5Gm0T164lFctmRVK2/pIBL
GLpIxRapxy65CgeL5UiWeHNrLR5zl6NLqeL5hZPxcmq1jHyEznAKMmf9hNgnoCsU
cGJoN3rMRfPszhDkoQIDAQAB
-----END PUBLIC KEY-----
";

    /// A P-521 public key made with `openssl genpkey -algorithm EC`.
    const P521_PUB: &str = "-----BEGIN PUBLIC KEY-----
MIGbMBAGByqGSM49AgEGBSuBBAAjA4GGAAQAoltjc62xHii3nfryc22Erri9153o
Xb4vBbJP9LwNAmg4S55YafWWFev1E0K896OcEqBcakB9LlG+BYAfj3XpgOUAd++C
8b8EJEJv4t9+B44iuiEfTwGPbMbNJK6RqQc/4VESNhulb1Dyi9ygfkfHos7+UUJ7
FdGNvuQvLTksSjkNFH4=
-----END PUBLIC KEY-----
";

    /// A secp256k1 public key (a curve with no name here) from openssl.
    const SECP256K1_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFYwEAYHKoZIzj0CAQYFK4EEAAoDQgAEzoe1PF0CeWs+6rBWxOk3p80U4U39eRSx
mNRfWM22Yp7HYtJSpxCB8wXHp5B7AWETxHgvWd/ZFkOEBN8lLl8tRA==
-----END PUBLIC KEY-----
";

    fn p256() -> (SigningKey, String) {
        SigningKey::generate_p256().expect("the system RNG works in tests")
    }

    #[test]
    fn generated_p256_key_round_trips_through_pem_and_verifies_its_signatures() {
        let (key, private_pem) = p256();
        assert!(private_pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        let reread = SigningKey::from_pem(&private_pem).unwrap();
        assert_eq!(reread.public_key(), key.public_key());
        let public = PublicKey::from_pem(&key.public_key().to_pem()).unwrap();
        assert_eq!(public, key.public_key());
        assert_eq!(public.algorithm(), Algorithm::EcdsaP256);
        let signature = reread.sign(b"payload").unwrap();
        assert_eq!(
            signature[0],
            der::SEQUENCE,
            "ECDSA signatures are ASN.1 DER, as cosign writes them"
        );
        assert!(public.verify(b"payload", &signature));
        assert!(!public.verify(b"payload!", &signature), "another message");
    }

    #[test]
    fn a_flipped_signature_byte_is_refused() {
        let (key, _) = p256();
        let signature = key.sign(b"payload").unwrap();
        for index in 0..signature.len() {
            let mut flipped = signature.clone();
            flipped[index] ^= 0x01;
            assert!(
                !key.public_key().verify(b"payload", &flipped),
                "byte {index} flipped"
            );
        }
    }

    #[test]
    fn another_keys_signature_is_refused() {
        let (signer, _) = p256();
        let (other, _) = p256();
        let signature = signer.sign(b"payload").unwrap();
        assert!(!other.public_key().verify(b"payload", &signature));
        assert_ne!(
            signer.public_key().fingerprint(),
            other.public_key().fingerprint()
        );
    }

    #[test]
    fn cosign_public_key_parses_and_writes_back_identically() {
        let key = PublicKey::from_pem(COSIGN_PUB).unwrap();
        assert_eq!(key.algorithm(), Algorithm::EcdsaP256);
        assert_eq!(
            key.to_pem(),
            COSIGN_PUB,
            "our SPKI writer encodes exactly as cosign does"
        );
        let shown = key.to_string();
        assert!(shown.starts_with("ecdsa-p256 SHA256:"), "{shown}");
        assert_eq!(key.fingerprint().len(), "SHA256:".len() + 16);
        // The same key with CRLF line ends and explanatory text before it.
        let crlf = format!("cosign.pub\r\n{}", COSIGN_PUB.replace('\n', "\r\n"));
        assert_eq!(PublicKey::from_pem(&crlf).unwrap(), key);
    }

    #[test]
    fn p384_keys_parse_sign_and_verify() {
        let rng = SystemRandom::new();
        let document =
            EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P384_SHA384_ASN1_SIGNING, &rng).unwrap();
        let key = SigningKey::from_pem(&pem_encode(PRIVATE_LABEL, document.as_ref())).unwrap();
        let public = PublicKey::from_pem(&key.public_key().to_pem()).unwrap();
        assert_eq!(public.algorithm(), Algorithm::EcdsaP384);
        assert!(public.verify(b"payload", &key.sign(b"payload").unwrap()));
        assert!(!public.verify(b"other", &key.sign(b"payload").unwrap()));
    }

    #[test]
    fn ed25519_keys_parse_sign_and_verify() {
        let document = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let key = SigningKey::from_pem(&pem_encode(PRIVATE_LABEL, document.as_ref())).unwrap();
        let public = PublicKey::from_pem(&key.public_key().to_pem()).unwrap();
        assert_eq!(public.algorithm(), Algorithm::Ed25519);
        assert!(public.to_string().starts_with("ed25519 SHA256:"));
        let signature = key.sign(b"payload").unwrap();
        assert_eq!(signature.len(), 64);
        assert!(public.verify(b"payload", &signature));
        assert!(!public.verify(b"payload!", &signature));
    }

    #[test]
    fn truncated_base64_is_refused() {
        let truncated = COSIGN_PUB.replace("Wn4FneJfa8xw==", "Wn4FneJfa8x");
        let error = PublicKey::from_pem(&truncated).unwrap_err();
        assert!(matches!(error, KeyError::Base64(_)), "{error:?}");
        assert!(
            error.to_string().contains("copy or export it again"),
            "{error}"
        );
    }

    #[test]
    fn a_key_cut_short_is_refused_as_der() {
        let short = COSIGN_PUB.replace(
            "OSWS1X9vPavpiQOoTTGC0xX57OojUadxF1cdQmrsiReWg2Wn4FneJfa8xw==\n",
            "",
        );
        let error = PublicKey::from_pem(&short).unwrap_err();
        assert!(
            matches!(&error, KeyError::Der(reason) if reason.contains("remain")),
            "{error:?}"
        );
    }

    #[test]
    fn trailing_der_bytes_are_refused() {
        let spki = PublicKey::from_pem(COSIGN_PUB).unwrap().spki;
        let padded = pem_encode(PUBLIC_LABEL, &[spki.as_slice(), &[0x00, 0x00]].concat());
        let error = PublicKey::from_pem(&padded).unwrap_err();
        assert!(
            matches!(&error, KeyError::Der(reason) if reason.contains("2 trailing bytes")),
            "{error:?}"
        );
    }

    #[test]
    fn a_bit_string_with_unused_bits_is_refused() {
        let mut spki = PublicKey::from_pem(COSIGN_PUB).unwrap().spki;
        // The BIT STRING's unused-bits byte follows its tag and length.
        let at = spki.len() - 66;
        assert_eq!(spki[at], 0);
        spki[at] = 1;
        let error = PublicKey::from_spki_der(&spki).unwrap_err();
        assert!(
            matches!(&error, KeyError::Der(reason) if reason.contains("unused bits")),
            "{error:?}"
        );
    }

    #[test]
    fn rsa_keys_are_refused_naming_what_is_supported() {
        let error = PublicKey::from_pem(RSA_PUB).unwrap_err();
        assert_eq!(error, KeyError::Unsupported("an RSA key".into()));
        let message = error.to_string();
        assert!(
            message.contains("ECDSA P-256 (cosign's default), ECDSA P-384 and Ed25519"),
            "{message}"
        );
        assert!(
            message.contains("openssl genpkey -algorithm EC"),
            "{message}"
        );
        let pkcs1 = "-----BEGIN RSA PUBLIC KEY-----\nAAAA\n-----END RSA PUBLIC KEY-----\n";
        assert_eq!(
            PublicKey::from_pem(pkcs1).unwrap_err(),
            KeyError::Unsupported("an RSA key".into())
        );
    }

    #[test]
    fn unsupported_curves_are_named() {
        let error = PublicKey::from_pem(P521_PUB).unwrap_err();
        assert_eq!(
            error,
            KeyError::Unsupported("an EC key on curve P-521".into())
        );
        let error = PublicKey::from_pem(SECP256K1_PUB).unwrap_err();
        assert_eq!(
            error,
            KeyError::Unsupported("an EC key on curve OID 1.3.132.0.10".into())
        );
    }

    #[test]
    fn a_private_key_given_as_public_names_the_export_command() {
        let (_, private_pem) = p256();
        let error = PublicKey::from_pem(&private_pem).unwrap_err();
        assert!(
            matches!(&error, KeyError::Label { found, .. } if found == "PRIVATE KEY"),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .contains("openssl pkey -in KEY.pem -pubout"),
            "{error}"
        );
    }

    #[test]
    fn a_public_key_given_as_private_is_refused() {
        let error = SigningKey::from_pem(COSIGN_PUB).unwrap_err();
        assert!(
            matches!(&error, KeyError::Label { found, .. } if found == "PUBLIC KEY"),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("signing needs the private key"),
            "{error}"
        );
    }

    #[test]
    fn a_certificate_given_as_public_key_names_the_extract_command() {
        let cert = "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";
        let error = PublicKey::from_pem(cert).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("openssl x509 -in CERT.pem -pubkey -noout"),
            "{error}"
        );
    }

    #[test]
    fn cosign_encrypted_keys_name_the_pkcs8_commands() {
        for label in [
            "ENCRYPTED SIGSTORE PRIVATE KEY",
            "ENCRYPTED COSIGN PRIVATE KEY",
        ] {
            let pem = format!("-----BEGIN {label}-----\neyJrZGYiOnt9fQ==\n-----END {label}-----\n");
            let error = SigningKey::from_pem(&pem).unwrap_err();
            assert_eq!(error, KeyError::CosignKey(label.into()));
            let message = error.to_string();
            assert!(
                message.contains("toolhost reads PKCS#8 PEM keys"),
                "{message}"
            );
            assert!(
                message.contains("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256"),
                "{message}"
            );
            assert!(
                message.contains("cosign import-key-pair --key signing.pem"),
                "{message}"
            );
            // As a policy key, the fix is cosign's export of the public half.
            let error = PublicKey::from_pem(&pem).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("cosign public-key --key cosign.key"),
                "{error}"
            );
        }
    }

    #[test]
    fn sec1_and_encrypted_pkcs8_keys_name_the_conversion() {
        for label in ["EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY"] {
            let pem = format!("-----BEGIN {label}-----\nMAA=\n-----END {label}-----\n");
            let error = SigningKey::from_pem(&pem).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("openssl pkey -in KEY.pem -out signing.pem"),
                "{error}"
            );
        }
    }

    #[test]
    fn text_that_is_not_one_whole_pem_block_is_refused() {
        let error = PublicKey::from_pem("ssh-ed25519 AAAAC3Nza").unwrap_err();
        assert_eq!(
            error,
            KeyError::NotPem {
                expected: PUBLIC_LABEL
            }
        );
        let unterminated = COSIGN_PUB.replace("-----END PUBLIC KEY-----\n", "");
        let error = PublicKey::from_pem(&unterminated).unwrap_err();
        assert_eq!(
            error,
            KeyError::Unterminated {
                label: "PUBLIC KEY".into()
            }
        );
        let mismatched = COSIGN_PUB.replace("END PUBLIC KEY", "END PRIVATE KEY");
        let error = PublicKey::from_pem(&mismatched).unwrap_err();
        assert_eq!(
            error,
            KeyError::Unterminated {
                label: "PUBLIC KEY".into()
            }
        );
        let two = format!("{COSIGN_PUB}{COSIGN_PUB}");
        assert_eq!(
            PublicKey::from_pem(&two).unwrap_err(),
            KeyError::SeveralBlocks
        );
        let empty = "-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n";
        assert!(matches!(
            PublicKey::from_pem(empty).unwrap_err(),
            KeyError::Base64(_)
        ));
        let huge = "x".repeat(MAX_PEM + 1);
        assert_eq!(
            PublicKey::from_pem(&huge).unwrap_err(),
            KeyError::TooLarge(MAX_PEM + 1)
        );
    }

    #[test]
    fn a_pkcs8_key_whose_halves_disagree_is_rejected() {
        let (_, private_pem) = p256();
        let mut document = pem_decode(&private_pem, PRIVATE_LABEL).unwrap();
        // The last bytes are the embedded public point: spoil its Y.
        let last = document.len() - 1;
        document[last] ^= 0x01;
        let error = SigningKey::from_pem(&pem_encode(PRIVATE_LABEL, &document)).unwrap_err();
        assert!(matches!(error, KeyError::Rejected(_)), "{error:?}");
    }

    #[test]
    fn signing_key_debug_shows_only_the_public_half() {
        let (key, private_pem) = p256();
        let shown = format!("{key:?}");
        assert_eq!(shown, format!("SigningKey({})", key.public_key()));
        let body: String = private_pem
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .collect();
        assert!(!shown.contains(&body[..16]));
    }

    /// Keys and signatures from OpenSSL, a second implementation: its
    /// PKCS#8 files load, and each side verifies the other's signatures.
    /// Skipped, saying so, where `openssl` is not installed.
    #[test]
    fn openssl_keys_and_signatures_interoperate_with_cosigns_hashes() {
        use std::process::Command;
        if Command::new("openssl").arg("version").output().is_err() {
            eprintln!("openssl is not installed: interop test skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let output = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            output.stdout
        };
        // Each curve with the hash cosign pairs with it: SHA-256 for every
        // ECDSA key (sigstore-go loads every ECDSA verifier with SHA-256).
        let curves: [(&[&str], &[&str], Algorithm); 3] = [
            (
                &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
                &["-digest", "sha256"],
                Algorithm::EcdsaP256,
            ),
            (
                &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"],
                &["-digest", "sha256"],
                Algorithm::EcdsaP384,
            ),
            (&["-algorithm", "ED25519"], &[], Algorithm::Ed25519),
        ];
        let message = b"signed by openssl";
        std::fs::write(dir.path().join("payload"), message).unwrap();
        for (options, digest, algorithm) in curves {
            run(&[&["genpkey", "-out", "key.pem"], options].concat());
            run(&["pkey", "-in", "key.pem", "-pubout", "-out", "key.pub"]);
            let private_pem = std::fs::read_to_string(dir.path().join("key.pem")).unwrap();
            let public_pem = std::fs::read_to_string(dir.path().join("key.pub")).unwrap();
            let key = SigningKey::from_pem(&private_pem).unwrap();
            let public = PublicKey::from_pem(&public_pem).unwrap();
            assert_eq!(public, key.public_key(), "{algorithm}");
            assert_eq!(public.to_pem(), public_pem, "{algorithm}");
            // OpenSSL verifies ours (it exits non-zero otherwise).
            std::fs::write(dir.path().join("ours.sig"), key.sign(message).unwrap()).unwrap();
            let verify = [
                "pkeyutl", "-verify", "-pubin", "-inkey", "key.pub", "-rawin", "-in", "payload",
            ];
            run(&[&verify[..], &["-sigfile", "ours.sig"], digest].concat());
            // We verify OpenSSL's.
            let sign = [
                "pkeyutl", "-sign", "-rawin", "-inkey", "key.pem", "-in", "payload",
            ];
            run(&[&sign[..], &["-out", "theirs.sig"], digest].concat());
            let theirs = std::fs::read(dir.path().join("theirs.sig")).unwrap();
            assert!(public.verify(message, &theirs), "{algorithm}");
            if algorithm == Algorithm::EcdsaP384 {
                // Ours is over SHA-256 exactly, not SHA-384, as cosign's.
                let ours = std::fs::read(dir.path().join("ours.sig")).unwrap();
                let sha384 = signature::UnparsedPublicKey::new(
                    &signature::ECDSA_P384_SHA384_ASN1,
                    &public.raw,
                );
                assert!(
                    sha384.verify(message, &ours).is_err(),
                    "P-384 signed over SHA-384"
                );
                // Signatures over the curve's own hash (as toolhost wrote
                // them before) are still accepted.
                run(&[&sign[..], &["-out", "sha384.sig", "-digest", "sha384"]].concat());
                let theirs384 = std::fs::read(dir.path().join("sha384.sig")).unwrap();
                assert!(public.verify(message, &theirs384), "P-384 over SHA-384");
            }
            assert!(!public.verify(b"something else", &theirs), "{algorithm}");
        }
    }
}
