//! Sigstore bundles signed by a key: what `cosign sign --key` writes by
//! default since cosign 3 (an OCI referrer of the manifest whose
//! verification material is the key's hint, not a certificate), checked
//! offline under a key policy; and written, for `toolhost sign --bundle`.
//!
//! The key is the trust: the signature must verify with the policy's key
//! and what it signs must be this manifest, either a DSSE envelope holding
//! an in-toto statement of cosign's signature predicate whose subject is
//! the manifest's digest, or a message signature over the manifest's
//! bytes. The bundle's transparency log entries, if any, are neither
//! required nor checked, and no verdict claims they were.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::key::{KeyError, PublicKey, SigningKey};
use super::keyless::bundle::{self, Content};
use super::keyless::{BUNDLE_MEDIA_TYPES, IN_TOTO_PAYLOAD_TYPE, Statement, pae, sha256};
use crate::registry::digest::Digest;

/// The predicate type of a cosign image signature (an in-toto statement
/// with an empty predicate). Other predicates are attestations (an SBOM,
/// a provenance): claims about the image, not its signer's approval.
pub(crate) const SIGN_PREDICATE_TYPE: &str = "https://sigstore.dev/cosign/sign/v1";

/// The in-toto statement type cosign 3 writes.
const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// How to make a bundle this policy accepts, for the refusals.
const SIGN_FIX: &str = "sign the digest with `cosign sign --key` or `toolhost sign --bundle --key`";

/// Why one key-signed bundle does not vouch for a manifest under a key
/// policy; each says what would make it pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyBundleError {
    /// Not a key-signed Sigstore bundle v0.3 (junk, or a keyless bundle).
    #[error("bundle: {path}: {reason}")]
    Bundle {
        /// The JSON path.
        path: String,
        /// What is wrong and the fix.
        reason: String,
    },
    /// Signed by another key.
    #[error(
        "signed by another key{hint_note}; sign it with the private key of the policy's key, or set the \
         policy to the key it was signed with",
        hint_note = hint_note(hint.as_deref(), expected)
    )]
    WrongKey {
        /// The key hint the bundle carries, if any (unsigned).
        hint: Option<String>,
        /// The policy key's hint.
        expected: String,
    },
    /// The bundle names the policy's key, yet its signature does not
    /// verify with it: changed after signing.
    #[error(
        "the bundle names the policy's key, but its signature does not verify with it: the bundle was \
         altered after signing; {SIGN_FIX}"
    )]
    Altered,
    /// The envelope holds something other than an in-toto statement.
    #[error(
        "the envelope's payload type is {found:?}, not an in-toto statement ({IN_TOTO_PAYLOAD_TYPE:?}); \
         {SIGN_FIX}"
    )]
    PayloadType {
        /// The payload type found.
        found: String,
    },
    /// The statement cannot be read.
    #[error("{reason}; {SIGN_FIX}")]
    Statement {
        /// What is wrong with it.
        reason: String,
    },
    /// An attestation (another predicate) rather than a signature.
    #[error(
        "the statement's predicate type is {found}, not cosign's signature ({SIGN_PREDICATE_TYPE}): an \
         attestation by the key is a claim about the component, not a signature of it; {SIGN_FIX}"
    )]
    Predicate {
        /// The predicate type found (`none` when absent).
        found: String,
    },
    /// The bundle vouches for another manifest.
    #[error("the bundle signs {found}, not manifest {expected}; sign this digest")]
    Subject {
        /// The manifest being verified.
        expected: String,
        /// What the bundle signs instead.
        found: String,
    },
}

impl KeyBundleError {
    /// How much a refusal says about this manifest, to report the most
    /// telling of several: junk least, a bundle the key signed most.
    pub(super) fn weight(&self) -> u8 {
        match self {
            Self::Bundle { .. } => 0,
            Self::WrongKey { .. } => 1,
            Self::Altered => 2,
            _ => 3,
        }
    }

