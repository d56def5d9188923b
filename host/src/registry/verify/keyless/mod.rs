//! Keyless (Sigstore) signatures checked offline: a bundle v0.3 whose
//! Fulcio certificate names the signer, against an operator's
//! [`TrustedRoot`], with no network.
//!
//! [`verify_bundle`] follows design §1.6 of issue 26, steps 1–7: read the
//! bundle; trust `integratedTime` only through a Rekor entry whose signed
//! entry timestamp, inclusion proof and checkpoint all verify with a log
//! key of the root; chain the certificate to a CA of the root at that time
//! (EKU codeSigning); verify its embedded SCT with a CT log of the root;
//! compare the identity and issuer exactly; verify the signature with the
//! certificate's key and bind it to the artifact; and check that the log
//! entry records this very signature and certificate. Anything it cannot
//! check it refuses: a bundle with only an RFC 3161 timestamp (Rekor v2)
//! is refused, not trusted.

pub(super) mod bundle;
mod json;
mod root;
mod sct;
mod tlog;
mod x509;

#[cfg(test)]
pub(crate) mod tests;

pub use bundle::BUNDLE_MEDIA_TYPES;
pub use root::{TRUSTED_ROOT_MEDIA_TYPE, TrustedRoot};

use super::Verdict;
use super::key::PublicKey;
use crate::registry::digest::Digest;
use bundle::{Bundle, Content, Entry};
use x509::{Certificate, ChainFailure};

/// The DSSE payload type of an in-toto statement.
pub(super) const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// Why a keyless bundle is not accepted; each names the step that failed
/// and what would make it pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeylessError {
    /// The trusted root file is not one toolhost can use.
    #[error("trusted root: {path}: {reason}")]
    TrustedRoot {
        /// The JSON path, e.g. `tlogs[0].publicKey.rawBytes`.
        path: String,
        /// What is wrong and the fix.
        reason: String,
    },
    /// Step 1: the bundle is not a keyless Sigstore bundle v0.3.
    #[error("bundle: {path}: {reason}")]
    Bundle {
        /// The JSON path.
        path: String,
        /// What is wrong and the fix.
        reason: String,
    },
    /// Step 1: the signing certificate is not a readable X.509 certificate.
    #[error("bundle: the signing certificate is not X.509 DER ({0})")]
    Certificate(String),
    /// Step 2: no log entry carries both a signed entry timestamp and an
    /// inclusion proof (e.g. a Rekor v2 entry, timestamped by RFC 3161).
    #[error(
        "bundle has no signed timestamp toolhost can check offline ({0}); sign with Rekor v1 \
         (cosign's default before v3, or --use-signing-config=false) so the entry carries its signed \
         entry timestamp and inclusion proof"
    )]
    NoSignedTimestamp(String),
    /// Step 2: the log entries are from logs the root does not trust at
    /// their time.
    #[error(
        "transparency log: the entry is from log {log_id} at {integrated_time} (Unix time), which the \
         trusted root does not list as valid then; add that Rekor key to the trusted root, or get a \
         bundle from a log it lists"
    )]
    UntrustedLog {
        /// The entry's log ID, hex.
        log_id: String,
        /// The time it claims.
        integrated_time: u64,
    },
    /// Step 2a: the signed entry timestamp does not verify.
    #[error(
        "transparency log: the signed entry timestamp of entry {log_index} does not verify with the key \
         of {log}: the entry, its time or its index were altered"
    )]
    SignedEntryTimestamp {
        /// The entry's log index.
        log_index: u64,
        /// The log's base URL.
        log: String,
    },
    /// Step 2b: the inclusion proof does not lead to its root hash.
    #[error("transparency log: the inclusion proof of entry {log_index} does not hold: {reason}")]
    InclusionProof {
        /// The entry's log index.
        log_index: u64,
        /// Why.
        reason: String,
    },
    /// Step 2b: the checkpoint is not signed by the log or names another tree.
    #[error("transparency log: the checkpoint of entry {log_index} does not hold: {reason}")]
    Checkpoint {
        /// The entry's log index.
        log_index: u64,
        /// Why.
        reason: String,
    },
    /// Step 3: the certificate does not chain to a trusted CA for code
    /// signing.
    #[error("certificate chain: {0}; the trusted root must list the Fulcio CA that issued it")]
    Chain(String),
    /// Step 3: the certificate was not valid when the log integrated the
    /// entry.
    #[error(
        "certificate chain: not valid when the entry was logged: {0}; sign again (Fulcio certificates live minutes)"
    )]
    CertificateTime(String),
    /// Step 4: no embedded SCT verifies with a trusted CT log.
    #[error(
        "certificate transparency: {0}; the trusted root's ctlogs must list the CT log Fulcio used"
    )]
    Sct(String),
    /// Step 5: another signer or issuer than the policy wants.
    #[error(
        "identity: signed by {found} (issuer {found_issuer}); the policy wants {identity} (issuer {issuer})"
    )]
    Identity {
        /// The certificate's SAN URIs and emails.
        found: String,
        /// The certificate's OIDC issuer.
        found_issuer: String,
        /// The policy's identity.
        identity: String,
        /// The policy's issuer.
        issuer: String,
    },
    /// Step 6: the signature does not verify with the certificate's key.
    #[error("signature: {0}")]
    Signature(String),
    /// Step 6: the bundle signs another artifact.
    #[error("signature: the bundle signs {found}, not {expected}")]
    ArtifactMismatch {
        /// The artifact being verified.
        expected: String,
        /// What the bundle signs instead.
        found: String,
    },
    /// Step 6: a message signature needs the artifact's bytes.
    #[error(
        "signature: the bundle signs the artifact's bytes (messageSignature); verify it with \
         verify_bundle_bytes and the artifact itself"
    )]
    NeedsArtifactBytes,
    /// Step 7: the log entry records another signature, certificate or
    /// artifact than the bundle (CVE-2022-36056).
    #[error("log entry: {0}: the bundle pairs a log entry with a signature it does not record")]
    LogBody(String),
}

