//! cosign's key signatures as they sit in a registry: the tag that holds
//! them (`sha256-<hex>.sig`), the layer media type and annotation, and the
//! "simple signing" payload each signature covers (cosign's
//! `specs/SIGNATURE_SPEC.md`, after containers/image's signature format).
//!
//! The payload names the manifest digest and the repository it was signed
//! for. A valid signature over a payload naming another digest or another
//! repository proves nothing about this one, so [`check_payload`] refuses
//! both (cosign itself only warns on the repository; a signature copied
//! from another repository is exactly what that check catches).

use serde::{Deserialize, Serialize};

use crate::registry::digest::Digest;

/// The media type of a `.sig` manifest's layers: each one a payload.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";

/// The layer annotation holding the base64 signature over the payload.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// The payload's `critical.type`, the same for every cosign signature.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";

/// The largest payload read: a real one is about 250 bytes (cosign adds
/// only small `optional` annotations), and a bigger blob is not parsed.
pub const MAX_PAYLOAD: usize = 64 * 1024;

/// Why a payload does not vouch for this manifest in this repository.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// Larger than [`MAX_PAYLOAD`].
    #[error(
        "the signed payload has {0} bytes, more than a cosign payload ever holds ({MAX_PAYLOAD}); re-sign with `toolhost sign` or `cosign sign`"
    )]
    TooLarge(usize),
    /// Not a simple-signing JSON document.
    #[error(
        "the signed payload is not a cosign simple-signing document ({0}); re-sign with `toolhost sign` or `cosign sign`"
    )]
    Malformed(String),
    /// `critical.type` is not cosign's.
    #[error(
        "the signed payload's type is {0:?}, not {PAYLOAD_TYPE:?}: it is not an image signature; re-sign with `toolhost sign` or `cosign sign`"
    )]
    Type(String),
    /// The payload signs another manifest.
    #[error("the signature is for manifest {found}, not {expected}: sign this digest")]
    Digest {
        /// The digest the payload names.
        found: String,
        /// The digest being verified.
        expected: Digest,
    },
    /// The payload was signed for another repository.
    #[error(
        "the signature was made for {found:?}, not {expected:?}: it was copied from another repository; sign this one"
    )]
    Repository {
        /// The `docker-reference` the payload names.
        found: String,
        /// The `REGISTRY/REPOSITORY` being verified.
        expected: String,
    },
}

/// A simple-signing document, fields in cosign's order (serde writes them
/// in declaration order, which is the byte layout cosign signs).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SimpleSigning {
    critical: Critical,
    /// Free-form claims (creator, timestamp, annotations): nothing here
    /// is trusted, so it is read as any JSON and ignored.
    optional: Option<serde_json::Value>,
}

/// The part of the payload a verifier must understand in full; unknown
/// fields are refused, as containers/image's format requires.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

/// Which repository the signature was made for.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Identity {
    docker_reference: String,
}

/// Which manifest the signature covers.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Image {
    docker_manifest_digest: String,
}

/// The tag cosign stores a manifest's signatures under: `sha256-<hex>.sig`.
#[must_use]
pub fn signature_tag(manifest: &Digest) -> String {
    format!("sha256-{}.sig", manifest.hex())
}

/// The payload cosign signs for `manifest` in `docker_reference`
/// (`REGISTRY/REPOSITORY`, no tag, no digest), byte for byte as cosign
/// writes it.
#[must_use]
pub fn payload(docker_reference: &str, manifest: &Digest) -> Vec<u8> {
    let document = SimpleSigning {
        critical: Critical {
            identity: Identity {
                docker_reference: docker_reference.to_owned(),
            },
            image: Image {
                docker_manifest_digest: manifest.to_string(),
            },
            kind: PAYLOAD_TYPE.to_owned(),
        },
        optional: None,
    };
    // Serialising plain structs of strings into memory cannot fail.
    serde_json::to_vec(&document).unwrap_or_default()
}