    /// Whether this bundle is the policy key's (signed by it, or naming it
    /// and altered), not another key's or junk.
    pub(crate) fn concerns_the_key(&self) -> bool {
        self.weight() >= 2
    }
}

/// The part of [`KeyBundleError::WrongKey`]'s message on the hints.
fn hint_note(hint: Option<&str>, expected: &str) -> String {
    match hint {
        Some(hint) => format!(" (the bundle's key hint is {hint}; the policy key's is {expected})"),
        None => String::new(),
    }
}

/// The hint cosign writes for `key`: base64 of the SHA-256 of its
/// SubjectPublicKeyInfo.
pub(super) fn key_hint(key: &PublicKey) -> String {
    BASE64.encode(sha256(key.spki_der()))
}

/// Checks that `bytes`, a Sigstore bundle, is signed by `key` and vouches
/// for the manifest whose bytes (as fetched, their digest the one pinned)
/// are `manifest`. Offline.
///
/// # Errors
/// A [`KeyBundleError`] saying why not.
pub(crate) fn verify(bytes: &[u8], key: &PublicKey, manifest: &[u8]) -> Result<(), KeyBundleError> {
    let read = bundle::read_key_signed(bytes).map_err(|error| KeyBundleError::Bundle {
        path: error.path,
        reason: error.reason,
    })?;
    let expected = key_hint(key);
    let unsigned = || {
        if read.hint.as_deref() == Some(expected.as_str()) {
            KeyBundleError::Altered
        } else {
            KeyBundleError::WrongKey {
                hint: read.hint.clone(),
                expected: expected.clone(),
            }
        }
    };
    let digest = Digest::of(manifest);
    match &read.content {
        Content::Message {
            algorithm,
            digest: signed,
            signature,
        } => {
            // The digest is not signed, but it names what the signature is
            // over: a mismatch says which artifact that was.
            if algorithm != "SHA2_256" || *signed != sha256(manifest) {
                return Err(KeyBundleError::Subject {
                    expected: digest.to_string(),
                    found: format!("a message digest {algorithm} {}", hex(signed)),
                });
            }
            if !key.verify(manifest, signature) {
                return Err(unsigned());
            }
            Ok(())
        }
        Content::Dsse {
            payload_type,
            payload,
            signature,
        } => {
            if !key.verify(&pae(payload_type, payload), signature) {
                return Err(unsigned());
            }
            if payload_type != IN_TOTO_PAYLOAD_TYPE {
                return Err(KeyBundleError::PayloadType {
                    found: payload_type.clone(),
                });
            }
            check_statement(payload, &digest)
        }
    }
}