/// The SHA-256 of `bytes`.
pub(super) fn sha256(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .to_vec()
}

/// Verifies a keyless Sigstore bundle v0.3 for the artifact with digest
/// `artifact` (design §1.6 steps 1–7): signed by exactly `identity` (SAN
/// URI or email) as vouched for by exactly `issuer` (Fulcio's OIDC issuer
/// extension), trusting only `root`. Offline.
///
/// A `dsseEnvelope` bundle (an in-toto statement, what cosign v3 writes)
/// binds to the digest. A `messageSignature` bundle signs the artifact's
/// bytes, which ECDSA verification needs: use [`verify_bundle_bytes`].
///
/// # Errors
/// A [`KeylessError`] naming the step that failed.
pub fn verify_bundle(
    bundle: &[u8],
    artifact: &Digest,
    identity: &str,
    issuer: &str,
    root: &TrustedRoot,
) -> Result<Verdict, KeylessError> {
    verify(bundle, artifact, None, identity, issuer, root)
}

/// [`verify_bundle`] given the artifact's bytes, which verifies
/// `messageSignature` bundles too (their signature is over the bytes).
///
/// # Errors
/// A [`KeylessError`] naming the step that failed.
pub fn verify_bundle_bytes(
    bundle: &[u8],
    artifact: &[u8],
    identity: &str,
    issuer: &str,
    root: &TrustedRoot,
) -> Result<Verdict, KeylessError> {
    verify(
        bundle,
        &Digest::of(artifact),
        Some(artifact),
        identity,
        issuer,
        root,
    )
}

/// Steps 1–7, in order.
fn verify(
    bytes: &[u8],
    artifact: &Digest,
    artifact_bytes: Option<&[u8]>,
    identity: &str,
    issuer: &str,
    root: &TrustedRoot,
) -> Result<Verdict, KeylessError> {
    let bundle = bundle::read(bytes).map_err(|error| KeylessError::Bundle {
        path: error.path,
        reason: error.reason,
    })?;
    let leaf = Certificate::parse(&bundle.certificate).map_err(KeylessError::Certificate)?;
    let entry = trusted_entry(&bundle, root)?;
    let time = entry.integrated_time;
    let issuer_der =
        x509::verify_chain(&leaf, &root.authorities, time).map_err(|failure| match failure {
            ChainFailure::Time(reason) => KeylessError::CertificateTime(reason),
            ChainFailure::Untrusted(reason) => KeylessError::Chain(reason),
        })?;
    let issuer_certificate = Certificate::parse(&issuer_der).map_err(KeylessError::Chain)?;
    sct::verify(&leaf, issuer_certificate.spki, &root.ctlogs).map_err(KeylessError::Sct)?;
    check_identity(&leaf, identity, issuer)?;
    let key = PublicKey::from_spki_der(leaf.spki).map_err(|error| {
        KeylessError::Signature(format!("the certificate's key is not usable: {error}"))
    })?;
    let signed = check_signature(&bundle.content, &key, artifact, artifact_bytes)?;
    tlog::check_body(&entry.body, signed, &bundle.certificate).map_err(KeylessError::LogBody)?;
    Ok(Verdict {
        signer: format!(
            "{identity} (issuer {issuer}; logged at {time} as entry {})",
            entry.log_index
        ),
        candidate: 0,
    })
}