/// Checks that `payload` vouches for `manifest` in `docker_reference`
/// (`REGISTRY/REPOSITORY`).
///
/// # Errors
/// A [`SignatureError`] naming what the payload says instead.
pub fn check_payload(
    payload: &[u8],
    docker_reference: &str,
    manifest: &Digest,
) -> Result<(), SignatureError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(SignatureError::TooLarge(payload.len()));
    }
    let document: SimpleSigning = serde_json::from_slice(payload)
        .map_err(|error| SignatureError::Malformed(error.to_string()))?;
    let critical = document.critical;
    if critical.kind != PAYLOAD_TYPE {
        return Err(SignatureError::Type(clip(&critical.kind)));
    }
    if critical.image.docker_manifest_digest != manifest.to_string() {
        return Err(SignatureError::Digest {
            found: clip(&critical.image.docker_manifest_digest),
            expected: manifest.clone(),
        });
    }
    if canonical(&critical.identity.docker_reference) != canonical(docker_reference) {
        return Err(SignatureError::Repository {
            found: clip(&critical.identity.docker_reference),
            expected: docker_reference.to_owned(),
        });
    }
    Ok(())
}

/// A `REGISTRY/REPOSITORY` as go-containerregistry names it, for
/// comparing: cosign writes Docker Hub's registry as `index.docker.io`
/// where a user writes `docker.io`, and both name the same repository.
fn canonical(docker_reference: &str) -> std::borrow::Cow<'_, str> {
    match docker_reference.strip_prefix("docker.io/") {
        Some(repository) => format!("index.docker.io/{repository}").into(),
        None => docker_reference.into(),
    }
}

