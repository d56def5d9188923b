//! Signature verification for registry components, offline: the
//! [`Policy`] a component is loaded under; [`verify_key`], which decides
//! over the cosign signatures found for a manifest; [`verify_key_bundles`],
//! over the Sigstore bundles signed by a key (cosign 3's default); and
//! [`keyless::verify_bundle`], which checks a keyless Sigstore bundle
//! against a [`TrustedRoot`].
//!
//! No network here: the caller fetches the `.sig` manifest
//! ([`cosign::signature_tag`]), checks each payload blob against its layer
//! digest and hands the payloads with their signature annotations in as
//! [`Candidate`]s. What is verified is then exactly what is stored: the
//! signature over the payload bytes as fetched, and the payload naming
//! this manifest digest in this repository.

pub mod cosign;
mod der;
mod key;
pub(crate) mod key_bundle;
pub mod keyless;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use cosign::SignatureError;
pub use key::{Algorithm, KeyError, PublicKey, SigningKey};
pub use key_bundle::KeyBundleError;
use keyless::{KeylessError, TrustedRoot};

use crate::registry::digest::Digest;
use crate::registry::reference::{OciRef, SCHEME};

/// The longest signature annotation decoded: an ECDSA P-384 signature is
/// 104 bytes (140 in base64); anything near this is not a signature.
const MAX_SIGNATURE_B64: usize = 4096;

/// What a component's signatures must show before it is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// Nothing is required: the component is loaded by digest alone.
    None,
    /// A signature by this key is required: a cosign `.sig` signature,
    /// or a Sigstore bundle signed by the key (an OCI referrer).
    Key {
        /// Where the key was read from, to name it in messages.
        path: PathBuf,
        /// The public key.
        key: PublicKey,
    },
    /// A keyless Sigstore bundle is required, its certificate naming
    /// exactly `identity` as vouched for by exactly `issuer`, checked
    /// against `root`.
    Keyless {
        /// The SAN URI or email the signing certificate must carry.
        identity: String,
        /// The OIDC issuer Fulcio must have recorded.
        issuer: String,
        /// Where the trusted root was read from, to name it in messages.
        root_path: PathBuf,
        /// The trusted root.
        root: Arc<TrustedRoot>,
    },
}

impl Policy {
    /// Decides over `candidates` under this policy: `Ok(None)` for
    /// [`Policy::None`] (nothing checked), the [`Verdict`] for a key.
    ///
    /// # Errors
    /// A [`VerifyError`] from [`verify_key`].
    pub fn verify(
        &self,
        candidates: &[Candidate],
        reference: &OciRef,
        manifest: &Digest,
    ) -> Result<Option<Verdict>, VerifyError> {
        match self {
            Self::None => Ok(None),
            Self::Key { path, key } => {
                verify_key(path, key, candidates, reference, manifest).map(Some)
            }
            Self::Keyless { .. } => Err(VerifyError::WrongEvidence {
                reference: pinned(reference, manifest),
                reason: "a keyless policy is met by a Sigstore bundle (an OCI referrer), not by a \
                         cosign .sig signature"
                    .into(),
            }),
        }
    }

    /// Decides over the Sigstore bundles found for a manifest (its
    /// referrers) under this policy: `Ok(None)` for [`Policy::None`], the
    /// [`Verdict`] of the first bundle that verifies: for a keyless policy
    /// by [`keyless::verify_bundle_bytes`], for a key policy by
    /// [`verify_key_bundles`], over `manifest_bytes`, the manifest as
    /// fetched, whose digest is the one pinned.
    ///
    /// # Errors
    /// For a keyless policy, [`VerifyError::NoBundle`] without bundles and
    /// [`VerifyError::Keyless`] with the first bundle's refusal; for a key
    /// policy, [`verify_key_bundles`]'s.
    pub fn verify_bundles(
        &self,
        bundles: &[Vec<u8>],
        reference: &OciRef,
        manifest_bytes: &[u8],
    ) -> Result<Option<Verdict>, VerifyError> {
        match self {
            Self::None => Ok(None),
            Self::Key { path, key } => {
                verify_key_bundles(path, key, bundles, reference, manifest_bytes).map(Some)
            }
            Self::Keyless {
                identity,
                issuer,
                root_path,
                root,
            } => verify_keyless_bundles(
                (identity, issuer, root_path, root),
                bundles,
                reference,
                manifest_bytes,
            )
            .map(Some),
        }
    }
}