/// Step 2: the first log entry of a trusted log whose SET, inclusion
/// proof and checkpoint verify; its `integratedTime` is then trusted.
fn trusted_entry<'b>(bundle: &'b Bundle, root: &TrustedRoot) -> Result<&'b Entry, KeylessError> {
    let mut refusal = None;
    for entry in &bundle.entries {
        match check_entry(entry, root) {
            Ok(()) => return Ok(entry),
            // An entry of a trusted log that fails says more than one of
            // a log the root does not list.
            Err(error) => {
                if refusal.is_none() || matches!(refusal, Some(KeylessError::UntrustedLog { .. })) {
                    refusal = Some(error);
                }
            }
        }
    }
    Err(refusal.unwrap_or_else(|| {
        KeylessError::NoSignedTimestamp("it carries no transparency log entry".into())
    }))
}

/// Step 2 for one entry.
fn check_entry(entry: &Entry, root: &TrustedRoot) -> Result<(), KeylessError> {
    let (log, key) = root
        .tlogs
        .iter()
        .find_map(|log| match &log.key {
            Some(key) if log.key_id == entry.log_id && log.valid.covers(entry.integrated_time) => {
                Some((log, key))
            }
            _ => None,
        })
        .ok_or_else(|| KeylessError::UntrustedLog {
            log_id: json::hex(&entry.log_id),
            integrated_time: entry.integrated_time,
        })?;
    let (Some(set), Some(proof)) = (&entry.set, &entry.proof) else {
        let missing = if entry.set.is_none() {
            "no signed entry timestamp (inclusionPromise)"
        } else {
            "no inclusion proof"
        };
        return Err(KeylessError::NoSignedTimestamp(format!(
            "its log entry has {missing}"
        )));
    };
    let payload = tlog::set_payload(
        &entry.body,
        entry.integrated_time,
        &entry.log_id,
        entry.log_index,
    );
    if !key.verify(payload.as_bytes(), set) {
        return Err(KeylessError::SignedEntryTimestamp {
            log_index: entry.log_index,
            log: log.base_url.clone(),
        });
    }
    let inclusion = |reason: String| KeylessError::InclusionProof {
        log_index: entry.log_index,
        reason,
    };
    let computed = tlog::root_from_inclusion(
        proof.log_index,
        proof.tree_size,
        &tlog::leaf_hash(&entry.body),
        &proof.hashes,
    )
    .map_err(inclusion)?;
    if computed != proof.root_hash {
        return Err(inclusion(format!(
            "the entry and its proof hash to root {}, the proof names {}",
            json::hex(&computed),
            json::hex(&proof.root_hash)
        )));
    }
    let checkpoint_error = |reason: String| KeylessError::Checkpoint {
        log_index: entry.log_index,
        reason,
    };
    let envelope = proof
        .checkpoint
        .as_deref()
        .ok_or_else(|| checkpoint_error("the inclusion proof carries no checkpoint".into()))?;
    let checkpoint = tlog::verify_checkpoint(envelope, key).map_err(checkpoint_error)?;
    if checkpoint.size != proof.tree_size || checkpoint.root != proof.root_hash {
        return Err(checkpoint_error(format!(
            "it signs tree size {} with root {}, the proof is for size {} with root {}",
            checkpoint.size,
            json::hex(&checkpoint.root),
            proof.tree_size,
            json::hex(&proof.root_hash)
        )));
    }
    Ok(())
}

/// Step 5: the SAN and issuer extension equal the policy's, exactly.
fn check_identity(
    leaf: &Certificate<'_>,
    identity: &str,
    issuer: &str,
) -> Result<(), KeylessError> {
    let identities = leaf.identities().map_err(KeylessError::Certificate)?;
    let found_issuer = leaf.oidc_issuer().map_err(KeylessError::Certificate)?;
    if identities.iter().any(|name| name == identity) && found_issuer.as_deref() == Some(issuer) {
        return Ok(());
    }
    Err(KeylessError::Identity {
        found: if identities.is_empty() {
            "no URI or email identity".into()
        } else {
            identities.join(", ")
        },
        found_issuer: found_issuer.unwrap_or_else(|| "none recorded".into()),
        identity: identity.into(),
        issuer: issuer.into(),
    })
}