/// The signed statement is cosign's signature of `manifest`.
fn check_statement(payload: &[u8], manifest: &Digest) -> Result<(), KeyBundleError> {
    let statement =
        Statement::read(payload).map_err(|reason| KeyBundleError::Statement { reason })?;
    if statement.predicate_type.as_deref() != Some(SIGN_PREDICATE_TYPE) {
        return Err(KeyBundleError::Predicate {
            found: statement.predicate_type.unwrap_or_else(|| "none".into()),
        });
    }
    match statement.mismatch(manifest) {
        None => Ok(()),
        Some(found) => Err(KeyBundleError::Subject {
            expected: manifest.to_string(),
            found,
        }),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A Sigstore bundle v0.3 signing manifest `manifest` of repository
/// `docker_reference` with `key`, as cosign 3's `sign --key` writes one:
/// a DSSE envelope over an in-toto statement of [`SIGN_PREDICATE_TYPE`]
/// whose subject is the manifest, the key's hint as verification
/// material, and no transparency log entry (nothing is uploaded anywhere).
///
/// # Errors
/// When the key cannot sign.
pub(crate) fn sign(
    key: &SigningKey,
    docker_reference: &str,
    manifest: &Digest,
) -> Result<Vec<u8>, KeyError> {
    let statement = serde_json::to_vec(&serde_json::json!({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": docker_reference, "digest": {"sha256": manifest.hex()}}],
        "predicateType": SIGN_PREDICATE_TYPE,
        "predicate": {},
    }))
    .expect("a statement serialises");
    let signature = key.sign(&pae(IN_TOTO_PAYLOAD_TYPE, &statement))?;
    let bundle = serde_json::json!({
        "mediaType": BUNDLE_MEDIA_TYPES[0],
        "verificationMaterial": {"publicKey": {"hint": key_hint(&key.public_key())}},
        "dsseEnvelope": {
            "payload": BASE64.encode(&statement),
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": BASE64.encode(signature), "keyid": ""}],
        },
    });
    Ok(serde_json::to_vec(&bundle).expect("a bundle serialises"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use serde_json::Value;

    use super::*;
    use crate::registry::reference::OciRef;
    use crate::registry::verify::keyless::tests::kit::{self, KeySigned};
    use crate::registry::verify::keyless::{KeylessError, TrustedRoot};
    use crate::registry::verify::{Policy, VerifyError};

    const MANIFEST: &[u8] =
        b"{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\"}";

    fn reference() -> OciRef {
        "oci://127.0.0.1:5000/acme/calc:1.0".parse().unwrap()
    }

    fn signing_key() -> SigningKey {
        SigningKey::generate_p256().unwrap().0
    }

    fn bytes(bundle: &Value) -> Vec<u8> {
        serde_json::to_vec(bundle).unwrap()
    }

    fn policy(key: &SigningKey) -> Policy {
        Policy::Key {
            path: "keys/calc.pub".into(),
            key: key.public_key(),
        }
    }

    /// The policy's refusal of `bundles`, and the most telling bundle's.
    fn refusal(key: &SigningKey, bundles: &[Value]) -> (VerifyError, KeyBundleError) {
        let bundles: Vec<Vec<u8>> = bundles.iter().map(bytes).collect();
        let error = policy(key)
            .verify_bundles(&bundles, &reference(), MANIFEST)
            .unwrap_err();
        let VerifyError::KeyBundle { error: first, .. } = &error else {
            panic!("expected KeyBundle, got {error:?}");
        };
        let first = (**first).clone();
        (error, first)
    }

    #[test]
    fn a_key_signed_dsse_bundle_verifies_among_junk_and_other_keys_bundles() {
        let key = signing_key();
        let other = kit::key_signed(&signing_key(), &KeySigned::of(MANIFEST));
        let junk = serde_json::json!({"not": "a bundle"});
        let good = kit::key_signed(&key, &KeySigned::of(MANIFEST));
        // The log entry it carries (Rekor v2-like) is neither read nor needed.
        assert!(good["verificationMaterial"]["tlogEntries"][0].is_object());
        let verdict = policy(&key)
            .verify_bundles(
                &[bytes(&junk), bytes(&other), bytes(&good)],
                &reference(),
                MANIFEST,
            )
            .unwrap()
            .unwrap();
        assert_eq!(verdict.candidate, 2);
        assert_eq!(
            verdict.signer,
            format!("keys/calc.pub ({})", key.public_key())
        );
    }

    #[test]
    fn a_key_signed_message_signature_bundle_verifies() {
        let key = signing_key();
        let mut how = KeySigned::of(MANIFEST);
        how.message = true;
        verify(
            &bytes(&kit::key_signed(&key, &how)),
            &key.public_key(),
            MANIFEST,
        )
        .unwrap();
        // Over another manifest's bytes, it vouches for that one only.
        how.subject = b"another manifest".to_vec();
        let error = verify(
            &bytes(&kit::key_signed(&key, &how)),
            &key.public_key(),
            MANIFEST,
        )
        .unwrap_err();
        assert_eq!(
            error,
            KeyBundleError::Subject {
                expected: Digest::of(MANIFEST).to_string(),
                found: format!(
                    "a message digest SHA2_256 {}",
                    Digest::of(b"another manifest").hex()
                ),
            }
        );
        // The digest right, the signature over other bytes: altered.
        how.subject = MANIFEST.to_vec();
        let mut bundle = kit::key_signed(&key, &how);
        let other = key.sign(b"another manifest").unwrap();
        bundle["messageSignature"]["signature"] = Value::String(BASE64.encode(other));
        assert_eq!(
            verify(&bytes(&bundle), &key.public_key(), MANIFEST),
            Err(KeyBundleError::Altered)
        );
    }

    #[test]
    fn a_bundle_by_another_key_is_refused_naming_both_hints_and_the_fix() {
        let key = signing_key();
        let other = signing_key();
        let (error, first) = refusal(&key, &[kit::key_signed(&other, &KeySigned::of(MANIFEST))]);
        assert_eq!(
            first,
            KeyBundleError::WrongKey {
                hint: Some(key_hint(&other.public_key())),
                expected: key_hint(&key.public_key()),
            }
        );
        let message = error.to_string();
        assert!(
            message.starts_with(&format!(
                "oci://127.0.0.1:5000/acme/calc@{}",
                Digest::of(MANIFEST)
            )),
            "{message}"
        );
        assert!(message.contains("1 Sigstore bundle(s)"), "{message}");
        assert!(
            message.contains("none accepted under keys/calc.pub"),
            "{message}"
        );
        assert!(
            message.contains("sign it with the private key of the policy's key"),
            "{message}"
        );
    }

    #[test]
    fn a_payload_changed_after_signing_is_refused_as_altered() {
        let key = signing_key();
        let mut bundle = kit::key_signed(&key, &KeySigned::of(MANIFEST));
        let statement = BASE64
            .decode(bundle["dsseEnvelope"]["payload"].as_str().unwrap())
            .unwrap();
        // Same meaning, other bytes: the signature covers bytes.
        let mut tampered = statement.clone();
        tampered.push(b'\n');
        bundle["dsseEnvelope"]["payload"] = Value::String(BASE64.encode(tampered));
        let (error, first) = refusal(&key, &[bundle]);
        assert_eq!(first, KeyBundleError::Altered);
        assert!(
            error.to_string().contains("altered after signing"),
            "{error}"
        );
    }

    #[test]
    fn a_bundle_the_key_signed_for_another_manifest_is_refused() {
        let key = signing_key();
        let other_manifest = b"an older manifest";
        let (error, first) = refusal(
            &key,
            &[kit::key_signed(&key, &KeySigned::of(other_manifest))],
        );
        assert_eq!(
            first,
            KeyBundleError::Subject {
                expected: Digest::of(MANIFEST).to_string(),
                found: format!("a statement about {}", Digest::of(other_manifest)),
            }
        );
        assert!(error.to_string().contains("sign this digest"), "{error}");
    }

    #[test]
    fn a_bundle_of_another_payload_type_is_refused() {
        let key = signing_key();
        let mut how = KeySigned::of(MANIFEST);
        how.payload_type = "text/plain".into();
        let (error, first) = refusal(&key, &[kit::key_signed(&key, &how)]);
        assert_eq!(
            first,
            KeyBundleError::PayloadType {
                found: "text/plain".into()
            }
        );
        assert!(error.to_string().contains("cosign sign --key"), "{error}");
    }

    #[test]
    fn an_attestation_by_the_key_is_not_a_signature() {
        let key = signing_key();
        let mut how = KeySigned::of(MANIFEST);
        how.predicate_type = "https://slsa.dev/provenance/v1".into();
        let (_, first) = refusal(&key, &[kit::key_signed(&key, &how)]);
        assert_eq!(
            first,
            KeyBundleError::Predicate {
                found: "https://slsa.dev/provenance/v1".into()
            }
        );
    }

    #[test]
    fn the_refusal_reported_is_the_policy_keys_bundle_not_the_junk_or_other_keys() {
        let key = signing_key();
        let junk = serde_json::json!({"not": "a bundle"});
        let other = kit::key_signed(&signing_key(), &KeySigned::of(MANIFEST));
        let stale = kit::key_signed(&key, &KeySigned::of(b"older"));
        let (error, first) = refusal(&key, &[junk, other, stale]);
        assert!(matches!(first, KeyBundleError::Subject { .. }), "{first:?}");
        assert!(
            error.to_string().contains("3 Sigstore bundle(s)"),
            "{error}"
        );
    }

    #[test]
    fn no_bundles_under_a_key_policy_is_unsigned() {
        let error = policy(&signing_key())
            .verify_bundles(&[], &reference(), MANIFEST)
            .unwrap_err();
        assert!(matches!(error, VerifyError::Unsigned { .. }), "{error:?}");
        assert!(error.to_string().contains("toolhost sign --key"), "{error}");
    }

    #[test]
    fn a_keyless_policy_refuses_a_key_signed_bundle_naming_the_key_policy() {
        let key = signing_key();
        let built = kit::build(&kit::Options::default());
        let root = TrustedRoot::parse(&serde_json::to_vec(&built.root).unwrap()).unwrap();
        let policy = Policy::Keyless {
            identity: kit::IDENTITY.into(),
            issuer: kit::ISSUER.into(),
            root_path: "trusted_root.json".into(),
            root: Arc::new(root),
        };
        let bundle = bytes(&kit::key_signed(&key, &KeySigned::of(MANIFEST)));
        let error = policy
            .verify_bundles(&[bundle], &reference(), MANIFEST)
            .unwrap_err();
        let VerifyError::Keyless { error: inner, .. } = &error else {
            panic!("expected Keyless, got {error:?}");
        };
        assert!(
            matches!(&**inner, KeylessError::Bundle { path, .. } if path == "verificationMaterial.publicKey"),
            "{inner:?}"
        );
        assert!(error.to_string().contains("verify = { key = "), "{error}");
    }

    #[test]
    fn a_key_policy_refuses_a_keyless_bundle_naming_the_keyless_policy() {
        let key = signing_key();
        let mut options = kit::Options::default();
        options.artifact = MANIFEST.to_vec();
        let keyless = bytes(&kit::build(&options).bundle);
        let error = verify(&keyless, &key.public_key(), MANIFEST).unwrap_err();
        let KeyBundleError::Bundle { path, reason } = &error else {
            panic!("expected Bundle, got {error:?}");
        };
        assert_eq!(path, "verificationMaterial.certificate");
        assert!(
            reason.contains("keyless policy (identity, issuer, trusted_root)"),
            "{reason}"
        );
    }

    #[test]
    fn the_bundle_toolhost_signs_verifies_under_its_key_only() {
        let key = signing_key();
        let manifest = Digest::of(MANIFEST);
        let bundle = sign(&key, "127.0.0.1:5000/acme/calc", &manifest).unwrap();
        verify(&bundle, &key.public_key(), MANIFEST).unwrap();
        let verdict = verify_key_bundles_for(&key, &bundle);
        assert_eq!(verdict.candidate, 0);
        assert!(matches!(
            verify(&bundle, &signing_key().public_key(), MANIFEST),
            Err(KeyBundleError::WrongKey { .. })
        ));
        assert!(matches!(
            verify(&bundle, &key.public_key(), b"another manifest"),
            Err(KeyBundleError::Subject { .. })
        ));
    }

    fn verify_key_bundles_for(key: &SigningKey, bundle: &[u8]) -> crate::registry::verify::Verdict {
        crate::registry::verify::verify_key_bundles(
            Path::new("keys/calc.pub"),
            &key.public_key(),
            &[bundle.to_vec()],
            &reference(),
            MANIFEST,
        )
        .unwrap()
    }
}