/// [`Policy::verify_bundles`] for a keyless policy: its identity, issuer,
/// trusted root's path and trusted root.
fn verify_keyless_bundles(
    (identity, issuer, root_path, root): (&str, &str, &Path, &TrustedRoot),
    bundles: &[Vec<u8>],
    reference: &OciRef,
    manifest_bytes: &[u8],
) -> Result<Verdict, VerifyError> {
    let manifest = Digest::of(manifest_bytes);
    let mut first_refusal = None;
    for (index, bundle) in bundles.iter().enumerate() {
        match keyless::verify_bundle_bytes(bundle, manifest_bytes, identity, issuer, root) {
            Ok(mut verdict) => {
                verdict.candidate = index;
                return Ok(verdict);
            }
            Err(error) => {
                // The reason a person needs is a real bundle's, not that
                // some junk pushed beside it is not a bundle at all.
                let junk = |e: &KeylessError| matches!(e, KeylessError::Bundle { .. });
                if first_refusal
                    .as_ref()
                    .is_none_or(|first| junk(first) && !junk(&error))
                {
                    first_refusal = Some(error);
                }
            }
        }
    }
    Err(match first_refusal {
        Some(error) => VerifyError::Keyless {
            reference: pinned(reference, &manifest),
            root: root_path.display().to_string(),
            found: bundles.len(),
            error: Box::new(error),
        },
        None => VerifyError::NoBundle {
            reference: pinned(reference, &manifest),
        },
    })
}

/// `oci://REGISTRY/REPOSITORY@sha256:…`, as messages name a manifest.
fn pinned(reference: &OciRef, manifest: &Digest) -> String {
    format!("{SCHEME}{}@{manifest}", docker_reference(reference))
}

/// One signature found for a manifest: a layer of its `.sig` manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The payload blob, as stored (its digest already checked by the
    /// caller against the layer descriptor).
    pub payload: Vec<u8>,
    /// The layer's [`cosign::SIGNATURE_ANNOTATION`]: base64 of the
    /// signature over `payload`.
    pub signature_b64: String,
}

/// Who vouched for a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// The key's path and fingerprint, e.g.
    /// `keys/calc.pub (ecdsa-p256 SHA256:0123456789abcdef)`.
    pub signer: String,
    /// The index in the candidates of the signature that verified, so
    /// the caller can keep that evidence.
    pub candidate: usize,
}