/// Step 6: the signature verifies with the certificate's key and binds to
/// `artifact`. Returns what was signed, for step 7.
fn check_signature<'c>(
    content: &'c Content,
    key: &PublicKey,
    artifact: &Digest,
    artifact_bytes: Option<&[u8]>,
) -> Result<tlog::Signed<'c>, KeylessError> {
    match content {
        Content::Message {
            algorithm,
            digest,
            signature,
        } => {
            if algorithm != "SHA2_256" || json::hex(digest) != artifact.hex() {
                return Err(KeylessError::ArtifactMismatch {
                    expected: artifact.to_string(),
                    found: format!("{algorithm} {}", json::hex(digest)),
                });
            }
            let bytes = artifact_bytes.ok_or(KeylessError::NeedsArtifactBytes)?;
            if !key.verify(bytes, signature) {
                return Err(KeylessError::Signature(
                    "the signature does not verify over the artifact with the certificate's key"
                        .into(),
                ));
            }
            Ok(tlog::Signed::Message { digest, signature })
        }
        Content::Dsse {
            payload_type,
            payload,
            signature,
        } => {
            if payload_type != IN_TOTO_PAYLOAD_TYPE {
                return Err(KeylessError::Signature(format!(
                    "the envelope's payload type is {payload_type:?}; toolhost reads {IN_TOTO_PAYLOAD_TYPE:?} statements"
                )));
            }
            if !key.verify(&pae(payload_type, payload), signature) {
                return Err(KeylessError::Signature(
                    "the envelope's signature does not verify with the certificate's key".into(),
                ));
            }
            check_statement(payload, artifact)?;
            Ok(tlog::Signed::Dsse { payload, signature })
        }
    }
}

/// DSSE's pre-authentication encoding: `DSSEv1 SP len(type) SP type SP
/// len(body) SP body`, lengths in ASCII decimal.
pub(super) fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// What an in-toto statement says, as far as verification reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Statement {
    /// `predicateType`, if it is a string.
    pub(super) predicate_type: Option<String>,
    /// The hex sha256 digests of its subjects.
    pub(super) digests: Vec<String>,
}

impl Statement {
    /// Reads a statement; `Err` says what is wrong with it.
    pub(super) fn read(payload: &[u8]) -> Result<Self, String> {
        let statement: serde_json::Value = serde_json::from_slice(payload)
            .map_err(|error| format!("the signed statement is not JSON ({error})"))?;
        let subjects = statement
            .get("subject")
            .and_then(serde_json::Value::as_array)
            .ok_or("the signed statement has no subject list")?;
        let digests = subjects
            .iter()
            .filter_map(|subject| {
                subject
                    .pointer("/digest/sha256")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            })
            .collect();
        let predicate_type = statement
            .get("predicateType")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
        Ok(Self {
            predicate_type,
            digests,
        })
    }

    /// `None` when a subject is `artifact`, else what the statement is
    /// about instead, to name in a refusal.
    pub(super) fn mismatch(&self, artifact: &Digest) -> Option<String> {
        if self.digests.iter().any(|digest| digest == artifact.hex()) {
            return None;
        }
        Some(if self.digests.is_empty() {
            "a statement with no sha256 subject".into()
        } else {
            format!(
                "a statement about sha256:{}",
                self.digests.join(", sha256:")
            )
        })
    }
}

/// The in-toto statement is cosign's signature (not an attestation: an
/// SBOM or provenance says something about the component, not that its
/// signer approved it) and names `artifact` among its subjects' sha256.
fn check_statement(payload: &[u8], artifact: &Digest) -> Result<(), KeylessError> {
    let statement = Statement::read(payload).map_err(KeylessError::Signature)?;
    let sign = super::key_bundle::SIGN_PREDICATE_TYPE;
    if statement.predicate_type.as_deref() != Some(sign) {
        return Err(KeylessError::Signature(format!(
            "the statement's predicate type is {}, not cosign's signature ({sign}): an attestation \
             is not a signature; sign the component with `cosign sign`",
            statement.predicate_type.as_deref().unwrap_or("none")
        )));
    }
    match statement.mismatch(artifact) {
        None => Ok(()),
        Some(found) => Err(KeylessError::ArtifactMismatch {
            expected: artifact.to_string(),
            found,
        }),
    }
}