/// A payload's string cut for a message: it comes from the registry.
fn clip(text: &str) -> String {
    /// Longer than any reference or digest, short enough for one line.
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str =
        "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b";

    fn manifest() -> Digest {
        MANIFEST.parse().unwrap()
    }

    #[test]
    fn payload_is_byte_for_byte_what_cosign_signs() {
        // The bytes of sigstore-rs's cosign-signed test payload
        // (`src/cosign/signature_layers.rs`): cosign's field order, no
        // whitespace, `optional` null.
        let expected = br#"{"critical":{"identity":{"docker-reference":"registry-testing.svc.lan/busybox"},"image":{"docker-manifest-digest":"sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"},"type":"cosign container image signature"},"optional":null}"#;
        assert_eq!(
            payload("registry-testing.svc.lan/busybox", &manifest()),
            expected.to_vec()
        );
    }

    #[test]
    fn signature_tag_is_the_digest_with_a_dash_and_sig() {
        assert_eq!(
            signature_tag(&manifest()),
            "sha256-f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b.sig"
        );
    }

    #[test]
    fn a_payload_for_this_digest_and_repository_passes() {
        let bytes = payload("127.0.0.1:5000/acme/calc", &manifest());
        check_payload(&bytes, "127.0.0.1:5000/acme/calc", &manifest()).unwrap();
    }

    #[test]
    fn cosign_optional_annotations_are_accepted_and_ignored() {
        // `cosign sign -a owner=acme` puts annotations, creator and
        // timestamp under `optional`, in any order, with whitespace.
        let bytes = format!(
            r#"{{ "optional": {{"owner": "acme", "creator": "cosign", "timestamp": 1700000000}},
                "critical": {{"type": "{PAYLOAD_TYPE}", "image": {{"docker-manifest-digest": "{MANIFEST}"}},
                "identity": {{"docker-reference": "ghcr.io/acme/calc"}}}} }}"#
        );
        check_payload(bytes.as_bytes(), "ghcr.io/acme/calc", &manifest()).unwrap();
    }

    #[test]
    fn a_payload_for_another_digest_is_refused() {
        let other: Digest = format!("sha256:{}", "0".repeat(64)).parse().unwrap();
        let bytes = payload("ghcr.io/acme/calc", &other);
        let error = check_payload(&bytes, "ghcr.io/acme/calc", &manifest()).unwrap_err();
        assert_eq!(
            error,
            SignatureError::Digest {
                found: other.to_string(),
                expected: manifest()
            }
        );
        let message = error.to_string();
        assert!(
            message.contains(&other.to_string()) && message.contains(MANIFEST),
            "{message}"
        );
    }

    #[test]
    fn a_payload_for_another_repository_is_refused() {
        let bytes = payload("ghcr.io/mallory/calc", &manifest());
        let error = check_payload(&bytes, "ghcr.io/acme/calc", &manifest()).unwrap_err();
        assert_eq!(
            error,
            SignatureError::Repository {
                found: "ghcr.io/mallory/calc".into(),
                expected: "ghcr.io/acme/calc".into()
            }
        );
        assert!(
            error.to_string().contains("copied from another repository"),
            "{error}"
        );
        // The same repository on another registry is another repository.
        let bytes = payload("evil.example/acme/calc", &manifest());
        assert!(check_payload(&bytes, "ghcr.io/acme/calc", &manifest()).is_err());
    }

    #[test]
    fn docker_hub_is_the_same_registry_however_it_is_spelled() {
        // cosign (go-containerregistry) writes Docker Hub as index.docker.io.
        let bytes = payload("index.docker.io/acme/calc", &manifest());
        check_payload(&bytes, "docker.io/acme/calc", &manifest()).unwrap();
        let bytes = payload("docker.io/acme/calc", &manifest());
        check_payload(&bytes, "index.docker.io/acme/calc", &manifest()).unwrap();
    }

    #[test]
    fn another_payload_type_is_refused() {
        let bytes = String::from_utf8(payload("ghcr.io/acme/calc", &manifest()))
            .unwrap()
            .replace(PAYLOAD_TYPE, "atomic container signature");
        let error = check_payload(bytes.as_bytes(), "ghcr.io/acme/calc", &manifest()).unwrap_err();
        assert_eq!(
            error,
            SignatureError::Type("atomic container signature".into())
        );
    }

    #[test]
    fn unknown_critical_fields_and_duplicates_are_refused() {
        let base = String::from_utf8(payload("ghcr.io/acme/calc", &manifest())).unwrap();
        let extra = base.replace(r#""type":"#, r#""expires":1,"type":"#);
        let error = check_payload(extra.as_bytes(), "ghcr.io/acme/calc", &manifest()).unwrap_err();
        assert!(
            matches!(&error, SignatureError::Malformed(reason) if reason.contains("expires")),
            "{error:?}"
        );
        // Two digests: a parser that kept the first and one that kept the
        // last would disagree on what was signed.
        let twice = base.replace(
            r#""image":{"#,
            &format!(
                r#""image":{{"docker-manifest-digest":"sha256:{}","#,
                "1".repeat(64)
            ),
        );
        let error = check_payload(twice.as_bytes(), "ghcr.io/acme/calc", &manifest()).unwrap_err();
        assert!(
            matches!(&error, SignatureError::Malformed(reason) if reason.contains("duplicate")),
            "{error:?}"
        );
    }

    #[test]
    fn payloads_that_are_not_simple_signing_are_refused() {
        for bytes in [
            &b"not json"[..],
            b"{}",
            b"[]",
            br#"{"critical":null,"optional":null}"#,
        ] {
            let error = check_payload(bytes, "ghcr.io/acme/calc", &manifest()).unwrap_err();
            assert!(matches!(error, SignatureError::Malformed(_)), "{error:?}");
        }
        let huge = vec![b' '; MAX_PAYLOAD + 1];
        let error = check_payload(&huge, "ghcr.io/acme/calc", &manifest()).unwrap_err();
        assert_eq!(error, SignatureError::TooLarge(MAX_PAYLOAD + 1));
    }

    #[test]
    fn long_strings_from_a_payload_are_clipped_in_messages() {
        let long = "x".repeat(10_000);
        let bytes = payload(&long, &manifest());
        let error = check_payload(&bytes, "ghcr.io/acme/calc", &manifest()).unwrap_err();
        assert!(error.to_string().len() < 600, "{error}");
    }
}