/// Why a manifest is not accepted under a key policy. Every message names
/// the reference with its digest, the reason, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// No signature at all: neither at the `.sig` tag nor a Sigstore
    /// bundle among the referrers.
    #[error(
        "{reference}: no signature found, neither at tag {tag} nor as a Sigstore bundle among its \
         referrers; sign it with `toolhost sign --key KEY.pem {reference}`"
    )]
    Unsigned {
        /// `oci://REGISTRY/REPOSITORY@sha256:…`.
        reference: String,
        /// The tag looked at.
        tag: String,
    },
    /// Signatures, but none by the policy's key.
    #[error(
        "{reference}: {found} signature(s) at tag {tag}, none by {signer}{unreadable_note}; sign it with the \
         private key of {signer}, or set the policy to the key it was signed with",
        unreadable_note = unreadable_note(*unreadable)
    )]
    WrongKey {
        /// `oci://REGISTRY/REPOSITORY@sha256:…`.
        reference: String,
        /// The tag looked at.
        tag: String,
        /// How many signatures were found.
        found: usize,
        /// How many of them were not base64.
        unreadable: usize,
        /// The policy's key path and fingerprint.
        signer: String,
    },
    /// The policy is met by another kind of evidence than was given.
    #[error("{reference}: {reason}")]
    WrongEvidence {
        /// `oci://REGISTRY/REPOSITORY@sha256:…`.
        reference: String,
        /// Which evidence the policy takes.
        reason: String,
    },
    /// No Sigstore bundle for a keyless policy.
    #[error(
        "{reference}: no Sigstore bundle found among its referrers; sign it keyless with \
         `cosign sign --new-bundle-format {reference}`"
    )]
    NoBundle {
        /// `oci://REGISTRY/REPOSITORY@sha256:…`.
        reference: String,
    },
    /// No bundle verified under a keyless policy.
    #[error(
        "{reference}: {found} Sigstore bundle(s), none accepted under trusted root {root}; the first: {error}"
    )]
    Keyless {
        /// `oci://REGISTRY/REPOSITORY@sha256:…`.
        reference: String,
        /// The trusted root's path.
        root: String,
        /// How many bundles were tried.
        found: usize,
        /// Why the first was refused (boxed: it is large, and rare).
        error: Box<KeylessError>,
    },
    /// Sigstore bundles, none of them signed by the policy's key for this
    /// manifest.
    #[error(
        "{reference}: {found} Sigstore bundle(s) among its referrers, none accepted under {signer}; \
         the most telling: {error}"
    )]
    KeyBundle {
        /// `oci://REGISTRY/REPOSITORY@sha256:…`.
        reference: String,
        /// The policy's key path and fingerprint.
        signer: String,
        /// How many bundles were tried.
        found: usize,
        /// Why the most telling one was refused.
        error: Box<KeyBundleError>,
    },
    /// A signature by the right key over a payload for another manifest
    /// or repository.
    #[error("{reference}: a signature by {signer} does not vouch for it: {reason}")]
    BadPayload {
        /// `oci://REGISTRY/REPOSITORY@sha256:…`.
        reference: String,
        /// The policy's key path and fingerprint.
        signer: String,
        /// What the signed payload says instead.
        reason: SignatureError,
    },
}

/// The part of [`VerifyError::WrongKey`]'s message on unreadable ones.
fn unreadable_note(unreadable: usize) -> String {
    match unreadable {
        0 => String::new(),
        n => format!(" ({n} not valid base64)"),
    }
}

/// `REGISTRY/REPOSITORY`, as a cosign payload's `docker-reference` names a
/// component's repository.
#[must_use]
pub fn docker_reference(reference: &OciRef) -> String {
    format!("{}/{}", reference.registry(), reference.repository())
}

/// Decides whether `manifest` of `reference`'s repository is signed by
/// `key` (read from `path`) among `candidates`.
///
/// Accepted when at least one candidate's signature decodes, verifies
/// with `key` over the payload bytes as stored, and its payload names
/// `manifest` in this repository ([`cosign::check_payload`]). Signatures by
/// other keys are ignored, so co-signers do not disturb each other.
///
/// # Errors
/// [`VerifyError::Unsigned`] without candidates; [`VerifyError::BadPayload`]
/// when the key signed only payloads for another digest or repository;
/// [`VerifyError::WrongKey`] otherwise.
pub fn verify_key(
    path: &Path,
    key: &PublicKey,
    candidates: &[Candidate],
    reference: &OciRef,
    manifest: &Digest,
) -> Result<Verdict, VerifyError> {
    let pinned = format!("{SCHEME}{}@{manifest}", docker_reference(reference));
    let signer = format!("{} ({key})", path.display());
    let tag = cosign::signature_tag(manifest);
    if candidates.is_empty() {
        return Err(VerifyError::Unsigned {
            reference: pinned,
            tag,
        });
    }
    let expected = docker_reference(reference);
    let mut unreadable = 0;
    let mut first_refusal = None;
    for (index, candidate) in candidates.iter().enumerate() {
        let Some(signature) = decode_signature(&candidate.signature_b64) else {
            unreadable += 1;
            continue;
        };
        if !key.verify(&candidate.payload, &signature) {
            continue;
        }
        match cosign::check_payload(&candidate.payload, &expected, manifest) {
            Ok(()) => {
                return Ok(Verdict {
                    signer,
                    candidate: index,
                });
            }
            Err(reason) => {
                first_refusal.get_or_insert(reason);
            }
        }
    }
    Err(match first_refusal {
        Some(reason) => VerifyError::BadPayload {
            reference: pinned,
            signer,
            reason,
        },
        None => VerifyError::WrongKey {
            reference: pinned,
            tag,
            found: candidates.len(),
            unreadable,
            signer,
        },
    })
}

/// Decides whether the manifest whose bytes are `manifest_bytes` (as
/// fetched; their digest the one pinned) of `reference`'s repository is
/// signed by `key` (read from `path`) among `bundles`, Sigstore bundles
/// found among its referrers.
///
/// Accepted when at least one bundle is signed by `key` and vouches for
/// this manifest ([`KeyBundleError`] lists how one may not). Bundles by
/// other keys, keyless ones and junk are skipped, so that co-signers and
/// anyone else who can push referrers do not disturb each other. Log
/// entries a bundle carries are not checked: the key is the trust.
///
/// # Errors
/// [`VerifyError::Unsigned`] without bundles, else
/// [`VerifyError::KeyBundle`] with the most telling refusal (a bundle the
/// key signed for something else before one by another key, before junk).
pub fn verify_key_bundles(
    path: &Path,
    key: &PublicKey,
    bundles: &[Vec<u8>],
    reference: &OciRef,
    manifest_bytes: &[u8],
) -> Result<Verdict, VerifyError> {
    let manifest = Digest::of(manifest_bytes);
    let signer = format!("{} ({key})", path.display());
    let mut telling: Option<KeyBundleError> = None;
    for (index, bundle) in bundles.iter().enumerate() {
        match key_bundle::verify(bundle, key, manifest_bytes) {
            Ok(()) => {
                return Ok(Verdict {
                    signer,
                    candidate: index,
                });
            }
            Err(error) => {
                if telling
                    .as_ref()
                    .is_none_or(|first| error.weight() > first.weight())
                {
                    telling = Some(error);
                }
            }
        }
    }
    Err(match telling {
        Some(error) => VerifyError::KeyBundle {
            reference: pinned(reference, &manifest),
            signer,
            found: bundles.len(),
            error: Box::new(error),
        },
        None => VerifyError::Unsigned {
            reference: pinned(reference, &manifest),
            tag: cosign::signature_tag(&manifest),
        },
    })
}

/// The signature bytes of an annotation, or `None` when it is not
/// (bounded, standard, padded) base64.
fn decode_signature(signature_b64: &str) -> Option<Vec<u8>> {
    let text = signature_b64.trim();
    if text.len() > MAX_SIGNATURE_B64 {
        return None;
    }
    BASE64.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cosign key signature published in sigstore-rs's tests
    /// (`src/cosign/signature_layers.rs`,
    /// `build_correct_signature_layer_without_bundle`): cosign.pub, the
    /// signature annotation, and the payload it covers. Not made by us, so
    /// it checks our verifier and payload against cosign itself.
    const COSIGN_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENptdY/l3nB0yqkXLBWkZWQwo6+cu
OSWS1X9vPavpiQOoTTGC0xX57OojUadxF1cdQmrsiReWg2Wn4FneJfa8xw==
-----END PUBLIC KEY-----
";
    const COSIGN_SIGNATURE: &str = "MEUCIQD6q/COgzOyW0YH1Dk+CCYSt4uAhm3FDHUwvPI55zwnlwIgE0ZK58ZOWpZw8YVmBapJhBqCfdPekIknimuO0xH8Jh8=";
    const COSIGN_REFERENCE: &str = "oci://registry-testing.svc.lan/busybox:latest";
    const COSIGN_MANIFEST: &str =
        "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b";

    /// A keyless cosign signature from the same file
    /// (`build_correct_signature_layer_with_certificate`): the key is the
    /// Fulcio certificate's, taken out with `openssl x509 -pubkey`. Its
    /// Rekor entry records the payload's sha256 (e7801de9…), which the
    /// test checks too: these are the bytes cosign signed.
    const KEYLESS_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEg17BAFLV/gCY0gQ10v5T8cmi0xIz
tk2eROdh5/HBX1MSum+cBnT4PMvJ8ABVp4m0qMW9s5NvwXXKEkVTRdj5GA==
-----END PUBLIC KEY-----
";
    const KEYLESS_SIGNATURE: &str = "MEUCIGqWScz7s9aP2sGXNFKeqivw3B6kPRs56AITIHnvd5igAiEA1kzbaV2Y5yPE81EN92NUFOl31LLJSvwsjFQ07m2XqaA=";
    const KEYLESS_REFERENCE: &str =
        "oci://registry-testing.svc.lan/kubewarden/disallow-service-nodeport:v0.1.0";
    const KEYLESS_MANIFEST: &str =
        "sha256:5f481572d088dc4023afb35fced9530ced3d9b03bf7299c6f492163cb9f0452e";
    const KEYLESS_PAYLOAD_SHA256: &str =
        "sha256:e7801de935512e22b237c7b57e42ca4d20e2134bdf1b98f976c8f55d9cfe4067";

    const REFERENCE: &str = "oci://127.0.0.1:5000/acme/calc:1.0";

    fn reference(text: &str) -> OciRef {
        text.parse().unwrap()
    }

    fn digest(text: &str) -> Digest {
        text.parse().unwrap()
    }

    fn manifest() -> Digest {
        Digest::of(b"a component manifest")
    }

    fn signing_key() -> SigningKey {
        SigningKey::generate_p256().unwrap().0
    }

    /// A candidate as `toolhost sign` makes one: `key` over the payload
    /// for `manifest` in `repository`.
    fn signed(key: &SigningKey, repository: &str, manifest: &Digest) -> Candidate {
        let payload = cosign::payload(repository, manifest);
        let signature_b64 = BASE64.encode(key.sign(&payload).unwrap());
        Candidate {
            payload,
            signature_b64,
        }
    }

    fn verify(key: &SigningKey, candidates: &[Candidate]) -> Result<Verdict, VerifyError> {
        let path = Path::new("keys/calc.pub");
        verify_key(
            path,
            &key.public_key(),
            candidates,
            &reference(REFERENCE),
            &manifest(),
        )
    }

    #[test]
    fn cosign_signature_from_sigstore_rs_verifies() {
        let key = PublicKey::from_pem(COSIGN_PUB).unwrap();
        let manifest = digest(COSIGN_MANIFEST);
        let reference = reference(COSIGN_REFERENCE);
        // Our payload for this manifest is the very bytes cosign signed.
        let payload = cosign::payload(&docker_reference(&reference), &manifest);
        let candidate = Candidate {
            payload,
            signature_b64: COSIGN_SIGNATURE.into(),
        };
        let verdict = verify_key(
            Path::new("cosign.pub"),
            &key,
            &[candidate],
            &reference,
            &manifest,
        )
        .unwrap();
        assert_eq!(verdict.candidate, 0);
        assert_eq!(verdict.signer, format!("cosign.pub ({key})"));
        // And the same signature is refused for another manifest.
        let other = Digest::of(b"another manifest");
        let candidate = Candidate {
            payload: cosign::payload(&docker_reference(&reference), &other),
            signature_b64: COSIGN_SIGNATURE.into(),
        };
        let error = verify_key(
            Path::new("cosign.pub"),
            &key,
            &[candidate],
            &reference,
            &other,
        )
        .unwrap_err();
        assert!(
            matches!(error, VerifyError::WrongKey { found: 1, .. }),
            "{error:?}"
        );
    }

    #[test]
    fn cosign_keyless_signature_from_sigstore_rs_verifies_with_its_certificate_key() {
        let key = PublicKey::from_pem(KEYLESS_PUB).unwrap();
        let manifest = digest(KEYLESS_MANIFEST);
        let reference = reference(KEYLESS_REFERENCE);
        let payload = cosign::payload(&docker_reference(&reference), &manifest);
        assert_eq!(Digest::of(&payload), digest(KEYLESS_PAYLOAD_SHA256));
        let candidate = Candidate {
            payload,
            signature_b64: KEYLESS_SIGNATURE.into(),
        };
        verify_key(
            Path::new("fulcio-leaf.pub"),
            &key,
            &[candidate],
            &reference,
            &manifest,
        )
        .unwrap();
        // The key-mode vector's key did not make this signature.
        let other = PublicKey::from_pem(COSIGN_PUB).unwrap();
        let candidate = Candidate {
            payload: cosign::payload(&docker_reference(&reference), &manifest),
            signature_b64: KEYLESS_SIGNATURE.into(),
        };
        assert!(
            verify_key(
                Path::new("cosign.pub"),
                &other,
                &[candidate],
                &reference,
                &manifest
            )
            .is_err()
        );
    }

    #[test]
    fn a_signature_by_the_policy_key_is_accepted_among_others() {
        let key = signing_key();
        let co_signer = signing_key();
        let candidates = [
            signed(&co_signer, "127.0.0.1:5000/acme/calc", &manifest()),
            signed(&key, "127.0.0.1:5000/acme/calc", &manifest()),
        ];
        let verdict = verify(&key, &candidates).unwrap();
        assert_eq!(verdict.candidate, 1);
        assert_eq!(
            verdict.signer,
            format!("keys/calc.pub ({})", key.public_key())
        );
        assert!(
            verdict.signer.contains("ecdsa-p256 SHA256:"),
            "{}",
            verdict.signer
        );
    }

    #[test]
    fn policy_none_checks_nothing_and_policy_key_verifies() {
        let key = signing_key();
        let candidates = [signed(&key, "127.0.0.1:5000/acme/calc", &manifest())];
        assert_eq!(
            Policy::None.verify(&[], &reference(REFERENCE), &manifest()),
            Ok(None)
        );
        let policy = Policy::Key {
            path: "keys/calc.pub".into(),
            key: key.public_key(),
        };
        let verdict = policy
            .verify(&candidates, &reference(REFERENCE), &manifest())
            .unwrap();
        assert_eq!(verdict.map(|verdict| verdict.candidate), Some(0));
        assert!(
            policy
                .verify(&[], &reference(REFERENCE), &manifest())
                .is_err()
        );
    }

    #[test]
    fn unsigned_names_the_reference_the_tag_and_the_sign_command() {
        let error = verify(&signing_key(), &[]).unwrap_err();
        let pinned = format!("oci://127.0.0.1:5000/acme/calc@{}", manifest());
        assert_eq!(
            error,
            VerifyError::Unsigned {
                reference: pinned.clone(),
                tag: cosign::signature_tag(&manifest())
            }
        );
        let message = error.to_string();
        assert!(
            message.contains(&format!("sha256-{}.sig", manifest().hex())),
            "{message}"
        );
        assert!(
            message.contains(&format!("toolhost sign --key KEY.pem {pinned}")),
            "{message}"
        );
    }

    #[test]
    fn signatures_by_another_key_are_refused_naming_the_policy_key() {
        let key = signing_key();
        let other = signing_key();
        let candidates = [signed(&other, "127.0.0.1:5000/acme/calc", &manifest())];
        let error = verify(&key, &candidates).unwrap_err();
        assert!(
            matches!(
                error,
                VerifyError::WrongKey {
                    found: 1,
                    unreadable: 0,
                    ..
                }
            ),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("oci://127.0.0.1:5000/acme/calc@{}", manifest())),
            "{message}"
        );
        assert!(
            message.contains(&format!(
                "1 signature(s) at tag sha256-{}.sig, none by keys/calc.pub ({})",
                manifest().hex(),
                key.public_key()
            )),
            "{message}"
        );
    }

    #[test]
    fn a_flipped_signature_byte_is_refused() {
        let key = signing_key();
        let mut candidate = signed(&key, "127.0.0.1:5000/acme/calc", &manifest());
        let mut signature = BASE64.decode(&candidate.signature_b64).unwrap();
        let middle = signature.len() / 2;
        signature[middle] ^= 0x80;
        candidate.signature_b64 = BASE64.encode(signature);
        let error = verify(&key, &[candidate]).unwrap_err();
        assert!(
            matches!(error, VerifyError::WrongKey { found: 1, .. }),
            "{error:?}"
        );
    }

    #[test]
    fn a_payload_changed_after_signing_is_refused() {
        let key = signing_key();
        let mut candidate = signed(&key, "127.0.0.1:5000/acme/calc", &manifest());
        // Same meaning, other bytes: the signature covers bytes, not meaning.
        candidate.payload.push(b'\n');
        assert!(matches!(
            verify(&key, &[candidate]),
            Err(VerifyError::WrongKey { .. })
        ));
    }

    #[test]
    fn a_validly_signed_payload_for_another_digest_is_refused() {
        let key = signing_key();
        let other = Digest::of(b"an older manifest");
        let candidates = [signed(&key, "127.0.0.1:5000/acme/calc", &other)];
        let error = verify(&key, &candidates).unwrap_err();
        let VerifyError::BadPayload { reason, .. } = &error else {
            panic!("expected BadPayload, got {error:?}");
        };
        assert!(
            matches!(reason, SignatureError::Digest { .. }),
            "{reason:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&format!("oci://127.0.0.1:5000/acme/calc@{}", manifest())),
            "{message}"
        );
        assert!(
            message.contains(&format!("the signature is for manifest {other}")),
            "{message}"
        );
    }

    #[test]
    fn a_validly_signed_payload_for_another_repository_is_refused() {
        let key = signing_key();
        let candidates = [signed(&key, "127.0.0.1:5000/mallory/calc", &manifest())];
        let error = verify(&key, &candidates).unwrap_err();
        let VerifyError::BadPayload { reason, .. } = &error else {
            panic!("expected BadPayload, got {error:?}");
        };
        assert!(
            matches!(reason, SignatureError::Repository { .. }),
            "{reason:?}"
        );
        assert!(
            error
                .to_string()
                .contains("\"127.0.0.1:5000/mallory/calc\""),
            "{error}"
        );
    }

    #[test]
    fn a_good_signature_wins_over_a_bad_payload_by_the_same_key() {
        let key = signing_key();
        let candidates = [
            signed(&key, "127.0.0.1:5000/acme/calc", &Digest::of(b"older")),
            signed(&key, "127.0.0.1:5000/acme/calc", &manifest()),
        ];
        assert_eq!(verify(&key, &candidates).unwrap().candidate, 1);
    }

    #[test]
    fn signatures_that_are_not_base64_are_counted_as_unreadable() {
        let key = signing_key();
        let mut garbled = signed(&key, "127.0.0.1:5000/acme/calc", &manifest());
        garbled.signature_b64 = "not base64!".into();
        let mut huge = garbled.clone();
        huge.signature_b64 = "A".repeat(MAX_SIGNATURE_B64 + 4);
        let other = signed(&signing_key(), "127.0.0.1:5000/acme/calc", &manifest());
        let error = verify(&key, &[garbled, huge, other]).unwrap_err();
        assert!(
            matches!(
                error,
                VerifyError::WrongKey {
                    found: 3,
                    unreadable: 2,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("3 signature(s) at tag"),
            "{error}"
        );
        assert!(
            error.to_string().contains("(2 not valid base64)"),
            "{error}"
        );
    }

    #[test]
    fn a_signature_annotation_with_surrounding_whitespace_is_read() {
        let key = signing_key();
        let mut candidate = signed(&key, "127.0.0.1:5000/acme/calc", &manifest());
        candidate.signature_b64 = format!(" {}\n", candidate.signature_b64);
        verify(&key, &[candidate]).unwrap();
    }
}
